"""A mid-size random-weight Qwen3-MoE for benchmarks (never CI): no hub is reachable here, so the
model is made with mlx-lm's own classes, as the tiny fixtures are, then quantized like an
mlx-community checkpoint and dequantized to its f32 twin (what mlx-lm runs our numerics on).

    moe_model.py TOKENIZER_DIR OUT      writes OUT-f32src, OUT (4-bit, group 64) and OUT-f32
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
import tiny_models  # noqa: E402  (also patches mx.gather_qmm for mlx-lm 0.32.2)
from mlx_lm.utils import save_config, save_model  # noqa: E402

# About 0.2 B parameters, 0.13 B of them in 32 experts per layer (4 active): the shape of
# Qwen3-30B-A3B scaled down, so that experts dominate the bytes a token reads.
CONFIG = {
    "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 512,
    "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
    "intermediate_size": 1536, "moe_intermediate_size": 512, "num_experts": 32,
    "num_experts_per_tok": 4, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "max_position_embeddings": 4096, "tie_word_embeddings": False, "vocab_size": 49152,
    "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32", "hidden_act": "silu",
}


def main():
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("tokenizer_dir", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    src = args.out.with_name(args.out.name + "-f32src")
    model = tiny_models.build_model(dict(CONFIG), seed=7)
    save_model(src, model)
    save_config(dict(CONFIG), src / "config.json")
    tiny_models.copy_tokenizer(args.tokenizer_dir, src)
    tiny_models.quiet_convert(str(src), str(args.out), quantize=True, q_bits=4, q_group_size=64)
    tiny_models.copy_tokenizer(src, args.out)
    twin = args.out.with_name(args.out.name + "-f32")
    tiny_models.quiet_convert(str(args.out), str(twin), dequantize=True, dtype="float32")
    tiny_models.copy_tokenizer(src, twin)
    print(f"wrote {src}, {args.out}, {twin}")


if __name__ == "__main__":
    main()
