"""The server's memory under a long run of varied estimate requests: does its RSS level off?

Starts `ridgeline serve` on a fresh SQLite catalog, sends random estimate bodies (every estimate
route, catalog models and GPUs, engines, lengths and batches drawn anew for each request, so
almost no two bodies repeat) from a few client threads, and prints the server's resident memory
every `--interval` seconds as `seconds,requests,rss_mib`, then the growth over the last half of
the run. Bounded caches (docs/performance.md states their budget) make the curve flatten.

Usage: python scripts/soak_memory.py --duration 1200 --interval 30
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"]
GPUS = ["h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "mi300x-192gb", "a100-sxm4-80gb"]
ENGINES = [None, "vllm", "sglang", "trtllm", "roofline"]
TP = {"llama-3.1-8b": 1, "llama-3.1-70b": 4, "qwen3-30b-a3b": 2, "deepseek-v3": 8}


def body(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A random estimate request: (path, body)."""
    model = rng.choice(MODELS)
    target: dict[str, Any] = {"model": model, "gpu": rng.choice(GPUS), "tp": TP.get(model, 1)}
    engine = rng.choice(ENGINES)
    if engine is not None:
        target["engine"] = engine
    prompt = rng.randint(1, 32_000)
    context = rng.randint(1, 32_000)
    batch = rng.randint(1, 256)
    route = rng.choice(["prefill", "decode", "request", "batch-ceiling", "prefill-curve"])
    if route == "prefill":
        return route, target | {"prompt_tokens": prompt}
    if route == "decode":
        return route, target | {"batch_size": batch, "context_tokens": context}
    if route == "request":
        output = rng.randint(1, 4_000)
        return route, target | {"prompt_tokens": prompt, "output_tokens": output}
    if route == "batch-ceiling":
        return route, target | {"context_tokens": context}
    lengths = sorted({rng.randint(1, 32_000) for _ in range(4)})
    return route, target | {"prompt_tokens": lengths}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1200.0, help="seconds of load")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--clients", type=int, default=2, help="client threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    bindir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp:
        env = os.environ | {
            "RIDGELINE_DATABASE_URL": f"sqlite:///{tmp}/soak.db",
            "RIDGELINE_API_KEYS": "soak",
        }
        for step in ("migrate", "load-catalog"):
            subprocess.run([bindir / "ridgeline", step], env=env, check=True, capture_output=True)
        port = _free_port()
        server = subprocess.Popen(
            [bindir / "ridgeline", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            return _soak(args, server.pid, f"http://127.0.0.1:{port}")
        finally:
            server.terminate()
            server.wait(30)


def _soak(args: argparse.Namespace, pid: int, base: str) -> int:
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(300):
            try:
                client.get("/healthz")
                break
            except httpx.TransportError:
                time.sleep(0.1)
    sent = [0]
    statuses: dict[int, int] = {}
    stop = threading.Event()

    def load(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=base, timeout=60) as client:
            while not stop.is_set():
                route, request = body(rng)
                status = client.post(f"/v1/estimates/{route}", json=request).status_code
                statuses[status] = statuses.get(status, 0) + 1
                sent[0] += 1

    threads = [
        threading.Thread(target=load, args=(args.seed * 100 + i,), daemon=True)
        for i in range(args.clients)
    ]
    start = time.monotonic()
    samples = [(0.0, 0, rss_mib(pid))]
    print("seconds,requests,rss_mib")
    print(f"0,0,{samples[0][2]:.1f}", flush=True)
    for thread in threads:
        thread.start()
    while (elapsed := time.monotonic() - start) < args.duration:
        time.sleep(min(args.interval, args.duration - elapsed))
        samples.append((time.monotonic() - start, sent[0], rss_mib(pid)))
        print(f"{samples[-1][0]:.0f},{samples[-1][1]},{samples[-1][2]:.1f}", flush=True)
    stop.set()
    for thread in threads:
        thread.join(60)
    half = [s for s in samples if s[0] >= args.duration / 2]
    growth = half[-1][2] - half[0][2]
    print(f"statuses: {dict(sorted(statuses.items()))}")
    peak = max(s[2] for s in samples)
    print(
        f"rss {samples[0][2]:.0f} -> {samples[-1][2]:.0f} MiB (peak {peak:.0f}); last half of "
        f"the run: {growth:+.1f} MiB over {half[-1][1] - half[0][1]} requests"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
