//! Python's side of mlx-lm's parsers: literals as `ast.literal_eval` reads them (the parsers
//! fall back on it for values that are not JSON), `str()` of a value, and JSON text as
//! `json.dumps(ensure_ascii=False)` writes it (how arguments reach the client).

use serde_json::{Map, Number, Value};

/// mlx-lm's `_deserialize`: JSON, else a Python literal, else the text itself.
pub(crate) fn deserialize(text: &str) -> Value {
    serde_json::from_str(text)
        .ok()
        .or_else(|| literal_eval(text))
        .unwrap_or_else(|| Value::String(text.to_string()))
}

/// `ast.literal_eval(text)` for the values JSON can hold (tuples become arrays); `None` where
/// Python raises, or where the value has no JSON form (bytes, sets, complex numbers).
pub(crate) fn literal_eval(text: &str) -> Option<Value> {
    let mut p = Literal::new(text.trim_start_matches([' ', '\t']), false);
    let first = p.value()?;
    let value = match p.eat(',') {
        // `1, 2` is a tuple at the top level too.
        true => p.sequence(first, None)?,
        false => first,
    };
    p.end().then_some(value)
}

/// A reader of Python literal syntax; `json_names` also takes `true`, `false` and `null`
/// (chat templates render nested values as JSON, mlx-lm's pythonic parser accepts them).
pub(crate) struct Literal<'a> {
    text: &'a str,
    at: usize,
    json_names: bool,
}

impl<'a> Literal<'a> {
    pub(crate) fn new(text: &'a str, json_names: bool) -> Literal<'a> {
        Literal {
            text,
            at: 0,
            json_names,
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    /// Takes `c` (after any space) if it is next.
    pub(crate) fn eat(&mut self, c: char) -> bool {
        self.skip_space();
        let found = self.rest().starts_with(c);
        if found {
            self.at += c.len_utf8();
        }
        found
    }

    pub(crate) fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.rest().chars().next()
    }

    /// Whether only space is left.
    pub(crate) fn end(&mut self) -> bool {
        self.skip_space();
        self.rest().is_empty()
    }

    /// An identifier (`\w+` not starting with a digit), if one is next.
    pub(crate) fn name(&mut self) -> Option<&'a str> {
        self.skip_space();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..len];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        self.at += len;
        Some(name)
    }

    /// One literal value.
    pub(crate) fn value(&mut self) -> Option<Value> {
        match self.peek()? {
            '[' => {
                self.at += 1;
                self.items(']')
            }
            '(' => {
                self.at += 1;
                self.parenthesized()
            }
            '{' => {
                self.at += 1;
                self.dict()
            }
            '-' | '+' => self.signed(),
            c if c.is_ascii_digit() || c == '.' => self.number(),
            '\'' | '"' => self.strings(),
            _ => self.word_or_string(),
        }
    }

    fn word_or_string(&mut self) -> Option<Value> {
        let save = self.at;
        let name = self.name()?;
        let value = match (name, self.json_names) {
            ("True", _) | ("true", true) => Value::Bool(true),
            ("False", _) | ("false", true) => Value::Bool(false),
            ("None", _) | ("null", true) => Value::Null,
            (prefix, _) if prefix.len() <= 2 && self.rest().starts_with(['\'', '"']) => {
                self.at = save;
                return self.strings();
            }
            _ => return None,
        };
        Some(value)
    }

    /// Items up to `close`, after the opening bracket.
    fn items(&mut self, close: char) -> Option<Value> {
        let mut items = Vec::new();
        while !self.eat(close) {
            items.push(self.value()?);
            if !self.eat(',') {
                return self.eat(close).then_some(Value::Array(items));
            }
        }
        Some(Value::Array(items))
    }

    /// `(x)` is x, `(x,)` and `(x, y)` are tuples, `()` is the empty tuple.
    fn parenthesized(&mut self) -> Option<Value> {
        if self.eat(')') {
            return Some(Value::Array(Vec::new()));
        }
        let first = self.value()?;
        match self.eat(',') {
            true => self.sequence(first, Some(')')),
            false => self.eat(')').then_some(first),
        }
    }

    /// The rest of a tuple after `first,` up to `close` (or the end of the text).
    fn sequence(&mut self, first: Value, close: Option<char>) -> Option<Value> {
        let mut items = vec![first];
        loop {
            let done = match close {
                Some(c) => self.eat(c),
                None => self.end(),
            };
            if done {
                return Some(Value::Array(items));
            }
            items.push(self.value()?);
            if !self.eat(',') {
                return match close {
                    Some(c) => self.eat(c).then_some(Value::Array(items)),
                    None => Some(Value::Array(items)),
                };
            }
        }
    }

    /// A dict after `{`; a set (no JSON form) is refused.
    fn dict(&mut self) -> Option<Value> {
        let mut map = Map::new();
        while !self.eat('}') {
            let key = dict_key(self.value()?)?;
            if !self.eat(':') {
                return None;
            }
            map.insert(key, self.value()?);
            if !self.eat(',') {
                return self.eat('}').then_some(Value::Object(map));
            }
        }
        Some(Value::Object(map))
    }

