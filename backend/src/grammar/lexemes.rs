//! Which GBNF rules can become Lark terminals (lexemes) without changing what the grammar
//! accepts. llguidance matches a terminal with one automaton, which makes a mask many times
//! cheaper than walking its characters through the Earley parser; but its lexer is greedy
//! (as Lark's): where a terminal's text could end and the next element begin, it keeps
//! extending the terminal. So a rule becomes a terminal only when that choice can never
//! arise: no character that can extend one of its complete matches can begin what may
//! follow it. JSON's `string`, `number` and `ws` pass; `[a-z ]*` before `" end"` does not,
//! and stays a rule, matched character by character.
//!
//! The check is over the grammar's structure with conservative sets (it may keep a rule
//! that could have been a terminal, never the reverse). Sets are of UTF-8 lead bytes, since
//! the lexer decides at a byte: characters that share their first byte count as clashing.

use std::collections::{BTreeMap, BTreeSet};

use super::gbnf::{Alternates, Node};

/// The rules, by name: where each was defined, and its body.
pub(super) type Rules = BTreeMap<String, (usize, Alternates)>;

/// Passes of the fixed-point computations before giving up; a grammar that needs more gets
/// no terminals (exact, only slower).
const MAX_PASSES: usize = 64;

/// The rules that can be terminals: not `root`, free of recursion (they name only literals,
/// classes and other terminals), and safe for a greedy lexer where they are used.
pub(super) fn terminals(rules: &Rules) -> BTreeSet<String> {
    let Some(facts) = rule_facts(rules) else {
        return BTreeSet::new();
    };
    let mut barred = BTreeSet::new();
    for _ in 0..MAX_PASSES {
        let candidates = closed_terminals(rules, &barred);
        let Some(clashes) = clashing(rules, &candidates, &facts) else {
            break;
        };
        if clashes.is_empty() {
            return candidates;
        }
        barred.extend(clashes);
    }
    BTreeSet::new()
}

/// The largest set of rules outside `barred` made only of literals, classes and rules of
/// the set itself (so with no recursion), as far as `MAX_PASSES` passes find it: every set on
/// the way is closed too, and fewer terminals only cost speed.
fn closed_terminals(rules: &Rules, barred: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for _ in 0..MAX_PASSES {
        let before = found.len();
        for (name, (_, body)) in rules {
            let eligible = name != "root" && !barred.contains(name) && !found.contains(name);
            if eligible && body_is_terminal(body, &found) {
                found.insert(name.clone());
            }
        }
        if found.len() == before {
            break;
        }
    }
    found
}

fn body_is_terminal(alts: &Alternates, terminals: &BTreeSet<String>) -> bool {
    alts.iter()
        .flatten()
        .all(|node| node_is_terminal(node, terminals))
}

fn node_is_terminal(node: &Node, terminals: &BTreeSet<String>) -> bool {
    match node {
        Node::Literal(_) | Node::Class { .. } | Node::Any => true,
        // Lark matches tokens in rules only.
        Node::Token { .. } => false,
        Node::Ref(name, _) => terminals.contains(name),
        Node::Group(alts) => body_is_terminal(alts, terminals),
        Node::Repeat { node, .. } => node_is_terminal(node, terminals),
    }
}

/// The terminals whose extensions clash with what may follow them; None if the tables did
/// not settle within `MAX_PASSES`.
fn clashing(
    rules: &Rules,
    terminals: &BTreeSet<String>,
    facts: &BTreeMap<String, Facts>,
) -> Option<BTreeSet<String>> {
    let follows = follow_sets(rules, terminals, facts)?;
    Some(
        terminals
            .iter()
            .filter(|t| {
                let ext = facts.get(*t).map_or(Bytes::NONE, |f| f.ext);
                follows.get(*t).is_some_and(|f| ext.meets(*f))
            })
            .cloned()
            .collect(),
    )
}

/// A set of UTF-8 lead bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Bytes([u64; 4]);

impl Bytes {
    const NONE: Bytes = Bytes([0; 4]);
    const ALL: Bytes = Bytes([u64::MAX; 4]);

    /// The lead bytes of the code points `a..=b` (the lead byte grows with the code point).
    fn span(a: u32, b: u32) -> Bytes {
        let mut set = Bytes::NONE;
        for byte in lead(a)..=lead(b) {
            set.0[usize::from(byte / 64)] |= 1 << (byte % 64);
        }
        set
    }

    fn of_char(c: char) -> Bytes {
        Bytes::span(c as u32, c as u32)
    }

