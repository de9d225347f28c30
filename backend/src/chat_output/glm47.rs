//! mlx-lm's `glm47`: GLM 4.5 and later, `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V
//! </arg_value>...</tool_call>`. Values are JSON or Python literals unless the tool's schema
//! declares the parameter a string; a body without `<arg_key>` falls back, as mlx-lm does, on
//! JSON, then `NAME {json}` or `NAME k=v ...`, and at worst a call named `unknown`.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::{json, Map, Value};

use super::literal::{deserialize, py_str, truthy};
use super::{pattern, schema, Call, ParseError};

static NAME: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?s)^(.*?)<arg_key>").ok());
static ARG: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?s)<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>").ok()
});

pub(crate) fn parse(text: &str, tools: Option<&Value>) -> Result<Call, ParseError> {
    let Some(name) = pattern(&NAME)?.captures(text).and_then(|c| c.get(1)) else {
        let fallback = json_call(text, tools).or_else(|| plain_call(text, tools));
        return Ok(fallback.unwrap_or_else(|| Call::new("unknown", json!({"raw": text.trim()}))));
    };
    let name = name.as_str().trim();
    let strings = string_args(tools, name);
    let mut arguments = Map::new();
    for found in pattern(&ARG)?.captures_iter(text) {
        let (Some(key), Some(value)) = (found.get(1), found.get(2)) else {
            continue;
        };
        let (key, value) = (key.as_str().trim(), value.as_str().trim());
        let value = match strings.contains(key) {
            true => Value::String(value.to_string()),
            false => deserialize(value),
        };
        arguments.insert(key.to_string(), value);
    }
    Ok(Call::new(name, Value::Object(arguments)))
}

