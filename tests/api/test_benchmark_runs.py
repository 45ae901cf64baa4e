"""`/v1/benchmark-runs`: upload, read back exactly, list, validate against the engine; the bundled
reference run; `expected_error_pct` in the spec cache; malformed uploads store nothing."""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.bundled import load_bundled_catalog
from app.catalog.service import LoadOutcome
from app.catalog.spec_cache import SpecCache
from app.db.session import make_engine, make_session_factory
from app.formats.run_document import RunDocument
from app.runs.orm import BenchmarkPointRow, BenchmarkRunRow, CalibrationRow
from app.runs.service import upsert_bundled_run
from app.settings import Settings
from tests.conftest import AUTH

SEED_RUN = "ref-seed000-a100-sxm4-80gb-llama-3-8b"
# docs/model.md and app/catalog/data/efficiency.json: the A100 default's residuals on article A's
# five TTFTs, +0.2 %, +10.4 %, -3.0 %, +2.3 %, +2.4 % (MAPE 3.6 %), with the norm and activation
# kernels charged (fitted without them: -3.7 %, +6.8 %, -4.9 %, +0.9 %, +1.2 %, MAPE 3.5 %).
SEED_ERRORS_PCT = [0.2, 10.4, -3.0, 2.3, 2.4]

# The job's tiny CPU architecture: 2 layers, d=256, 4 query heads over 2 KV heads of 64, gated
# FFN of 512, vocabulary 1000. Per layer: Q and O 2*256*256, K and V 2*256*128, FFN 3*256*512,
# 589,824 parameters; 1,179,648 in 2 layers; LM head 256,000.
TINY_MODEL: dict[str, Any] = {
    "id": "tiny-llama",
    "num_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 64,
    "intermediate_size": 512,
    "ffn_type": "gated",
    "vocab_size": 1000,
    "max_context_tokens": 2048,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "moe": None,
    "mla": None,
    "sliding_window": 0,
    "window_layers": 0,
    "window_kind": "sliding",
    "attention_sinks": False,
    "mtp_layers": 0,
}
MATMUL_FLOPS_PER_S = 1e12
COPY_BYTES_PER_S = 1e11


def _point(phase: str, batch: int, tokens: int, median_ms: float | None) -> dict[str, Any]:
    measured = median_ms is not None
    return {
        "phase": phase,
        "prompt_tokens": tokens if phase == "prefill" else None,
        "batch_size": batch,
        "context_tokens": tokens if phase == "decode" else None,
        "median_ms": median_ms,
        "p10_ms": median_ms * 0.95 if median_ms else None,
        "p90_ms": median_ms * 1.1 if median_ms else None,
        "repeats": 5 if measured else 0,
        "skipped": None if measured else {"reason": "out of memory: tried to allocate 8 GiB"},
    }


def run_document(**changes: Any) -> dict[str, Any]:
    """A complete fp32 run of the tiny model on a device outside the catalog, as JSON data."""
    document: dict[str, Any] = {
        "schema_version": 1,
        "id": None,
        "created_at": "2026-11-29T08:00:00Z",
        "environment": {
            "device_name": "Test CPU 9000",
            "device_kind": "cpu",
            "torch_version": "2.13.0+cpu",
            "cuda_version": None,
            "driver_version": None,
            "host": "ci",
            "python_version": "3.11.7",
            "num_devices": 1,
        },
        "gpu": None,
        "model": copy.deepcopy(TINY_MODEL),
        "dtype": "fp32",
        "tp": 1,
        "attention_backend": "cpu",
        "provenance": {"kind": "measured-by-job", "source": "ridgeline-bench 0.1.0", "note": None},
        "points": [
            _point("prefill", 1, 512, 2.0),
            _point("decode", 1, 512, 0.1),
            _point("decode", 1, 2048, 0.125),
            _point("decode", 8, 2048, None),
        ],
        "microbenchmarks": {
            "matmul_flops_per_s": MATMUL_FLOPS_PER_S,
            "matmul_shape": [1024, 1024, 1024],
            "copy_bytes_per_s": COPY_BYTES_PER_S,
            "copy_bytes": 67108864,
        },
    }
    return document | changes


def runs_snapshot(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the runs tables, every column, to compare before and after a refusal."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            return {
                table.__tablename__: [
                    tuple(json.dumps(v, sort_keys=True, default=str) for v in row)
                    for row in connection.execute(
                        select(*table.__table__.columns).order_by(*table.__table__.primary_key)
                    )
                ]
                for table in (BenchmarkRunRow, BenchmarkPointRow, CalibrationRow)
            }
    finally:
        engine.dispose()