    fn union(self, other: Bytes) -> Bytes {
        Bytes(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    fn meets(self, other: Bytes) -> bool {
        self.0.iter().zip(other.0).any(|(a, b)| a & b != 0)
    }

    fn when(self, cond: bool) -> Bytes {
        if cond {
            self
        } else {
            Bytes::NONE
        }
    }
}

/// The first byte of a code point's UTF-8 form.
fn lead(cp: u32) -> u8 {
    let byte = match cp {
        0..=0x7f => cp,
        0x80..=0x7ff => 0xc0 | (cp >> 6),
        0x800..=0xffff => 0xe0 | (cp >> 12),
        _ => 0xf0 | (cp >> 18).min(7),
    };
    byte as u8
}

/// What a piece of grammar can match, as far as lexing goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Facts {
    /// It matches the empty text.
    nullable: bool,
    /// Bytes that can begin a match.
    first: Bytes,
    /// Bytes that can appear anywhere in a match.
    all: Bytes,
    /// Bytes that can extend a complete match into a longer one (or a prefix of one).
    ext: Bytes,
}

impl Facts {
    const EMPTY: Facts = Facts {
        nullable: true,
        first: Bytes::NONE,
        all: Bytes::NONE,
        ext: Bytes::NONE,
    };

    fn one(set: Bytes) -> Facts {
        Facts {
            nullable: false,
            first: set,
            all: set,
            ext: Bytes::NONE,
        }
    }

    /// `x` then `y`. A complete `x y` extends within `y`; or, `y` empty, within `x` or into
    /// `y`; or, if `x` can extend with what begins `y`, by splitting the text elsewhere.
    fn then(x: Facts, y: Facts) -> Facts {
        let split = x.ext.meets(y.first);
        Facts {
            nullable: x.nullable && y.nullable,
            first: x.first.union(y.first.when(x.nullable)),
            all: x.all.union(y.all),
            ext: y
                .ext
                .union(x.ext.union(y.first).when(y.nullable))
                .union(x.all.union(y.all).when(split)),
        }
    }

    /// `x` or `y`: one's match may be a prefix of the other's (from its first byte on, or
    /// all of it if the shorter is empty).
    fn or(x: Facts, y: Facts) -> Facts {
        let shared = x.first.meets(y.first);
        Facts {
            nullable: x.nullable || y.nullable,
            first: x.first.union(y.first),
            all: x.all.union(y.all),
            ext: x
                .ext
                .union(y.ext)
                .union(y.first.when(x.nullable))
                .union(x.first.when(y.nullable))
                .union(x.all.union(y.all).when(shared)),
        }
    }

