//! llama.cpp's GBNF, as LocalAI writes it (JSON mode, JSON-schema and tool-call grammars),
//! read into llguidance's Lark dialect, which llguidance then compiles. This is a translation
//! of notation only: the grammar engine is llguidance's. GBNF is character-level with no
//! lexer, so literals become Lark strings, character classes and `.` become one-character
//! regexes, and rules keep their structure; `root` becomes Lark's `start`.
//!
//! A rule that needs no recursion (it names only literals, classes and other such rules:
//! JSON's `string`, `number`, `ws`) becomes a Lark terminal, as llguidance's own
//! `gbnf_to_lark` does. llguidance matches terminals with its lexer's automaton, so a token's
//! bytes walk one DFA instead of one Earley item per character: the mask costs a fraction.
//! Terminals are matched greedily (as in Lark), so a grammar whose text could end a terminal
//! early and go on in the next one gets the greedy reading; every output still fits it.

use std::collections::{BTreeMap, BTreeSet};

use super::bounds::{check_rules, check_text, LimitError};
use super::lexemes::{terminals, Rules};

/// A GBNF text that does not parse: where and why (1-based line and column).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct GbnfError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// A grammar the translator refuses: it does not parse, or it is over one of the limits.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TranslateError {
    #[error(transparent)]
    Syntax(#[from] GbnfError),
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// One element of a sequence.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Literal(String),
    /// `[...]`: `negated`, and the ranges (a single character is a range of one).
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `.`: any one character.
    Any,
    /// `<[id]>` or `<text>`: one token of the model's vocabulary; `negated` (`!<...>`): any
    /// token but that one.
    Token {
        token: TokenRef,
        negated: bool,
    },
    /// A rule's name, and where it was named (for an undefined rule's error).
    Ref(String, usize),
    Group(Alternates),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
}

pub(super) type Alternates = Vec<Vec<Node>>;

/// How a token reference names its token.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum TokenRef {
    Id(u32),
    /// Its text, brackets included (`<think>`: one token of the vocabulary), and where it was
    /// named.
    Text(String, usize),
}

/// Finds the id of the token whose text is exactly this, if there is one.
pub type TokenLookup<'a> = &'a dyn Fn(&str) -> Option<u32>;

/// The GBNF grammar `text` as Lark, or where it stops parsing, or the limit it is over
/// (checked before anything walks it deeply); `tokens` resolves token references by text.
pub fn to_lark(text: &str, tokens: TokenLookup) -> Result<String, TranslateError> {
    check_text(text)?;
    let rules = parse(text)?;
    check_rules(&rules)?;
    let mut order: Vec<String> = rules.keys().cloned().collect();
    order.sort_by_key(|name| rules.get(name).map(|(at, _)| *at));
    let reader = Reader {
        text,
        pos: 0,
        depth: 0,
    };
    Ok(Lark::new(&order, &terminals(&rules), tokens).write(&reader, &order, &rules)?)
}

/// Whether `text` parses and is within the limits, without translating it: a cheap first
/// look (milliseconds for a megabyte) that refuses a grammar before it waits for a compile.
pub fn check(text: &str) -> Result<(), TranslateError> {
    check_text(text)?;
    check_rules(&parse(text)?)?;
    Ok(())
}

/// The rules of a GBNF text, by name, each with where it is defined.
pub(super) fn parse(text: &str) -> Result<Rules, GbnfError> {
    let mut reader = Reader {
        text,
        pos: 0,
        depth: 0,
    };
    let mut rules = Rules::new();
    reader.skip_space(true);
    while !reader.at_end() {
        let at = reader.pos;
        let name = reader.name()?;
        reader.skip_space(false);
        reader.expect("::=")?;
        reader.skip_space(true);
        let body = reader.alternates(false)?;
        reader.end_of_rule()?;
        if rules.insert(name.clone(), (at, body)).is_some() {
            let name = shown(&name);
            return Err(reader.error_at(at, format!("rule `{name}` is defined twice")));
        }
        reader.skip_space(true);
    }
    if !rules.contains_key("root") {
        return Err(reader.error_at(0, "the grammar has no `root` rule".into()));
    }
    Ok(rules)
}

/// A cursor over the GBNF text.
struct Reader<'a> {
    text: &'a str,
    pos: usize,
    /// Groups open at `pos`.
    depth: usize,
}

/// How deep groups may nest: far beyond any real grammar (LocalAI's nest a few levels).
const MAX_NESTING: usize = 64;

