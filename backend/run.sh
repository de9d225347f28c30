#!/usr/bin/env bash
# LocalAI backend entry point: LocalAI runs `run.sh --addr HOST:PORT` from this folder.
# Uses the release binary if built, else the debug one (build: cargo build --release -p backend).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for bin in "${MLX_DISTRIBUTED_BACKEND_BIN:-}" "$here/../target/release/mlx-distributed-backend" \
           "$here/../target/debug/mlx-distributed-backend" "$here/mlx-distributed-backend"; do
  if [ -n "$bin" ] && [ -x "$bin" ]; then exec "$bin" "$@"; fi
done
echo "run.sh: mlx-distributed-backend is not built (cargo build --release -p backend)" >&2
exit 1
