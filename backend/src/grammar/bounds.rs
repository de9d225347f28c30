//! Bounds on a request's grammar, checked on its parsed rules before anything walks them
//! deeply. llguidance compiles a rule where it is first named, by recursion, so a chain of
//! rules naming rules is a chain of stack frames, and Rust cannot catch a stack overflow: it
//! aborts the process. These limits make the deepest walk fit the compile thread's stack
//! (`super::compile::STACK_BYTES`), and keep a grammar under llguidance's own size bound
//! (fewer than 65,525 symbols, which it asserts rather than reports).

use std::collections::BTreeMap;

use super::gbnf::{Alternates, Node};
use super::lexemes::Rules;

/// Bytes of GBNF text: LocalAI's JSON-schema grammars are a few kilobytes.
pub const MAX_BYTES: usize = 1 << 20;
/// Rules in one grammar.
pub const MAX_RULES: usize = 4_096;
/// Elements in one grammar: literals, classes, tokens, references, groups, repetitions and
/// alternatives. llguidance makes at most about two symbols of each, so this keeps a grammar
/// well under its 65,525.
pub const MAX_ELEMENTS: usize = 20_000;
/// Groups and repetitions nested in one rule: llguidance's Lark parser refuses 29 (each
/// translates to one level of parentheses).
pub const MAX_NESTING: usize = 24;
/// Levels of the deepest walk: each rule along a chain of rules naming rules counts one,
/// plus the groups and repetitions it nests.
pub const MAX_DEPTH: usize = 512;

/// A grammar over one of the limits: which, and by how much.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("the grammar is {0} bytes, over the limit of {MAX_BYTES} bytes")]
    Bytes(usize),
    #[error("the grammar has {0} rules, over the limit of {MAX_RULES} rules")]
    Rules(usize),
    #[error(
        "the grammar has {0} elements (literals, classes, references, groups, repetitions, \
         alternatives), over the limit of {MAX_ELEMENTS}"
    )]
    Elements(usize),
    #[error("a rule nests groups and repetitions {0} deep, over the limit of {MAX_NESTING}")]
    Nesting(usize),
    #[error(
        "the grammar nests {0} levels deep (rules naming rules, with their groups and \
         repetitions), over the limit of {MAX_DEPTH} levels"
    )]
    Depth(usize),
}

/// The text's size, checked before it is parsed.
pub fn check_text(text: &str) -> Result<(), LimitError> {
    match text.len() > MAX_BYTES {
        true => Err(LimitError::Bytes(text.len())),
        false => Ok(()),
    }
}

/// The parsed rules' count, elements, nesting and depth.
pub(super) fn check_rules(rules: &Rules) -> Result<(), LimitError> {
    if rules.len() > MAX_RULES {
        return Err(LimitError::Rules(rules.len()));
    }
    let elements: usize = rules.values().map(|(_, body)| elements(body)).sum();
    if elements > MAX_ELEMENTS {
        return Err(LimitError::Elements(elements));
    }
    let nested = rules.values().map(|(_, b)| nesting(b)).max().unwrap_or(0);
    if nested > MAX_NESTING {
        return Err(LimitError::Nesting(nested));
    }
    let depth = depth(rules);
    match depth > MAX_DEPTH {
        true => Err(LimitError::Depth(depth)),
        false => Ok(()),
    }
}

fn elements(alts: &Alternates) -> usize {
    alts.iter()
        .map(|seq| 1 + seq.iter().map(node_elements).sum::<usize>())
        .sum()
}

fn node_elements(node: &Node) -> usize {
    match node {
        Node::Group(alts) => 1 + elements(alts),
        Node::Repeat { node, .. } => 1 + node_elements(node),
        _ => 1,
    }
}

/// How deep groups and repetitions nest in a body.
fn nesting(alts: &Alternates) -> usize {
    alts.iter().flatten().map(node_nesting).max().unwrap_or(0)
}

fn node_nesting(node: &Node) -> usize {
    match node {
        Node::Group(alts) => 1 + nesting(alts),
        Node::Repeat { node, .. } => 1 + node_nesting(node),
        _ => 0,
    }
}

/// The rules each body names, in `Node::Ref`s at any nesting.
fn references<'a>(alts: &'a Alternates, out: &mut Vec<&'a str>) {
    for node in alts.iter().flatten() {
        node_references(node, out);
    }
}

fn node_references<'a>(node: &'a Node, out: &mut Vec<&'a str>) {
    match node {
        Node::Ref(name, _) => out.push(name),
        Node::Group(alts) => references(alts, out),
        Node::Repeat { node, .. } => node_references(node, out),
        _ => {}
    }
}

