#!/usr/bin/env bash
# The benchmark job on one NVIDIA H200: Llama-3-8B (all 32 layers, random weights) in bf16.
#
#   prefill, batch 1: 512 ... 32,768 tokens (7 lengths)
#   decode: batches 1, 8, 32, 128 over 512, 4,096 and 16,384 cached tokens (12 points; B=128 at
#           16K needs 256 GiB of KV cache and is expected to be skipped as out of memory)
#   microbenchmarks: 8192^3 bf16 matmul, 1 GiB device copy
#
# 3 warm-up and 10 timed runs per point. Estimated time on an H200: about 1 minute of
# measurement (the 32K prefill is ~1.2 s a run, ~16 s with its repeats; all prefill ~35 s;
# decode steps are milliseconds) plus PyTorch's start-up; well under the 6-minute budget.
#
# Writes "$OUT/h200-llama-3-8b.json" (the run document) and "$OUT/h200-llama-3-8b.log" (the
# job's stderr), then prints a summary. Needs no network.
#
# On the device machine python3 has PyTorch, tqdm and httpx but may lack pydantic. If so, carry
# wheels in .wheels/ (made here beforehand with:
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       -d .wheels pydantic
# ) and this script installs them offline.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-bench-out}"
PYTHON="${PYTHON:-python3}"
RUN="$OUT/h200-llama-3-8b"
mkdir -p "$OUT"

if ! "$PYTHON" -c "import pydantic" 2>/dev/null; then
    if [ -d .wheels ]; then
        "$PYTHON" -m pip install --quiet --no-index --find-links .wheels pydantic
    else
        echo "device_bench: $PYTHON lacks pydantic and no .wheels/ was carried" >&2
        exit 3
    fi
fi
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 4)" || {
    echo "device_bench: PyTorch sees no CUDA device" >&2
    exit 4
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv || true

# Large KV caches come and go between points: let the allocator grow segments in place.
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"

started=$(date +%s)
status=0
"$PYTHON" -m app.bench \
    --model llama-3-8b --gpu h200-sxm-141gb --dtype bf16 --device cuda \
    --prompt-lens 512,1024,2048,4096,8192,16384,32768 --prefill-batch 1 \
    --decode-batches 1,8,32,128 --kv-lens 512,4096,16384 \
    --repeats 10 --warmup 3 --seed 0 \
    --out "$RUN.json" 2> >(tee "$RUN.log" >&2) || status=$?
echo "device_bench: job exited $status after $(($(date +%s) - started)) s"
[ -f "$RUN.json" ] || exit "$status"

# A summary from the document alone (standard library only).
"$PYTHON" - "$RUN.json" <<'PY'
import json
import math
import sys

run = json.load(open(sys.argv[1], encoding="utf-8"))
env, model, micro = run["environment"], run["model"], run["microbenchmarks"]
print(f"{env['device_name']}, torch {env['torch_version']}, CUDA {env['cuda_version']}, "
      f"driver {env['driver_version']}; gpu id {run['gpu']}; attention {run['attention_backend']}")
if micro:
    print(f"matmul {micro['matmul_flops_per_s'] / 1e12:.0f} TFLOP/s, "
          f"copy {micro['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write)")
print("prefill, batch 1: TTFT, ratio and log-log slope to the previous length")
previous = None
for p in run["points"]:
    if p["phase"] != "prefill" or p["batch_size"] != 1:
        continue
    n, ms = p["prompt_tokens"], p["median_ms"]
    if ms is None:
        print(f"  n={n:>6}  skipped: {p['skipped']['reason']}")
        continue
    extra = ""
    if previous:
        ratio = ms / previous[1]
        extra = f"  x{ratio:5.2f}  slope {math.log(ratio) / math.log(n / previous[0]):.2f}"
    print(f"  n={n:>6}  {ms:9.2f} ms (p10 {p['p10_ms']:.2f}, p90 {p['p90_ms']:.2f}){extra}")
    previous = (n, ms)
print("decode: step time and tokens per second")
for p in run["points"]:
    if p["phase"] != "decode":
        continue
    where = f"  B={p['batch_size']:>3} c={p['context_tokens']:>6}"
    if p["median_ms"] is None:
        print(f"{where}  skipped: {p['skipped']['reason'][:100]}")
    else:
        rate = p["batch_size"] / (p["median_ms"] / 1e3)
        print(f"{where}  {p['median_ms']:8.3f} ms  {rate:10.0f} tokens/s")
PY
exit "$status"
