"""mlx-lm's greedy tokens for prompt ids, with its KV cache settings: the oracle of
integration-tests/tests/kv_cache.rs.

Reads {"model": folder, "max_tokens": n, "runs": [{"prompt_ids": [...], "kv_bits": b|null,
"kv_group_size": g, "quantized_kv_start": s}]} on stdin; prints {"runs": [{"tokens", "text",
"top", "band"}]}: top holds each step's five most likely [id, logprob] pairs, best first; band
the same ids' log-probabilities when the embeddings are scaled by 1 + 1e-5 and the same tokens
are fed, which shows how far a difference in the last bits moves this setting's output.

Steps are generate_step's: all prompt tokens but the last in one forward pass, then one token a
pass. quantized_kv_start 0 means a QuantizedKVCache from the first pass; more means the cache
is quantized after the first pass that leaves that many positions cached, as maybe_quantize_kv_cache
does."""

import json
import sys

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import KVCache, QuantizedKVCache

PERTURBATION = 1e-5


def new_cache(model, run):
    """Each layer's cache as the run's setting starts it."""
    bits, group = run.get("kv_bits"), run.get("kv_group_size", 64)
    if bits is not None and run.get("quantized_kv_start", 0) == 0:
        return [QuantizedKVCache(group_size=group, bits=bits) for _ in model.layers]
    return [KVCache() for _ in model.layers]


def maybe_quantize(cache, run):
    """mlx-lm's maybe_quantize_kv_cache, after a forward pass."""
    bits = run.get("kv_bits")
    for i, c in enumerate(cache):
        if bits is not None and isinstance(c, KVCache) and c.offset >= run.get("quantized_kv_start", 0):
            cache[i] = c.to_quantized(group_size=run.get("kv_group_size", 64), bits=bits)


def steps(model, run, max_tokens, forced=None):
    """Each step's log-probabilities, greedy (or fed `forced`), up to eos or max_tokens."""
    ids, cache, out = run["prompt_ids"], new_cache(model, run), []
    if len(ids) > 1:
        model(mx.array(ids[:-1])[None], cache=cache)
        maybe_quantize(cache, run)
    token = ids[-1]
    for step in range(max_tokens):
        logits = model(mx.array([[token]]), cache=cache)[0, -1]
        maybe_quantize(cache, run)
        logprobs = logits - mx.logsumexp(logits)
        mx.eval(logprobs)
        out.append(logprobs)
        token = forced[step] if forced is not None else mx.argmax(logprobs).item()
        if forced is not None and step + 1 >= len(forced):
            break
        if forced is None and token in EOS:
            break
    return out


def greedy(model, tokenizer, run, max_tokens):
    """Tokens up to eos (not included) or max_tokens, their text, top five and band."""
    main = steps(model, run, max_tokens)
    tokens = [mx.argmax(lp).item() for lp in main]
    tokens = [t for t in tokens if t not in EOS]
    top = [mx.argsort(-lp)[:5].tolist() for lp in main]
    embed = model.model.embed_tokens
    weight = embed.weight
    embed.weight = weight * (1 + PERTURBATION)
    moved = steps(model, run, max_tokens, forced=tokens + [0])
    embed.weight = weight
    return {"tokens": tokens, "text": tokenizer.decode(tokens),
            "top": [[[i, lp[i].item()] for i in best] for best, lp in zip(top, main)],
            "band": [[lp[i].item() for i in best] for best, lp in zip(top, moved)]}


def main():
    """Every run on one loaded model."""
    global EOS
    spec = json.load(sys.stdin)
    model, tokenizer = load(spec["model"])
    EOS = set(tokenizer.eos_token_ids)
    runs = [greedy(model, tokenizer, run, spec["max_tokens"]) for run in spec["runs"]]
    print(json.dumps({"runs": runs}))


EOS = set()

if __name__ == "__main__":
    main()
