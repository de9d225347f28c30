//! mlx-lm's `pythonic`: LFM2's `<|tool_call_start|>[name(arg="v", n=2), other()]
//! <|tool_call_end|>`, read as a Python list of calls with literal keyword arguments (JSON's
//! `true`/`false`/`null` allowed), else by mlx-lm's looser pattern for the first call.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::literal::{literal_eval, Literal};
use super::{pattern, Call, ParseError};

static CALL: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?s)\[(?P<name>[\w.]+)\((?P<args>.*?)\)\]").ok());
static ARG: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r#"(?s)(?P<key>\w+)=(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^,]+))(?:,\s*|\n?\z)"#,
    )
    .ok()
});

pub(crate) fn parse(text: &str) -> Result<Vec<Call>, ParseError> {
    if let Some(calls) = python_calls(text) {
        return Ok(calls);
    }
    let found = pattern(&CALL)?
        .captures(text)
        .ok_or_else(|| ParseError::new("no [name(...)] in the call"))?;
    let (Some(name), Some(args)) = (found.name("name"), found.name("args")) else {
        return Err(ParseError::new("no [name(...)] in the call"));
    };
    let mut arguments = Map::new();
    for arg in pattern(&ARG)?.captures_iter(args.as_str()) {
        let Some(key) = arg.name("key") else { continue };
        let value = match (arg.name("bare"), arg.name("dq").or(arg.name("sq"))) {
            (Some(bare), _) => bare.as_str().trim(),
            (None, Some(quoted)) => quoted.as_str(),
            (None, None) => "",
        };
        let value = literal_eval(value).unwrap_or_else(|| Value::String(value.to_string()));
        arguments.insert(key.as_str().to_string(), value);
    }
    Ok(vec![Call::new(name.as_str(), Value::Object(arguments))])
}

/// The text from its first `[` to its last `]` as a non-empty Python list of calls.
fn python_calls(text: &str) -> Option<Vec<Call>> {
    let (start, end) = (text.find('[')?, text.rfind(']')?);
    if end <= start {
        return None;
    }
    let mut p = Literal::new(&text[start..=end], true);
    p.eat('[').then_some(())?;
    let mut calls = Vec::new();
    while !p.eat(']') {
        calls.push(python_call(&mut p)?);
        if !p.eat(',') {
            p.eat(']').then_some(())?;
            break;
        }
    }
    (p.end() && !calls.is_empty()).then_some(calls)
}

/// `name(k=v, ...)` or `a.b(...)`: keyword arguments only.
fn python_call(p: &mut Literal) -> Option<Call> {
    let mut name = p.name()?.to_string();
    while p.eat('.') {
        name = format!("{name}.{}", p.name()?);
    }
    p.eat('(').then_some(())?;
    let mut arguments = Map::new();
    while !p.eat(')') {
        let key = p.name()?;
        (p.eat('=') && p.peek() != Some('=')).then_some(())?;
        arguments.insert(key.to_string(), p.value()?);
        if !p.eat(',') {
            p.eat(')').then_some(())?;
            break;
        }
    }
    Some(Call::new(name, Value::Object(arguments)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pythonic_lists_of_calls() -> Result<(), ParseError> {
        let text = "[get_weather(city=\"Paris\", days=3, opts={\"metric\": true}), tools.now()]";
        assert_eq!(
            parse(text)?,
            vec![
                Call::new(
                    "get_weather",
                    json!({"city": "Paris", "days": 3, "opts": {"metric": true}})
                ),
                Call::new("tools.now", json!({}))
            ]
        );
        Ok(())
    }

    #[test]
    fn the_loose_pattern_takes_what_python_refuses() -> Result<(), ParseError> {
        let text = "[search(q=\"a b\", n=5, where=Paris, '42'=x)]";
        assert_eq!(
            parse(text)?,
            vec![Call::new(
                "search",
                json!({"q": "a b", "n": 5, "where": "Paris"})
            )]
        );
        assert!(parse("no call here").is_err());
        assert!(parse("[1, 2]").is_err());
        Ok(())
    }
}
