"""Catalog read throughput: requests/s and p50/p99 latency with 32 keep-alive clients, for
`GET /v1/gpus/{id}`, `GET /v1/gpus?limit=50` and `/healthz`, beside a bare constant endpoint.

    .venv/bin/python scripts/bench_api.py [--seconds 10]
"""

from __future__ import annotations

import argparse

from benchlib import print_table, running_server, wrk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    with running_server() as base:
        wrk("warm-up", f"{base}/v1/gpus/h100-sxm5-80gb", seconds=2)
        common = {"seconds": args.seconds, "connections": args.connections}
        bare = wrk("GET /bench/constant (bare)", f"{base}/bench/constant", **common)
        results = [
            bare,
            wrk("GET /healthz", f"{base}/healthz", **common),
            wrk("GET /v1/gpus/{id}", f"{base}/v1/gpus/h100-sxm5-80gb", **common),
            wrk("GET /v1/gpus?limit=50", f"{base}/v1/gpus?limit=50", **common),
        ]
    healthz = results[1]
    print_table(results, bare)
    print("ratio to /healthz:")
    for r in results[2:]:
        print(f"  {r.name:<40} {r.requests_per_s / healthz.requests_per_s:.2f}")


if __name__ == "__main__":
    main()
