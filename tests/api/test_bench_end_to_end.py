"""The whole validation loop on the CPU: the benchmark job measures a tiny model for real, uploads
the run to a test server through the job's own uploader, the service validates it, a catalog
entry for the CPU is made from the run's microbenchmarks, and a calibration on the run lowers
the error.

SQLite only (its own migrated database): the job's measurement is the costly part, and the
PostgreSQL paths of upload, validation and calibration run in test_benchmark_runs.py and
test_calibrations.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import httpx
import pytest
from fastapi.testclient import TestClient

from app.db.migrate import upgrade
from app.main import create_app
from app.settings import Settings
from tests.conftest import AUTH, TEST_API_KEY, reset_database

torch = pytest.importorskip("torch")

from app.bench.cli import parse_options, run  # noqa: E402 - after the importorskip

# The job's tiny CPU architecture (tests/bench/conftest.py): 2 layers, d=256, 4 query heads over
# 2 KV heads, gated FFN 512, vocabulary 1000.
TINY_HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}


@pytest.fixture
def sqlite_client(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'ridgeline.db'}"
    upgrade(url)
    reset_database(url)
    settings = Settings(database_url=url, api_keys=[TEST_API_KEY], log_level="WARNING")
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_torch_thread")
def test_job_run_uploaded_validated_and_calibrated(
    sqlite_client: TestClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = sqlite_client
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_HF_CONFIG), encoding="utf-8")
    out = tmp_path / "run.json"
    argv = [
        "--config",
        str(config),
        "--device",
        "cpu",
        "--threads",
        "1",
        "--prompt-lens",
        "16,64,256",
        "--decode-batches",
        "1,4",
        "--kv-lens",
        "64,512",
        "--repeats",
        "3",
        "--warmup",
        "1",
        "--out",
        str(out),
        "--upload",
        "http://testserver",
        "--api-key",
        TEST_API_KEY,
    ]
    # What `ridgeline-bench` (app.bench.__main__.main) runs, with the test server as transport:
    # the TestClient is httpx2's Client, the interface the job's uploader calls.
    http = cast(httpx.Client, client)
    assert run(parse_options(argv), http_client=http, progress=False) == 0
    run_id = capsys.readouterr().out.strip().splitlines()[-1]
    assert run_id.startswith("run-")

    stored = client.get(f"/v1/benchmark-runs/{run_id}").json()
    written = json.loads(out.read_text(encoding="utf-8"))
    assert {k: v for k, v in stored.items() if k not in ("id", "stored_at", "origin")} == {
        k: v for k, v in written.items() if k != "id"
    }
    measured = [p for p in stored["points"] if p["skipped"] is None]
    assert len(measured) == 3 + 2 * 2  # three prompt lengths; two batches at two contexts

    # A CPU is no catalog GPU: the run is compared with its own microbenchmarks.
    report = client.get(f"/v1/benchmark-runs/{run_id}/validation").json()
    assert report["gpu_basis"]["kind"] == "microbenchmarks"
    assert math.isfinite(report["mape_pct"])
    assert report["mape_pct"] > 0
    assert len(report["points"]) == len(measured)
    assert {phase["phase"] for phase in report["phases"]} == {"prefill", "decode"}

    # A catalog entry for this CPU from the same microbenchmarks, at 100 % with no overhead,
    # named by the device: validation resolves to it by alias and gives the same figures.
    rates = stored["microbenchmarks"]
    device = stored["environment"]["device_name"]
    entry = {
        "id": "test-cpu",
        "name": f"{device} (CPU)",
        "vendor": "cpu",
        "memory_bytes": 16 * 2**30,
        "memory_bandwidth_bytes_per_s": rates["copy_bytes_per_s"],
        "peak_flops_per_s": {"fp32": rates["matmul_flops_per_s"]},
        "interconnect": {"kind": "pcie4", "bandwidth_bytes_per_s": 64e9},
        "aliases": [device],
        "efficiency": {
            "gemm": 1.0,
            "attention": 1.0,
            "memory": 1.0,
            "overhead_ms": 0.0,
            "source": f"microbenchmarks of run {run_id}",
        },
    }
    assert client.post("/v1/gpus", json=entry, headers=AUTH).status_code == 201
    by_alias = client.get(f"/v1/benchmark-runs/{run_id}/validation").json()
    assert (by_alias["gpu_basis"]["kind"], by_alias["gpu_basis"]["gpu"]) == ("catalog", "test-cpu")
    assert by_alias["mape_pct"] == pytest.approx(report["mape_pct"], rel=1e-9)

    calibration = client.post(
        "/v1/gpus/test-cpu/calibrations", json={"run_ids": [run_id]}, headers=AUTH
    )
    assert calibration.status_code == 201, calibration.text
    fitted = calibration.json()
    assert fitted["before_mape_pct"] == pytest.approx(report["mape_pct"], rel=1e-9)
    assert fitted["after_mape_pct"] < fitted["before_mape_pct"]
    assert fitted["points"] == len(measured)
    assert fitted["warnings"] == []  # both phases measured

    after = client.get(f"/v1/benchmark-runs/{run_id}/validation").json()
    assert after["gpu_basis"]["calibration_id"] == fitted["id"]
    assert after["mape_pct"] == pytest.approx(fitted["after_mape_pct"], rel=1e-9)
    print(  # the figures for the report (pytest -s)
        f"CPU run {run_id}: MAPE {fitted['before_mape_pct']:.1f} % -> "
        f"{fitted['after_mape_pct']:.1f} %, fitted {fitted['efficiency']}"
    )