/// The parameters the tool's schema declares `"type": "string"`.
fn string_args(tools: Option<&Value>, name: &str) -> HashSet<String> {
    let Some(props) = schema::properties(tools, name) else {
        return HashSet::new();
    };
    props
        .iter()
        .filter(|(_, s)| s.get("type").and_then(Value::as_str) == Some("string"))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Declared strings stay (or become) text; other text values are read as values.
fn normalize(name: &str, arguments: Map<String, Value>, tools: Option<&Value>) -> Value {
    let strings = string_args(tools, name);
    let typed = arguments.into_iter().map(|(k, v)| {
        let v = match (strings.contains(&k), v) {
            (true, v) => Value::String(py_str(&v)),
            (false, Value::String(s)) => deserialize(&s),
            (false, v) => v,
        };
        (k, v)
    });
    Value::Object(typed.collect())
}

/// mlx-lm's `_parse_json_tool_call`: `{"name", "arguments"}`, `{"function", "arguments"}` or
/// `{"tool": {...}}`, alone or first in a list.
fn json_call(text: &str, tools: Option<&Value>) -> Option<Call> {
    let mut parsed: Value = serde_json::from_str(text.trim()).ok()?;
    if let Some(first) = parsed
        .as_array()
        .and_then(|a| a.first())
        .filter(|f| f.is_object())
    {
        parsed = first.clone();
    }
    let get = |v: &Value, k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let has = |k: &str| parsed.get(k).is_some();
    let (mut name, mut arguments) = if has("name") && has("arguments") {
        (get(&parsed, "name"), get(&parsed, "arguments"))
    } else if has("function") && has("arguments") {
        (get(&parsed, "function"), get(&parsed, "arguments"))
    } else if let Some(tool) = parsed.get("tool").filter(|t| t.is_object()) {
        (get(tool, "name"), get(tool, "arguments"))
    } else {
        (Value::Null, Value::Null)
    };
    if name.is_object() {
        if !truthy(&arguments) {
            arguments = get(&name, "arguments");
        }
        name = get(&name, "name");
    }
    if let Value::String(s) = &arguments {
        arguments = deserialize(s);
    }
    match (name, arguments) {
        (Value::String(name), Value::Null) => Some(Call::new(name, json!({}))),
        (Value::String(name), Value::Object(args)) => {
            let arguments = normalize(&name, args, tools);
            Some(Call::new(name, arguments))
        }
        _ => None,
    }
}

/// mlx-lm's `_parse_plain_text_tool_call`: `NAME\n{json}`, `NAME {json}`, `NAME k=v ...`,
/// `NAME`, or `NAME` with the rest as `{"raw": rest}`.
fn plain_call(text: &str, tools: Option<&Value>) -> Option<Call> {
    let stripped = text.trim();
    if stripped.is_empty() {
        return None;
    }
    if let Some((first, rest)) = stripped.split_once('\n') {
        let (name, rest) = (first.trim(), rest.trim());
        if let (false, false, Value::Object(args)) =
            (name.is_empty(), rest.is_empty(), deserialize(rest))
        {
            return Some(Call::new(name, normalize(name, args, tools)));
        }
    }
    let (name, rest) = stripped.split_once(' ').unwrap_or((stripped, ""));
    let rest = rest.trim();
    if rest.is_empty() {
        return Some(Call::new(name, json!({})));
    }
    if let Value::Object(args) = deserialize(rest) {
        return Some(Call::new(name, normalize(name, args, tools)));
    }
    let arguments = match key_value_pairs(rest, &string_args(tools, name)) {
        Some(map) => Value::Object(map),
        None => json!({"raw": rest}),
    };
    Some(Call::new(name, arguments))
}

/// `k=v` words (shell quoting) as arguments; `None` unless every word is one.
fn key_value_pairs(text: &str, strings: &HashSet<String>) -> Option<Map<String, Value>> {
    if !text.contains('=') {
        return None;
    }
    let words = shell_words(text)?;
    if words.is_empty() {
        return None;
    }
    let mut arguments = Map::new();
    for word in words {
        let (key, value) = word.split_once('=')?;
        let key = key.trim();
        if key.is_empty() {
            return None;
        }
        let value = match strings.contains(key) {
            true => Value::String(value.to_string()),
            false => deserialize(value),
        };
        arguments.insert(key.to_string(), value);
    }
    Some(arguments)
}

/// Python's `shlex.split` (POSIX rules); `None` where it raises (an open quote or escape).
fn shell_words(text: &str) -> Option<Vec<String>> {
    let (mut words, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                }
                in_word = false;
                continue;
            }
            '\\' => word.push(chars.next()?),
            '\'' => loop {
                match chars.next()? {
                    '\'' => break,
                    c => word.push(c),
                }
            },
            '"' => loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => match chars.next()? {
                        e @ ('\\' | '"' | '$' | '`') => word.push(e),
                        '\n' => {}
                        e => word.extend(['\\', e]),
                    },
                    c => word.push(c),
                }
            },
            c => word.push(c),
        }
        in_word = true;
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Value {
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "zip": {"type": "string"}}
        }}}])
    }

    #[test]
    fn glm_call_with_typed_values() -> Result<(), ParseError> {
        let body = "get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n\
                    <arg_key>days</arg_key>\n<arg_value>3</arg_value>\n\
                    <arg_key>zip</arg_key>\n<arg_value>75001</arg_value>\n\
                    <arg_key>opts</arg_key>\n<arg_value>{\"unit\": \"C\"}</arg_value>\n";
        let call = parse(body, Some(&tools()))?;
        assert_eq!(call.name, "get_weather");
        assert_eq!(
            call.arguments,
            json!({"city": "Paris", "days": 3, "zip": "75001", "opts": {"unit": "C"}})
        );
        // Without the schema a number-like string becomes a number.
        assert_eq!(parse(body, None)?.arguments["zip"], json!(75001));
        Ok(())
    }

    #[test]
    fn glm_fallbacks_follow_mlx_lm() -> Result<(), ParseError> {
        let t = Some(tools());
        let cases = [
            ("get_time", Call::new("get_time", json!({}))),
            (
                r#"{"name": "f", "arguments": "{\"days\": 2}"}"#,
                Call::new("f", json!({"days": 2})),
            ),
            (r#"[{"tool": {"name": "f"}}]"#, Call::new("f", json!({}))),
            (
                "get_weather\n{\"city\": 5}",
                Call::new("get_weather", json!({"city": "5"})),
            ),
            (
                "get_weather city=\"New York\" days=2",
                Call::new("get_weather", json!({"city": "New York", "days": 2})),
            ),
            ("f what now", Call::new("f", json!({"raw": "what now"}))),
            ("   ", Call::new("unknown", json!({"raw": ""}))),
        ];
        for (body, want) in cases {
            assert_eq!(parse(body, t.as_ref())?, want, "{body}");
        }
        Ok(())
    }

    #[test]
    fn shell_words_follow_shlex() {
        assert_eq!(
            shell_words(r#"a="b c" d='e f' g\ h "x\"y""#),
            Some(vec![
                "a=b c".into(),
                "d=e f".into(),
                "g h".into(),
                "x\"y".into()
            ])
        );
        assert_eq!(shell_words("a='open"), None);
        assert_eq!(shell_words("a ''"), Some(vec!["a".into(), String::new()]));
    }
}
