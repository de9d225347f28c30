//! mlx-lm's `minimax_m2`: MiniMax M2's `<minimax:tool_call>\n<invoke name="NAME">\n
//! <parameter name="P">V</parameter>\n</invoke>\n</minimax:tool_call>`, several invokes a
//! section. Values are typed by every type the parameter's schema allows (`type`, `enum`,
//! `anyOf`...), the most specific first.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::literal::literal_eval;
use super::qwen3_coder::python_float;
use super::{pattern, schema, Call, ParseError};

static INVOKE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<invoke name=(.*?)</invoke>").ok());
static PARAMETER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<parameter name=(.*?)</parameter>").ok());

/// The order types are tried in; a string type ends the search.
const PRIORITY: [&str; 11] = [
    "integer", "int", "number", "float", "boolean", "bool", "object", "array", "string", "str",
    "text",
];

pub(crate) fn parse(text: &str, tools: Option<&Value>) -> Result<Vec<Call>, ParseError> {
    let mut calls = Vec::new();
    for invoke in pattern(&INVOKE)?.captures_iter(text) {
        let Some(body) = invoke.get(1).map(|m| m.as_str()) else {
            continue;
        };
        // mlx-lm's `^([^>]+)`: up to the first `>` or the end.
        let Some(name) = body.split('>').next().filter(|n| !n.is_empty()) else {
            continue;
        };
        let name = unquote(name);
        let mut arguments = Map::new();
        for param in pattern(&PARAMETER)?.captures_iter(body) {
            let Some((key, value)) = param.get(1).and_then(|m| m.as_str().split_once('>')) else {
                continue;
            };
            if key.is_empty() {
                continue;
            }
            let key = unquote(key);
            let types =
                schema::parameter(tools, &name, &key).map_or_else(|| vec!["string".into()], types);
            arguments.insert(key, convert(value.trim(), &types));
        }
        calls.push(Call::new(name, Value::Object(arguments)));
    }
    match calls.is_empty() {
        true => Err(ParseError::new(
            "no <invoke name=...>...</invoke> in the call",
        )),
        false => Ok(calls),
    }
}

/// A name without the quotes around it.
fn unquote(name: &str) -> String {
    let name = name.trim();
    let quoted = name.len() >= 2
        && ((name.starts_with('"') && name.ends_with('"'))
            || (name.starts_with('\'') && name.ends_with('\'')));
    match quoted {
        true => name[1..name.len() - 1].to_string(),
        false => name.to_string(),
    }
}

/// mlx-lm's `_extract_types_from_schema`: every type a schema allows; `string` if none.
fn types(schema: &Value) -> Vec<String> {
    let Some(schema) = schema.as_object() else {
        return vec!["string".into()];
    };
    let mut found = BTreeSet::new();
    match schema.get("type") {
        Some(Value::String(t)) => drop(found.insert(t.clone())),
        Some(Value::Array(ts)) => {
            found.extend(ts.iter().filter_map(Value::as_str).map(String::from))
        }
        _ => {}
    }
    for value in schema
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        found.insert(json_type(value).into());
    }
    for choice in ["anyOf", "oneOf", "allOf"] {
        for sub in schema
            .get(choice)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            found.extend(types(sub));
        }
    }
    match found.is_empty() {
        true => vec!["string".into()],
        false => found.into_iter().collect(),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// mlx-lm's `_convert_param_value_with_types`.
fn convert(value: &str, types: &[String]) -> Value {
    let lower = value.to_lowercase();
    let types: Vec<String> = types.iter().map(|t| t.to_lowercase()).collect();
    let allows = |t: &str| types.iter().any(|x| x == t);
    if lower == "null" || (allows("null") && matches!(lower.as_str(), "none" | "nil")) {
        return Value::Null;
    }
    for kind in PRIORITY.into_iter().filter(|k| allows(k)) {
        if let Some(v) = as_type(value, kind) {
            return v;
        }
    }
    serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()))
}

/// The value as one type, or `None` to try the next.
fn as_type(value: &str, kind: &str) -> Option<Value> {
    match kind {
        "string" | "str" | "text" => Some(Value::String(value.to_string())),
        "integer" | "int" => value
            .trim()
            .replace('_', "")
            .parse::<i64>()
            .ok()
            .map(Value::from),
        "number" | "float" => {
            let x = python_float(value).ok()?;
            match x.fract() == 0.0 && x.abs() < 9.2e18 {
                true => Some(Value::from(x as i64)),
                false => serde_json::Number::from_f64(x).map(Value::Number),
            }
        }
        "boolean" | "bool" => match value.trim().to_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Some(Value::Bool(true)),
            "false" | "0" | "no" | "off" => Some(Value::Bool(false)),
            _ => None,
        },
        _ => serde_json::from_str(value)
            .ok()
            .or_else(|| literal_eval(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Value {
        json!([{"type": "function", "function": {"name": "book", "parameters": {"properties": {
            "guests": {"type": "integer"}, "price": {"type": ["number", "null"]},
            "vip": {"type": "boolean"}, "when": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "rooms": {"type": "array"}, "level": {"enum": [1, 2, 3]}, "note": {"type": "string"}
        }}}}])
    }

    #[test]
    fn minimax_invokes_with_typed_values() -> Result<(), ParseError> {
        let text = "\n<invoke name=\"book\">\n<parameter name=\"guests\">4</parameter>\n\
                    <parameter name=\"price\">none</parameter>\n<parameter name=\"vip\">yes</parameter>\n\
                    <parameter name=\"when\">20250101</parameter>\n<parameter name=\"rooms\">['a', 'b']</parameter>\n\
                    <parameter name=\"level\">2</parameter>\n<parameter name=\"note\">\n42\n</parameter>\n\
                    <parameter name=\"other\">{\"x\": 1}</parameter>\n</invoke>\n\
                    <invoke name=\"now\">\n</invoke>\n";
        let calls = parse(text, Some(&tools()))?;
        assert_eq!(calls.len(), 2);
        assert_eq!(
            calls[0],
            Call::new(
                "book",
                json!({"guests": 4, "price": null, "vip": true, "when": 20250101,
                "rooms": ["a", "b"], "level": 2, "note": "42", "other": "{\"x\": 1}"})
            )
        );
        assert_eq!(calls[1], Call::new("now", json!({})));
        Ok(())
    }

    #[test]
    fn bad_minimax_calls_are_errors() {
        for t in ["", "<invoke name=\"f\">", "<invoke name=>x</invoke>"] {
            assert!(parse(t, None).is_err(), "{t}");
        }
    }
}
