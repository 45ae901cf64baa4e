"""Serving-benchmark result files: each tool's format read, replayed on the simulator at the
run's load, compared, stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.formats.serving_results import LoadMode, ServingTool, parse_serving_result
from tests.conftest import AUTH

FILES = Path(__file__).resolve().parents[1] / "fixtures" / "serving"
SAMPLES = {
    "vllm": "vllm_sample.json",
    "sglang": "sglang_sample.jsonl",
    "genai-perf": "genai_perf_sample.json",
    "aiperf": "aiperf_sample.json",
    "guidellm": "guidellm_sample.json",
}


def result_of(tool: str) -> Any:
    text = (FILES / SAMPLES[tool]).read_text()
    return text if tool == "sglang" else json.loads(text)


def body(tool: str, **changes: Any) -> dict[str, Any]:
    return {
        "tool": tool,
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm5-80gb",
        "engine": "vllm",
        "result": result_of(tool),
    } | changes


@pytest.mark.parametrize("tool", list(SAMPLES))
def test_every_tools_file_reads_to_the_same_run(tool: str) -> None:
    text = (FILES / SAMPLES[tool]).read_text()
    (measurement,) = parse_serving_result(ServingTool(tool), text)
    assert measurement.mean_prompt_tokens == pytest.approx(1000)
    assert measurement.mean_output_tokens == pytest.approx(200)
    assert 30 < (measurement.ttft_ms.p50 or 0) < 60
    assert 7 < (measurement.tpot_ms.p50 or 0) < 9
    if tool == "sglang":  # the last run appended: 4 requests/s, open loop
        assert measurement.mode is LoadMode.RATE and measurement.request_rate == 4.0
    else:
        assert measurement.mode is LoadMode.CONCURRENCY and measurement.concurrency == 8
    assert 3.5 < measurement.request_throughput < 5.0


def test_genai_perf_nanoseconds_are_read_as_milliseconds() -> None:
    data = json.loads((FILES / SAMPLES["genai-perf"]).read_text())
    for name in ("time_to_first_token", "inter_token_latency", "request_latency"):
        record = data[name]
        for key in ("avg", "p50", "p90", "p99"):
            record[key] *= 1e6
        record["unit"] = "ns"
    (ns,) = parse_serving_result(ServingTool.GENAI_PERF, json.dumps(data))
    (ms,) = parse_serving_result(
        ServingTool.GENAI_PERF, (FILES / SAMPLES["genai-perf"]).read_text()
    )
    assert ns.ttft_ms.p50 == pytest.approx(ms.ttft_ms.p50, rel=1e-12)
    assert ns.e2e_ms.mean == pytest.approx(ms.e2e_ms.mean, rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("tool", list(SAMPLES))
def test_an_upload_is_replayed_compared_and_stored(client: TestClient, tool: str) -> None:
    response = client.post("/v1/serving-runs", json=body(tool), headers=AUTH)
    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["basis"]["gemm"] == "profile h100-sxm5-80gb vllm@0.24.0"
    (comparison,) = answer["comparisons"]
    for key, error in comparison["error_pct"].items():
        measured, simulated = comparison["measured"][key], comparison["simulated"][key]
        if measured is None:
            assert error is None
        else:
            assert error == pytest.approx(100 * (simulated / measured - 1), abs=0.01)
    if comparison["mode"] == "concurrency":
        assert comparison["replayed_requests_per_s"] == pytest.approx(
            comparison["measured"]["requests_per_s"]
        )
        assert "closed loop" in comparison["note"]
        # Replayed as a closed loop: the simulated throughput is the concurrency over the
        # simulated E2E (Little's law of a closed system, within the run's start and end).
        simulated = comparison["simulated"]
        assert simulated["requests_per_s"] == pytest.approx(
            comparison["concurrency"] / (simulated["e2e_ms_mean"] / 1000), rel=0.1
        )
    else:
        assert comparison["replayed_requests_per_s"] == 4.0 and comparison["note"] is None
    # The replica keeps up with the run's own load, and its latencies are of the run's order.
    assert comparison["saturated"] is False
    assert abs(comparison["error_pct"]["tpot_ms_p50"]) < 50
    stored = client.get(response.headers["location"]).json()
    assert stored["comparisons"] == answer["comparisons"]
    listed = client.get("/v1/serving-runs", params={"gpu": "h100-sxm5-80gb"}).json()
    assert [item["id"] for item in listed["items"]] == [answer["id"]]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"result": {"completed": 0}}, "result.completed"),
        ({"result": "not json"}, "result.result"),
        ({"result": {"benchmarks": []}, "tool_": "guidellm"}, "result.benchmarks"),
        ({"tool_": "locust"}, "tool"),
        ({"gpu": "no-such-gpu"}, "gpu"),
        # Physical bounds (these were stored and replayed as measured runs).
        ({"result": result_of("vllm") | {"duration": 0}}, "result.duration"),
        ({"result": result_of("vllm") | {"duration": -12.5}}, "result.duration"),
        ({"result": result_of("vllm") | {"mean_ttft_ms": -3.0}}, "result.ttft_ms.mean"),
        ({"result": result_of("vllm") | {"request_throughput": 1e9}}, "result.request_throughput"),
    ],
)
def test_bad_uploads_are_422_naming_the_field_and_store_nothing(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    changes = dict(changes)  # parameters are shared between the database backends
    tool = changes.pop("tool_", "vllm")
    upload = body("vllm", **changes) | {"tool": tool}
    response = client.post("/v1/serving-runs", json=upload, headers=AUTH)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"] == field
    assert client.get("/v1/serving-runs").json()["items"] == []


@pytest.mark.slow
def test_a_profile_calibrated_to_serving_runs_moves_only_its_own_engine(
    client: TestClient,
) -> None:
    """Fitting the H100's vLLM profile to two runs: the replays' median TPOT within 3 % after,
    never worse than before; the fitted profile becomes the GPU's vLLM default, and an SGLang
    answer does not move."""
    runs = [
        client.post("/v1/serving-runs", json=body(tool), headers=AUTH).json()["id"]
        for tool in ("vllm", "aiperf")
    ]
    question = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm5-80gb",
        "batch_size": 8,
        "context_tokens": 1100,
    }
    before = {
        engine: client.post("/v1/estimates/decode", json=question | {"engine": engine}).json()
        for engine in ("vllm", "sglang")
    }
    response = client.post(
        "/v1/profiles/h100-sxm5-80gb-vllm-0.24.0/calibrations",
        json={"serving_run_ids": runs},
        headers=AUTH,
    )
    assert response.status_code == 201, response.text
    fit = response.json()
    assert fit["runs"] == 2 and fit["calibrated_from"] == "h100-sxm5-80gb-vllm-0.24.0"
    assert fit["after_mape_pct"]["tpot_ms_p50"] <= fit["before_mape_pct"]["tpot_ms_p50"] + 0.01
    assert fit["after_mape_pct"]["tpot_ms_p50"] < 3.0
    assert fit["profile"]["default"] is True and fit["profile"]["engine"] == "vllm"
    after = {
        engine: client.post("/v1/estimates/decode", json=question | {"engine": engine}).json()
        for engine in ("vllm", "sglang")
    }
    assert after["sglang"]["tpot_ms"] == pytest.approx(before["sglang"]["tpot_ms"], rel=1e-12)
    assert after["vllm"]["target"]["basis"]["overhead"].startswith("profile h100-sxm5-80gb")
    assert after["vllm"]["tpot_ms"] != pytest.approx(before["vllm"]["tpot_ms"], rel=1e-3)
    other_gpu = client.post(
        "/v1/profiles/a100-sxm4-80gb-vllm-0.14.0/calibrations",
        json={"serving_run_ids": runs[:1]},
        headers=AUTH,
    )
    assert other_gpu.status_code == 422
    assert other_gpu.json()["errors"][0]["field"] == "serving_run_ids.0"
