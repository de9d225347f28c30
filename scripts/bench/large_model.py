"""A large random-weight Llama and its llama.cpp twin, for benchmarks (never CI): 2.2 GB of 4-bit
weights, far more than any CPU cache, so that a decode step streams every weight from memory and
its speed measures memory bandwidth rather than cache hits. No hub is reachable here, so the
model is made with mlx-lm's own `llama` class, as the tiny fixtures are.

    large_model.py TOKENIZER_DIR OUT_DIR GGUF_PATH [--layers N] [--force] [--time-limit S]

writes OUT_DIR, an mlx-community-style 4-bit checkpoint (affine, group 64, bf16 scales and
biases, as `mlx_lm convert -q` makes; SmolLM2's tokenizer files copied from TOKENIZER_DIR), and
GGUF_PATH, a GGUF of the same shapes for llama.cpp: every matrix Q4_0 (the token embedding and
the output head too, as `llama-quantize --pure` leaves them; plain Q4_0 would make the head
Q6_K), norms F32, and the tokenizer metadata of SmolLM2's own GGUF (--vocab-gguf). Both draw
every matrix from a normal of std 0.02 (HF's init) with norms at one; the numbers differ, the
shapes and formats match. Both are built one layer at a time, so memory stays under twice the
size of the 4-bit model: about 7 minutes and 3.7 GB at peak on 2 cores.
"""

import argparse
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType
from gguf.quants import quant_shape_to_byte_shape, quantize
from mlx.utils import tree_flatten, tree_unflatten

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
import tiny_models  # noqa: E402
from mlx_lm.models import llama  # noqa: E402
from mlx_lm.utils import save_config, save_model  # noqa: E402

# Phi-3-mini's shape with grouped-query attention and SmolLM2's vocabulary, rope and context:
# 36 layers make the 4-bit folder 2.18 GB (each layer 99 M parameters in 55.7 MB, plus 170 MB
# of embedding and head).
CONFIG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 3072,
    "intermediate_size": 8192, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 96, "vocab_size": 49152, "rope_theta": 100000.0,
    "rms_norm_eps": 1e-5, "max_position_embeddings": 8192, "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "rope_scaling": None, "hidden_act": "silu",
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "torch_dtype": "bfloat16",
}
QUANTIZATION = {"group_size": 64, "bits": 4, "mode": "affine"}
INIT_STD = 0.02
SEED = 7
TIME_LIMIT = 3600  # seconds the whole build may take (--time-limit)
CACHE = Path(os.environ.get("MLX_DIST_CACHE", Path.home() / ".cache/mlx-distributed"))
VOCAB_GGUF = CACHE / "downloads/SmolLM2-135M-Instruct.Q4_1.gguf"
Q4_0, F32 = GGMLQuantizationType.Q4_0, GGMLQuantizationType.F32


def randomize(module, skip=()):
    """Give every matrix of module (but those under the prefixes skip) normal(0, INIT_STD) bf16
    weights and every norm ones, then quantize those matrices and evaluate them: one layer at a
    time is ever in float."""
    def init(path, value):
        if "norm" in path:
            return mx.ones(value.shape, mx.bfloat16)
        return (INIT_STD * mx.random.normal(value.shape)).astype(mx.bfloat16)

    params = [(k, v) for k, v in tree_flatten(module.parameters()) if not k.startswith(skip)]
    module.update(tree_unflatten([(k, init(k, v)) for k, v in params]))
    matrices = lambda path, m: isinstance(m, (nn.Linear, nn.Embedding)) and not path.startswith(skip)  # noqa: E731
    nn.quantize(module, **QUANTIZATION, class_predicate=matrices)
    mx.eval(module.parameters())


def build_mlx(config, seed):
    """mlx-lm's Llama with random weights, quantized layer by layer (the rest stays lazy)."""
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    for layer in model.model.layers:
        randomize(layer)
    randomize(model, skip=("model.layers.",))  # the embedding, the final norm and the head
    return model


def check_finite(model):
    """One forward pass over a few tokens must give finite logits; return their std."""
    logits = model(mx.array([[1, 28, 1029, 3075, 30, 2, 17, 400]])).astype(mx.float32)
    if not mx.isfinite(logits).all().item():
        sys.exit("large_model.py: the random model's logits are not finite")
    return mx.std(logits).item()


def write_mlx(model, config, tokenizer_dir, out):
    """Save model as an mlx-lm folder with the quantization entry and tokenizer files."""
    save_model(out, model)
    save_config({**config, "quantization": dict(QUANTIZATION)}, out / "config.json")
    tiny_models.copy_tokenizer(tokenizer_dir, out)


def gguf_tensors(config):
    """(name, shape as numpy orders it, type) of every tensor of the llama.cpp twin, in file order."""
    d, ff, n = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    q, kv = config["num_attention_heads"] * config["head_dim"], config["num_key_value_heads"] * config["head_dim"]
    tensors = [("token_embd.weight", (config["vocab_size"], d), Q4_0)]
    for i in range(n):
        tensors += [(f"blk.{i}.{name}.weight", shape, kind) for name, shape, kind in [
            ("attn_norm", (d,), F32), ("attn_q", (q, d), Q4_0), ("attn_k", (kv, d), Q4_0),
            ("attn_v", (kv, d), Q4_0), ("attn_output", (d, q), Q4_0), ("ffn_norm", (d,), F32),
            ("ffn_gate", (ff, d), Q4_0), ("ffn_up", (ff, d), Q4_0), ("ffn_down", (d, ff), Q4_0)]]
    return tensors + [("output_norm.weight", (d,), F32), ("output.weight", (config["vocab_size"], d), Q4_0)]


