//! PredictOptions to our request types, and our results to Replies. Validation lives here.

use crate::speculative::MAX_DRAFT_TOKENS;
use std::collections::HashMap;

use serde_json::{json, Value};
use tonic::Status;

use super::pb;
use crate::engine::ModelInfo;
use crate::error::quote;
use crate::request::{GenerateOptions, Summary, TokenLogprob};
use crate::sampling::SamplingParams;
use crate::tokenizer::{ChatMessage, TemplateInput, Tokenizer};

/// LocalAI's mlx backend: 200 new tokens for Predict and 512 for PredictStream when Tokens is 0.
pub const DEFAULT_MAX_TOKENS_PREDICT: usize = 200;
pub const DEFAULT_MAX_TOKENS_STREAM: usize = 512;

/// INVALID_ARGUMENT, its text bounded (`error::bounded`) whatever value it quotes.
fn invalid(msg: impl Into<String>) -> Status {
    Status::invalid_argument(crate::error::bounded(&msg.into()).into_owned())
}

/// Fails with NOT_FOUND when the request names another model than the loaded one; both
/// names quoted (`error::quote`), so a 20 MB identity is not echoed back.
pub fn check_identity(requested: &str, model: &ModelInfo) -> Result<(), Status> {
    if requested.is_empty() || requested == model.config.model {
        return Ok(());
    }
    Err(Status::not_found(format!(
        "model identity mismatch: loaded '{}', requested '{}'",
        quote(&model.config.model),
        quote(requested)
    )))
}

/// Images, videos and audios are refused naming the field: no model this backend loads
/// reads them, and answering without them would answer another question.
pub fn refuse_media(req: &pb::PredictOptions) -> Result<(), Status> {
    for (field, items) in [
        ("Images", &req.images),
        ("Videos", &req.videos),
        ("Audios", &req.audios),
    ] {
        if !items.is_empty() {
            return Err(invalid(format!(
                "{field} has {} item(s), and this backend serves text models only: send the \
                 request without {field}",
                items.len()
            )));
        }
    }
    Ok(())
}

/// The request's `Tools` (JSON), which the template renders and the tool-call parsers read
/// argument types from.
pub fn tools(req: &pb::PredictOptions) -> Result<Option<Value>, Status> {
    match req.tools.trim() {
        "" => Ok(None),
        t => serde_json::from_str::<Value>(t)
            .map(Some)
            .map_err(|e| invalid(format!("Tools is not valid JSON: {e}"))),
    }
}

/// The prompt text: `Prompt`, or `Messages` rendered through the chat template.
pub fn prompt_text(req: &pb::PredictOptions, tok: &Tokenizer) -> Result<String, Status> {
    if !req.prompt.is_empty() || !req.use_tokenizer_template || req.messages.is_empty() {
        return Ok(req.prompt.clone());
    }
    let tools = tools(req)?;
    let tool_choice = match req.tool_choice.trim() {
        "" => None,
        t => {
            Some(serde_json::from_str::<Value>(t).unwrap_or_else(|_| Value::String(t.to_string())))
        }
    };
    let enable_thinking = match req
        .metadata
        .get("enable_thinking")
        .map(|v| v.trim().to_ascii_lowercase())
    {
        None => None,
        Some(v) if v == "true" => Some(true),
        Some(v) if v == "false" => Some(false),
        Some(v) => {
            return Err(invalid(format!(
                "Metadata enable_thinking must be true or false, got {}",
                quote(&format!("{v:?}"))
            )))
        }
    };
    let messages = req
        .messages
        .iter()
        .map(message)
        .collect::<Result<Vec<_>, _>>()?;
    let input = TemplateInput {
        messages,
        add_generation_prompt: true,
        tools,
        tool_choice,
        enable_thinking,
    };
    tok.apply_chat_template(&input)
        .map_err(|e| invalid(e.to_string()))
}

