"""mlx-lm's side of `cargo run -p bench`: the same measurements on the same token ids, as JSON."""

import argparse
import json
import sys
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler
from mlx_lm.utils import sharded_load

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
import mlx_compat  # noqa: E402,F401  (quantized MoE as stored: see the module)

GREEDY = make_sampler(0.0)


def bench_ids(n):
    """The benchmark's prompt: the same deterministic ids the `bench` binary uses."""
    return [100 + (i * 7919) % 40000 for i in range(n)]


def prompt_tps(model, n):
    """Prompt tokens per second, to the first generated token."""
    tic = time.perf_counter()
    for _ in generate_step(mx.array(bench_ids(n)), model, max_tokens=1, sampler=GREEDY):
        break
    return n / (time.perf_counter() - tic)


def generation_tps(model, n, after=16):
    """Generated tokens per second after the first, greedy, never stopping early, following a
    prompt of `after` tokens."""
    stamps = []
    for _ in generate_step(mx.array(bench_ids(after)), model, max_tokens=n, sampler=GREEDY):
        stamps.append(time.perf_counter())
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-lens", default="128")
    p.add_argument("--gen-tokens", type=int, default=128)
    p.add_argument("--gen-after", type=int, default=16, help="the prompt length before generation")
    p.add_argument(
        "--repeats", type=int, default=1, help="runs per prompt length; the best counts"
    )
    p.add_argument("--adapter", help="a LoRA adapter folder, applied as mlx-lm applies it")
    p.add_argument(
        "--sharded",
        choices=["tensor", "pipeline"],
        help="under mlx.launch: mlx-lm's own distributed generation",
    )
    a = p.parse_args()
    group = None
    if a.sharded:
        group = mx.distributed.init(strict=True)
        split = (None, group) if a.sharded == "tensor" else (group, None)
        model, _ = sharded_load(a.model, *split)
    else:
        model, _ = load(a.model, adapter_path=a.adapter)
    prompt_tps(model, 16)  # warm-up
    out = {"prompt_tps": {}, "generation_tps": None}
    for n in [int(x) for x in a.prompt_lens.split(",") if x]:
        out["prompt_tps"][str(n)] = max(prompt_tps(model, n) for _ in range(max(a.repeats, 1)))
    if a.gen_tokens > 0:
        out["generation_tps"] = generation_tps(model, a.gen_tokens, a.gen_after)
    if group is None or group.rank() == 0:
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