    /// `x` repeated `min..=max` times.
    fn repeat(x: Facts, min: u32, max: Option<u32>) -> Facts {
        if max == Some(0) {
            return Facts::EMPTY;
        }
        let grows = max != Some(min) || (x.nullable && min >= 2);
        let several = max.is_none_or(|m| m >= 2);
        Facts {
            nullable: min == 0 || x.nullable,
            first: x.first,
            all: x.all,
            ext: x
                .ext
                .union(x.first.when(grows))
                .union(x.all.when(several && x.ext.meets(x.first))),
        }
    }
}

/// Every rule's facts, to a fixed point (rules may recurse); None if it does not settle.
fn rule_facts(rules: &Rules) -> Option<BTreeMap<String, Facts>> {
    let mut table: BTreeMap<String, Facts> = BTreeMap::new();
    for _ in 0..MAX_PASSES {
        let mut changed = false;
        for (name, (_, body)) in rules.iter().rev() {
            let facts = alternates(body, &table);
            if table.get(name) != Some(&facts) {
                table.insert(name.clone(), facts);
                changed = true;
            }
        }
        if !changed {
            return Some(table);
        }
    }
    None
}

fn alternates(alts: &Alternates, table: &BTreeMap<String, Facts>) -> Facts {
    let mut each = alts.iter().map(|seq| sequence(seq, table));
    let first = each.next().unwrap_or(Facts::EMPTY);
    each.fold(first, Facts::or)
}

fn sequence(seq: &[Node], table: &BTreeMap<String, Facts>) -> Facts {
    seq.iter()
        .map(|n| node(n, table))
        .fold(Facts::EMPTY, Facts::then)
}

fn node(n: &Node, table: &BTreeMap<String, Facts>) -> Facts {
    match n {
        Node::Literal(s) => s
            .chars()
            .map(|c| Facts::one(Bytes::of_char(c)))
            .fold(Facts::EMPTY, Facts::then),
        Node::Class { negated, ranges } => Facts::one(class(*negated, ranges)),
        // A token is whole: any bytes may begin it, and nothing extends it.
        Node::Any | Node::Token { .. } => Facts::one(Bytes::ALL),
        Node::Ref(name, _) => table.get(name).copied().unwrap_or(Facts {
            nullable: false,
            ..Facts::EMPTY
        }),
        Node::Group(alts) => alternates(alts, table),
        Node::Repeat { node: x, min, max } => Facts::repeat(node(x, table), *min, *max),
    }
}

/// The lead bytes of a character class (a negated one: of every code point outside it).
fn class(negated: bool, ranges: &[(char, char)]) -> Bytes {
    let mut spans: Vec<(u32, u32)> = ranges.iter().map(|&(a, b)| (a as u32, b as u32)).collect();
    if negated {
        spans.sort_unstable();
        let mut outside = Vec::new();
        let mut next = 0u32;
        for (a, b) in spans {
            if a > next {
                outside.push((next, a - 1));
            }
            next = next.max(b.saturating_add(1));
        }
        if next <= 0x10ffff {
            outside.push((next, 0x10ffff));
        }
        spans = outside;
    }
    spans
        .into_iter()
        .filter(|(a, b)| a <= b)
        .fold(Bytes::NONE, |set, (a, b)| set.union(Bytes::span(a, b)))
}

/// What may come right after a place in the grammar: these bytes, or whatever may follow
/// the end of these rules.
#[derive(Debug, Clone, Default, PartialEq)]
struct Follow {
    bytes: Bytes,
    rules: BTreeSet<String>,
}

impl Follow {
    fn add(&mut self, other: &Follow) {
        self.bytes = self.bytes.union(other.bytes);
        self.rules.extend(other.rules.iter().cloned());
    }
}

/// The bytes that may follow each terminal where the parser uses it.
fn follow_sets(
    rules: &Rules,
    terminals: &BTreeSet<String>,
    facts: &BTreeMap<String, Facts>,
) -> Option<BTreeMap<String, Bytes>> {
    let mut direct: BTreeMap<String, Follow> = BTreeMap::new();
    for (name, (_, body)) in rules.iter().filter(|(n, _)| !terminals.contains(*n)) {
        let end = Follow {
            bytes: Bytes::NONE,
            rules: BTreeSet::from([name.clone()]),
        };
        let mut walk = Walk {
            facts,
            found: &mut direct,
        };
        walk.alternates(body, &end);
    }
    let ends = rule_ends(&direct)?;
    let resolve = |f: &Follow| {
        f.rules
            .iter()
            .filter_map(|r| ends.get(r))
            .fold(f.bytes, |set, b| set.union(*b))
    };
    Some(
        terminals
            .iter()
            .filter_map(|t| direct.get(t).map(|f| (t.clone(), resolve(f))))
            .collect(),
    )
}

/// What may follow the end of each rule, to a fixed point; None if it does not settle.
fn rule_ends(direct: &BTreeMap<String, Follow>) -> Option<BTreeMap<String, Bytes>> {
    let mut ends: BTreeMap<String, Bytes> = BTreeMap::new();
    for _ in 0..MAX_PASSES {
        let mut changed = false;
        for (name, follow) in direct {
            let bytes = follow
                .rules
                .iter()
                .filter_map(|r| ends.get(r))
                .fold(follow.bytes, |set, b| set.union(*b));
            if ends.get(name) != Some(&bytes) {
                ends.insert(name.clone(), bytes);
                changed = true;
            }
        }
        if !changed {
            return Some(ends);
        }
    }
    None
}

/// Records, for each rule named in a body, what may follow it there.
struct Walk<'a> {
    facts: &'a BTreeMap<String, Facts>,
    found: &'a mut BTreeMap<String, Follow>,
}

