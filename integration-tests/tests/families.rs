//! Each model family on a tiny random-weight model that mlx-lm made: last-position
//! logits close to mlx-lm's and the same greedy tokens.

use backend::loader;
use backend::weights::WeightMode;
use integration_tests::goldens::{greedy_tokens, load_tiny_file};
use integration_tests::{fixture, TestResult};
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Dtype};

/// Same MLX ops on f32 weights: only summation order could differ.
const LOGIT_TOLERANCE: f32 = 1e-4;

fn check(folder: &str) -> TestResult {
    check_with(folder, WeightMode::AsStored, "golden.json")
}

/// `folder` loaded in `mode` gives the logits and greedy tokens of its golden `file`.
fn check_with(folder: &str, mode: WeightMode, file: &str) -> TestResult {
    let golden = load_tiny_file(folder, file)?;
    let m = loader::load(&fixture(folder)?, mode)?;
    let mut caches = m.model.new_caches();
    let ids = &golden.prompt_ids;
    let logits = m
        .model
        .forward(&Array::from_slice(ids, &[1, ids.len() as i32]), &mut caches)?;
    let last = logits.index((0, -1, ..)).as_dtype(Dtype::Float32)?;
    last.eval()?;
    let worst = last
        .as_slice::<f32>()
        .iter()
        .zip(&golden.last_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst <= LOGIT_TOLERANCE,
        "{folder} {mode:?}: max |logit - mlx-lm| = {worst}"
    );

    let tokens = greedy_tokens(&m, ids, golden.tokens.len())?;
    assert_eq!(tokens, golden.tokens, "{folder} {mode:?}: greedy tokens");
    Ok(())
}

#[test]
fn qwen2_with_qkv_bias() -> TestResult {
    check("tiny-qwen2")
}

#[test]
fn qwen3_with_qk_norm_and_explicit_head_dim() -> TestResult {
    check("tiny-qwen3")
}

#[test]
fn llama_with_llama3_rope_and_untied_head() -> TestResult {
    check("tiny-llama3")
}

#[test]
fn qwen3_moe_with_a_dense_layer_between_sparse_ones() -> TestResult {
    check("tiny-qwen3-moe")
}

#[test]
fn deepseek_v2_latent_attention_group_limited_routing_and_a_shared_expert() -> TestResult {
    check("tiny-deepseek-v2")
}

#[test]
fn deepseek_v3_cached_latent_and_sigmoid_routing_with_its_correction_bias() -> TestResult {
    check("tiny-deepseek-v3")
}

/// `golden-dense.json`'s `index_topk` (tiny_models.py's `DENSE_TOPK`): above any context.
const DENSE_TOPK: i64 = 1 << 20;

/// DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the prompt runs past the indexer's 12
/// picked keys; with an `index_topk` above the context DeepSeek-V3.2's weights attend densely,
/// and give mlx-lm's other tokens.
#[test]
fn sparse_attention_picks_mlx_lms_keys_and_is_dense_past_the_context() -> TestResult {
    let root = std::env::temp_dir().join(format!("mlxd-dense-{}", std::process::id()));
    check("tiny-glm-moe-dsa")?;
    let folder = "tiny-deepseek-v32";
    check(folder)?;
    let golden = load_tiny_file(folder, "golden-dense.json")?;
    let dense = with_config(&root, folder, "index_topk", DENSE_TOPK.into())?;
    let m = loader::load(&dense, WeightMode::AsStored)?;
    let tokens = greedy_tokens(&m, &golden.prompt_ids, golden.tokens.len())?;
    assert_eq!(tokens, golden.tokens, "{folder} dense: greedy tokens");
    std::fs::remove_dir_all(&root)?;
    Ok(())
}

/// A folder of links to `folder`'s files with `key` set to `value` in its config.json.
fn with_config(
    root: &std::path::Path,
    folder: &str,
    key: &str,
    value: serde_json::Value,
) -> TestResult<std::path::PathBuf> {
    let dir = fixture(folder)?;
    let scratch = root.join(folder);
    std::fs::create_dir_all(&scratch)?;
    for entry in std::fs::read_dir(&dir)? {
        let entry = entry?;
        let link = scratch.join(entry.file_name());
        if entry.file_name() != "config.json" && !link.exists() {
            std::os::unix::fs::symlink(entry.path(), link)?;
        }
    }
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json"))?)?;
    config[key] = value;
    std::fs::write(scratch.join("config.json"), serde_json::to_vec(&config)?)?;
    Ok(scratch)
}

#[test]
fn gemma3_sliding_windows_sandwich_norms_geglu_and_scaled_embedding() -> TestResult {
    check("tiny-gemma3-text")
}

#[test]
fn glm4_partial_rope_sandwich_norms_and_fused_gate_up() -> TestResult {
    check("tiny-glm4")
}

#[test]
fn ministral3_yarn_llama4_query_temperature_and_sliding_layers() -> TestResult {
    check("tiny-ministral3")
}

/// MiniMax's q/k norms over all heads and normalized sigmoid router, quantized too (its router
/// at 8 bits by mlx-lm's quant predicate).
#[test]
fn minimax_all_head_norms_partial_rope_and_normalized_sigmoid_routing() -> TestResult {
    check("tiny-minimax")?;
    check_with("tiny-minimax-4bit", WeightMode::PackedF32, "golden.json")?;
    check_with(
        "tiny-minimax-4bit",
        WeightMode::AsStored,
        "golden-as-stored.json",
    )
}

