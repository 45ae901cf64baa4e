"""Computed estimates in process, for counting instructions an answer: after a warm-up of every
route, `n` answers of one route (its request schema, service and JSON writer; bodies as
bench_estimates.py draws them, one field random). Run it under callgrind with the route and with
`none 0`; the difference of the two `totals:` over `n` is the route's instructions an answer
(docs/performance.md). The database must be migrated and loaded (`ridgeline migrate`,
`ridgeline load-catalog`); `MEMO` overrides the kept timers' memo size.

    valgrind --tool=callgrind python scripts/count_estimates.py chunk-size 300 /tmp/r.db
"""

# ruff: noqa: E402
import os
import random
import sys

route, n, db = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# OpenBLAS's idle threads spin, and callgrind counts their spinning: one thread keeps the
# counts to this process's own work (runs of a build differed by up to 6 % without it).
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["RIDGELINE_DATABASE_URL"] = f"sqlite:///{db}"
os.environ["RIDGELINE_LOG_LEVEL"] = "WARNING"
from bench_estimates import ENDPOINTS

if os.environ.get("MEMO"):
    import app.targets.service as _ts

    _ts.PROFILED_MEMO_ENTRIES = int(os.environ["MEMO"])
from app.catalog.spec_cache import SpecCache
from app.db.session import make_engine, make_session_factory
from app.estimates import schemas, service
from app.estimates.endpoints import _written
from app.settings import get_settings

ROUTES = {
    "prefill": ("PrefillRequest", "prefill", "PrefillResponse", "/v1/estimates/prefill"),
    "decode": ("DecodeRequest", "decode", "DecodeResponse", "/v1/estimates/decode"),
    "request": ("RequestRequest", "request", "RequestResponse", "/v1/estimates/request"),
    "batch-ceiling": (
        "BatchCeilingRequest",
        "batch_ceiling",
        "BatchCeilingResponse",
        "/v1/estimates/batch-ceiling",
    ),
    "tp-feasibility": (
        "TpFeasibilityRequest",
        "tp_feasibility",
        "TpFeasibilityResponse",
        "/v1/estimates/tp-feasibility",
    ),
    "chunk-size": (
        "ChunkSizeRequest",
        "chunk_size",
        "ChunkSizeResponse",
        "/v1/recommendations/chunk-size",
    ),
    "roofline": ("RooflineRequest", "roofline_of", "RooflineResponse", "/v1/roofline"),
    "prefill-curve": (
        "PrefillCurveRequest",
        "prefill_points",
        "PrefillCurveResponse",
        "/v1/estimates/prefill-curve (5 points)",
    ),
}
settings = get_settings()
cache = SpecCache(make_session_factory(make_engine(settings.database_url)), 1e9)


def go(name: str, k: int, rng: random.Random) -> None:
    req, fn, resp, path = ROUTES[name]
    body, (field, low, high) = ENDPOINTS[path]
    request_schema, answer_schema = getattr(schemas, req), getattr(schemas, resp)
    answer = getattr(service, fn)
    for _ in range(k):
        b = request_schema.model_validate({**body, field: rng.randint(low, high)})
        _written(answer_schema, answer(cache, b.query()))


for name in ROUTES:
    go(name, 30, random.Random(7))
if route != "none":
    go(route, n, random.Random(1))
