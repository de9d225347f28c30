//! Special tokens in generated text, as mlx-lm's detokenizers keep them, and the end token
//! left out; over a copy of the SmolLM2 fixture's tokenizer with added special markers.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::{json, Value};
use tokenizers::AddedToken;

use super::{Detokenizer, Tokenizer};
use crate::chat_output::{OutputFormat, ToolFormat};
use crate::engine::fake;
use crate::request::{FinishReason, GenerateOptions};
use crate::sequence::Sequence;

type TestResult<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// SmolLM2's `<|im_end|>`, its eos.
const IM_END: u32 = 2;

/// A fresh folder `name` with the fixture's tokenizer, `[TOOL_CALLS]` and `[THINK]` added as
/// special tokens, and the fixture's configs as `edit` leaves them.
fn folder(name: &str, edit: impl Fn(&str, &mut Value)) -> TestResult<PathBuf> {
    let src = fake::fixture_dir();
    let dir = std::env::temp_dir().join(format!("detok-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for file in [
        "tokenizer_config.json",
        "config.json",
        "generation_config.json",
    ] {
        let mut value: Value = serde_json::from_str(&std::fs::read_to_string(src.join(file))?)?;
        edit(file, &mut value);
        std::fs::write(dir.join(file), value.to_string())?;
    }
    let mut inner = tokenizers::Tokenizer::from_file(src.join("tokenizer.json"))?;
    inner.add_special_tokens(&[
        AddedToken::from("[TOOL_CALLS]", true),
        AddedToken::from("[THINK]", true),
    ]);
    inner.save(dir.join("tokenizer.json"), false)?;
    Ok(dir)
}

fn marked() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = folder("marked", |_, _| {}).expect("the test folder is written");
        Tokenizer::load(&dir).expect("the marked tokenizer loads")
    })
}

fn id(tok: &Tokenizer, token: &str) -> u32 {
    tok.inner()
        .token_to_id(token)
        .expect("the token is in the vocabulary")
}

/// Streams `ids` through a detokenizer: every delta, the finishing one last.
fn deltas(tok: &Tokenizer, ids: &[u32]) -> TestResult<Vec<String>> {
    let mut d = Detokenizer::new();
    let mut out = ids
        .iter()
        .map(|&i| d.push(tok, i))
        .collect::<crate::error::Result<Vec<_>>>()?;
    out.push(d.finish(tok)?);
    Ok(out)
}

#[test]
fn special_tokens_decode_as_their_text() -> TestResult {
    let tok = marked();
    let text = "[THINK]plan[TOOL_CALLS][{\"name\": \"f\"}]<|im_end|>";
    let ids = tok.encode(text)?;
    assert!(ids.contains(&id(tok, "[TOOL_CALLS]")) && ids.contains(&IM_END));
    assert_eq!(tok.decode(&ids)?, text);
    assert_eq!(deltas(tok, &ids)?.concat(), text);
    Ok(())
}

/// A special token arrives as one whole delta, after complete text and after text held back
/// for an incomplete character (which then decodes as U+FFFD, as the whole decode has it).
#[test]
fn streamed_deltas_split_at_special_tokens() -> TestResult {
    let tok = marked();
    let calls = id(tok, "[TOOL_CALLS]");
    let mut ids = tok.encode("Sure")?;
    ids.push(calls);
    ids.extend(tok.encode("[]")?);
    let got = deltas(tok, &ids)?;
    assert_eq!(got.concat(), "Sure[TOOL_CALLS][]");
    assert!(got.iter().any(|d| d == "[TOOL_CALLS]"), "{got:?}");

    let emoji = tok.encode("🎉")?;
    assert!(emoji.len() > 1, "the emoji spans byte tokens: {emoji:?}");
    let mut cut = vec![emoji[0], calls];
    cut.extend(&emoji);
    let got = deltas(tok, &cut)?;
    assert_eq!(got.concat(), tok.decode(&cut)?);
    assert!(got.concat().ends_with("[TOOL_CALLS]🎉"), "{got:?}");
    Ok(())
}

/// Generated text of `ids` through a sequence (as `generate` and the batch engine push them):
/// the text emitted and held back, and how it finished.
fn generated(ids: &[u32], opts: GenerateOptions) -> TestResult<(String, FinishReason)> {
    let tok = marked();
    let mut seq = Sequence::new(0, &[1], opts, Vec::new())?;
    let mut text = String::new();
    for &i in ids {
        if seq.ended() {
            break;
        }
        seq.push(tok, i, None, &mut |e| {
            text.push_str(&e.text);
            true
        })?;
    }
    let summary = seq.finish(tok)?;
    Ok((text + &summary.tail, summary.finish))
}