/// An upper bound on the deepest walk a compiler can make, whatever order it takes rules
/// in: the heaviest path through the graph of rules naming rules, each rule weighing one
/// plus its nesting, and each cycle of rules (strongly connected) weighing all its rules,
/// since a walk that marks rules in progress can pass each of them once.
pub(super) fn depth(rules: &Rules) -> usize {
    let index: BTreeMap<&str, usize> = rules
        .keys()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut graph = Vec::with_capacity(rules.len());
    let mut weight = Vec::with_capacity(rules.len());
    for (_, body) in rules.values() {
        let mut names = Vec::new();
        references(body, &mut names);
        graph.push(names.iter().filter_map(|n| index.get(n).copied()).collect());
        weight.push(1 + nesting(body));
    }
    heaviest_path(&graph, &weight)
}

/// The heaviest path through `graph`'s components (Tarjan's, which numbers a component
/// after every component it reaches, so one pass in that order settles them all).
fn heaviest_path(graph: &[Vec<usize>], weight: &[usize]) -> usize {
    let component = components(graph);
    let count = component.iter().max().map_or(0, |c| c + 1);
    let mut members = vec![Vec::new(); count];
    for (v, &c) in component.iter().enumerate() {
        members[c].push(v);
    }
    let mut cost = vec![0usize; count];
    for c in 0..count {
        let own: usize = members[c].iter().map(|&v| weight[v]).sum();
        let below = members[c]
            .iter()
            .flat_map(|&v| graph[v].iter())
            .map(|&w| component[w])
            .filter(|&d| d != c)
            .map(|d| cost[d])
            .max()
            .unwrap_or(0);
        cost[c] = own.saturating_add(below);
    }
    cost.into_iter().max().unwrap_or(0)
}

