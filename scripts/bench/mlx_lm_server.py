"""mlx-lm's side of the batching benchmark: the same load against `mlx_lm.server` (its
continuous batching and prompt cache), as JSON. The load comes from a JSON file the Rust
benchmark writes: {"streams": [1, 4, 8], "tokens": 64, "prompts": [...], "ttft": [[cold, warm], ...],
"eos": id}."""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request


def post(port, body, timeout=600):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    return urllib.request.urlopen(req, timeout=timeout)


def completion(port, prompt, tokens, eos):
    """One greedy completion that never stops early; its completion token count."""
    body = {
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0.0,
        "logit_bias": {str(eos): -1000.0},
    }
    with post(port, body) as r:
        return json.load(r)["usage"]["completion_tokens"]


def aggregate(port, prompts, n, tokens, eos):
    """Tokens per second of `n` requests started together."""
    counts = [0] * n
    errors = []

    def run(i):
        try:
            counts[i] = completion(port, prompts[i % len(prompts)], tokens, eos)
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    tic = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return sum(counts) / (time.perf_counter() - tic)


def ttft(port, prompt):
    """Seconds from sending a streamed request to its first token."""
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0.0, "stream": True}
    tic = time.perf_counter()
    with post(port, body) as r:
        for line in r:
            if line.startswith(b"data:") and b"[DONE]" not in line:
                first = time.perf_counter() - tic
                for _ in r:
                    pass
                return first
    raise RuntimeError("the stream carried no token")


def wait_ready(port, server, limit=120):
    start = time.time()
    while time.time() - start < limit:
        if server.poll() is not None:
            raise RuntimeError(f"mlx_lm.server exited with {server.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).close()
            return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError("mlx_lm.server did not answer within 120 s")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--load", required=True, help="the JSON load file")
    a = p.parse_args()
    load = json.load(open(a.load))
    server_bin = os.path.join(os.path.dirname(sys.executable), "mlx_lm.server")
    server = subprocess.Popen(
        [server_bin, "--model", a.model, "--port", str(a.port), "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(a.port, server)
        prompts, tokens, eos = load["prompts"], load["tokens"], load["eos"]
        aggregate(a.port, prompts, 1, tokens, eos)  # warm-up
        out = {"streams": {}, "ttft": {"cold": [], "warm": []}}
        for n in load["streams"]:
            # The best of two, as the Rust side measures ours.
            best = max(aggregate(a.port, prompts, n, tokens, eos) for _ in range(2))
            out["streams"][str(n)] = best
        for cold, warm in load["ttft"]:
            out["ttft"]["cold"].append(ttft(a.port, cold))
            out["ttft"]["warm"].append(ttft(a.port, warm))
        print(json.dumps(out), flush=True)
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
