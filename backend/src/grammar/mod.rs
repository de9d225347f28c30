//! Constrained decoding: a request's GBNF grammar (LocalAI's JSON mode, JSON-schema and
//! tool-call grammars) compiled by llguidance into a token mask per step. llguidance is the
//! engine (the one vLLM and llama.cpp use); we only translate GBNF's notation (`gbnf`),
//! keep each request's matcher, and make it lazy when the model has grammar triggers.
//!
//! Everything here runs on rank 0: workers compute forward passes only, so a constrained
//! request runs the same on one node and across ranks.

mod bounds;
mod compile;
mod gbnf;
mod lexemes;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{SimpleVob, TokEnv, TokTrie};
use llguidance::{Matcher, ParserFactory};

pub use bounds::{LimitError, MAX_BYTES, MAX_DEPTH, MAX_ELEMENTS, MAX_NESTING, MAX_RULES};
pub use compile::{counts, slots, CompileCounts, STACK_BYTES};
pub use gbnf::{to_lark, GbnfError, TranslateError};

use compile::{short, Cancel};

use crate::error::{Error, Result};

/// A loaded model's grammar compiler: where its tokenizer is, the width of its logits, and
/// the trigger words that make grammars lazy (`ModelOptions.GrammarTriggers`). llguidance's
/// token trie is built on the first request with a grammar (about 0.25 s for a 49k
/// vocabulary), so a LoadModel that never sees one does not pay for it.
pub struct Grammars {
    tokenizer_json: PathBuf,
    vocab: usize,
    eos: Vec<u32>,
    triggers: Arc<[Vec<u8>]>,
    built: OnceLock<std::result::Result<Compiler, String>>,
}

/// llguidance's side, once built.
struct Compiler {
    factory: ParserFactory,
    env: TokEnv,
}

impl Compiler {
    /// The token whose text is exactly `text` (a special token's too: llguidance's trie
    /// holds those behind a marker byte).
    fn token_id(&self, text: &str) -> Option<u32> {
        let trie = self.env.tok_trie();
        let marked = [&[TokTrie::SPECIAL_TOKEN_MARKER], text.as_bytes()].concat();
        trie.token_id(text.as_bytes())
            .or_else(|| trie.token_id(&marked))
    }
}

impl Grammars {
    /// For the model folder `dir` (its `tokenizer.json`); `vocab`: the width of the logits.
    pub fn new(dir: &Path, vocab: usize, eos: &[u32], triggers: &[String]) -> Grammars {
        Grammars {
            tokenizer_json: dir.join("tokenizer.json"),
            vocab,
            eos: eos.to_vec(),
            triggers: triggers.iter().map(|t| t.as_bytes().to_vec()).collect(),
            built: OnceLock::new(),
        }
    }

    fn compiler(&self) -> Result<&Compiler> {
        let build = || -> anyhow::Result<Compiler> {
            let mut bytes = toktrie_hf_tokenizers::ByteTokenizer::from_file(&self.tokenizer_json)?;
            bytes.set_eos_tokens(&self.eos);
            let env = bytes.into_tok_env(Some(self.vocab))?;
            let mut factory = ParserFactory::new_simple(&env)?;
            factory.set_stderr_log_level(0);
            *factory.limits_mut() = limits();
            Ok(Compiler { factory, env })
        };
        let built = self
            .built
            .get_or_init(|| build().map_err(|e| e.to_string()));
        built.as_ref().map_err(|why| {
            Error::InvalidRequest(format!("this model cannot take a Grammar: {why}"))
        })
    }

    /// Compiles a request's GBNF grammar on this thread, whose stack must be the compile
    /// thread's (`compile.rs`); a bad grammar is an error naming its position or the limit
    /// it is over. Between phases it stops if `cancel` says the caller left.
    fn compile_here(&self, gbnf: &str, cancel: &Cancel) -> Result<Constraint> {
        cancel.check()?;
        let compiler = self.compiler()?;
        cancel.check()?;
        let lark = to_lark(gbnf, &|text| compiler.token_id(text))
            .map_err(|e| Error::InvalidRequest(short(format!("Grammar: {e}"))))?;
        cancel.check()?;
        let parser = compiler
            .factory
            .create_parser(TopLevelGrammar::from_lark(lark))
            .map_err(|e| match is_panic(&e) {
                true => Error::Internal(reported(&e)),
                false => Error::InvalidRequest(short(format!("Grammar: {}", reported(&e)))),
            })?;
        cancel.check()?;
        let matcher = Matcher::new(Ok(parser));
        let state = match self.triggers.is_empty() {
            true => State::Active(matcher),
            false => State::Waiting {
                matcher,
                text: Vec::new(),
            },
        };
        Ok(Constraint {
            env: compiler.env.clone(),
            triggers: self.triggers.clone(),
            state,
            trim: TrimOnDrop(gbnf.len() >= TRIM_AFTER_BYTES),
        })
    }
}

/// Whether llguidance's error is a panic it caught (it returns the panic's text and
/// backtrace as the error).
fn is_panic(e: &impl std::fmt::Display) -> bool {
    e.to_string().starts_with("panic:")
}