/// Tarjan's strongly connected components, without recursion: each vertex's component.
fn components(graph: &[Vec<usize>]) -> Vec<usize> {
    const NONE: usize = usize::MAX;
    let n = graph.len();
    let (mut index, mut low) = (vec![NONE; n], vec![0; n]);
    let (mut on_stack, mut stack) = (vec![false; n], Vec::new());
    let (mut component, mut next, mut found) = (vec![NONE; n], 0, 0);
    for root in 0..n {
        if index[root] != NONE {
            continue;
        }
        let mut calls = vec![(root, 0usize)];
        (index[root], low[root], next) = (next, next, next + 1);
        stack.push(root);
        on_stack[root] = true;
        while let Some(&(v, edge)) = calls.last() {
            if let Some(&w) = graph[v].get(edge) {
                if let Some(top) = calls.last_mut() {
                    top.1 += 1;
                }
                if index[w] == NONE {
                    (index[w], low[w], next) = (next, next, next + 1);
                    stack.push(w);
                    on_stack[w] = true;
                    calls.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(u, _)) = calls.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component[w] = found;
                    if w == v {
                        break;
                    }
                }
                found += 1;
            }
        }
    }
    component
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::gbnf::TranslateError;

    fn rules(gbnf: &str) -> Rules {
        super::super::gbnf::parse(gbnf).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A chain counts each rule; a cycle counts all its rules once; groups add their levels.
    #[test]
    fn depth_follows_chains_cycles_and_nesting() {
        assert_eq!(depth(&rules("root ::= a\na ::= b\nb ::= \"x\"")), 3);
        assert_eq!(
            depth(&rules("root ::= a\na ::= \"(\" a? \")\" | b\nb ::= \"x\"")),
            1 + 2 + 1
        );
        assert_eq!(depth(&rules("root ::= ((a))\na ::= \"x\"")), 3 + 1);
        assert_eq!(
            depth(&rules("root ::= a b c\na ::= \"x\"\nb ::= a\nc ::= b")),
            4
        );
        let cycle = "root ::= a\na ::= b | \"x\"\nb ::= c\nc ::= a d\nd ::= \"y\"";
        assert_eq!(depth(&rules(cycle)), 1 + 3 + 1);
    }

    /// Each limit names itself and the grammar's value.
    #[test]
    fn limits_name_the_value_and_the_limit() {
        let mut chain = String::from("root ::= r0\n");
        for i in 0..1100 {
            chain.push_str(&format!("r{i} ::= r{}\n", i + 1));
        }
        chain.push_str("r1100 ::= \"a\"\n");
        assert_eq!(check_rules(&rules(&chain)), Err(LimitError::Depth(1102)));
        let wide = format!("root ::= {}", vec!["\"a\""; 20_001].join(" "));
        assert_eq!(
            check_rules(&rules(&wide)),
            Err(LimitError::Elements(20_002))
        );
        let many: String = (0..5000).map(|i| format!("r{i} ::= \"a\"\n")).collect();
        let many = format!("root ::= \"a\"\n{many}");
        assert_eq!(check_rules(&rules(&many)), Err(LimitError::Rules(5001)));
        let nested = format!("root ::= {}\"a\"{}*", "(".repeat(24), ")".repeat(24));
        assert_eq!(check_rules(&rules(&nested)), Err(LimitError::Nesting(25)));
        let text = "x".repeat(MAX_BYTES + 1);
        let err = check_text(&text).map_err(|e| e.to_string());
        assert_eq!(
            err,
            Err("the grammar is 1048577 bytes, over the limit of 1048576 bytes".into())
        );
    }

    /// A seeded xorshift: the same cases on every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n.max(1) as u64) as usize
        }

        /// Up to `max`, spread over its orders of magnitude.
        fn scale(&mut self, max: usize) -> usize {
            let bits = usize::BITS - max.leading_zeros();
            let cap = 1usize << self.below(bits as usize + 1);
            1 + self.below(cap.min(max))
        }
    }

    /// A grammar along the two axes: `rules` rules, each naming the next (a chain as deep as
    /// the grammar is long) and sometimes one further or itself, with groups nested up to
    /// `nest` deep, alternatives and repetitions.
    fn generated(rng: &mut Rng, rules: usize, nest: usize) -> String {
        let mut out = String::from("root ::= r0\n");
        for i in 0..rules {
            let depth = rng.below(nest + 1);
            let mut body = match i + 1 < rules {
                true => format!("r{}", i + 1),
                false => "\"a\"".into(),
            };
            if rng.below(4) == 0 {
                body = format!("{body} | \"x\" r{}?", rng.below(rules));
            }
            for _ in 0..depth {
                body = match rng.below(3) {
                    0 => format!("({body})"),
                    1 => format!("({body})*"),
                    _ => format!("(\"y\" | {body}){{0,3}}"),
                };
            }
            out.push_str(&format!("r{i} ::= {body} [a-z]\n"));
        }
        out
    }

    /// A few bytes of `text` replaced by GBNF's own characters.
    fn mutated(rng: &mut Rng, text: &str) -> String {
        let mut bytes = text.as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(bytes.len());
            let alphabet = b"()[]|*+?{}\"\\:=<>!.\n ax0";
            bytes[at] = alphabet[rng.below(alphabet.len())];
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The translator's answer for `text`, checked: it never panics or overflows (it runs
    /// on a 2 MiB stack, a tokio blocking thread's), and a limit it names is one the
    /// grammar is over, while a grammar it translates is within every limit.
    fn check(text: &str) -> Result<(), String> {
        let result = std::thread::scope(|s| {
            let run = std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn_scoped(s, || crate::grammar::to_lark(text, &|_| None));
            run.map_err(|e| e.to_string())?
                .join()
                .map_err(|_| format!("to_lark panicked on {text:?}"))
        })?;
        match result {
            Err(TranslateError::Limit(LimitError::Depth(d))) if d <= MAX_DEPTH => {
                Err(format!("depth {d} refused"))
            }
            Err(TranslateError::Limit(LimitError::Elements(n))) if n <= MAX_ELEMENTS => {
                Err(format!("{n} elements refused"))
            }
            Err(TranslateError::Limit(LimitError::Nesting(n))) if n <= MAX_NESTING => {
                Err(format!("nesting {n} refused"))
            }
            Err(TranslateError::Limit(LimitError::Rules(n))) if n <= MAX_RULES => {
                Err(format!("{n} rules refused"))
            }
            Err(e) if e.to_string().len() > 1024 => Err(format!("a long message: {e}")),
            Ok(_) => match super::super::gbnf::parse(text) {
                Ok(r) if depth(&r) <= MAX_DEPTH && r.len() <= MAX_RULES => Ok(()),
                _ => Err("a grammar over a limit was translated".into()),
            },
            Err(_) => Ok(()),
        }
    }

    /// Property: over depth (chains up to 6,000 rules, groups up to 70 deep) and size, and
    /// random edits of those grammars, the translator answers Ok or a clear error, never a
    /// panic or an overflow.
    #[test]
    fn the_translator_is_total_over_depth_and_size() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..120 {
            let rules = rng.scale(6_000);
            let nest = rng.below(71);
            let text = generated(&mut rng, rules, nest);
            let text = match case % 3 {
                0 => mutated(&mut rng, &text),
                _ => text,
            };
            if let Err(why) = check(&text) {
                panic!("case {case} ({rules} rules, nesting {nest}): {why}");
            }
        }
    }
}
