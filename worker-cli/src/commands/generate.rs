//! `worker generate`: one prompt on this machine, streamed to stdout, a summary on stderr.

use std::io::Write;

use backend::generate::generate;
use backend::loader;
use backend::options::ProcessEnv;
use backend::request::GenerateOptions;
use backend::sampling::SamplingParams;
use backend::source;
use backend::tokenizer::{ChatMessage, TemplateInput};
use backend::weights::{Numerics, WeightMode};

use super::CliResult;
use crate::args::GenerateArgs;

/// The flags' weight mode: as stored, dequantized, or packed in `--exact` or the default
/// numerics (`MLX_DISTRIBUTED_CPU_NUMERICS`, else int8), as LoadModel settles them.
fn weight_mode(args: &GenerateArgs) -> CliResult<WeightMode> {
    let numerics = match args.exact {
        true => Numerics::Exact,
        false => backend::options::numerics(&ProcessEnv)?.0,
    };
    Ok(match (args.as_stored, args.dequantize) {
        (true, _) => WeightMode::AsStored,
        (_, true) => WeightMode::DequantizeF32,
        _ => WeightMode::default_for_device().with_numerics(numerics),
    })
}

pub fn run(args: GenerateArgs) -> CliResult {
    let dir = source::resolve(&args.model, None)?;
    let mode = weight_mode(&args)?;
    let loaded = loader::load(&dir, mode)?;
    let tok = &loaded.tokenizer;
    let text = if args.chat {
        tok.apply_chat_template(&TemplateInput {
            messages: vec![ChatMessage {
                role: "user".into(),
                content: args.prompt.clone(),
                ..Default::default()
            }],
            add_generation_prompt: true,
            ..Default::default()
        })?
    } else {
        args.prompt.clone()
    };
    let prompt = tok.encode(&text)?;
    let opts = GenerateOptions {
        max_tokens: args.max_tokens,
        sampling: SamplingParams {
            temperature: args.temperature,
            top_p: args.top_p,
            seed: args.seed,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut out = std::io::stdout().lock();
    let mut ids = Vec::new();
    let summary = generate(loaded.model.as_ref(), tok, &prompt, &opts, |event| {
        ids.push(event.id);
        out.write_all(event.text.as_bytes())
            .and_then(|_| out.flush())
            .is_ok()
    })?;
    writeln!(out, "{}", summary.tail)?;
    if args.print_ids {
        eprintln!("ids={ids:?}");
    }
    eprintln!(
        "{} prompt tokens at {:.1} tok/s, {} generated at {:.1} tok/s ({:?})",
        summary.prompt_tokens,
        summary.prompt_tokens as f64 / summary.prefill_secs.max(1e-9),
        summary.generated_tokens,
        summary.generated_tokens.saturating_sub(1) as f64 / summary.decode_secs.max(1e-9),
        summary.finish
    );
    Ok(())
}
