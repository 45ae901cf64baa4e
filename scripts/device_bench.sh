#!/usr/bin/env bash
# The benchmark job on one NVIDIA H200: Llama-3-8B (all 32 layers, random weights) in bf16.
#
#   prefill, batch 1: 512 ... 32,768 tokens (7 lengths)
#   decode: batches 1, 8, 32, 128 over 512, 4,096 and 16,384 cached tokens (12 points). B=128 at
#           16K needs 128 x 16,384 x 131,072 B = 256 GiB of KV cache: predicted not to fit before
#           anything is allocated, and recorded as skipped with that reason
#   microbenchmarks: 8192^3 bf16 matmul, 1 GiB device-to-device copy (read + write bytes)
#
# Every point: one eager run (first use), capture as a CUDA graph, 3 warm-up and 10 timed
# replays between CUDA events. Expected on an H200: ~1 minute of measurement (the 32K prefill is
# ~1.3 s a run, 14 runs; all prefill ~35 s; decode steps are milliseconds, the largest KV cache
# 64 GiB) plus ~30 s of start-up. The job gets a hard deadline of BENCH_DEADLINE_S (420 s): at
# it, `timeout` sends SIGTERM, which the job takes like Ctrl-C (measured points written, the rest
# marked "interrupted", exit 130), so the whole script stays under ~8 minutes.
#
# Offline: nothing is installed from a network. The machine's python3 has PyTorch, httpx and tqdm
# but no pydantic; its wheels travel in .whl/, made beforehand where pip reaches PyPI:
#
#   scripts/device_wheels.sh                                  # here, once: writes .whl/
#   run(command="bash scripts/device_bench.sh", carry=[".whl"], timeout_s=540)
#
# Writes "$OUT/h200-llama-3-8b.json" (the run document) and "$OUT/h200-llama-3-8b.log" (the job's
# output), and prints a summary. Exit status: the job's (0 complete; 130 stopped at the deadline,
# partial document written; 1 broken, the points measured before kept; 137 killed 30 s after the
# deadline), or 3 something missing, 4 no usable H200.
#
# DEVICE_BENCH_SMOKE=1 runs the same steps on the CPU with a tiny Llama-style config.json and a
# tiny plan, to check the script itself on a machine without a GPU.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-bench-out}"
PYTHON="${PYTHON:-python3}"
DEADLINE_S="${BENCH_DEADLINE_S:-420}"
SMOKE="${DEVICE_BENCH_SMOKE:-0}"
RUN="$OUT/h200-llama-3-8b"
SITE=/tmp/ridgeline-site
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"

say() { echo "device_bench: $*" >&2; }
fail() {
    local code=$1
    shift
    say "FAILED: $*"
    exit "$code"
}

command -v timeout >/dev/null || fail 3 "no 'timeout' command (coreutils) on this machine"
command -v "$PYTHON" >/dev/null || fail 3 "no $PYTHON on this machine"

# 1. pydantic and its needs, from the carried wheels, into a private folder (no network).
if ! "$PYTHON" -c "import pydantic" 2>/dev/null; then
    shopt -s nullglob
    wheels=(.whl/*.whl)
    shopt -u nullglob
    [ ${#wheels[@]} -gt 0 ] ||
        fail 3 "$PYTHON lacks pydantic and no .whl/ was carried: run scripts/device_wheels.sh" \
            "here, then call the device with carry=[\".whl\"]"
    "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$SITE" "${wheels[@]}" ||
        fail 3 "offline install of ${wheels[*]} failed"
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    say "installed ${#wheels[@]} carried wheels into $SITE"
fi

# 2. Every module the job imports, before any device time is spent.
"$PYTHON" -c "import app.bench.cli, app.bench.workload, app.bench.device, tqdm, httpx" ||
    fail 3 "the job's imports fail (above): a package is missing from $PYTHON"

# 3. The GPU: an H200 that PyTorch sees (the document records it as h200-sxm-141gb).
if [ "$SMOKE" = 1 ]; then
    say "smoke run on the CPU: tiny model and plan, not a measurement"
    tiny="$OUT/smoke-config.json"
    cat >"$tiny" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
 "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
 "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 2048}
JSON
    job=(--config "$tiny" --device cpu --dtype fp32 --threads 1
        --prompt-lens 16,32 --decode-batches 1,2 --kv-lens 32,64 --repeats 2 --warmup 1)
else
    "$PYTHON" - <<'PY' || fail 4 "no usable H200 (above)"
import sys

import torch

if not torch.cuda.is_available():
    sys.exit("PyTorch sees no CUDA device")
name = torch.cuda.get_device_name()
free, total = torch.cuda.mem_get_info()
print(
    f"device_bench: {name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free), "
    f"torch {torch.__version__}, CUDA {torch.version.cuda}",
    file=sys.stderr,
)
if "H200" not in name:
    sys.exit(f"expected an NVIDIA H200, found {name!r}")
PY
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >&2 ||
        say "nvidia-smi failed (not needed)"
    job=(--model llama-3-8b --gpu h200-sxm-141gb --device cuda --dtype bf16
        --prompt-lens 512,1024,2048,4096,8192,16384,32768 --prefill-batch 1
        --decode-batches 1,8,32,128 --kv-lens 512,4096,16384
        --repeats 10 --warmup 3 --seed 0)
fi

# 4. The job, under its deadline. SIGTERM at the deadline, SIGKILL 30 s later if it hangs.
rm -f "$RUN.json" "$RUN.log" # never summarise an earlier run's document
started=$(date +%s)
set +e
timeout --preserve-status --kill-after=30 "$DEADLINE_S" \
    "$PYTHON" -m app.bench "${job[@]}" --out "$RUN.json" 2>&1 | tee "$RUN.log"
status=${PIPESTATUS[0]}
set -e
say "job exited $status after $(($(date +%s) - started)) s"
[ -f "$RUN.json" ] || fail "$((status == 0 ? 1 : status))" "the job wrote no document"

# 5. A summary from the document alone (standard library only).
"$PYTHON" - "$RUN.json" <<'PY'
import json
import math
import sys

with open(sys.argv[1], encoding="utf-8") as handle:
    run = json.load(handle)
env, model, micro = run["environment"], run["model"], run["microbenchmarks"]
print(
    f"{env['device_name']}, torch {env['torch_version']}, CUDA {env['cuda_version']}, "
    f"driver {env['driver_version']}; gpu id {run['gpu']}; {model['num_layers']} layers, "
    f"{run['dtype']}; attention {run['attention_backend']}"
)
print(f"provenance: {run['provenance']['note']}")
if micro:
    print(
        f"matmul {micro['matmul_flops_per_s'] / 1e12:.3g} TFLOP/s "
        f"({'x'.join(map(str, micro['matmul_shape']))}), "
        f"copy {micro['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + write)"
    )
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
print("decode: step time (p10, p90) and tokens per second")
for p in run["points"]:
    if p["phase"] != "decode":
        continue
    where = f"  B={p['batch_size']:>3} c={p['context_tokens']:>6}"
    if p["median_ms"] is None:
        print(f"{where}  skipped: {p['skipped']['reason']}")
    else:
        rate = p["batch_size"] / (p["median_ms"] / 1e3)
        print(
            f"{where}  {p['median_ms']:8.3f} ms ({p['p10_ms']:.3f}, {p['p90_ms']:.3f})"
            f"  {rate:10.0f} tokens/s"
        )
PY
[ "$status" -eq 0 ] || say "FAILED: the job exited $status (see $RUN.log)"
exit "$status"