/// Mistral 4: latent attention with Llama 4's query temperature (its prompts through the
/// additive-mask attention, mlx-lm's concatenated one within rounding), grouped softmax
/// routing; alone and under `mistral3`.
#[test]
fn mistral4_latent_attention_llama4_temperature_and_grouped_softmax() -> TestResult {
    for folder in ["tiny-mistral4", "tiny-mistral3-mistral4"] {
        check(folder)?;
    }
    check_with("tiny-mistral4-8bit", WeightMode::PackedF32, "golden.json")?;
    check_with(
        "tiny-mistral4-8bit",
        WeightMode::AsStored,
        "golden-as-stored.json",
    )
}

/// Multimodal wrappers: the text model under `language_model.`, its config under
/// `text_config`, the vision tower beside it dropped.
#[test]
fn wrappers_serve_their_text_model() -> TestResult {
    for folder in ["tiny-gemma3", "tiny-mistral3", "tiny-kimi-k25"] {
        check(folder)?;
    }
    Ok(())
}

/// The dense 2026 families quantized, in every weight mode.
#[test]
fn quantized_dense_families_in_every_weight_mode() -> TestResult {
    for folder in [
        "tiny-gemma3-text-4bit",
        "tiny-glm4-4bit",
        "tiny-ministral3-8bit",
    ] {
        check_with(folder, WeightMode::PackedF32, "golden.json")?;
        check_with(folder, WeightMode::DequantizeF32, "golden.json")?;
        check_with(folder, WeightMode::AsStored, "golden-as-stored.json")?;
    }
    Ok(())
}

/// Quantized mixtures of experts in every weight mode: packed (quant-cpu's gathered kernel) and
/// dequantized against mlx-lm on the f32 twin, as stored (MLX's `gather_qmm`, and its
/// quantized matmul over DeepSeek's per-head matrices) against mlx-lm on the quantized folder.
/// Qwen3-MoE's router is 8-bit through a per-layer override; DeepSeek-V2's `kv_b_proj` is
/// quantized and sliced per head; DeepSeek-V3's `q_b_proj` (48 inputs) stays f32 at group 32.
#[test]
fn quantized_experts_in_every_weight_mode() -> TestResult {
    for folder in [
        "tiny-qwen3-moe-4bit",
        "tiny-deepseek-v2-4bit",
        "tiny-deepseek-v3-8bit",
    ] {
        check_with(folder, WeightMode::PackedF32, "golden.json")?;
        check_with(folder, WeightMode::DequantizeF32, "golden.json")?;
        check_with(folder, WeightMode::AsStored, "golden-as-stored.json")?;
    }
    Ok(())
}

/// A long prompt in one forward pass (on CPU its attention runs in query blocks, each over the
/// keys up to its last query; MoE rows are sorted by expert) gives every position the logits it
/// gets fed one token at a time.
#[test]
fn a_long_prompt_at_once_equals_one_token_at_a_time() -> TestResult {
    for folder in [
        "tiny-llama3",
        "tiny-qwen3-moe",
        "tiny-deepseek-v2",
        "tiny-deepseek-v3",
        "tiny-gemma3-text",
        "tiny-ministral3",
        "tiny-glm4",
    ] {
        long_prompt_at_once(folder)?;
    }
    Ok(())
}

fn long_prompt_at_once(folder: &str) -> TestResult {
    let m = loader::load(&fixture(folder)?, WeightMode::AsStored)?;
    let caches = || m.model.new_caches();
    // Long enough for three blocks and a ragged last one.
    let ids: Vec<u32> = (0..300u32).map(|i| (i * 7919 + 13) % 49152).collect();
    let len = ids.len() as i32;
    let all = m
        .model
        .forward(&Array::from_slice(&ids, &[1, len]), &mut caches())?
        .as_dtype(Dtype::Float32)?;
    let mut one = caches();
    for (t, id) in ids.iter().enumerate() {
        let step = m
            .model
            .forward(&Array::from_slice(&[*id], &[1, 1]), &mut one)?
            .index((0, 0, ..))
            .as_dtype(Dtype::Float32)?;
        let want = all.index((0, t as i32, ..));
        let worst = step.subtract(&want)?.abs()?.max(None)?.item_exact::<f32>();
        assert!(
            worst <= LOGIT_TOLERANCE,
            "{folder} position {t}: max |diff| = {worst}"
        );
    }
    Ok(())
}

/// A sliding-window model fed a long prompt in chunks (each chunk sees the window before it,
/// and the caches let go of their front between chunks) gives the logits it gives the prompt
/// at once.
#[test]
fn a_prompt_in_chunks_equals_it_at_once_past_the_window() -> TestResult {
    for folder in ["tiny-gemma3-text", "tiny-ministral3"] {
        let m = loader::load(&fixture(folder)?, WeightMode::AsStored)?;
        let ids: Vec<u32> = (0..600u32).map(|i| (i * 7919 + 13) % 49152).collect();
        let all = m
            .model
            .forward(
                &Array::from_slice(&ids, &[1, 600]),
                &mut m.model.new_caches(),
            )?
            .as_dtype(Dtype::Float32)?;
        for chunk in [7usize, 64] {
            let mut caches = m.model.new_caches();
            for (i, part) in ids.chunks(chunk).enumerate() {
                let n = part.len() as i32;
                let out = m
                    .model
                    .forward(&Array::from_slice(part, &[1, n]), &mut caches)?
                    .as_dtype(Dtype::Float32)?;
                let start = (i * chunk) as i32;
                let want = all.index((.., start..start + n, ..));
                let worst = out.subtract(&want)?.abs()?.max(None)?.item_exact::<f32>();
                assert!(
                    worst <= LOGIT_TOLERANCE,
                    "{folder} chunks of {chunk}, chunk {i}: max |diff| = {worst}"
                );
            }
        }
    }
    Ok(())
}
