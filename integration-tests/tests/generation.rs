//! Generation controls on the real model: seeds, stop strings, max_tokens, ignore_eos,
//! logprobs, and the incremental detokenizer.

use backend::generate::generate;
use backend::loader::{self, LoadedModel};
use backend::request::{FinishReason, GenerateOptions, Summary};
use backend::sampling::SamplingParams;
use backend::tokenizer::Detokenizer;
use backend::weights::WeightMode;
use integration_tests::{fixture, TestResult};

fn model() -> TestResult<LoadedModel> {
    Ok(loader::load(
        &fixture("smollm2-135m-8bit")?,
        WeightMode::DequantizeF32,
    )?)
}

fn run(
    m: &LoadedModel,
    prompt: &str,
    opts: &GenerateOptions,
) -> TestResult<(Vec<u32>, String, Summary)> {
    let ids = m.tokenizer.encode(prompt)?;
    let (mut tokens, mut text) = (Vec::new(), String::new());
    let summary = generate(m.model.as_ref(), &m.tokenizer, &ids, opts, |e| {
        tokens.push(e.id);
        text.push_str(&e.text);
        true
    })?;
    text.push_str(&summary.tail);
    Ok((tokens, text, summary))
}

#[test]
fn same_seed_same_text_and_other_seed_other_text() -> TestResult {
    let m = model()?;
    let opts = |seed| GenerateOptions {
        max_tokens: 24,
        sampling: SamplingParams {
            temperature: 0.9,
            seed: Some(seed),
            ..Default::default()
        },
        ..Default::default()
    };
    let (a, _, _) = run(&m, "Once upon a time", &opts(42))?;
    let (b, _, _) = run(&m, "Once upon a time", &opts(42))?;
    let (c, _, _) = run(&m, "Once upon a time", &opts(43))?;
    assert_eq!(a, b);
    assert_ne!(a, c);
    Ok(())
}

#[test]
fn stop_string_cuts_the_text_and_ends_generation() -> TestResult {
    let m = model()?;
    let greedy = GenerateOptions {
        max_tokens: 40,
        ..Default::default()
    };
    let (_, full, _) = run(&m, "Write a haiku about the sea.", &greedy)?;
    // A stop made of the text's own middle, so it spans token boundaries somewhere.
    let stop: String = full.chars().skip(10).take(7).collect();
    let cut = &full[..full.find(&stop).ok_or("stop not in text")?];
    let opts = GenerateOptions {
        stop: vec![stop.clone()],
        ..greedy
    };
    let (_, text, summary) = run(&m, "Write a haiku about the sea.", &opts)?;
    assert_eq!(text, cut, "text must end right before the stop {stop:?}");
    assert_eq!(summary.finish, FinishReason::Stop);
    Ok(())
}

#[test]
fn max_tokens_and_ignore_eos() -> TestResult {
    let m = model()?;
    let (tokens, _, s) = run(
        &m,
        "List three prime numbers.",
        &GenerateOptions {
            max_tokens: 5,
            ..Default::default()
        },
    )?;
    assert_eq!(
        (tokens.len(), s.generated_tokens, s.finish),
        (5, 5, FinishReason::Length)
    );

    // The chat answer to the capital question ends with eos after 7 tokens; ignore_eos runs on.
    let chat =
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let (t, _, s) = run(
        &m,
        chat,
        &GenerateOptions {
            max_tokens: 30,
            ..Default::default()
        },
    )?;
    assert_eq!(s.finish, FinishReason::Stop);
    let (t2, _, s2) = run(
        &m,
        chat,
        &GenerateOptions {
            max_tokens: 30,
            ignore_eos: true,
            ..Default::default()
        },
    )?;
    assert_eq!((t2.len(), s2.finish), (30, FinishReason::Length));
    assert_eq!(
        t2[..t.len()],
        t[..],
        "ignore_eos must not change the tokens before eos"
    );
    Ok(())
}

#[test]
fn logprobs_are_reported_with_alternatives() -> TestResult {
    let m = model()?;
    let ids = m.tokenizer.encode("The capital of France is")?;
    let opts = GenerateOptions {
        max_tokens: 3,
        logprobs: Some(4),
        ..Default::default()
    };
    let mut seen = Vec::new();
    generate(m.model.as_ref(), &m.tokenizer, &ids, &opts, |e| {
        seen.push((e.id, e.logprob));
        true
    })?;
    for (id, lp) in seen {
        let lp = lp.ok_or("no logprob")?;
        assert_eq!(lp.top.len(), 4);
        assert_eq!(lp.top[0].0, id, "greedy picks the most likely token");
        assert!(lp.logprob <= 0.0 && lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
    Ok(())
}

#[test]
fn streamed_deltas_concatenate_to_the_whole_decode() -> TestResult {
    let m = model()?;
    let tok = &m.tokenizer;
    // Multi-byte characters split across byte-level tokens, and arbitrary ids.
    let mut cases = vec![tok.encode("naïve café 日本語 🎉🎉 done")?];
    let mut state = 12345u64;
    for _ in 0..20 {
        let ids = (0..40)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) % tok.vocab_size() as u64) as u32
            })
            .collect();
        cases.push(ids);
    }
    for ids in cases {
        let mut d = Detokenizer::new();
        let mut text = String::new();
        for &id in &ids {
            text.push_str(&d.push(tok, id)?);
        }
        text.push_str(&d.finish(tok)?);
        assert_eq!(text, tok.decode(&ids)?, "ids {ids:?}");
    }
    Ok(())
}
