"""Mid-size random-weight mixtures of experts for benchmarks (never CI): no hub is reachable
here, so the models are made with mlx-lm's own classes, as the tiny fixtures are, then
quantized like an mlx-community checkpoint and dequantized to their f32 twins (what mlx-lm
runs our numerics on).

    moe_model.py TOKENIZER_DIR OUT [--family FAMILY]
        writes OUT-f32src, OUT (4-bit, group 64) and OUT-f32

Every family has the same scale where it can: hidden 512, 8 layers, 8 query heads, 32 experts
of 512 neurons (4 active) or a dense 1536, vocabulary 49152; each config below says what it
adds.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
import tiny_models  # noqa: E402  (also patches mx.gather_qmm for mlx-lm 0.32.2)
from mlx_lm.utils import save_config, save_model  # noqa: E402

# About 0.2 B parameters, 0.13 B of them in 32 experts per layer (4 active): the shape of
# Qwen3-30B-A3B scaled down, so that experts dominate the bytes a token reads.
QWEN3_MOE = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 512,
    "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
    "intermediate_size": 1536, "moe_intermediate_size": 512, "num_experts": 32,
    "num_experts_per_tok": 4, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "max_position_embeddings": 4096, "tie_word_embeddings": False, "vocab_size": 49152,
    "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32", "hidden_act": "silu",
}
# DeepSeek-V2-Lite's shape scaled down the same way: latent attention (no q LoRA), a dense first
# layer, 32 routed experts (4 active) and 2 shared ones, YaRN rope.
DEEPSEEK_V2 = {
    "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 512,
    "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 8, "q_lora_rank": None,
    "kv_lora_rank": 128, "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64,
    "intermediate_size": 1536, "moe_intermediate_size": 512, "n_routed_experts": 32,
    "n_shared_experts": 2, "num_experts_per_tok": 4, "topk_method": "greedy",
    "routed_scaling_factor": 1.0, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 163840,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707},
    "tie_word_embeddings": False, "vocab_size": 49152, "bos_token_id": 1, "eos_token_id": 2,
    "torch_dtype": "float32", "hidden_act": "silu",
}
# The scale every family below shares.
BASE = {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "intermediate_size": 1536,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "vocab_size": 49152, "bos_token_id": 1,
        "eos_token_id": 2, "torch_dtype": "float32", "hidden_act": "silu"}
# DeepSeek-V3's latent attention with a query LoRA and sigmoid group routing, as GLM-4.7-Flash,
# DeepSeek-V3.2, GLM-5 and Mistral 4 build on it.
MLA_V3 = {**BASE, "num_key_value_heads": 8, "q_lora_rank": 192, "kv_lora_rank": 128, "qk_rope_head_dim": 32,
          "qk_nope_head_dim": 64, "v_head_dim": 64, "moe_intermediate_size": 512, "n_routed_experts": 32,
          "n_shared_experts": 1, "num_experts_per_tok": 4, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
          "norm_topk_prob": True, "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
          "first_k_dense_replace": 1, "moe_layer_freq": 1, "attention_bias": False}
# GLM-4.5's shape: partial rotary, q/k norms, q/k/v biases, a shared expert, a dense first layer.
GLM4_MOE = {**BASE, "model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"], "num_key_value_heads": 4,
            "head_dim": 64, "partial_rotary_factor": 0.5, "use_qk_norm": True, "attention_bias": True,
            "moe_intermediate_size": 512, "n_routed_experts": 32, "n_shared_experts": 1, "num_experts_per_tok": 4,
            "n_group": 4, "topk_group": 2, "norm_topk_prob": True, "routed_scaling_factor": 2.5,
            "first_k_dense_replace": 1, "rope_theta": 1000000.0, "rope_scaling": None,
            "max_position_embeddings": 131072}
GLM4_MOE_LITE = {**MLA_V3, "model_type": "glm4_moe_lite", "architectures": ["Glm4MoeLiteForCausalLM"],
                 "rope_theta": 1000000.0, "max_position_embeddings": 202752}
# The indexer keeps 64 keys (2,048 in the real models), so a 128-token prompt runs sparse.
DSA = {"index_head_dim": 64, "index_n_heads": 8, "index_topk": 64}
DEEPSEEK_V32 = {**MLA_V3, **DSA, "model_type": "deepseek_v32", "architectures": ["DeepseekV32ForCausalLM"],
                "rope_theta": 10000.0, "max_position_embeddings": 163840,
                "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                                 "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}}
GLM_MOE_DSA = {**MLA_V3, **DSA, "model_type": "glm_moe_dsa", "architectures": ["GlmMoeDsaForCausalLM"],
               "n_group": 1, "topk_group": 1, "max_position_embeddings": 202752,
               "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}}
# Mistral 4 routes by softmax over groups (no correction bias, no topk_method or scoring_func).
MISTRAL4 = {**{k: v for k, v in MLA_V3.items() if k not in ("topk_method", "scoring_func", "moe_layer_freq")},
            "model_type": "mistral4", "architectures": ["Mistral4ForCausalLM"], "routed_scaling_factor": 1.5,
            "max_position_embeddings": 65536,
            "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                                "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
                                "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}}
# MiniMax M2: q/k norms over all heads, partial rotary, sigmoid routing, no shared expert.
MINIMAX = {**BASE, "model_type": "minimax", "architectures": ["MiniMaxM2ForCausalLM"], "num_key_value_heads": 4,
           "head_dim": 64, "rotary_dim": 32, "intermediate_size": 512, "num_local_experts": 32,
           "num_experts_per_tok": 4, "shared_intermediate_size": 0, "scoring_func": "sigmoid", "use_qk_norm": True,
           "rope_theta": 5000000.0, "max_position_embeddings": 196608}
# gpt-oss: sinks, 128-position windows on every other layer, clamped SwiGLU with biases.
GPT_OSS = {**BASE, "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "num_key_value_heads": 4,
           "head_dim": 64, "intermediate_size": 512, "num_local_experts": 32, "num_experts_per_tok": 4,
           "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 4, "rms_norm_eps": 1e-5,
           "rope_theta": 150000, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                                  "beta_slow": 1.0, "truncate": False,
                                                  "original_max_position_embeddings": 4096},
           "max_position_embeddings": 131072}
# The hybrids: three Gated DeltaNet layers to each gated full-attention layer, Qwen3-Next's head
# ratios (2 KV heads; twice the value heads of key heads) scaled down.
HYBRID = {**BASE, "num_key_value_heads": 2, "head_dim": 64, "full_attention_interval": 4,
          "linear_num_value_heads": 8, "linear_num_key_heads": 4, "linear_key_head_dim": 64,
          "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4, "max_position_embeddings": 32768,
          "attention_bias": False}
HYBRID_MOE = {"num_experts": 32, "num_experts_per_tok": 4, "moe_intermediate_size": 512,
              "shared_expert_intermediate_size": 512}
QWEN35_ROPE = {"rope_parameters": {"rope_type": "default", "mrope_section": [11, 11, 10], "rope_theta": 10000000.0,
                                   "partial_rotary_factor": 0.25}}
QWEN3_NEXT = {**HYBRID, **HYBRID_MOE, "model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"],
              "partial_rotary_factor": 0.25, "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
              "rope_theta": 10000000.0}
QWEN3_5 = {**HYBRID, **QWEN35_ROPE, "model_type": "qwen3_5", "architectures": ["Qwen3_5ForCausalLM"]}
QWEN3_5_MOE = {**HYBRID, **HYBRID_MOE, **QWEN35_ROPE, "model_type": "qwen3_5_moe",
               "architectures": ["Qwen3_5MoeForCausalLM"]}
FAMILIES = {c["model_type"]: c for c in [QWEN3_MOE, DEEPSEEK_V2, GLM4_MOE, GLM4_MOE_LITE, DEEPSEEK_V32, GLM_MOE_DSA,
                                          MISTRAL4, MINIMAX, GPT_OSS, QWEN3_NEXT, QWEN3_5, QWEN3_5_MOE]}
# Latent attention past DeepSeek-V2: mlx-lm's own dequantize leaves the per-head matrices quantized.
LATENT = {"glm4_moe_lite", "deepseek_v32", "glm_moe_dsa", "mistral4"}


def main():
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("tokenizer_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--family", choices=sorted(FAMILIES), default="qwen3_moe")
    args = ap.parse_args()
    config = FAMILIES[args.family]
    src = args.out.with_name(args.out.name + "-f32src")
    model = tiny_models.build_model(dict(config), seed=7)
    save_model(src, model)
    save_config(dict(config), src / "config.json")
    tiny_models.copy_tokenizer(args.tokenizer_dir, src)
    tiny_models.quiet_convert(str(src), str(args.out), quantize=True, q_bits=4, q_group_size=64)
    tiny_models.copy_tokenizer(src, args.out)
    twin = args.out.with_name(args.out.name + "-f32")
    if args.family in LATENT:
        tiny_models.dequantized_twin(args.out, twin)
    else:
        tiny_models.quiet_convert(str(args.out), str(twin), dequantize=True, dtype="float32")
        tiny_models.copy_tokenizer(src, twin)
    print(f"wrote {src}, {args.out}, {twin}")


if __name__ == "__main__":
    main()