#[test]
fn the_end_token_stops_before_its_text() -> TestResult {
    let tok = marked();
    let mut ids = vec![id(tok, "[TOOL_CALLS]")];
    ids.extend(tok.encode("[]")?);
    ids.push(IM_END);
    ids.extend(tok.encode(" more")?);
    let (text, finish) = generated(&ids, GenerateOptions::default())?;
    assert_eq!(
        (text.as_str(), finish),
        ("[TOOL_CALLS][]", FinishReason::Stop)
    );

    // An end token that does not stop is text like any other: mlx-lm decodes every token it
    // does not stop on.
    let opts = GenerateOptions {
        ignore_eos: true,
        max_tokens: ids.len(),
        ..GenerateOptions::default()
    };
    let (text, finish) = generated(&ids, opts)?;
    assert_eq!(text, "[TOOL_CALLS][]<|im_end|> more");
    assert_eq!(finish, FinishReason::Length);
    Ok(())
}

#[test]
fn a_stop_string_cuts_at_a_special_token() -> TestResult {
    let tok = marked();
    let mut ids = tok.encode("Sure")?;
    ids.push(id(tok, "[TOOL_CALLS]"));
    ids.extend(tok.encode("[]")?);
    let opts = GenerateOptions {
        stop: vec!["e[TOOL".into()],
        ..GenerateOptions::default()
    };
    assert_eq!(generated(&ids, opts)?, ("Sur".into(), FinishReason::Stop));
    Ok(())
}

#[test]
fn tool_parser_type_names_the_format() -> TestResult {
    let named = |value: Value| {
        move |file: &str, config: &mut Value| {
            if file == "tokenizer_config.json" {
                config["tool_parser_type"] = value.clone();
            }
        }
    };
    let dir = folder("named", named(json!("mistral")))?;
    let tok = Tokenizer::load(&dir)?;
    assert_eq!(tok.tool_parser_type(), Some("mistral"));
    assert_eq!(OutputFormat::of(&tok).tools, Some(ToolFormat::Mistral));
    assert_eq!(OutputFormat::of(marked()).tools, None);

    let dir = folder("badly-named", named(json!(3)))?;
    let err = Tokenizer::load(&dir).err().map(|e| e.to_string());
    assert!(err.is_some_and(|e| e.contains("tool_parser_type")));
    Ok(())
}

/// `generation_config.json`'s end ids replace `config.json`'s unless Python finds them false.
#[test]
fn generation_config_eos_replaces_the_configs() -> TestResult {
    let eos = |generation: Value| {
        move |file: &str, config: &mut Value| match file {
            "config.json" => config["eos_token_id"] = json!(1),
            "generation_config.json" => config["eos_token_id"] = generation.clone(),
            _ => {}
        }
    };
    for (name, generation, want) in [
        ("eos-list", json!([0]), vec![0, IM_END]),
        ("eos-zero", json!(0), vec![1, IM_END]),
        ("eos-empty", json!([]), vec![1, IM_END]),
        ("eos-none", Value::Null, vec![1, IM_END]),
    ] {
        let tok = Tokenizer::load(&folder(name, eos(generation))?)?;
        let got: Vec<u32> = tok.eos_ids().iter().copied().collect();
        assert_eq!(got, want, "{name}");
    }
    Ok(())
}

/// A SentencePiece-style tokenizer (mlx-lm picks its `SPMStreamingDetokenizer` for this
/// decoder) with `[TOOL_CALLS]` special: the texts are what mlx-lm 0.32.2's detokenizer and
/// `tokenizer.decode` give for the same ids.
#[test]
fn sentencepiece_text_keeps_special_tokens_as_mlx_lm() -> TestResult {
    let added = |id: u32, content: &str| {
        json!({"id": id, "content": content, "single_word": false, "lstrip": false,
               "rstrip": false, "normalized": false, "special": true})
    };
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>"),
                         added(8, "[TOOL_CALLS]")],
        "normalizer": null, "post_processor": null,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": false},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>",
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                  "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "▁hello": 3, "▁world": 4,
                            "hello": 5, "▁": 6, "x": 7},
                  "merges": []}
    });
    let dir = std::env::temp_dir().join(format!("detok-spm-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string())?;
    let tok = Tokenizer::load(&dir)?;
    assert_eq!(
        deltas(&tok, &[3, 8, 4])?.concat(),
        "hello[TOOL_CALLS] world"
    );
    assert_eq!(
        deltas(&tok, &[8, 3, 4])?.concat(),
        "[TOOL_CALLS] hello world"
    );
    assert_eq!(
        deltas(&tok, &[8, 5, 4])?.concat(),
        "[TOOL_CALLS]hello world"
    );
    assert_eq!(
        deltas(&tok, &[3, 4, 2, 3])?.concat(),
        "hello world</s> hello"
    );
    assert_eq!(
        deltas(&tok, &[3, 8, 4])?[..3],
        ["hello", "[TOOL_CALLS]", " world"]
    );
    Ok(())
}
