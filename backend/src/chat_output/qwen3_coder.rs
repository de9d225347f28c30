//! mlx-lm's `qwen3_coder`: Qwen3-Coder's and Qwen3.5's XML calls,
//! `<tool_call>\n<function=NAME>\n<parameter=P>\nV\n</parameter>\n</function>\n</tool_call>`.
//! Values are typed by the parameter's schema in the request's tools.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Number, Value};

use super::literal::{literal_eval, truthy};
use super::{pattern, schema, Call, ParseError};

/// Everything from the first `<function=` to a `</function>` that ends the text (Python's
/// `$` also matches before one final newline).
static FUNCTION: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<function=(.*?)</function>\n?\z").ok());
static PARAMETER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<parameter=(.*?)</parameter>").ok());
static NAME: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^\s*([^\s<>]+)>?").ok());

const STRING_TYPES: [&str; 6] = ["string", "str", "text", "varchar", "char", "enum"];
const BOOL_TYPES: [&str; 3] = ["boolean", "bool", "binary"];
const OBJECT_TYPES: [&str; 3] = ["object", "array", "arr"];
const INT_PREFIXES: [&str; 5] = ["int", "uint", "long", "short", "unsigned"];

pub(crate) fn parse(body: &str, tools: Option<&Value>) -> Result<Call, ParseError> {
    let function = pattern(&FUNCTION)?
        .captures(body)
        .and_then(|c| c.get(1))
        .ok_or_else(|| ParseError::new("no <function=...></function> in the call"))?
        .as_str();
    let (name, params) =
        split_name(function)?.ok_or_else(|| ParseError::new("no function name"))?;
    let mut arguments = Map::new();
    for found in pattern(&PARAMETER)?.captures_iter(params) {
        let Some(text) = found.get(1).map(|m| m.as_str()) else {
            continue;
        };
        let Some((param, value)) = split_name(text)? else {
            continue;
        };
        let value = value.strip_prefix('\n').unwrap_or(value);
        let value = value.strip_suffix('\n').unwrap_or(value);
        let typed = convert(value, schema::parameter(tools, name, param))?;
        arguments.insert(param.to_string(), typed);
    }
    Ok(Call::new(name, Value::Object(arguments)))
}

/// The leading name (`NAME>`) and the text after it.
fn split_name(text: &str) -> Result<Option<(&str, &str)>, ParseError> {
    Ok(pattern(&NAME)?.captures(text).and_then(|c| {
        let (all, name) = (c.get(0)?, c.get(1)?);
        Some((name.as_str(), &text[all.end()..]))
    }))
}

/// mlx-lm's `_convert_param_value`: the value typed by the parameter's schema.
fn convert(value: &str, param: Option<&Value>) -> Result<Value, ParseError> {
    let text = || Value::String(value.to_string());
    if value.to_lowercase() == "null" {
        return Ok(Value::Null);
    }
    let Some(param) = param.filter(|p| truthy(p)) else {
        return Ok(text());
    };
    let Some(kind) = param.get("type") else {
        return Ok(match serde_json::from_str::<Value>(value) {
            Ok(v @ (Value::Array(_) | Value::Object(_))) => v,
            _ => text(),
        });
    };
    // Python's `str()` of a non-string type starts with none of the names below.
    let kind = kind
        .as_str()
        .map(|k| k.trim().to_lowercase())
        .unwrap_or_default();
    if STRING_TYPES.contains(&kind.as_str()) {
        Ok(text())
    } else if INT_PREFIXES.iter().any(|p| kind.starts_with(p)) {
        let x = python_float(value)?;
        match x.fract() == 0.0 {
            true => integral(x),
            false => Err(ParseError::new(format!(
                "invalid integer literal {value:?}"
            ))),
        }
    } else if kind.starts_with("num") || kind.starts_with("float") {
        let x = python_float(value)?;
        match x.fract() == 0.0 {
            true => integral(x),
            false => Number::from_f64(x)
                .map(Value::Number)
                .ok_or_else(|| not_number(value)),
        }
    } else if BOOL_TYPES.contains(&kind.as_str()) {
        Ok(Value::Bool(value.to_lowercase() == "true"))
    } else {
        let structured = OBJECT_TYPES.contains(&kind.as_str())
            || kind.starts_with("dict")
            || kind.starts_with("list");
        let json = structured
            .then(|| serde_json::from_str(value).ok())
            .flatten();
        Ok(json.or_else(|| literal_eval(value)).unwrap_or_else(text))
    }
}

/// Python's `float(text)`: space around, `_` between digits; a finite value.
pub(crate) fn python_float(text: &str) -> Result<f64, ParseError> {
    let x: f64 = text
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|_| not_number(text))?;
    x.is_finite().then_some(x).ok_or_else(|| not_number(text))
}

fn integral(x: f64) -> Result<Value, ParseError> {
    match x.abs() < 9.2e18 {
        true => Ok(Value::from(x as i64)),
        false => Err(ParseError::new(format!("{x} is beyond a 64-bit integer"))),
    }
}

fn not_number(text: &str) -> ParseError {
    ParseError::new(format!("could not convert {text:?} to a number"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Value {
        json!([{"type": "function", "function": {"name": "search", "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer"},
            "score": {"type": "number"}, "exact": {"type": "boolean"},
            "filters": {"type": "object"}, "tags": {"type": "array"},
            "extra": {"description": "no type"}, "any": {"type": ["string", "null"]}
        }}}}])
    }

    #[test]
    fn qwen3_coder_call_with_typed_values() -> Result<(), ParseError> {
        let body = "\n<function=search>\n<parameter=query>\nrust 2024\n</parameter>\n\
                    <parameter=limit>\n10\n</parameter>\n<parameter=score>\n2.0\n</parameter>\n\
                    <parameter=exact>\nTrue\n</parameter>\n<parameter=filters>\n{\"lang\": \"en\"}\n\
                    </parameter>\n<parameter=tags>\n['a', 'b']\n</parameter>\n\
                    <parameter=extra>\n[1, 2]\n</parameter>\n<parameter=any>\n{'k': 1}\n</parameter>\n\
                    <parameter=other>\n42\n</parameter>\n</function>\n";
        let call = parse(body, Some(&tools()))?;
        assert_eq!(call.name, "search");
        assert_eq!(
            call.arguments,
            json!({"query": "rust 2024", "limit": 10, "score": 2, "exact": true,
                   "filters": {"lang": "en"}, "tags": ["a", "b"], "extra": [1, 2],
                   "any": {"k": 1}, "other": "42"})
        );
        Ok(())
    }

    #[test]
    fn without_tools_every_value_is_text() -> Result<(), ParseError> {
        let body = "<function=f>\n<parameter=n>\n5\n</parameter>\n<parameter=z>\nnull\n</parameter>\n</function>";
        assert_eq!(parse(body, None)?.arguments, json!({"n": "5", "z": null}));
        Ok(())
    }

    #[test]
    fn malformed_calls_are_errors() {
        let bad_int = "<function=search>\n<parameter=limit>\n2.5\n</parameter>\n</function>";
        for body in [
            "{\"name\": \"f\"}",
            "<function=f>\n<parameter=a>\n1",
            bad_int,
        ] {
            assert!(parse(body, Some(&tools())).is_err(), "{body}");
        }
    }
}