def upload(client: TestClient, document: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/benchmark-runs", json=document, headers=AUTH)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def _spec_cache(client: TestClient) -> SpecCache:
    cache: SpecCache = client.app.state.spec_cache  # type: ignore[attr-defined]
    return cache


# upload and read


def test_upload_stores_the_document_and_get_returns_it_exactly(client: TestClient) -> None:
    document = run_document()
    response = client.post("/v1/benchmark-runs", json=document, headers=AUTH)
    assert response.status_code == 201
    stored = response.json()
    run_id = stored["id"]
    assert run_id.startswith("run-")
    assert len(run_id) == len("run-") + 12
    assert response.headers["location"] == f"/v1/benchmark-runs/{run_id}"
    fetched = client.get(response.headers["location"])
    assert fetched.status_code == 200
    assert fetched.json() == stored
    extras = {"id", "stored_at", "origin"}
    assert {k: v for k, v in stored.items() if k not in extras} == {
        k: v for k, v in document.items() if k != "id"
    }
    assert stored["origin"] == "user"


def test_upload_needs_a_key(client: TestClient, settings: Settings) -> None:
    before = runs_snapshot(settings.database_url)
    assert client.post("/v1/benchmark-runs", json=run_document()).status_code == 401
    wrong = {"Authorization": "Bearer not-a-key"}
    assert client.post("/v1/benchmark-runs", json=run_document(), headers=wrong).status_code == 403
    assert runs_snapshot(settings.database_url) == before


def test_list_filters_by_gpu_and_model_newest_first(client: TestClient) -> None:
    first = upload(client, run_document())
    second = upload(client, run_document(gpu="h200-sxm-141gb"))
    everything = client.get("/v1/benchmark-runs").json()
    assert everything["total"] == 3  # the bundled seed run and these two
    assert [item["id"] for item in everything["items"][:2]] == [second["id"], first["id"]]
    summary = everything["items"][0]
    assert (summary["points"], summary["measured_points"]) == (4, 3)
    assert (summary["gpu"], summary["model"], summary["device_name"]) == (
        "h200-sxm-141gb",
        "tiny-llama",
        "Test CPU 9000",
    )
    by_gpu = client.get("/v1/benchmark-runs", params={"gpu": "a100-sxm4-80gb"}).json()
    assert [item["id"] for item in by_gpu["items"]] == [SEED_RUN]
    by_model = client.get("/v1/benchmark-runs", params={"model": "tiny-llama"}).json()
    assert by_model["total"] == 2
    both = client.get("/v1/benchmark-runs", params={"gpu": "h200-sxm-141gb", "model": "tiny-llama"})
    assert [item["id"] for item in both.json()["items"]] == [second["id"]]
    page = client.get("/v1/benchmark-runs", params={"limit": 1, "offset": 1}).json()
    assert [item["id"] for item in page["items"]] == [first["id"]]


def test_unknown_run_is_404(client: TestClient) -> None:
    for path in ("/v1/benchmark-runs/run-000000000000", "/v1/benchmark-runs/nope/validation"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/problem+json"


# validation


def test_seed_a100_run_validates_within_10_percent(client: TestClient) -> None:
    report = client.get(f"/v1/benchmark-runs/{SEED_RUN}/validation").json()
    basis = report["gpu_basis"]
    assert (basis["kind"], basis["gpu"], basis["calibration_id"]) == (
        "catalog",
        "a100-sxm4-80gb",
        None,
    )
    assert basis["efficiency"]["gemm"] == 0.618
    errors = [point["error_pct"] for point in report["points"]]
    assert errors == [pytest.approx(e, abs=0.06) for e in SEED_ERRORS_PCT]
    assert report["mape_pct"] < 10.0  # docs/model.md's acceptance figure
    assert report["mape_pct"] == pytest.approx(3.6, abs=0.05)
    for point in report["points"]:
        expected = (point["estimated_ms"] - point["measured_ms"]) / point["measured_ms"] * 100
        assert point["error_pct"] == pytest.approx(expected, rel=1e-12)
    assert [p["measured_ms"] for p in report["points"]] == [81, 832, 7717, 21731, 32863]
    (phase,) = report["phases"]
    assert (phase["phase"], phase["points"]) == ("prefill", 5)
    assert phase["mape_pct"] == pytest.approx(report["mape_pct"], rel=1e-12)
    assert phase["mean_error_pct"] == pytest.approx(sum(errors) / 5, rel=1e-12)
    assert report["skipped_points"] == 0


def test_run_outside_the_catalog_is_compared_with_its_microbenchmarks(client: TestClient) -> None:
    """At the measured peaks (1e12 FLOP/s, 1e11 B/s), 100 % and no overhead:
    prefill of 512 tokens is compute-bound but for the LM head's weight read:
    (2 * 1,179,648 * 512 linear + 4 * 256 * (512 * 513 / 2) * 2 attention) / 1e12
    + 256,000 * 4 B / 1e11 = 1.4769 + 0.0102 ms, plus the norms and activations; decode at
    batch 1 is memory-bound: (1,435,648 weights * 4 B + 2 * 2 * 2 * 64 * 4 B * (c + 1) KV) / 1e11
    (activations ~0.5 %), plus the same."""
    run = upload(client, run_document())
    report = client.get(f"/v1/benchmark-runs/{run['id']}/validation").json()
    basis = report["gpu_basis"]
    assert (basis["kind"], basis["gpu"]) == ("microbenchmarks", None)
    efficiency = basis["efficiency"]
    assert (efficiency["gemm"], efficiency["memory"], efficiency["overhead_ms"]) == (1, 1, 0)
    prefill_ms = (2 * 1_179_648 * 512 + 4 * 256 * (512 * 513 / 2) * 2) / 1e12 * 1e3
    prefill_ms += 256_000 * 4 / 1e11 * 1e3
    # Norms and activations: per layer two residual-add + RMSNorms and the SwiGLU, 6 kernels at
    # 3 us x 0.8 and (8 d + 3 f) fp32 elements a token per layer: 28,672 bytes a token.
    kernels_ms, elementwise_bytes = 6 * 3e-3 * 0.8, (8 * 256 + 3 * 512) * 2 * 4
    prefill_ms += kernels_ms + 512 * elementwise_bytes / 1e11 * 1e3
    weights_bytes = (1_179_648 + 256_000) * 4 + elementwise_bytes
    expected = [
        prefill_ms,
        kernels_ms + (weights_bytes + 2048 * 513) / 1e11 * 1e3,
        kernels_ms + (weights_bytes + 2048 * 2049) / 1e11 * 1e3,
    ]
    points = report["points"]
    assert [p["position"] for p in points] == [0, 1, 2]  # the skipped point is left out
    assert report["skipped_points"] == 1
    assert [p["estimated_ms"] for p in points] == [pytest.approx(e, rel=0.01) for e in expected]
    assert [p["bound"] for p in points] == ["compute", "memory", "memory"]
    measured = [2.0, 0.1, 0.125]
    errors = [(p["estimated_ms"] - m) / m * 100 for p, m in zip(points, measured, strict=True)]
    assert [p["error_pct"] for p in points] == [pytest.approx(e, rel=1e-12) for e in errors]
    assert report["mape_pct"] == pytest.approx(sum(abs(e) for e in errors) / 3, rel=1e-12)
    phases = {phase["phase"]: phase for phase in report["phases"]}
    assert phases["prefill"]["mape_pct"] == pytest.approx(abs(errors[0]), rel=1e-12)
    assert phases["decode"]["mape_pct"] == pytest.approx(
        (abs(errors[1]) + abs(errors[2])) / 2, rel=1e-12
    )
    assert phases["decode"]["rms_error_pct"] == pytest.approx(
        math.sqrt((errors[1] ** 2 + errors[2] ** 2) / 2), rel=1e-12
    )


def test_gpu_is_resolved_by_id_then_alias_then_microbenchmarks(client: TestClient) -> None:
    aliased = upload(
        client,
        run_document(
            dtype="bf16",
            environment=run_document()["environment"] | {"device_name": "NVIDIA A100-SXM4-80GB"},
        ),
    )
    basis = client.get(f"/v1/benchmark-runs/{aliased['id']}/validation").json()["gpu_basis"]
    assert (basis["kind"], basis["gpu"]) == ("catalog", "a100-sxm4-80gb")
    assert "alias" in basis["note"]

    unknown_gpu = upload(client, run_document(gpu="not-in-the-catalog"))
    basis = client.get(f"/v1/benchmark-runs/{unknown_gpu['id']}/validation").json()["gpu_basis"]
    assert basis["kind"] == "microbenchmarks"
    assert "'not-in-the-catalog' is not in the catalog" in basis["note"]


def test_run_with_nothing_to_compare_against_is_422(client: TestClient) -> None:
    published = upload(
        client,
        run_document(
            provenance={"kind": "published", "source": "a vendor's blog", "note": None},
            microbenchmarks=None,
            environment=run_document()["environment"] | {"device_name": "Mystery Accelerator"},
        ),
    )
    response = client.get(f"/v1/benchmark-runs/{published['id']}/validation")
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    (error,) = response.json()["errors"]
    assert error["field"] == "microbenchmarks"
    assert "Mystery Accelerator" in error["message"]

    parallel = upload(client, run_document(tp=2))  # stored: a catalog GPU may come later
    response = client.get(f"/v1/benchmark-runs/{parallel['id']}/validation")
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "tp"


# expected_error_pct


def test_expected_error_pct_is_the_rms_of_the_gpus_residuals(client: TestClient) -> None:
    cache = _spec_cache(client)
    expected = math.sqrt(sum(e * e for e in SEED_ERRORS_PCT) / 5)  # 4.15 % from the cited figures
    assert cache.gpu("a100-sxm4-80gb").expected_error_pct == {
        "prefill": pytest.approx(expected, abs=0.05)
    }
    assert cache.gpu("h100-sxm5-80gb").expected_error_pct == {}  # no runs


def test_an_upload_drops_the_gpus_cached_spec(client: TestClient) -> None:
    cache = _spec_cache(client)
    before = cache.gpu("a100-sxm4-80gb").expected_error_pct
    decode_only = run_document(
        gpu="a100-sxm4-80gb",
        dtype="bf16",
        points=[_point("decode", 1, 512, 0.05), _point("decode", 8, 1024, 0.08)],
    )
    run = upload(client, decode_only)
    assert cache.peek_gpu("a100-sxm4-80gb") is None  # dropped at commit
    after = cache.gpu("a100-sxm4-80gb").expected_error_pct
    assert after["prefill"] == before["prefill"]
    report = client.get(f"/v1/benchmark-runs/{run['id']}/validation").json()
    (decode,) = report["phases"]
    assert after["decode"] == pytest.approx(decode["rms_error_pct"], rel=1e-12)


def test_a_gpu_write_refreshes_its_stored_expected_error(client: TestClient) -> None:
    """The expected error is stored, not recomputed from every run when the cache fills: a
    write of the GPU's efficiency recomputes it before the write commits (halving the memory
    efficiency moves the reference run's prefill residuals, so their RMS)."""
    cache = _spec_cache(client)
    before = cache.gpu("a100-sxm4-80gb").expected_error_pct["prefill"]
    gpu = client.get("/v1/gpus/a100-sxm4-80gb").json()
    slower = dict(gpu["efficiency"], gemm=gpu["efficiency"]["gemm"] / 2)
    assert client.patch("/v1/gpus/a100-sxm4-80gb", json={"efficiency": slower}, headers=AUTH)
    after = cache.gpu("a100-sxm4-80gb").expected_error_pct["prefill"]
    assert after > 2 * before  # compute-bound prefill: twice the time, errors near +100 %


# the bundled reference runs


def test_bundled_runs_load_once_and_follow_their_file(settings: Settings) -> None:
    engine = make_engine(settings.database_url)
    try:
        with make_session_factory(engine).begin() as session:
            report = load_bundled_catalog(session)
        assert report["benchmark_runs"] == Counter({LoadOutcome.UNCHANGED: 1})
        with make_session_factory(engine).begin() as session:
            stored = session.get(BenchmarkRunRow, SEED_RUN)
            assert stored is not None
            assert stored.origin == "bundled"
            document = RunDocument.model_validate(stored.document | {"id": None})
            shorter = document.model_copy(update={"points": document.points[:2]})
            outcome = upsert_bundled_run(session, SEED_RUN, shorter, "another digest")
            assert outcome is LoadOutcome.UPDATED
        with make_session_factory(engine).begin() as session:
            stored = session.get(BenchmarkRunRow, SEED_RUN)
            assert stored is not None
            assert [p.prompt_tokens for p in stored.points] == [1024, 10240]
            assert len(stored.document["points"]) == 2
            report = load_bundled_catalog(session)  # the shipped file wins back
            assert report["benchmark_runs"] == Counter({LoadOutcome.UPDATED: 1})
            assert len(stored.points) == 5
    finally:
        engine.dispose()


# malformed uploads


def _mutated(path: str, value: Any) -> dict[str, Any]:
    document = run_document()
    target: Any = document
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if value is _DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return document


_DELETE = object()
_NAN_BODY = json.dumps(run_document()).replace('"median_ms": 2.0', '"median_ms": NaN', 1)

# (what is wrong, body, the problem's field, a fragment its message must hold)
MALFORMED: list[tuple[str, Any, str, str]] = [
    ("unknown schema version", _mutated("schema_version", 2), "schema_version", "not supported"),
    ("no schema version", _mutated("schema_version", _DELETE), "schema_version", "required"),
    ("negative median", _mutated("points.0.median_ms", -1.0), "points.0.median_ms", ""),
    ("zero p90", _mutated("points.1.p90_ms", 0), "points.1.p90_ms", ""),
    ("NaN median", _NAN_BODY.encode(), "points.0.median_ms", ""),
    ("p10 above the median", _mutated("points.0.p10_ms", 5.0), "points.0.p10_ms", "exceeds"),
    (
        "prefill without its length",
        _mutated("points.0.prompt_tokens", None),
        "points.0.prompt_tokens",
        "required",
    ),
    (
        "decode with a prompt",
        _mutated("points.1.prompt_tokens", 64),
        "points.1.prompt_tokens",
        "must be null",
    ),
    (
        "skipped point with times",
        _mutated("points.3.median_ms", 3.0),
        "points.3.median_ms",
        "must be null",
    ),
    ("zero batch", _mutated("points.0.batch_size", 0), "points.0.batch_size", ""),
    # Past a 32-bit column: it used to reach the INSERT and come back a 500.
    (
        "batch beyond int32",
        _mutated("points.0.batch_size", 2**31),
        "points.0.batch_size",
        "less than or equal",
    ),
    (
        "repeats beyond int32",
        _mutated("points.1.repeats", 10**30),
        "points.1.repeats",
        "less than or equal",
    ),
    # Beyond its String(64) column, or with a NUL: PostgreSQL refused the INSERT with a 500.
    ("gpu id too long", _mutated("gpu", "g" * 65), "gpu", "at most 64"),
    (
        "NUL in the device",
        _mutated("environment.device_name", "cpu\x00"),
        "environment.device_name",
        "NUL",
    ),
    ("unknown phase", _mutated("points.0.phase", "warmup"), "points.0.phase", ""),
    (
        "prompt beyond the model's context",
        _mutated("points.0.prompt_tokens", 4096),
        "points.0.prompt_tokens",
        "4096 exceeds",
    ),
    (
        "repeated configuration",
        _mutated("points.2.context_tokens", 512),
        "points.2",
        "repeats the configuration of points[1]",
    ),
    ("no points", _mutated("points", []), "points", ""),
    ("heads not divisible", _mutated("model.num_kv_heads", 3), "model.num_kv_heads", "divisible"),
    ("unknown dtype", _mutated("dtype", "bf17"), "dtype", ""),
    ("unknown field", _mutated("flops_per_dollar", 3), "flops_per_dollar", "unknown field"),
    ("naive timestamp", _mutated("created_at", "2026-11-29T08:00:00"), "created_at", "timezone"),
    ("a number for a date-time", _mutated("created_at", 0), "created_at", "ISO 8601"),
    # Found by a fuzzer: was a 500 (a block-scaled format taken as the run's KV format too).
    ("a weight-only format", _mutated("dtype", "mxfp4"), "dtype", "block-scaled"),
    (
        "zero matmul rate",
        _mutated("microbenchmarks.matmul_flops_per_s", 0),
        "microbenchmarks.matmul_flops_per_s",
        "",
    ),
    ("measured without rates", _mutated("microbenchmarks", None), "microbenchmarks", "required"),
    (
        "published without a source",
        _mutated("provenance", {"kind": "published", "source": None, "note": None}),
        "provenance.source",
        "must name its source",
    ),
    ("an id from the client", _mutated("id", "run-mine"), "id", "assigned by the service"),
    ("tp that does not split the heads", _mutated("tp", 3), "tp", "4 query heads"),
    (
        "a format the named GPU lacks",
        _mutated("gpu", "a100-sxm4-80gb") | {"dtype": "fp8"},
        "dtype",
        "no fp8 compute",
    ),
    ("not an object", [run_document()], "body", ""),
]


def test_malformed_uploads_get_422_naming_the_field_and_store_nothing(
    client: TestClient, settings: Settings
) -> None:
    assert len(MALFORMED) >= 10
    before = runs_snapshot(settings.database_url)
    failures = []
    for name, body, field, fragment in MALFORMED:
        if isinstance(body, bytes):
            response = client.post(
                "/v1/benchmark-runs",
                content=body,
                headers=AUTH | {"content-type": "application/json"},
            )
        else:
            response = client.post("/v1/benchmark-runs", json=body, headers=AUTH)
        problem = response.json()
        named = [
            e for e in problem.get("errors", []) if e["field"] == field and fragment in e["message"]
        ]
        if (
            response.status_code != 422
            or response.headers["content-type"] != "application/problem+json"
            or not named
        ):
            failures.append(f"{name}: {response.status_code} {problem}")
    assert failures == []
    assert runs_snapshot(settings.database_url) == before