impl Reader<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn error_at(&self, pos: usize, message: String) -> GbnfError {
        let before = &self.text[..pos.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        GbnfError {
            line,
            column,
            message,
        }
    }

    fn error(&self, message: impl Into<String>) -> GbnfError {
        self.error_at(self.pos, message.into())
    }

    /// Skips blanks and `#` comments, and newlines where `newlines` allows them.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    let rest = &self.text[self.pos..];
                    self.pos += rest.find('\n').unwrap_or(rest.len());
                }
                _ => break,
            }
        }
    }

    fn expect(&mut self, s: &str) -> Result<(), GbnfError> {
        match self.text[self.pos..].starts_with(s) {
            true => {
                self.pos += s.len();
                Ok(())
            }
            false => Err(self.error(format!("expected `{s}`"))),
        }
    }

    /// A rule name: letters, digits, `-` and `_`.
    fn name(&mut self) -> Result<String, GbnfError> {
        let rest = &self.text[self.pos..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(rest.len());
        if len == 0 {
            return Err(self.error("expected a rule name"));
        }
        self.pos += len;
        Ok(rest[..len].to_string())
    }

    /// A rule ends at a newline or the end of the text.
    fn end_of_rule(&mut self) -> Result<(), GbnfError> {
        match self.peek() {
            None | Some('\r' | '\n') => Ok(()),
            Some(c) => Err(self.error(format!("unexpected `{c}`"))),
        }
    }

    /// Sequences separated by `|`; `nested`: inside parentheses, where newlines are blanks.
    fn alternates(&mut self, nested: bool) -> Result<Alternates, GbnfError> {
        let mut alternates = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_space(true);
            alternates.push(self.sequence(nested)?);
        }
        Ok(alternates)
    }

    fn sequence(&mut self, nested: bool) -> Result<Vec<Node>, GbnfError> {
        let mut nodes = Vec::new();
        loop {
            let node = match self.peek() {
                Some('"') => Node::Literal(self.literal()?),
                Some('[') => self.class()?,
                Some('.') => {
                    self.pos += 1;
                    Node::Any
                }
                Some('(') => self.group()?,
                Some(c) if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                    let at = self.pos;
                    Node::Ref(self.name()?, at)
                }
                Some('<') => self.token(false)?,
                Some('!') => {
                    self.pos += 1;
                    match self.peek() {
                        Some('<') => self.token(true)?,
                        _ => return Err(self.error("expected `<` after `!`")),
                    }
                }
                _ => return Ok(nodes),
            };
            let node = self.repetition(node)?;
            nodes.push(node);
            self.skip_space(nested);
        }
    }

    /// A token reference, `<[id]>` or `<text>`, from its `<`.
    fn token(&mut self, negated: bool) -> Result<Node, GbnfError> {
        let at = self.pos;
        let rest = &self.text[self.pos + 1..];
        let Some(len) = rest
            .find(['>', '\n'])
            .filter(|&n| rest[n..].starts_with('>'))
        else {
            return Err(self.error_at(at, "unterminated token reference".into()));
        };
        let inside = &rest[..len];
        self.pos += len + 2;
        let token = match inside.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            Some(id) => TokenRef::Id(id.trim().parse().map_err(|_| {
                self.error_at(at, format!("`<[{}]>` is not a token id", shown(id)))
            })?),
            None if inside.is_empty() => {
                return Err(self.error_at(at, "empty token reference".into()))
            }
            None => TokenRef::Text(format!("<{inside}>"), at),
        };
        Ok(Node::Token { token, negated })
    }

    /// A parenthesised group, at most `MAX_NESTING` deep (deeper would exhaust the stack).
    fn group(&mut self) -> Result<Node, GbnfError> {
        if self.depth >= MAX_NESTING {
            return Err(self.error(format!("groups nested more than {MAX_NESTING} deep")));
        }
        self.pos += 1;
        self.depth += 1;
        self.skip_space(true);
        let group = self.alternates(true)?;
        self.expect(")")?;
        self.depth -= 1;
        Ok(Node::Group(group))
    }

    /// `*`, `+`, `?`, `{m}`, `{m,}` or `{m,n}` after `node`, if any.
    fn repetition(&mut self, node: Node) -> Result<Node, GbnfError> {
        let (min, max) = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => {
                self.pos += 1;
                let bounds = self.bounds()?;
                return Ok(Node::Repeat {
                    node: Box::new(node),
                    min: bounds.0,
                    max: bounds.1,
                });
            }
            _ => return Ok(node),
        };
        self.pos += 1;
        Ok(Node::Repeat {
            node: Box::new(node),
            min,
            max,
        })
    }

    /// The inside of `{m}`, `{m,}` or `{m,n}` and its closing brace.
    fn bounds(&mut self) -> Result<(u32, Option<u32>), GbnfError> {
        self.skip_space(false);
        let min = self.number()?;
        self.skip_space(false);
        let max = match self.peek() {
            Some(',') => {
                self.pos += 1;
                self.skip_space(false);
                match self.peek() {
                    Some('}') => None,
                    _ => Some(self.number()?),
                }
            }
            _ => Some(min),
        };
        self.skip_space(false);
        self.expect("}")?;
        if max.is_some_and(|max| max < min) {
            return Err(self.error(format!(
                "a repetition of at most {max:?} and at least {min}"
            )));
        }
        Ok((min, max))
    }

    fn number(&mut self) -> Result<u32, GbnfError> {
        let rest = &self.text[self.pos..];
        let len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n = rest[..len]
            .parse()
            .map_err(|_| self.error("expected a number"))?;
        self.pos += len;
        Ok(n)
    }

    /// A `"..."` literal, unescaped.
    fn literal(&mut self) -> Result<String, GbnfError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None | Some('\n') => return Err(self.error("unterminated string")),
                Some('"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(_) => out.push(self.char()?),
            }
        }
    }

    /// One character of a literal or class, escapes read.
    fn char(&mut self) -> Result<char, GbnfError> {
        let at = self.pos;
        let c = self.bump().ok_or_else(|| self.error("unexpected end"))?;
        if c != '\\' {
            return Ok(c);
        }
        let hex = |r: &mut Self, digits: usize| {
            let s = r.text.get(r.pos..r.pos + digits).unwrap_or_default();
            let c = u32::from_str_radix(s, 16).ok().and_then(char::from_u32);
            r.pos += digits.min(r.text.len() - r.pos);
            c.ok_or_else(|| r.error_at(at, format!("invalid escape `\\{s}`")))
        };
        match self.bump() {
            Some('n') => Ok('\n'),
            Some('r') => Ok('\r'),
            Some('t') => Ok('\t'),
            Some(c @ ('\\' | '"' | '[' | ']' | '-' | '/')) => Ok(c),
            Some('x') => hex(self, 2),
            Some('u') => hex(self, 4),
            Some('U') => hex(self, 8),
            Some(c) => Err(self.error_at(at, format!("invalid escape `\\{c}`"))),
            None => Err(self.error("unexpected end")),
        }
    }

    /// A `[...]` character class.
    fn class(&mut self) -> Result<Node, GbnfError> {
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None | Some('\n') => return Err(self.error("unterminated character class")),
                Some(']') => {
                    self.pos += 1;
                    return Ok(Node::Class { negated, ranges });
                }
                Some(_) => {
                    let start = self.char()?;
                    let rest = &self.text[self.pos..];
                    let end = match rest.starts_with('-') && !rest[1..].starts_with(']') {
                        true => {
                            self.pos += 1;
                            self.char()?
                        }
                        false => start,
                    };
                    ranges.push((start, end));
                }
            }
        }
    }
}

