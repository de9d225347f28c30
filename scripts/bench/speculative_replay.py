#!/usr/bin/env python3
"""What prompt lookup can buy on a model's greedy output, replayed offline.

mlx-lm's greedy tokens for the speculative bench's two tasks (our greedy output, token for
token, on the f32 twin of a packed checkpoint) are replayed through the backend's prompt
lookup (speculative.rs: the latest earlier 3- or 2-token match) and draft-length schedule,
with a verifying step of 1 + p positions costing 1 + c * p plain steps. It prints tok/s
against plain decoding and the proposals taken, per setting. A benchmark aid, never run by CI.

  scripts/bench/speculative_replay.py MODEL_DIR [--cost C] [--tokens N]
"""
import argparse
import re
from pathlib import Path


def tasks():
    """The bench's prompts, read from integration-tests/benches/speculative.rs."""
    src = (Path(__file__).resolve().parents[2] / "integration-tests/benches/speculative.rs").read_text()
    code = re.search(r'const CODE: &str = "(.*?)";\n', src, re.S).group(1).replace('\\"', '"')
    grounded = ("Rewrite this code with one change: rename the class `Cart` to `ShoppingCart`. "
                "Repeat everything else exactly.\n\n" + code)
    free = "Write a long story about a lighthouse keeper who finds a message in a bottle."
    return {"grounded": grounded, "free": free}


def greedy(model_dir, tokens):
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step
    model, tok = load(model_dir)
    out = {}
    for name, prompt in tasks().items():
        text = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                       add_generation_prompt=True, tokenize=False)
        ids = tok.encode(text, add_special_tokens=False)
        steps = zip(generate_step(mx.array(ids), model, max_tokens=tokens), range(tokens))
        out[name] = (ids, [int(t) for (t, _), _ in steps])
    return out


def lookup(history, k, n_min, n_max=3):
    for n in range(n_max, n_min - 1, -1):
        if len(history) <= n:
            continue
        suffix = history[-n:]
        for at in range(len(history) - n - 1, -1, -1):
            if history[at:at + n] == suffix:
                return history[at + n:min(at + n + k, len(history))]
    return []


def replay(prompt, output, k_max, n_min, schedule, cost):
    """tok/s against plain decoding, proposals taken, proposals made."""
    t, spent, taken, made, now = 0, 0.0, 0, 0, k_max
    while t < len(output):
        k = min(now if schedule else k_max, len(output) - t - 1)
        draft = lookup(prompt + output[:t], k, n_min)
        a = 0
        while a < len(draft) and draft[a] == output[t + a]:
            a += 1
        if draft:
            made, taken = made + len(draft), taken + a
            now = min(k_max, now + 2) if a == len(draft) else max(1, now - 1)
        spent += 1 + cost * len(draft)
        t += a + 1
    return len(output) / spent, taken, made


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--cost", type=float, default=0.48, help="a verified position, in plain steps")
    p.add_argument("--tokens", type=int, default=256)
    a = p.parse_args()
    runs = greedy(a.model, a.tokens)
    for label, n_min, schedule in (("1-3 token match, fixed k", 1, False),
                                   ("2-3 token match, schedule", 2, True)):
        for k in (1, 2, 4, 8):
            cells = []
            for name, (prompt, output) in runs.items():
                rate, taken, made = replay(prompt, output, k, n_min, schedule, a.cost)
                cells.append(f"{name} {rate:.2f}x ({taken}/{made} taken)")
            print(f"{label}, k={k}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
