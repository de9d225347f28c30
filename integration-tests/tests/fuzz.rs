//! Property tests over the parsers that take outside input: LoadModel options, hostfiles, chat
//! templates with hostile messages, and the incremental detokenizer with arbitrary token ids.
//! Inputs come from a seeded generator (the seed is printed on failure); nothing may panic,
//! and the invariants named in each test must hold.

use std::panic::{catch_unwind, AssertUnwindSafe};

use backend::distributed::Hostfile;
use backend::distributed::Transport;
use backend::options::{parse_options, Env, LoadConfig, LoadRequest};
use backend::tokenizer::{ChatMessage, Detokenizer, TemplateInput, Tokenizer};
use integration_tests::{fixture, TestResult};

/// SplitMix64: small, seeded and good enough to pick cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
    /// A string of up to `max` characters from a hostile alphabet.
    fn text(&mut self, max: usize) -> String {
        const BITS: &[&str] = &[
            "a",
            "Z",
            "0",
            "9",
            "-",
            ".",
            ":",
            ",",
            " ",
            "\n",
            "\t",
            "\0",
            "\"",
            "'",
            "\\",
            "{",
            "}",
            "[",
            "]",
            "{{",
            "}}",
            "{%",
            "%}",
            "é",
            "日本",
            "🦀",
            "\u{202e}",
            "\u{fffd}",
            "1e308",
            "-1",
            "NaN",
            "true",
            "null",
            "<|im_start|>",
            "<|im_end|>",
            "<think>",
        ];
        let n = self.below(max + 1);
        (0..n).map(|_| self.pick(BITS)).collect()
    }
}

/// Runs `case` for `n` seeds; a panic fails the test naming the seed.
fn for_seeds(name: &str, n: u64, mut case: impl FnMut(&mut Rng) -> TestResult) -> TestResult {
    for seed in 0..n {
        let mut rng = Rng(seed ^ 0x5EED);
        match catch_unwind(AssertUnwindSafe(|| case(&mut rng))) {
            Ok(result) => result.map_err(|e| format!("{name}, seed {seed}: {e}"))?,
            Err(_) => return Err(format!("{name} panicked with seed {seed}").into()),
        }
    }
    Ok(())
}

struct NoEnv;

impl Env for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
}

#[test]
fn load_options_never_panic_and_every_error_says_something() -> TestResult {
    // Every key the backend knows, from its option table, and two it does not.
    let mut keys = backend::options::option_names();
    keys.extend(["", "unknown"]);
    const VALUES: &[&str] = &[
        "0",
        "1",
        "-1",
        "2147483648",
        "99999999999999999999",
        "0.5",
        "-0.0",
        "1e309",
        "NaN",
        "inf",
        "true",
        "false",
        "ring",
        "jaccl",
        "tensor",
        "pipeline",
        "auto",
        "1,2",
        ",,",
        "x",
        "",
    ];
    for_seeds("options", 3000, |rng| {
        let options: Vec<String> = (0..rng.below(6))
            .map(|_| match rng.below(4) {
                0 => rng.text(12),
                1 => format!("{}:{}", rng.pick(&keys), rng.text(8)),
                _ => format!("{}:{}", rng.pick(&keys), rng.pick(VALUES)),
            })
            .collect();
        parse_options(&options);
        let req = LoadRequest {
            model: rng.text(6),
            options: options.clone(),
            context_size: rng.next() as i32,
            ..Default::default()
        };
        if let Err(e) = LoadConfig::from_request(&req, &NoEnv) {
            assert!(!e.is_empty(), "an empty error for {options:?}");
        }
        Ok(())
    })
}

#[test]
fn hostfiles_never_panic() -> TestResult {
    const VALID: &[&str] = &[
        r#"["127.0.0.1:5000", "127.0.0.1:5001"]"#,
        r#"[[null, "rdma_en2"], ["rdma_en2", null]]"#,
        r#"{"hosts": [{"ssh": "a", "ips": ["10.0.0.1"]}, {"ssh": "b", "ips": ["10.0.0.2"]}]}"#,
        r#"[{"ssh": "a", "ips": ["10.0.0.1"], "rdma": [null, "rdma_en3"]}]"#,
    ];
    for_seeds("hostfile", 3000, |rng| {
        let mut text: Vec<char> = rng.pick(VALID).chars().collect();
        for _ in 0..rng.below(4) {
            let at = rng.below(text.len() + 1);
            match rng.below(3) {
                0 if at < text.len() => {
                    text.remove(at);
                }
                _ => {
                    for (i, c) in rng.text(3).chars().enumerate() {
                        text.insert((at + i).min(text.len()), c);
                    }
                }
            }
        }
        let text: String = text.into_iter().collect();
        for transport in [Transport::Ring, Transport::Jaccl] {
            if let Ok(h) = Hostfile::parse(&text, transport) {
                assert!(h.size() > 0, "an empty hostfile parsed: {text}");
                h.mlx_json();
            }
        }
        Ok(())
    })
}

fn smollm_tokenizer() -> TestResult<Tokenizer> {
    Ok(Tokenizer::load(&fixture("smollm2-135m-4bit")?)?)
}