/// Writes rules in Lark: names mapped to Lark rule names, every reference checked.
struct Lark<'t> {
    names: BTreeMap<String, String>,
    tokens: TokenLookup<'t>,
}

impl<'t> Lark<'t> {
    /// Lark rule names start with a lowercase letter and terminal names are capitals; GBNF's
    /// may mix cases or start with a digit, so each gets a `g-` (rule) or `G_` (terminal)
    /// name made unique.
    fn new(order: &[String], terminals: &BTreeSet<String>, tokens: TokenLookup<'t>) -> Lark<'t> {
        let mut names = BTreeMap::new();
        let mut taken = BTreeSet::from(["start".to_string()]);
        for name in order.iter().filter(|n| *n != "root") {
            let (base, sep) = match terminals.contains(name) {
                true => (terminal_name(name), '_'),
                false => (format!("g-{}", name.to_ascii_lowercase()), '-'),
            };
            let mut lark = base.clone();
            let mut n = 1;
            while !taken.insert(lark.clone()) {
                n += 1;
                lark = format!("{base}{sep}{n}");
            }
            names.insert(name.clone(), lark);
        }
        names.insert("root".into(), "start".into());
        Lark { names, tokens }
    }

    fn write(&self, reader: &Reader, order: &[String], rules: &Rules) -> Result<String, GbnfError> {
        let mut out = String::new();
        for name in order {
            let Some((_, body)) = rules.get(name) else {
                continue;
            };
            let lark = self.names.get(name).map_or(name.as_str(), String::as_str);
            out.push_str(&format!("{lark}: {}\n", self.alternates(reader, body)?));
        }
        Ok(out)
    }

    fn alternates(&self, reader: &Reader, alts: &Alternates) -> Result<String, GbnfError> {
        let alts: Vec<String> = alts
            .iter()
            .map(|seq| self.sequence(reader, seq))
            .collect::<Result<_, _>>()?;
        Ok(alts.join(" | "))
    }

    fn sequence(&self, reader: &Reader, seq: &[Node]) -> Result<String, GbnfError> {
        if seq.is_empty() {
            return Ok("\"\"".into());
        }
        let items: Vec<String> = seq
            .iter()
            .map(|n| self.node(reader, n))
            .collect::<Result<_, _>>()?;
        Ok(items.join(" "))
    }

    fn node(&self, reader: &Reader, node: &Node) -> Result<String, GbnfError> {
        Ok(match node {
            Node::Literal(s) => json_string(s),
            Node::Class { negated, ranges } => class_regex(*negated, ranges),
            Node::Any => "/(?s:.)/".into(),
            Node::Token { token, negated } => {
                let id = match token {
                    TokenRef::Id(id) => *id,
                    TokenRef::Text(text, at) => (self.tokens)(text).ok_or_else(|| {
                        let text = shown(text);
                        reader.error_at(*at, format!("`{text}` is not one token of this model"))
                    })?,
                };
                format!("<[{}{id}]>", if *negated { "^" } else { "" })
            }
            Node::Ref(name, at) => match self.names.get(name) {
                Some(lark) => lark.clone(),
                None => {
                    let name = shown(name);
                    return Err(reader.error_at(*at, format!("rule `{name}` is not defined")));
                }
            },
            Node::Group(alts) => format!("({})", self.alternates(reader, alts)?),
            Node::Repeat { node, min, max } => {
                let inner = format!("({})", self.node(reader, node)?);
                match (min, max) {
                    (0, None) => format!("{inner}*"),
                    (1, None) => format!("{inner}+"),
                    (0, Some(1)) => format!("{inner}?"),
                    (min, None) => format!("{inner}{{{min},}}"),
                    (min, Some(max)) => format!("{inner}{{{min},{max}}}"),
                }
            }
        })
    }
}

/// A name or text from the grammar as an error quotes it: its first 64 characters.
fn shown(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_string(),
    }
}

