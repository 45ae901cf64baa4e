"""Estimate endpoints under load: requests/s and p50/p99 with 32 keep-alive clients (wrk) for
each endpoint (catalog ids, so the catalog lookup is included), each as a ratio to a plain FastAPI
app's constant GET (no middleware, one async route, the same uvicorn) measured just before it,
run for run (the median of `--runs` pairs); and the time of a 1,000-point prefill curve.

Targets (issue 13): the same body repeated (answered from the memo) >= 0.6 of plain with p99
under 20 ms; every body different (computed) >= 0.45; the 1,000-point curve under 100 ms.

    .venv/bin/python scripts/bench_estimates.py [--seconds 5] [--runs 1] [--only prefill]
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx
from benchlib import Compared, Load, compared, print_compared, running_plain, running_server

BASE = {"model": "llama-3-8b", "gpu": "h100-sxm5-80gb"}
# Each endpoint's body, and the field drawn at random per request (so that every request differs).
ENDPOINTS: dict[str, tuple[dict[str, object], tuple[str, int, int]]] = {
    "/v1/estimates/prefill": ({**BASE, "prompt_tokens": 2048}, ("prompt_tokens", 1, 8192)),
    "/v1/estimates/decode": (
        {**BASE, "batch_size": 32, "context_tokens": 4096},
        ("context_tokens", 1, 8192),
    ),
    "/v1/estimates/request": (
        {**BASE, "prompt_tokens": 2048, "output_tokens": 256},
        ("prompt_tokens", 1, 7000),
    ),
    "/v1/estimates/batch-ceiling": ({**BASE, "context_tokens": 4096}, ("context_tokens", 1, 8192)),
    "/v1/estimates/tp-feasibility": (
        {"model": "llama-3-70b", "gpu": "h100-sxm5-80gb", "context_tokens": 2048},
        ("context_tokens", 1, 8192),
    ),
    "/v1/recommendations/chunk-size": (
        {**BASE, "itl_slo_ms": 50, "decode_batch_size": 32, "decode_context_tokens": 2048},
        ("decode_context_tokens", 1, 8192),
    ),
    "/v1/roofline": (
        {"gpu": "h100-sxm5-80gb", "model": "llama-3-8b", "prompt_tokens": 2048},
        ("prompt_tokens", 1, 8192),
    ),
    "/v1/estimates/prefill-curve (5 points)": (
        {
            "model": "llama-3.1-8b",
            "gpu": "a100-sxm4-80gb",
            "chunk_tokens": 4096,
            "prompt_tokens": [1024, 10240, 51200, 102400, 131072],
        },
        ("chunk_tokens", 1, 1 << 20),
    ),
}


def curve_timing(base: str) -> tuple[float, float]:
    """Median wall time (ms) of a 1,000-point prefill curve over HTTP, and in the engine."""
    from app.engine.estimates import prefill_curve  # noqa: PLC0415
    from app.engine.step_cost import StepCostModel  # noqa: PLC0415
    from app.formats.catalog_specs import gpu_spec_from_fields, model_spec_from_fields  # noqa: PLC0415

    lengths = list(range(128, 128 * 1001, 128))
    body = {"model": "llama-3.1-8b", "gpu": "h200-sxm-141gb", "prompt_tokens": lengths}
    with httpx.Client(base_url=base, timeout=30) as client:
        http_ms = []
        for _ in range(20):
            started = time.perf_counter()
            client.post("/v1/estimates/prefill-curve", json=body).raise_for_status()
            http_ms.append((time.perf_counter() - started) * 1e3)
        model = client.get("/v1/models/llama-3.1-8b").json()
        gpu = client.get("/v1/gpus/h200-sxm-141gb").json()
    cost = StepCostModel(model_spec_from_fields(model), gpu_spec_from_fields(gpu))
    engine_ms = []
    for _ in range(20):
        started = time.perf_counter()
        prefill_curve(cost, lengths)
        engine_ms.append((time.perf_counter() - started) * 1e3)
    return statistics.median(http_ms), statistics.median(engine_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--runs", type=int, default=1, help="pairs per endpoint (median)")
    parser.add_argument("--only", default=None, help="only endpoints whose path contains this")
    parser.add_argument("--no-curve", action="store_true", help="skip the 1,000-point curve")
    args = parser.parse_args()
    load = Load(args.seconds, args.connections)
    endpoints = {k: v for k, v in ENDPOINTS.items() if args.only is None or args.only in k}

    with running_plain() as plain_base:
        plain = plain_base + "/constant"
        # Every answer computed: the response memo off, and a field drawn at random per request.
        with running_server(response_memo_entries="0") as base:
            for path, (body, _) in endpoints.items():  # warm the catalog cache and code paths
                httpx.post(base + path.split(" ")[0], json=body).raise_for_status()
            computed: list[Compared] = [
                compared(
                    f"POST {path}",
                    base + path.split(" ")[0],
                    plain,
                    load,
                    args.runs,
                    body=body,
                    vary=vary,
                )
                for path, (body, vary) in endpoints.items()
            ]
            curve = None if args.no_curve else curve_timing(base)

        # A scheduler's repeated question: the same body each time, as served by default.
        with running_server() as base:
            for path, (body, _) in endpoints.items():  # fill the catalog cache, then the memo
                for _ in range(3):
                    httpx.post(base + path.split(" ")[0], json=body).raise_for_status()
            repeated: list[Compared] = [
                compared(
                    "plain FastAPI POST, pydantic body", plain, plain, load, args.runs, body=BASE
                ),
                *(
                    compared(
                        f"POST {path}", base + path.split(" ")[0], plain, load, args.runs, body=body
                    )
                    for path, (body, _) in endpoints.items()
                ),
            ]

    print("Every answer computed (response memo off; each request's body differs):")
    print_compared(computed)
    print()
    print("The same body repeated (default settings: answered from the response memo):")
    print_compared(repeated)
    if curve is not None:
        print()
        http_ms, engine_ms = curve
        print(
            f"1,000-point prefill curve: {http_ms:.1f} ms over HTTP, {engine_ms:.1f} ms in the "
            "engine"
        )


if __name__ == "__main__":
    main()