/// A chat message as templates expect it: optional fields only when set, tool calls as JSON.
fn message(m: &pb::Message) -> Result<ChatMessage, Status> {
    let mut extra = serde_json::Map::new();
    for (key, value) in [
        ("name", &m.name),
        ("tool_call_id", &m.tool_call_id),
        ("reasoning_content", &m.reasoning_content),
    ] {
        if !value.is_empty() {
            extra.insert(key.into(), Value::String(value.clone()));
        }
    }
    if !m.tool_calls.trim().is_empty() {
        let mut calls: Value = serde_json::from_str(&m.tool_calls)
            .map_err(|e| invalid(format!("Message tool_calls is not valid JSON: {e}")))?;
        // Templates index into arguments, so JSON-encoded argument strings become objects.
        for call in calls.as_array_mut().into_iter().flatten() {
            if let Some(args) = call.pointer_mut("/function/arguments") {
                if let Some(parsed) = args
                    .as_str()
                    .and_then(|s| serde_json::from_str::<Value>(s).ok())
                {
                    *args = parsed;
                }
            }
        }
        extra.insert("tool_calls".into(), calls);
    }
    Ok(ChatMessage {
        role: m.role.clone(),
        content: m.content.clone(),
        extra,
    })
}

/// The first ModelOptions field this backend cannot honour yet, named with what to do:
/// loading without it would serve another model than the one asked for (no projector), so
/// LoadModel fails instead of ignoring it.
pub fn unsupported_model_field(o: &pb::ModelOptions) -> Option<String> {
    if o.mm_proj.trim().is_empty() {
        return None;
    }
    Some(
        "ModelOptions.MMProj is set, and a multimodal projector is not supported by this \
         backend yet: remove `mmproj` from the model's config to load it without"
            .into(),
    )
}

/// Sampling and limits: the request's values, LocalAI's defaults, and load options on top
/// (except max_tokens, where the request wins, and Temperature 0, which is greedy).
pub fn generate_options(
    req: &pb::PredictOptions,
    model: &ModelInfo,
    stream: bool,
) -> Result<GenerateOptions, Status> {
    check_ranges(req)?;
    let o = &model.config.sampling;
    let default_max = if stream {
        DEFAULT_MAX_TOKENS_STREAM
    } else {
        DEFAULT_MAX_TOKENS_PREDICT
    };
    Ok(GenerateOptions {
        max_tokens: match req.tokens {
            0 => o.max_tokens.unwrap_or(default_max),
            n => n as usize,
        },
        sampling: sampling(req, model)?,
        stop: req
            .stop_prompts
            .iter()
            .filter(|s| !s.is_empty())
            .cloned()
            .collect(),
        ignore_eos: req.ignore_eos,
        logprobs: (req.logprobs > 0 || req.top_logprobs > 0).then_some(req.top_logprobs as usize),
        draft_tokens: req.n_draft as usize,
        ..GenerateOptions::default()
    })
}

/// Every numeric field in its range: INVALID_ARGUMENT naming the first that is not.
fn check_ranges(req: &pb::PredictOptions) -> Result<(), Status> {
    if req.tokens < 0 {
        return Err(invalid(format!(
            "Tokens must not be negative (got {})",
            req.tokens
        )));
    }
    if req.top_k < 0 {
        return Err(invalid(format!(
            "TopK must not be negative (got {})",
            req.top_k
        )));
    }
    for (name, v, lo, hi) in [
        ("Temperature", req.temperature, 0.0, 100.0),
        ("TopP", req.top_p, 0.0, 1.0),
        ("MinP", req.min_p, 0.0, 1.0),
        ("Penalty", req.penalty, 0.0, 100.0),
        ("PresencePenalty", req.presence_penalty, -100.0, 100.0),
        ("FrequencyPenalty", req.frequency_penalty, -100.0, 100.0),
    ] {
        if !v.is_finite() || v < lo || v > hi {
            return Err(invalid(format!("{name} must be in [{lo}, {hi}] (got {v})")));
        }
    }
    if req.n_draft < 0 || req.n_draft as usize > MAX_DRAFT_TOKENS {
        return Err(invalid(format!(
            "NDraft must be in [0, {MAX_DRAFT_TOKENS}] (got {})",
            req.n_draft
        )));
    }
    if req.logprobs < 0 || req.top_logprobs < 0 || req.top_logprobs > 20 {
        return Err(invalid("Logprobs must be >= 0 and TopLogprobs in [0, 20]"));
    }
    Ok(())
}

