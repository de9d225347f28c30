//! mlx-lm's `kimi_k2`: Kimi K2's section of calls,
//! `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
//! <|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>`.
//! `functions.NAME:IDX` is the call's id, which Kimi's template renders back in history.

use std::sync::LazyLock;

use regex::Regex;

use super::literal::deserialize;
use super::{pattern, Call, ParseError};

static NAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"(?s)^\s*((?:functions\.)?(.+?):\d+)\s*<\|tool_call_argument_begin\|>").ok()
});
static ARGS: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<\|tool_call_argument_begin\|>\s*(.*)").ok());
static CALL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)<\|tool_call_begin\|>(.*?)<\|tool_call_end\|>").ok());

pub(crate) fn parse(section: &str) -> Result<Vec<Call>, ParseError> {
    let calls: Vec<&str> = pattern(&CALL)?
        .captures_iter(section)
        .filter_map(|c| c.get(1).map(|m| m.as_str()))
        .collect();
    match calls.is_empty() {
        true => Ok(vec![one(section)?]),
        false => calls.into_iter().map(one).collect(),
    }
}

fn one(text: &str) -> Result<Call, ParseError> {
    let head = pattern(&NAME)?
        .captures(text)
        .ok_or_else(|| ParseError::new("no functions.NAME:IDX before the arguments"))?;
    let (Some(id), Some(name)) = (head.get(1), head.get(2)) else {
        return Err(ParseError::new(
            "no functions.NAME:IDX before the arguments",
        ));
    };
    let args = pattern(&ARGS)?
        .captures(text)
        .and_then(|c| c.get(1))
        .ok_or_else(|| ParseError::new("no arguments"))?;
    let mut call = Call::new(name.as_str(), deserialize(args.as_str()));
    call.id = Some(id.as_str().to_string());
    Ok(call)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kimi_section_with_two_calls() -> Result<(), ParseError> {
        let section = "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>\
                       {\"city\": \"Beijing\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1\
                       <|tool_call_argument_begin|>{}<|tool_call_end|>";
        let calls = parse(section)?;
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].name.as_str(), calls[0].id.as_deref()),
            ("get_weather", Some("functions.get_weather:0"))
        );
        assert_eq!(calls[0].arguments, json!({"city": "Beijing"}));
        assert_eq!(
            (calls[1].name.as_str(), &calls[1].arguments),
            ("get_time", &json!({}))
        );
        Ok(())
    }

    #[test]
    fn bad_kimi_calls_are_errors() {
        for s in [
            "",
            "{\"a\": 1}",
            "<|tool_call_begin|>get_weather<|tool_call_argument_begin|>{}<|tool_call_end|>",
        ] {
            assert!(parse(s).is_err(), "{s}");
        }
    }
}