    /// One sign applied to a number, as `literal_eval` allows.
    fn signed(&mut self) -> Option<Value> {
        let negative = self.rest().starts_with('-');
        self.at += 1;
        self.skip_space();
        if !self
            .rest()
            .starts_with(|c: char| c.is_ascii_digit() || c == '.')
        {
            return None;
        }
        match (self.number()?, negative) {
            (v, false) => Some(v),
            (Value::Number(n), true) => negate(&n),
            _ => None,
        }
    }

    fn number(&mut self) -> Option<Value> {
        let rest = self.rest();
        let len = rest
            .char_indices()
            .find(|&(i, c)| {
                let prev = rest[..i].chars().last();
                let sign_after_e = matches!(c, '+' | '-') && matches!(prev, Some('e' | 'E'));
                !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || sign_after_e)
            })
            .map_or(rest.len(), |(i, _)| i);
        self.at += len;
        python_number(&rest[..len])
    }

    /// One or more adjacent string literals, joined as Python joins them; bytes and
    /// f-strings have no JSON form.
    fn strings(&mut self) -> Option<Value> {
        let (mut out, mut any) = (String::new(), false);
        loop {
            self.skip_space();
            let rest = self.rest();
            let prefix = rest
                .find(['\'', '"'])
                .filter(|&n| n <= 2 && rest[..n].chars().all(|c| c.is_ascii_alphabetic()));
            let Some(n) = prefix else { break };
            let prefix = rest[..n].to_ascii_lowercase();
            if !matches!(prefix.as_str(), "" | "r" | "u") {
                return None;
            }
            self.at += n;
            out.push_str(&self.string_body(prefix == "r")?);
            any = true;
        }
        any.then_some(Value::String(out))
    }

    /// A quoted string (single, double or triple quotes) at the cursor.
    fn string_body(&mut self, raw: bool) -> Option<String> {
        let rest = self.rest();
        let quote = ["'''", "\"\"\"", "'", "\""]
            .into_iter()
            .find(|q| rest.starts_with(q))?;
        let body = &rest[quote.len()..];
        let mut chars = body.char_indices();
        let mut out = String::new();
        while let Some((i, c)) = chars.next() {
            if body[i..].starts_with(quote) {
                self.at += quote.len() + i + quote.len();
                return Some(out);
            }
            match c {
                '\n' if quote.len() == 1 => return None,
                '\\' if raw => {
                    out.push('\\');
                    out.extend(chars.next().map(|(_, c)| c));
                }
                '\\' => escape(&mut chars, body, &mut out)?,
                c => out.push(c),
            }
        }
        None
    }
}

/// One backslash escape of a non-raw Python string.
fn escape(chars: &mut std::str::CharIndices, body: &str, out: &mut String) -> Option<()> {
    let (i, c) = chars.next()?;
    let hex = |chars: &mut std::str::CharIndices, n: usize| {
        let digits = body
            .get(i + 1..i + 1 + n)
            .filter(|d| d.chars().all(|c| c.is_ascii_hexdigit()))?;
        let code = u32::from_str_radix(digits, 16).ok()?;
        chars.nth(n - 1);
        char::from_u32(code)
    };
    match c {
        '\n' => {}
        'n' => out.push('\n'),
        't' => out.push('\t'),
        'r' => out.push('\r'),
        'b' => out.push('\u{8}'),
        'f' => out.push('\u{c}'),
        'v' => out.push('\u{b}'),
        'a' => out.push('\u{7}'),
        'x' => out.push(hex(chars, 2)?),
        'u' => out.push(hex(chars, 4)?),
        'U' => out.push(hex(chars, 8)?),
        '0'..='7' => {
            let digits: String = body[i..]
                .chars()
                .take_while(|d| d.is_digit(8))
                .take(3)
                .collect();
            if digits.len() > 1 {
                chars.nth(digits.len() - 2);
            }
            out.push(char::from_u32(u32::from_str_radix(&digits, 8).ok()?)?);
        }
        '\\' | '\'' | '"' => out.push(c),
        'N' => return None,
        other => {
            out.push('\\');
            out.push(other);
        }
    }
    Some(())
}

/// A Python number literal (decimal, hex, octal, binary, float) as JSON; `None` for
/// complex numbers, integers beyond 64 bits and malformed text.
fn python_number(text: &str) -> Option<Value> {
    if text.is_empty() || text.ends_with('_') || text.contains("__") {
        return None;
    }
    let plain = text.replace('_', "");
    let lower = plain.to_ascii_lowercase();
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(digits) = lower.strip_prefix(prefix) {
            return u64::from_str_radix(digits, radix).ok().map(Value::from);
        }
    }
    let is_float = lower.contains(['.', 'e']);
    if !is_float {
        // Python refuses leading zeros on a non-zero integer (`007`).
        if lower.len() > 1 && lower.starts_with('0') && !lower.trim_start_matches('0').is_empty() {
            return None;
        }
        return lower
            .parse::<i64>()
            .ok()
            .map(Value::from)
            .or_else(|| lower.parse::<u64>().ok().map(Value::from));
    }
    if !lower
        .chars()
        .all(|c| c.is_ascii_digit() || ".e+-".contains(c))
    {
        return None;
    }
    let x: f64 = lower.parse().ok()?;
    Number::from_f64(x).map(Value::Number)
}