/// `G_` and the name in capitals, with `_` for anything Lark's terminal names cannot hold.
fn terminal_name(name: &str) -> String {
    let upper: String = name
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect();
    format!("G_{upper}")
}

/// A Lark string literal (JSON syntax): quotes, backslashes and control characters escaped.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A one-character regex for a class; every character written as `\x{..}`, so nothing in
/// it can be read as regex syntax or end the `/.../`.
fn class_regex(negated: bool, ranges: &[(char, char)]) -> String {
    let mut out = String::from(if negated { "/[^" } else { "/[" });
    for &(a, b) in ranges {
        out.push_str(&format!("\\x{{{:x}}}", a as u32));
        if a != b {
            out.push_str(&format!("-\\x{{{:x}}}", b as u32));
        }
    }
    out.push_str("]/");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grammar as Lark, with one named token: `<think>` is id 7.
    fn lark(gbnf: &str) -> Result<String, TranslateError> {
        to_lark(gbnf, &|t| (t == "<think>").then_some(7))
    }

    #[test]
    fn rules_literals_classes_and_repetitions() {
        let out = lark(
            "root ::= item (\",\" item){0,3} tail # a list\nitem ::= [a-z_]+ | \"\\\"q\\\"\"\ntail ::= \";\" .?",
        );
        assert_eq!(
            out,
            Ok(
                "start: G_ITEM ((\",\" G_ITEM)){0,3} G_TAIL\n\
                G_ITEM: (/[\\x{61}-\\x{7a}\\x{5f}]/)+ | \"\\\"q\\\"\"\nG_TAIL: \";\" (/(?s:.)/)?\n"
                    .into()
            )
        );
    }

    /// Multi-line rules as LocalAI writes them: newlines inside parentheses and after `::=`.
    #[test]
    fn localai_layout() {
        let gbnf = "root ::= object\nobject ::=\n  \"{\" ws (\n    string\n    (\",\" ws string)*\n  )? \"}\"\n\
                    string ::= \"\\\"\" [^\"\\\\]* \"\\\"\"\nws ::= [ \\t\\n]*";
        let out = lark(gbnf).unwrap_or_else(|e| panic!("{e}"));
        assert!(out.starts_with("start: G_OBJECT\n"), "{out}");
        assert!(out.contains("G_WS: (/[\\x{20}\\x{9}\\x{a}]/)*"), "{out}");
        assert!(out.contains("G_OBJECT: \"{\" G_WS"), "{out}");
    }

    /// Errors name the line and column.
    #[test]
    fn errors_name_the_position() {
        let err = |g: &str| lark(g).map(|_| ()).unwrap_err().to_string();
        assert_eq!(
            err("root ::= \"a\"\nx ::= \"b"),
            "line 2, column 9: unterminated string"
        );
        assert_eq!(
            err("root ::= a"),
            "line 1, column 10: rule `a` is not defined"
        );
        assert_eq!(
            err("x ::= \"a\""),
            "line 1, column 1: the grammar has no `root` rule"
        );
        assert_eq!(err("root ::= \"a\" )"), "line 1, column 14: unexpected `)`");
        assert_eq!(err("root = \"a\""), "line 1, column 6: expected `::=`");
        assert_eq!(
            err("root ::= \"\\q\""),
            "line 1, column 11: invalid escape `\\q`"
        );
        assert_eq!(
            err("root ::= [a-z"),
            "line 1, column 14: unterminated character class"
        );
        let deep = format!(
            "root ::= {}\"a\"{}",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        assert_eq!(
            err(&deep),
            "line 1, column 74: groups nested more than 64 deep"
        );
    }

    /// Token references by id or text, negated or not, keep their rule a rule; rule names
    /// may hold `_`.
    #[test]
    fn token_references() {
        assert_eq!(
            lark("root ::= <think> body <[8]>\nbody ::= !<[8]>* | !<think>\nmy_rule ::= \"x\""),
            Ok("start: <[7]> g-body <[8]>\ng-body: (<[^8]>)* | <[^7]>\nG_MY_RULE: \"x\"\n".into())
        );
        let err = |g: &str| lark(g).map(|_| ()).unwrap_err().to_string();
        assert_eq!(
            err("root ::= \"a\" <tool>"),
            "line 1, column 14: `<tool>` is not one token of this model"
        );
        assert_eq!(
            err("root ::= <[x]>"),
            "line 1, column 10: `<[x]>` is not a token id"
        );
        assert_eq!(
            err("root ::= <think"),
            "line 1, column 10: unterminated token reference"
        );
        assert_eq!(
            err("root ::= !\"a\""),
            "line 1, column 11: expected `<` after `!`"
        );
    }

    /// Names whose case Lark reads as the other kind, or that collide once its case is
    /// applied, get its case and stay apart.
    #[test]
    fn names_take_lark_case_and_stay_distinct() {
        let out = lark("root ::= A a 0x\nA ::= \"1\"\na ::= \"2\"\n0x ::= \"\\x41\"");
        assert_eq!(
            out,
            Ok("start: G_A G_A_2 G_0X\nG_A: \"1\"\nG_A_2: \"2\"\nG_0X: \"A\"\n".into())
        );
        let out = lark("root ::= L\nL ::= \"(\" L? \")\" | M\nM ::= \"m\"");
        assert_eq!(
            out,
            Ok("start: g-l\ng-l: \"(\" (g-l)? \")\" | G_M\nG_M: \"m\"\n".into())
        );
    }

    /// Only rules free of recursion become terminals, however deep the recursion.
    #[test]
    fn recursion_keeps_rules() {
        let rules = |g: &str| {
            let out = lark(g).unwrap_or_else(|e| panic!("{e}"));
            out.lines()
                .map(|l| l.split(':').next().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            rules("root ::= a\na ::= b \"x\"\nb ::= c?\nc ::= \"[\" a \"]\"\nd ::= [0-9]"),
            ["start", "g-a", "g-b", "g-c", "G_D"]
        );
    }
}