impl Walk<'_> {
    fn alternates(&mut self, alts: &Alternates, after: &Follow) {
        for seq in alts {
            self.sequence(seq, after);
        }
    }

    fn sequence(&mut self, seq: &[Node], after: &Follow) {
        let mut next = after.clone();
        for n in seq.iter().rev() {
            self.node(n, &next);
            let f = node(n, self.facts);
            next = match f.nullable {
                true => Follow {
                    bytes: next.bytes.union(f.first),
                    rules: next.rules,
                },
                false => Follow {
                    bytes: f.first,
                    rules: BTreeSet::new(),
                },
            };
        }
    }

    fn node(&mut self, n: &Node, after: &Follow) {
        match n {
            Node::Literal(_) | Node::Class { .. } | Node::Any | Node::Token { .. } => {}
            Node::Ref(name, _) => self.found.entry(name.clone()).or_default().add(after),
            Node::Group(alts) => self.alternates(alts, after),
            Node::Repeat { node: x, max, .. } => {
                let again = node(x, self.facts).first;
                let after = Follow {
                    bytes: after.bytes.union(again.when(max.is_none_or(|m| m >= 2))),
                    rules: after.rules.clone(),
                };
                self.node(x, &after);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(gbnf: &str) -> Rules {
        super::super::gbnf::parse(gbnf).unwrap_or_else(|e| panic!("{e}"))
    }

    fn names(gbnf: &str) -> Vec<String> {
        terminals(&rules(gbnf)).into_iter().collect()
    }

    /// LocalAI's JSON grammar: every rule without recursion is a terminal.
    #[test]
    fn json_primitives_are_terminals() {
        let gbnf = "root ::= object\nvalue ::= object | string | number\n\
                    object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n\
                    string ::= \"\\\"\" ([^\"\\\\] | \"\\\\\" [\"nt])* \"\\\"\" ws\n\
                    number ::= \"-\"? [0-9]+ (\".\" [0-9]+)? ws\nws ::= | \" \" | \"\\n\" [ \\t]{0,20}";
        assert_eq!(names(gbnf), ["number", "string", "ws"]);
    }

    /// A rule that could swallow what follows it stays a rule, and so does a rule that uses
    /// it; one that cannot, in the same grammar, is a terminal.
    #[test]
    fn a_rule_that_could_swallow_what_follows_stays_a_rule() {
        assert_eq!(
            names("root ::= a \" end\"\na ::= [a-z ]*"),
            Vec::<String>::new()
        );
        assert_eq!(
            names("root ::= a b\na ::= [0-9]+\nb ::= [0-9] \"x\""),
            ["b"]
        );
        assert_eq!(
            names("root ::= w \"x\" | n \"!\"\nw ::= n \"-\"?\nn ::= [0-9]+"),
            ["n", "w"]
        );
        assert_eq!(
            names("root ::= w \"-\"\nw ::= n \"-\"?\nn ::= [0-9]+"),
            ["n"]
        );
        // What follows a rule's end counts: `a` ends `b`, and `b` is followed by a digit.
        assert_eq!(
            names("root ::= b [0-9]\nb ::= \"x\" a\na ::= [0-9]*"),
            Vec::<String>::new()
        );
    }

    /// A hostile chain of 3000 rules, each naming the next, is bounded: the passes stop at
    /// `MAX_PASSES`, and whatever they found is still a closed set of terminals.
    #[test]
    fn a_long_chain_of_rules_is_bounded() {
        let mut gbnf = String::from("root ::= r0000\n");
        for i in 0..3000 {
            gbnf.push_str(&format!("r{i:04} ::= \"x\" r{:04}?\n", i + 1));
        }
        gbnf.push_str("r3000 ::= \"y\"\n");
        let found = terminals(&rules(&gbnf));
        assert!(
            found.len() < 3001 && found.contains("r3000"),
            "{}",
            found.len()
        );
        let set = rules(&gbnf);
        for name in &found {
            let (_, body) = &set[name];
            assert!(body_is_terminal(body, &found), "{name}");
        }
    }

    /// Extensions hidden in alternatives and splits: `"ab" | "abc"` extends with `c`, and
    /// `[a-b]* "b"` can end at either `b`.
    #[test]
    fn extensions_through_alternatives_and_splits() {
        let ext = |gbnf: &str| {
            let facts = rule_facts(&rules(gbnf)).unwrap_or_default();
            facts.get("t").map_or(Bytes::NONE, |f| f.ext)
        };
        let byte = |c: char| Bytes::of_char(c);
        assert_eq!(
            ext("root ::= t\nt ::= \"ab\" | \"abc\""),
            byte('a').union(byte('b')).union(byte('c'))
        );
        assert!(ext("root ::= t\nt ::= [a-b]* \"b\"").meets(byte('b')));
        assert_eq!(ext("root ::= t\nt ::= \"{\" [a-z]* \"}\""), Bytes::NONE);
        assert_eq!(ext("root ::= t\nt ::= \"x\" \" \"?"), byte(' '));
        assert!(!ext("root ::= t\nt ::= [^\\x00-\\x7f]").meets(Bytes::ALL));
        assert_eq!(
            class(true, &[('\0', '\u{7f}')]),
            Bytes::span(0x80, 0x10ffff)
        );
    }
}