/// llguidance's error as a client reads it: its first line (the lines after it quote the
/// Lark grammar), or, for a panic it caught, a short note; the panic's text goes to the log.
fn reported(e: &impl std::fmt::Display) -> String {
    let text = e.to_string();
    if is_panic(&text) {
        tracing::error!(panic = %text, "llguidance panicked");
        return "llguidance failed on this grammar (details in the backend's log)".into();
    }
    text.lines().next().unwrap_or_default().to_string()
}

/// llguidance's limits for our grammars: its defaults, but fewer symbols than its compiled
/// grammar's index holds (it asserts fewer than 65,525 rather than failing; it checks its
/// limit between expansions, and `bounds::MAX_ELEMENTS` more can come after the last check),
/// a lexer of at most 50,000 states (each 1-2 kB, so under 100 MB a grammar), and errors
/// that do not quote the grammar back (a request's message stays short).
fn limits() -> ParserLimits {
    ParserLimits {
        max_grammar_size: 40_000,
        max_lexer_states: 50_000,
        verbose_errors: false,
        ..ParserLimits::default()
    }
}

/// One request's grammar, as far as its output has gone.
pub struct Constraint {
    env: TokEnv,
    triggers: Arc<[Vec<u8>]>,
    state: State,
    trim: TrimOnDrop,
}

/// Grammars at least this long compile to automata of tens of megabytes.
const TRIM_AFTER_BYTES: usize = 64 << 10;

/// Returns the C heap's free pages once a large grammar's automata are dropped: they were
/// allocated in the compile thread's arena, which glibc would otherwise keep resident (two
/// answered 1 MB grammars left 53-67 MB behind).
/// Dropped after the other fields (declared last).
#[derive(Clone)]
struct TrimOnDrop(bool);

impl Drop for TrimOnDrop {
    fn drop(&mut self) {
        if self.0 {
            crate::memory::trim_heap();
        }
    }
}

enum State {
    /// Lazy: unconstrained until a trigger word appears in `text`, the output so far.
    Waiting {
        matcher: Matcher,
        text: Vec<u8>,
    },
    Active(Matcher),
    /// The output left the grammar (only possible with a trigger word that the grammar does
    /// not start with): it ends the request.
    Broken(String),
}

impl Clone for Constraint {
    /// A matcher of its own (a plain clone would share parser state).
    fn clone(&self) -> Self {
        let state = match &self.state {
            State::Waiting { matcher, text } => State::Waiting {
                matcher: matcher.deep_clone(),
                text: text.clone(),
            },
            State::Active(matcher) => State::Active(matcher.deep_clone()),
            State::Broken(why) => State::Broken(why.clone()),
        };
        Constraint {
            env: self.env.clone(),
            triggers: self.triggers.clone(),
            state,
            trim: self.trim.clone(),
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Waiting { .. } => "waiting for a trigger",
            State::Active(_) => "active",
            State::Broken(_) => "broken",
        };
        write!(f, "Constraint({state})")
    }
}

/// The tokens a row may take next.
pub enum Mask {
    /// Any token (a lazy grammar not yet triggered).
    Any,
    Only(SimpleVob),
    /// None: the grammar allows nothing more, and why.
    Nothing(String),
}

impl Constraint {
    /// The tokens allowed next (the model's eos once the grammar is complete).
    pub fn mask(&mut self) -> Mask {
        match &mut self.state {
            State::Waiting { .. } => Mask::Any,
            State::Broken(why) => Mask::Nothing(why.clone()),
            State::Active(matcher) => match matcher.compute_mask_or_eos() {
                Ok(mask) if mask.is_zero() => Mask::Nothing("the grammar allows no token".into()),
                Ok(mask) => Mask::Only(mask),
                Err(e) => Mask::Nothing(format!("the grammar failed: {}", reported(&e))),
            },
        }
    }

    /// Takes the token chosen; a lazy grammar starts at the first trigger word, fed the
    /// output from that word on.
    pub fn accept(&mut self, id: u32) {
        let state = std::mem::replace(&mut self.state, State::Broken(String::new()));
        self.state = match state {
            State::Active(mut matcher) => match matcher.consume_token(id) {
                Ok(()) => State::Active(matcher),
                Err(e) => {
                    State::Broken(format!("the grammar rejected the output: {}", reported(&e)))
                }
            },
            State::Waiting { matcher, mut text } => {
                let before = text.len();
                text.extend(self.env.tok_trie().decode_raw(&[id]));
                self.trigger(matcher, text, before)
            }
            broken => broken,
        };
    }