/// The request's sampling, where LoadModel's options did not fix it (0 means unset for
/// TopP and Penalty, as LocalAI sends them).
fn sampling(req: &pb::PredictOptions, model: &ModelInfo) -> Result<SamplingParams, Status> {
    let o = &model.config.sampling;
    Ok(SamplingParams {
        temperature: o.temperature.unwrap_or(req.temperature),
        top_p: o
            .top_p
            .unwrap_or(if req.top_p == 0.0 { 1.0 } else { req.top_p }),
        top_k: o.top_k.unwrap_or(req.top_k as usize),
        min_p: o.min_p.unwrap_or(req.min_p),
        repetition_penalty: o.repetition_penalty.unwrap_or(if req.penalty == 0.0 {
            1.0
        } else {
            req.penalty
        }),
        presence_penalty: o.presence_penalty.unwrap_or(req.presence_penalty),
        frequency_penalty: o.frequency_penalty.unwrap_or(req.frequency_penalty),
        logit_bias: logit_bias(&req.logit_bias, model.tokenizer.vocab_size())?,
        seed: o.seed.or((req.seed != 0).then_some(req.seed as i64 as u64)),
        ..SamplingParams::default()
    })
}

/// `{"token_id": bias}` as JSON text; every id must be in the vocabulary (as Detokenize's).
fn logit_bias(text: &str, vocab: usize) -> Result<HashMap<u32, f32>, Status> {
    if text.trim().is_empty() {
        return Ok(HashMap::new());
    }
    let map: HashMap<String, f32> = serde_json::from_str(text).map_err(|e| {
        invalid(format!(
            "LogitBias must be a JSON object of token id to number: {e}"
        ))
    })?;
    map.into_iter()
        .map(|(k, v)| match k.trim().parse::<u32>() {
            Ok(id) if (id as usize) >= vocab => Err(invalid(format!(
                "LogitBias: token {id} is not in the vocabulary (0..{vocab})"
            ))),
            Ok(id) if v.is_finite() => Ok((id, v)),
            _ => Err(invalid(format!(
                "LogitBias: bad entry {}: {v}",
                crate::error::quote(&format!("{k:?}"))
            ))),
        })
        .collect()
}

/// OpenAI-format logprobs JSON of the generated tokens; empty when none were asked for.
pub fn logprobs_json(tok: &Tokenizer, entries: &[(u32, TokenLogprob)]) -> Vec<u8> {
    if entries.is_empty() {
        return Vec::new();
    }
    let token = |id: u32| tok.decode(&[id]).unwrap_or_default();
    let entry = |id: u32, logprob: f32| {
        let t = token(id);
        json!({ "token": t, "logprob": logprob, "bytes": t.as_bytes() })
    };
    let content: Vec<Value> = entries
        .iter()
        .map(|(id, lp)| {
            let mut e = entry(*id, lp.logprob);
            e["top_logprobs"] = lp.top.iter().map(|(alt, l)| entry(*alt, *l)).collect();
            e
        })
        .collect();
    json!({ "content": content }).to_string().into_bytes()
}

/// The counts and timings (milliseconds, as llama.cpp's backend reports them) of a finished request.
pub fn with_summary(mut reply: pb::Reply, s: &Summary) -> pb::Reply {
    reply.tokens = s.generated_tokens as i32;
    reply.prompt_tokens = s.prompt_tokens as i32;
    reply.timing_prompt_processing = s.prefill_secs * 1000.0;
    reply.timing_token_generation = s.decode_secs * 1000.0;
    reply
}
