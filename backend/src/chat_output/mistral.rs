//! mlx-lm's `mistral`: `[TOOL_CALLS]` then either a JSON list of `{"name", "arguments"}`
//! (Mistral Small 3.1's template) or `NAME[ARGS]{json}`, repeatable (Magistral, Mistral 3).
//! There is no end marker: the calls run to the end of the output.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use super::{pattern, Call, ParseError};

static HEADER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"([\w-]+)\s*\[ARGS\]\s*").ok());

pub(crate) fn parse(text: &str) -> Result<Vec<Call>, ParseError> {
    let mut calls = json_calls(text)?;
    if calls.is_empty() {
        calls = header_calls(text)?;
    }
    match calls.is_empty() {
        true => Err(ParseError::new("no JSON list of calls and no NAME[ARGS]")),
        false => Ok(calls),
    }
}

/// A JSON list of calls; JSON that is a list but not of calls is an error, so it does not
/// fall through to the header form.
fn json_calls(text: &str) -> Result<Vec<Call>, ParseError> {
    let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text) else {
        return Ok(Vec::new());
    };
    items.iter().map(json_call).collect()
}

fn json_call(item: &Value) -> Result<Call, ParseError> {
    let name = item.get("name").and_then(Value::as_str);
    let arguments = match item.get("arguments") {
        None => Some(Value::Object(Default::default())),
        // Some templates render the arguments as JSON text.
        Some(Value::String(s)) => serde_json::from_str(s).ok(),
        Some(other) => Some(other.clone()),
    };
    let (Some(name), Some(arguments @ Value::Object(_))) = (name, arguments) else {
        return Err(ParseError::new(format!(
            "not a {{\"name\", \"arguments\"}} call: {item}"
        )));
    };
    let mut call = Call::new(name, arguments);
    call.id = item.get("id").and_then(Value::as_str).map(str::to_string);
    Ok(call)
}

/// `NAME[ARGS]{json}` repeated; JSON cut short is an error.
fn header_calls(text: &str) -> Result<Vec<Call>, ParseError> {
    let (mut calls, mut at) = (Vec::new(), 0);
    while let Some(head) = pattern(&HEADER)?.captures_at(text, at) {
        let (Some(all), Some(name)) = (head.get(0), head.get(1)) else {
            break;
        };
        let mut values =
            serde_json::Deserializer::from_str(&text[all.end()..]).into_iter::<Value>();
        let arguments = match values.next() {
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                return Err(ParseError::new(format!(
                    "the arguments of {} are not JSON: {e}",
                    name.as_str()
                )))
            }
            None => {
                return Err(ParseError::new(format!(
                    "{} has no arguments",
                    name.as_str()
                )))
            }
        };
        at = all.end() + values.byte_offset();
        calls.push(Call::new(name.as_str(), arguments));
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mistral_json_list() -> Result<(), ParseError> {
        let text = r#" [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}, {"name": "now", "arguments": "{}"}]"#;
        let calls = parse(text)?;
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(calls[0].id.as_deref(), Some("abc123def"));
        assert_eq!(
            (calls[1].name.as_str(), calls[1].id.as_deref()),
            ("now", None)
        );
        Ok(())
    }

    #[test]
    fn mistral_headers() -> Result<(), ParseError> {
        let text = "get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get-time [ARGS] {}";
        let calls = parse(text)?;
        assert_eq!(
            calls,
            vec![
                Call::new("get_weather", json!({"city": "Paris"})),
                Call::new("get-time", json!({}))
            ]
        );
        Ok(())
    }

    #[test]
    fn bad_mistral_calls_are_errors() {
        for t in [
            "",
            "hello",
            "f[ARGS]{\"a\": ",
            "[1, 2]",
            "[{\"name\": \"f\", \"arguments\": null}]",
        ] {
            assert!(parse(t).is_err(), "{t}");
        }
    }
}