    /// Starts the grammar at the first trigger word in `text`, looking only where the bytes
    /// after `before` could have completed one (earlier text was searched before).
    fn trigger(&self, mut matcher: Matcher, text: Vec<u8>, before: usize) -> State {
        let longest = self.triggers.iter().map(Vec::len).max().unwrap_or(0);
        let from = before.saturating_sub(longest.saturating_sub(1));
        let found = self
            .triggers
            .iter()
            .filter_map(|t| find(&text[from..], t))
            .min()
            .map(|at| from + at);
        let Some(at) = found else {
            return State::Waiting { matcher, text };
        };
        let tokens = self.env.tokenize_bytes(&text[at..]);
        match matcher.consume_tokens(&tokens) {
            Ok(()) => State::Active(matcher),
            Err(e) => State::Broken(format!(
                "the output after the trigger word does not fit the grammar: {}",
                reported(&e)
            )),
        }
    }
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    match needle.is_empty() {
        true => None,
        false => hay.windows(needle.len()).position(|w| w == needle),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fake;
    use crate::tokenizer::Tokenizer;

    fn grammars(triggers: &[&str]) -> (Grammars, &'static Arc<Tokenizer>, u32) {
        let tok = fake::tokenizer();
        let eos = *tok.eos_ids().first().expect("an eos id");
        let dir = fake::fixture_dir();
        let triggers: Vec<String> = triggers.iter().map(|t| t.to_string()).collect();
        let g = Grammars::new(&dir, fake::VOCAB as usize, &[eos], &triggers);
        (g, tok, eos)
    }

    fn allows(c: &mut Constraint, id: u32) -> bool {
        match c.mask() {
            Mask::Any => true,
            Mask::Only(m) => m.is_allowed(id),
            Mask::Nothing(why) => panic!("{why}"),
        }
    }

    /// Every token of a matching text is allowed in turn, then only eos.
    #[test]
    fn a_grammar_allows_its_language_then_eos() -> Result<()> {
        let (g, tok, eos) = grammars(&[]);
        let mut c = g.compile("root ::= \"{\" [a-z]+ \"}\"")?;
        let ids = tok.encode("{abc}")?;
        for &id in &ids {
            assert!(allows(&mut c, id), "{id}");
            c.accept(id);
        }
        assert!(allows(&mut c, eos));
        assert!(!allows(&mut c, ids[0]));
        Ok(())
    }

    /// Rules that a greedy lexer would let swallow what follows them (the digits before
    /// `[0-9] "x"`, the words before `" end"`) keep every text of the grammar.
    #[test]
    fn rules_keep_texts_that_terminals_would_lose() -> Result<()> {
        let (g, tok, eos) = grammars(&[]);
        let cases = [
            ("root ::= a b\na ::= [0-9]+\nb ::= [0-9] \"x\"", "1234x"),
            (
                "root ::= a b\na ::= [a-z ]*\nb ::= \" end\"",
                "hello world end",
            ),
        ];
        for (gbnf, text) in cases {
            let mut c = g.compile(gbnf)?;
            for id in tok.encode(text)? {
                assert!(allows(&mut c, id), "{gbnf}: {id}");
                c.accept(id);
            }
            assert!(allows(&mut c, eos), "{gbnf}");
        }
        Ok(())
    }

    /// Token references: by id, negated, and by the text of a special token.
    #[test]
    fn token_references_constrain_by_token() -> Result<()> {
        let (g, tok, _) = grammars(&[]);
        let paris = tok.encode("Paris")?;
        let im_end = tok.encode("<|im_end|>")?;
        assert_eq!((paris.len(), im_end.len()), (1, 1));
        let mut c = g.compile(&format!("root ::= <[{}]> !<[{0}]> <|im_end|>", paris[0]))?;
        let the = tok.encode(" the")?[0];
        assert!(allows(&mut c, paris[0]) && !allows(&mut c, the));
        c.accept(paris[0]);
        assert!(allows(&mut c, the) && !allows(&mut c, paris[0]));
        c.accept(the);
        assert!(allows(&mut c, im_end[0]) && !allows(&mut c, the));
        let err = g
            .compile("root ::= <|no_such_token|>")
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("is not one token of this model")));
        Ok(())
    }

    /// llguidance's caught panics reach no client: a short note instead, and only the
    /// first line of its other errors.
    #[test]
    fn llguidance_panics_and_quoted_grammars_stay_out_of_messages() {
        let panic = "panic: assertion failed: grammar.symbols.len() < u16::MAX\n<backtrace>";
        assert!(is_panic(&panic));
        let note = reported(&panic);
        assert!(!note.contains("symbols") && note.contains("log"), "{note}");
        assert_eq!(
            reported(&"at 2(9): too big\n   1 | start: x"),
            "at 2(9): too big"
        );
    }

    /// Lazy: anything goes until the trigger word, then the grammar holds from the word on.
    #[test]
    fn a_trigger_word_starts_the_grammar() -> Result<()> {
        let (g, tok, _) = grammars(&["Paris"]);
        let mut c = g.compile("root ::= \"Paris\" \" is \" (\"big\" | \"old\")")?;
        for id in tok.encode("The capital is")? {
            assert!(matches!(c.mask(), Mask::Any));
            c.accept(id);
        }
        for id in tok.encode(" Paris")? {
            c.accept(id);
        }
        let is = tok.encode(" is")?;
        assert!(allows(&mut c, is[0]));
        let the = tok.encode(" the")?;
        assert!(!allows(&mut c, the[0]));
        Ok(())
    }
}
