"""Cheap requests while heavy ones run: the latency of catalog reads and estimates alone, then
with eight clients submitting simulations back to back (each about 20 s of CPU), on one server
process and its heavy-work pool (`make bench-heavy`). Prints each cheap path's requests per
second, p50, p99 and the slowest request (the longest the server kept anyone waiting), and
what happened to the heavy requests (served, refused with 429).

Not a test: a measurement of this machine, to read beside its CPU count.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import httpx
from benchlib import running_server, wrk

HEAVY_CLIENTS = 8
SECONDS = 10
KEY = {"X-API-Key": "bench-key-0123456789"}
SIMULATION = {
    "model": "llama-3-8b",
    "gpu": "h100-sxm5-80gb",
    "workload": {
        "requests_per_s": 0.5,
        "num_requests": 20_000,
        "prompt_tokens": {"p50": 512, "p90": 512, "p99": 512},
        "output_tokens": {"p50": 400, "p90": 400, "p99": 400},
    },
}
ESTIMATE = {"model": "llama-3-8b", "gpu": "h100-sxm5-80gb", "prompt_tokens": 2048}


def cheap(base: str, label: str) -> None:
    for result in (
        wrk(
            f"{label} GET /v1/gpus/{{id}}",
            f"{base}/v1/gpus/h100-sxm5-80gb",
            connections=8,
            seconds=SECONDS,
        ),
        wrk(
            f"{label} POST /v1/estimates/prefill (computed)",
            f"{base}/v1/estimates/prefill",
            body=ESTIMATE,
            vary=("prompt_tokens", 1, 8000),
            connections=8,
            seconds=SECONDS,
        ),
        wrk(f"{label} GET /readyz", f"{base}/readyz", connections=2, seconds=SECONDS),
    ):
        print(
            f"{result.name:<58} {result.requests_per_s:>8.0f} req/s  p50 {result.p50_ms:7.2f}"
            f"  p99 {result.p99_ms:7.2f}  max {result.max_ms:8.2f} ms  errors {result.errors}"
        )


def main() -> None:
    print(f"{os.cpu_count()} CPUs; one server process, its default heavy-work pool")
    with running_server(log_level="WARNING") as base:
        cheap(base, "alone:")
        outcomes: Counter[int] = Counter()
        stop = threading.Event()

        def heavy() -> None:
            with httpx.Client(timeout=300) as client:
                while not stop.is_set():
                    status = client.post(
                        f"{base}/v1/simulations", json=SIMULATION, headers=KEY
                    ).status_code
                    outcomes[status] += 1
                    if status == 429:
                        time.sleep(1.0)

        threads = [threading.Thread(target=heavy, daemon=True) for _ in range(HEAVY_CLIENTS)]
        for thread in threads:
            thread.start()
        time.sleep(2.0)  # let the pool fill
        cheap(base, f"with {HEAVY_CLIENTS} heavy:")
        stop.set()
        print(f"heavy requests during the run, by status: {dict(sorted(outcomes.items()))}")


if __name__ == "__main__":
    main()
