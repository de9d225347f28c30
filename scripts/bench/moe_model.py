"""Mid-size random-weight mixtures of experts for benchmarks (never CI): no hub is reachable
here, so the models are made with mlx-lm's own classes, as the tiny fixtures are, then
quantized like an mlx-community checkpoint and dequantized to their f32 twins (what mlx-lm
runs our numerics on).

    moe_model.py TOKENIZER_DIR OUT [--family qwen3_moe|deepseek_v2]
        writes OUT-f32src, OUT (4-bit, group 64) and OUT-f32
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
FAMILIES = {"qwen3_moe": QWEN3_MOE, "deepseek_v2": DEEPSEEK_V2}


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
    tiny_models.quiet_convert(str(args.out), str(twin), dequantize=True, dtype="float32")
    tiny_models.copy_tokenizer(src, twin)
    print(f"wrote {src}, {args.out}, {twin}")


if __name__ == "__main__":
    main()
