"""Catalog reads and the middleware under load: requests/s and p50/p99 latency with 32 keep-alive
clients (wrk), each as a ratio to a plain FastAPI app's constant GET (no middleware, one async
route, the same uvicorn) measured just before it, run for run (the median of `--runs` pairs).

Targets (issue 13): `GET /v1/gpus/{id}` and `GET /v1/models/{id}` >= 0.6 of plain with p99 under
20 ms; a 50-item list page >= 0.3; the middleware (request id, metrics, access log) costs at most
15 % of `/healthz`'s throughput (Ridgeline with and without it). That cost is measured run for
run, `/healthz` with the middleware against `/healthz` without it (the median of `--runs` pairs,
each side first in turn, with a distribution-free 95 % interval of that median: 21 pairs or
more give a useful one); the figure from the two rows' ratios to the plain app is printed too,
but it carries the noise of two more runs of the plain app.

    .venv/bin/python scripts/bench_api.py [--seconds 5] [--runs 3] [--workers 1]
        [--postgres postgresql+psycopg://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import contextlib

import httpx
from benchlib import (
    API_KEY,
    Compared,
    Load,
    compared,
    median_interval,
    postgres_database,
    print_compared,
    running_plain,
    running_server,
    wrk,
)

LIST_PAGE = 50
_LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}


def fill_models(base: str, count: int) -> None:
    """Import Llama-shaped models until the catalog holds `count`, so a page of `count` is full."""
    with httpx.Client(base_url=base, headers={"X-API-Key": API_KEY}, timeout=30) as client:
        total = client.get("/v1/models", params={"limit": 1}).json()["total"]
        for n in range(max(0, count - total)):
            client.post(
                "/v1/models/hf-import", params={"id": f"bench-model-{n:03d}"}, json=_LLAMA_CONFIG
            ).raise_for_status()
        page = client.get("/v1/models", params={"limit": count}).json()
        if len(page["items"]) != count:
            raise RuntimeError(f"the model catalog holds {page['total']}, not {count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--runs", type=int, default=1, help="pairs per endpoint (median)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers of Ridgeline")
    parser.add_argument("--postgres", default=None, help="an admin URL: serve a new database")
    parser.add_argument("--only", default=None, help="only endpoints whose name contains this")
    args = parser.parse_args()
    load = Load(args.seconds, args.connections)
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(postgres_database(args.postgres)) if args.postgres else None
        plain = stack.enter_context(running_plain()) + "/constant"
        base = stack.enter_context(running_server(database_url=url, workers=args.workers))
        bare = stack.enter_context(
            running_server(factory="create_bare_ridgeline_app", database_url=url)
        )
        fill_models(base, LIST_PAGE)
        gpu = f"{base}/v1/gpus/h100-sxm5-80gb"
        etag = httpx.get(gpu).headers["etag"]
        endpoints: list[tuple[str, str, dict[str, str] | None]] = [
            ("GET /healthz", f"{base}/healthz", None),
            ("GET /healthz, Ridgeline without middleware", f"{bare}/healthz", None),
            ("GET /v1/gpus/{id}", gpu, None),
            ("GET /v1/models/{id}", f"{base}/v1/models/llama-3-8b", None),
            (f"GET /v1/models?limit={LIST_PAGE}", f"{base}/v1/models?limit={LIST_PAGE}", None),
            ("GET /v1/gpus/{id}, If-None-Match (304)", gpu, {"If-None-Match": etag}),
        ]
        endpoints = [e for e in endpoints if args.only is None or args.only in e[0]]
        for _, endpoint, headers in endpoints:  # warm caches and code paths
            wrk("warm-up", endpoint, headers=headers, seconds=1)
        rows: list[Compared] = [
            compared(name, endpoint, plain, load, args.runs, headers=headers)
            for name, endpoint, headers in endpoints
        ]
        direct = (
            compared(
                "GET /healthz, against itself without middleware",
                f"{base}/healthz",
                f"{bare}/healthz",
                load,
                args.runs,
            )
            if args.only is None or args.only in "GET /healthz"
            else None
        )
    database = "PostgreSQL" if url else "SQLite"
    print(f"Ridgeline: {args.workers} worker(s), {database}; {load.connections} connections")
    print_compared(rows)
    ratios = {row.result.name: row.ratio for row in rows}
    with_mw = ratios.get("GET /healthz")
    without = ratios.get("GET /healthz, Ridgeline without middleware")
    if with_mw is not None and without is not None:  # each against its own plain runs
        cost = 1 - with_mw / without
        print(f"middleware cost on /healthz, through the plain app's runs: {cost:.0%}")
    if direct is not None:
        mine, bare_cpu = direct.result.cpu_us_per_request, direct.plain.cpu_us_per_request
        by_cpu = f"{1 - bare_cpu / mine:.0%}" if mine and bare_cpu else "n/a"
        costs = ", ".join(f"{1 - ratio:.0%}" for ratio in reversed(direct.ratios))
        low, high = median_interval(direct.ratios)
        print(
            f"middleware cost on /healthz, run for run: {1 - direct.ratio:.0%} "
            f"(95 % interval of the median {1 - high:.0%} to {1 - low:.0%}, "
            f"{len(direct.ratios)} pairs; "
            f"by CPU {by_cpu}; {direct.plain.requests_per_s:.0f} req/s without it, "
            f"{direct.result.requests_per_s:.0f} with it; pairs {costs}) (target <= 15 %)"
        )


if __name__ == "__main__":
    main()