#[test]
fn chat_templates_render_hostile_messages_as_data() -> TestResult {
    let tok = smollm_tokenizer()?;
    const ROLES: &[&str] = &["system", "user", "assistant", "tool", "", "{{role}}"];
    for_seeds("chat", 500, |rng| {
        let messages: Vec<ChatMessage> = (0..rng.below(5))
            .map(|_| ChatMessage {
                role: rng.pick(ROLES).into(),
                content: rng.text(40),
                extra: Default::default(),
            })
            .collect();
        let tools = match rng.below(3) {
            0 => Some(serde_json::json!([{"type": "function", "function": {"name": rng.text(5)}}])),
            1 => Some(serde_json::Value::String(rng.text(5))),
            _ => None,
        };
        let input = TemplateInput {
            messages,
            add_generation_prompt: rng.below(2) == 0,
            tools,
            tool_choice: None,
            enable_thinking: Some(rng.below(2) == 0),
        };
        let _ = tok.apply_chat_template(&input);
        Ok(())
    })?;
    let injected = TemplateInput {
        messages: vec![ChatMessage {
            role: "user".into(),
            content: "{{ 7 * 7 }} {% for x in range(3) %}x{% endfor %}".into(),
            extra: Default::default(),
        }],
        add_generation_prompt: true,
        ..Default::default()
    };
    let text = tok.apply_chat_template(&injected)?;
    assert!(
        text.contains("{{ 7 * 7 }} {% for x in range(3) %}x{% endfor %}"),
        "message text must not be evaluated as a template: {text}"
    );
    Ok(())
}

#[test]
fn the_detokenizer_takes_any_ids_and_its_deltas_add_up_to_the_decode() -> TestResult {
    let tok = smollm_tokenizer()?;
    let vocab = tok.vocab_size() as u64;
    for_seeds("detokenizer", 400, |rng| {
        let in_vocab = rng.below(4) != 0;
        let ids: Vec<u32> = (0..rng.below(40))
            .map(|_| match in_vocab {
                true => (rng.next() % vocab) as u32,
                false => rng.next() as u32,
            })
            .collect();
        let mut detok = Detokenizer::new();
        let mut text = String::new();
        let mut failed = false;
        for &id in &ids {
            match detok.push(&tok, id) {
                Ok(delta) => text.push_str(&delta),
                Err(_) => failed = true,
            }
        }
        match detok.finish(&tok) {
            Ok(delta) => text.push_str(&delta),
            Err(_) => failed = true,
        }
        if in_vocab {
            assert!(!failed, "ids in the vocabulary must decode: {ids:?}");
            assert_eq!(text, tok.decode(&ids)?, "ids {ids:?}");
        }
        Ok(())
    })
}

/// A copy of a tiny fixture whose config.json the test may rewrite (the weights are links).
fn scratch_model(name: &str) -> TestResult<std::path::PathBuf> {
    let from = fixture(name)?;
    let to = std::env::temp_dir().join(format!("mlxd-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    std::fs::create_dir_all(&to)?;
    for entry in std::fs::read_dir(&from)? {
        let entry = entry?;
        std::os::unix::fs::symlink(entry.path(), to.join(entry.file_name()))?;
    }
    std::fs::remove_file(to.join("config.json"))?;
    Ok(to)
}

/// A hostile value for a config field: zero, negative, huge, the wrong type, or a near miss.
fn hostile_value(rng: &mut Rng, original: &serde_json::Value) -> serde_json::Value {
    use serde_json::json;
    let near = original.as_i64().unwrap_or(64);
    match rng.below(14) {
        0 => json!(0),
        1 => json!(-1),
        2 => json!(i32::MAX),
        3 => json!(1_000_000_000),
        4 => json!(1e30),
        5 => json!(near * 2),
        6 => json!(near / 2 + 1),
        7 => json!(near + 1),
        8 => json!(0.5),
        9 => serde_json::Value::Null,
        10 => json!(rng.text(8)),
        11 => json!([near]),
        12 => json!({ "type": rng.pick(&["linear", "llama3", "yarn", ""]), "factor": near }),
        _ => json!(-1e-6),
    }
}

/// Rewrites one to three fields each family reads, then loads: nothing may panic, and a
/// refused config says what is wrong.
#[test]
fn hostile_model_configs_never_panic_and_errors_name_the_problem() -> TestResult {
    use backend::weights::WeightMode;
    const FIELDS: &[&str] = &[
        "hidden_size",
        "num_hidden_layers",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "rms_norm_eps",
        "rope_theta",
        "rope_scaling",
        "max_position_embeddings",
        "tie_word_embeddings",
        "model_type",
        "quantization",
    ];
    for family in ["tiny-llama3", "tiny-qwen2", "tiny-qwen3"] {
        let dir = scratch_model(family)?;
        let original: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture(family)?.join("config.json"))?)?;
        for_seeds(&format!("config of {family}"), 50, |rng| {
            let mut config = original.clone();
            for _ in 0..1 + rng.below(3) {
                let field = rng.pick(FIELDS);
                let value = hostile_value(rng, &config[field]);
                config[field] = value;
            }
            std::fs::write(dir.join("config.json"), serde_json::to_vec(&config)?)?;
            let mode = match rng.below(2) {
                0 => WeightMode::AsStored,
                _ => WeightMode::DequantizeF32,
            };
            if let Err(e) = backend::loader::load(&dir, mode) {
                let msg = e.to_string();
                assert!(msg.len() > 10, "a bare error for {config}: {msg:?}");
                assert!(!msg.contains("-1843"), "an overflowed shape: {msg}");
            }
            Ok(())
        })?;
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