fn negate(n: &Number) -> Option<Value> {
    if let Some(i) = n.as_i64() {
        return Some(Value::from(i.checked_neg()?));
    }
    if n.is_u64() {
        // -2**63 is the one u64 whose negation fits.
        return (n.as_u64() == Some(1 << 63)).then(|| Value::from(i64::MIN));
    }
    Number::from_f64(-n.as_f64()?).map(Value::Number)
}

/// A dict key as `json.dumps` writes it: strings as they are, numbers, booleans and None
/// as their JSON text; others (tuples) make `json.dumps` raise.
fn dict_key(key: Value) -> Option<String> {
    match key {
        Value::String(s) => Some(s),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some("null".into()),
        _ => None,
    }
}

/// Python's truth value of a value.
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Python's `str(value)` of a parsed value: strings as they are, others as their `repr`.
pub(crate) fn py_str(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => py_repr(other),
    }
}

fn py_repr(value: &Value) -> String {
    let key = |k: &str| py_repr(&Value::String(k.to_string()));
    if let Some(text) = container(value, py_repr, key) {
        return text;
    }
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => match s.contains('\'') && !s.contains('"') {
            true => format!("\"{s}\""),
            false => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        },
        other => other.to_string(),
    }
}

/// `json.dumps(value, ensure_ascii=False)`: `", "` and `": "` between items, keys in order.
pub(crate) fn dumps(value: &Value) -> String {
    let key = |k: &str| Value::String(k.to_string()).to_string();
    container(value, dumps, key).unwrap_or_else(|| value.to_string())
}

/// A list or dict with Python's separators, its values written by `item` and keys by `key`;
/// `None` for a scalar.
fn container(value: &Value, item: fn(&Value) -> String, key: fn(&str) -> String) -> Option<String> {
    match value {
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(item).collect();
            Some(format!("[{}]", items.join(", ")))
        }
        Value::Object(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", key(k), item(v)))
                .collect();
            Some(format!("{{{}}}", items.join(", ")))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn literals_read_as_python_reads_them() {
        let cases = [
            ("42", json!(42)),
            ("-3.5", json!(-3.5)),
            ("1_000", json!(1000)),
            ("0x1f", json!(31)),
            ("True", json!(true)),
            ("None", Value::Null),
            ("'it''s'", json!("its")),
            ("\"a\\nb\"", json!("a\nb")),
            ("r'a\\n'", json!("a\\n")),
            ("'''x\ny'''", json!("x\ny")),
            ("'\\x41\\u00e9\\101'", json!("Aé\u{41}")),
            (
                "[1, 'two', (3, 4), {'k': None}]",
                json!([1, "two", [3, 4], {"k": null}]),
            ),
            (
                "{1: 'a', True: 'b', None: 'c'}",
                json!({"1": "a", "true": "b", "null": "c"}),
            ),
            ("(1,)", json!([1])),
            ("(1)", json!(1)),
            ("1, 2", json!([1, 2])),
            ("[1, 2,]", json!([1, 2])),
            ("  .5", json!(0.5)),
            ("1e3", json!(1000.0)),
        ];
        for (text, want) in cases {
            assert_eq!(literal_eval(text), Some(want), "{text}");
        }
    }

    #[test]
    fn what_python_refuses_is_none() {
        for text in [
            "Paris",
            "b'x'",
            "{1, 2}",
            "1j",
            "007",
            "f'x'",
            "[1,",
            "'open",
            "1 2",
            "-'a'",
            "x()",
            "{'a': [true]}",
            "99999999999999999999999",
        ] {
            assert_eq!(literal_eval(text), None, "{text}");
        }
    }

    #[test]
    fn json_names_are_taken_only_when_asked() {
        let mut p = Literal::new("[true, null]", true);
        assert_eq!(p.value(), Some(json!([true, null])));
    }

    #[test]
    fn deserialize_tries_json_then_python_then_text() {
        assert_eq!(deserialize("{\"a\": 1}"), json!({"a": 1}));
        assert_eq!(deserialize("{'a': True}"), json!({"a": true}));
        assert_eq!(deserialize("Paris"), json!("Paris"));
    }

    #[test]
    fn dumps_writes_as_python_does() {
        let v = json!({"b": [1, 2.5, "é\n"], "a": {"x": null, "y": true}});
        assert_eq!(
            dumps(&v),
            r#"{"b": [1, 2.5, "é\n"], "a": {"x": null, "y": true}}"#
        );
        assert_eq!(
            py_str(&json!({"a": [1, "x'"], "b": null})),
            "{'a': [1, \"x'\"], 'b': None}"
        );
    }
}
