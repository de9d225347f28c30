//! mlx-lm's `json_tools`: Qwen's and Hermes' `<tool_call>{"name": ..., "arguments": {...}}
//! </tool_call>`; the body is JSON, one call or a list of calls.

use serde_json::Value;

use super::{Call, ParseError};

pub(crate) fn parse(body: &str) -> Result<Vec<Call>, ParseError> {
    let value: Value = serde_json::from_str(body.trim())
        .map_err(|e| ParseError::new(format!("the call is not JSON: {e}")))?;
    let items = match value {
        Value::Array(items) => items,
        other => vec![other],
    };
    if items.is_empty() {
        return Err(ParseError::new("the call is an empty list"));
    }
    items.iter().map(call).collect()
}

/// One `{"name", "arguments"}` object. Arguments sent as JSON text are read as JSON, so
/// the client does not get them encoded twice; missing arguments are `{}`.
fn call(item: &Value) -> Result<Call, ParseError> {
    let name = item
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ParseError::new(format!("the call has no string \"name\": {item}")))?;
    let arguments = match item.get("arguments") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(other) => other.clone(),
    };
    Ok(Call::new(name.trim(), arguments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn qwen_calls_parse() -> Result<(), ParseError> {
        let body =
            "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n";
        assert_eq!(
            parse(body)?,
            vec![Call::new(
                "get_weather",
                json!({"city": "Paris", "days": 3})
            )]
        );
        let list = r#"[{"name": "a", "arguments": "{\"x\": 1}"}, {"name": "b"}]"#;
        assert_eq!(
            parse(list)?,
            vec![Call::new("a", json!({"x": 1})), Call::new("b", json!({}))]
        );
        Ok(())
    }

    #[test]
    fn bad_calls_are_errors() {
        for body in [
            "bad",
            "{\"name\": \"a\"",
            "[]",
            "{\"arguments\": {}}",
            "{\"name\": 3}",
        ] {
            assert!(parse(body).is_err(), "{body}");
        }
    }
}