# llama.cpp's integer hyperparameters and the config.json fields they come from.
GGUF_UINTS = [
    ("context_length", "max_position_embeddings"), ("embedding_length", "hidden_size"),
    ("block_count", "num_hidden_layers"), ("feed_forward_length", "intermediate_size"),
    ("attention.head_count", "num_attention_heads"),
    ("attention.head_count_kv", "num_key_value_heads"), ("attention.key_length", "head_dim"),
    ("attention.value_length", "head_dim"), ("rope.dimension_count", "head_dim"),
    ("vocab_size", "vocab_size"),
]


def add_metadata(writer, config, vocab_gguf):
    """llama hyperparameters matching config, and every tokenizer.* key of vocab_gguf as stored."""
    a = "llama"
    writer.add_name("random llama-large (benchmark)")
    for key, name in GGUF_UINTS:
        writer.add_uint32(f"{a}.{key}", config[name])
    writer.add_float32(f"{a}.rope.freq_base", config["rope_theta"])
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    writer.add_uint32("general.file_type", LlamaFileType.MOSTLY_Q4_0)
    writer.add_uint32("general.quantization_version", 2)
    reader = GGUFReader(vocab_gguf)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            kind = field.types[0]
            sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), kind, sub_type=sub)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    if len(tokens) != config["vocab_size"]:
        sys.exit(f"large_model.py: {vocab_gguf} has {len(tokens)} tokens, the model {config['vocab_size']}")


def write_gguf(config, vocab_gguf, path, seed):
    """Write the llama.cpp twin tensor by tensor: the header first, then each tensor drawn,
    quantized and written before the next is made."""
    tensors = gguf_tensors(config)
    writer = GGUFWriter(path, "llama")
    add_metadata(writer, config, vocab_gguf)
    for name, shape, kind in tensors:
        if kind == F32:
            writer.add_tensor_info(name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        else:
            raw = quant_shape_to_byte_shape(shape, kind)
            writer.add_tensor_info(name, raw, np.dtype(np.uint8), int(np.prod(raw)), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape, kind in tensors:
        if kind == F32:
            writer.write_tensor_data(np.ones(shape, np.float32))
        else:
            writer.write_tensor_data(quantize(INIT_STD * rng.standard_normal(shape, np.float32), kind))
    writer.close()


def check_gguf(config, path):
    """Read the written GGUF back: every tensor present with its shape and type."""
    reader = GGUFReader(path)
    got = {t.name: (tuple(int(x) for x in reversed(t.shape)), t.tensor_type) for t in reader.tensors}
    want = {name: (tuple(shape), kind) for name, shape, kind in gguf_tensors(config)}
    if got != want:
        sys.exit(f"large_model.py: {path} does not hold the tensors written")


def claim(path, force):
    """Refuse to overwrite path without --force; with it, remove what is there."""
    if not path.exists():
        return
    if not force:
        sys.exit(f"large_model.py: {path} exists; pass --force to rebuild it")
    shutil.rmtree(path) if path.is_dir() else path.unlink()


def main():
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer_dir", type=Path, help="a folder with SmolLM2's tokenizer files")
    ap.add_argument("out", type=Path, help="the 4-bit mlx-lm folder to write")
    ap.add_argument("gguf", type=Path, help="the Q4_0 GGUF to write")
    ap.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"], help="decoder layers (55.7 MB each)")
    ap.add_argument("--vocab-gguf", type=Path, default=VOCAB_GGUF, help="the GGUF whose tokenizer.* keys to copy")
    ap.add_argument("--force", action="store_true", help="replace OUT and GGUF if they exist")
    ap.add_argument("--time-limit", type=int, default=TIME_LIMIT, help="seconds before giving up")
    args = ap.parse_args()
    for path in [args.tokenizer_dir / f for f in tiny_models.TOKENIZER_FILES] + [args.vocab_gguf]:
        if not path.is_file():
            sys.exit(f"large_model.py: missing {path}")
    give_up = f"large_model.py: gave up after {args.time_limit} s (raise it with --time-limit)"
    signal.signal(signal.SIGALRM, lambda *_: sys.exit(give_up))
    signal.alarm(args.time_limit)
    config = {**CONFIG, "num_hidden_layers": args.layers}
    claim(args.out, args.force)
    claim(args.gguf, args.force)

    t0 = time.monotonic()
    model = build_mlx(config, SEED)
    print(f"built and quantized in {time.monotonic() - t0:.0f} s; logits std {check_finite(model):.3f}")
    tmp = args.out.with_name(args.out.name + ".part")
    claim(tmp, True)
    write_mlx(model, config, args.tokenizer_dir, tmp)
    tmp.rename(args.out)
    del model
    print(f"wrote {args.out} at {time.monotonic() - t0:.0f} s")

    tmp = args.gguf.with_name(args.gguf.name + ".part")
    claim(tmp, True)
    write_gguf(config, args.vocab_gguf, tmp, SEED)
    check_gguf(config, tmp)
    tmp.rename(args.gguf)
    print(f"wrote {args.gguf} at {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
