"""`POST /v1/simulations` over HTTP: open, deterministic, numbers that follow from the step model.

Expected numbers come from the engine's `StepCostModel` built in the test from the bundled
catalog entries (the calibrated H100 and Llama-3-8B), not from the simulator: a request alone on
the replica has TTFT = one prefill step and TPOT = the mean of its decode steps.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.catalog.loader import bundled_gpus, bundled_models
from app.catalog.profiles import bundled_document
from app.engine.memory import memory_plan
from app.engine.profiles import ProfiledStepCost
from app.engine.specs import Deployment
from app.engine.step_cost import StepCostModel, decode_load, prefill_load
from app.formats.catalog_specs import gpu_spec_from_fields, model_spec_from_fields
from tests.conftest import AUTH

CONSTANT_2K = {"p50": 2048, "p90": 2048, "p99": 2048}
CONSTANT_256 = {"p50": 256, "p90": 256, "p99": 256}
BODY: dict[str, Any] = {
    "model": "llama-3-8b",
    "gpu": "h100-sxm5-80gb",
    "workload": {
        "requests_per_s": 4.0,
        "num_requests": 500,
        "prompt_tokens": CONSTANT_2K,
        "output_tokens": CONSTANT_256,
    },
    "engine": "roofline",
}


def body(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(BODY) | changes


def catalog_cost(*, profiled: bool = False) -> StepCostModel:
    """The H100's roofline at its catalog efficiency (these tests ask for `engine: roofline`,
    whose step times are exact formulas); `profiled`: its default vLLM profile."""
    gpu = gpu_spec_from_fields(next(g for g in bundled_gpus() if g["id"] == "h100-sxm5-80gb"))
    model = model_spec_from_fields(next(m for m in bundled_models() if m["id"] == "llama-3-8b"))
    if profiled:
        profile = bundled_document("h100-sxm5-80gb-vllm-0.24.0").to_profile()
        return ProfiledStepCost(model, gpu, Deployment(), profile)
    return StepCostModel(model, gpu, Deployment(), gpu.efficiency)


def test_lone_requests_are_timed_by_the_gpus_default_profile(client: TestClient) -> None:
    """Without `engine` a catalog GPU's default profile times the steps, and the answer says
    so: the first token after the prefill step (vLLM adds no per-request dispatch); decode
    steps between memoised contexts are interpolated (within 0.5 % here)."""
    rows = [[100.0 * i, 1000, 50] for i in range(3)]
    request = body(workload=None, trace=rows)
    del request["engine"]
    answer = client.post("/v1/simulations", json=request).json()
    cost = catalog_cost(profiled=True)
    assert cost.request_overhead_s == 0.0
    ttft_ms = (cost.seconds(prefill_load(1000)) + cost.request_overhead_s) * 1e3
    tpot_ms = sum(cost.seconds(decode_load(1, c)) for c in range(1001, 1050)) / 49 * 1e3
    assert answer["ttft_ms"]["p50"] == pytest.approx(ttft_ms, rel=1e-9)
    assert answer["tpot_ms"]["p50"] == pytest.approx(tpot_ms, rel=5e-3)
    assert answer["target"]["engine"] == "vllm@0.24.0"
    assert answer["target"]["basis"]["gemm"] == "profile h100-sxm5-80gb vllm@0.24.0"
    roofline = client.post("/v1/simulations", json=body(workload=None, trace=rows)).json()
    assert roofline["target"]["basis"] == dict.fromkeys(
        ("gemm", "prefill_attention", "decode_attention", "elementwise", "overhead"), "roofline"
    )
    assert roofline["ttft_ms"]["p50"] != pytest.approx(answer["ttft_ms"]["p50"], rel=0.01)


def test_lone_requests_take_one_prefill_step_and_their_decode_steps(client: TestClient) -> None:
    # Five requests 100 s apart: each is served alone. 1,000 prompt tokens fit one 2,048-token
    # step; the 49 decode steps after the first token attend over 1,001 ... 1,049 tokens.
    rows = [[100.0 * i, 1000, 50] for i in range(5)]
    response = client.post("/v1/simulations", json=body(workload=None, trace=rows))
    assert response.status_code == 200, response.text
    answer = response.json()
    contract = {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "throughput_tokens_per_s"}
    assert contract | {"goodput_requests_per_s", "saturated"} <= set(answer)
    for latency in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert {"p50", "p90", "p99"} <= set(answer[latency])
    cost = catalog_cost()
    ttft_ms = cost.seconds(prefill_load(1000)) * 1e3
    tpot_ms = sum(cost.seconds(decode_load(1, c)) for c in range(1001, 1050)) / 49 * 1e3
    for key in ("p50", "p90", "p99", "max"):
        assert answer["ttft_ms"][key] == pytest.approx(ttft_ms, rel=1e-9)
        # Decode steps between memoised points are interpolated: exact for a batch-1 decode,
        # which is memory-bound and so affine in the context (to float rounding).
        assert answer["tpot_ms"][key] == pytest.approx(tpot_ms, rel=1e-9)
    assert answer["e2e_ms"]["p50"] == pytest.approx(ttft_ms + 49 * tpot_ms, rel=1e-9)
    assert answer["completed_requests"] == 5 and answer["num_requests"] == 5
    assert answer["steps"] == 5 * 50
    assert answer["saturated"] is False
    assert answer["max_running_requests"] == 1
    e2e_s = (ttft_ms + 49 * tpot_ms) / 1e3
    assert answer["makespan_s"] == pytest.approx(400 + e2e_s, rel=1e-9)
    assert answer["throughput_tokens_per_s"] == pytest.approx(250 / (400 + e2e_s), rel=1e-9)
    assert answer["target"]["gpu"] == "h100-sxm5-80gb"
    assert answer["target"]["catalog_versions"] == {"model": 1, "gpu": 1}


def test_kv_cache_follows_the_memory_plan_at_the_scheduler_settings(client: TestClient) -> None:
    scheduler = {"max_num_seqs": 128, "max_num_batched_tokens": 4096}
    response = client.post("/v1/simulations", json=body(scheduler=scheduler))
    assert response.status_code == 200, response.text
    cost = catalog_cost()
    plan = memory_plan(
        cost.model, cost.gpu, Deployment(), max_num_batched_tokens=4096, max_num_seqs=128
    )
    expected = math.floor(plan.kv_pool_bytes / plan.kv_bytes_per_token) // 16 * 16
    answer = response.json()
    assert answer["kv_capacity_tokens"] == expected
    assert answer["scheduler"]["max_num_seqs"] == 128
    assert answer["max_running_requests"] <= 128
    override = client.post("/v1/simulations", json=body(kv_capacity_tokens=50_000)).json()
    assert override["kv_capacity_tokens"] == 50_000


def test_same_seed_same_answer_and_overload_saturates(client: TestClient) -> None:
    first = client.post("/v1/simulations", json=body(seed=7)).json()
    again = client.post("/v1/simulations", json=body(seed=7)).json()
    other = client.post("/v1/simulations", json=body(seed=8)).json()
    assert first == again
    assert first["ttft_ms"] != other["ttft_ms"]
    assert first["saturated"] is False
    # A replica of this H100 completes about 20 such requests per second (the planner's bound);
    # 60 per second overload it, and the backlog grows at roughly the difference.
    overload = body()
    overload["workload"]["requests_per_s"] = 60.0
    overload["workload"]["num_requests"] = 3000
    loaded = client.post("/v1/simulations", json=overload).json()
    assert loaded["saturated"] is True
    assert loaded["requests_per_s"] < 30
    assert loaded["backlog_growth_requests_per_s"] > 25


def test_goodput_counts_requests_within_the_slos(client: TestClient) -> None:
    rows = [[100.0 * i, 1000, 50] for i in range(5)]
    cost = catalog_cost()
    ttft_ms = cost.seconds(prefill_load(1000)) * 1e3
    within = client.post(
        "/v1/simulations",
        json=body(workload=None, trace=rows, slo={"ttft_ms": ttft_ms * 1.01}),
    ).json()
    assert within["goodput_requests_per_s"] == pytest.approx(within["requests_per_s"], rel=1e-12)
    late = client.post(
        "/v1/simulations",
        json=body(workload=None, trace=rows, slo={"ttft_ms": ttft_ms * 0.99}),
    ).json()
    assert late["goodput_requests_per_s"] == 0.0


def test_a_histogram_workload_and_an_unsorted_trace(client: TestClient) -> None:
    histogram = {"edges_tokens": [100, 200, 400], "weights": [3, 1]}
    workload = dict(BODY["workload"], prompt_tokens=histogram)
    response = client.post("/v1/simulations", json=body(workload=workload))
    assert response.status_code == 200, response.text
    # Rows in any order are served in arrival order: the same answer as sorted rows.
    rows = [[2.0, 500, 10], [0.0, 700, 20], [1.0, 300, 5]]
    shuffled = client.post("/v1/simulations", json=body(workload=None, trace=rows)).json()
    ordered = client.post("/v1/simulations", json=body(workload=None, trace=sorted(rows))).json()
    assert shuffled == ordered


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workload": dict(BODY["workload"], requests_per_s=-1)}, "workload.requests_per_s"),
        # So slow that arrival times swamp step times in float64 (latencies would read 0).
        ({"workload": dict(BODY["workload"], requests_per_s=1e-300)}, "workload.requests_per_s"),
        ({"workload": None, "trace": [[1e300, 100, 10]]}, "trace.0.0"),
        # Lengths beyond the model's 8,192-token context.
        (
            {
                "workload": dict(
                    BODY["workload"], output_tokens={"edges_tokens": [100, 100_001], "weights": [1]}
                )
            },
            "workload.output_tokens.edges_tokens",
        ),
        ({"workload": None, "trace": [[0.0, 100, 10], [1.0, 9000, 10]]}, "trace"),
        # More requests than a simulation without an API key may serve.
        ({"workload": dict(BODY["workload"], num_requests=20_001)}, "workload.num_requests"),
        (
            {
                "workload": dict(
                    BODY["workload"], prompt_tokens={"p50": 500, "p90": 400, "p99": 900}
                )
            },
            "workload.prompt_tokens.p90",
        ),
        (
            {"workload": dict(BODY["workload"], prompt_tokens={"p50": 500, "p90": 600})},
            "workload.prompt_tokens",
        ),
        (
            {
                "workload": dict(
                    BODY["workload"], prompt_tokens={"p50": 9e5, "p90": 9e5, "p99": 9e5}
                )
            },
            "workload.prompt_tokens.p99",
        ),
        ({"workload": dict(BODY["workload"], num_requests=200_001)}, "workload.num_requests"),
        ({"workload": None, "trace": [[-1.0, 100, 10]]}, "trace.0.0"),
        ({"workload": None, "trace": [[0.0, 0, 10]]}, "trace.0.1"),
        ({"trace": [[0.0, 100, 10]]}, "body"),
        ({"workload": None}, "body"),
        (
            {"scheduler": {"max_num_seqs": 512, "max_num_batched_tokens": 256}},
            "scheduler.max_num_batched_tokens",
        ),
        ({"gpu": "no-such-gpu"}, "gpu"),
        ({"tp": 3}, "tp"),
        ({"seed": -1}, "seed"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/simulations", json=body(**changes))
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert field in [error["field"] for error in response.json()["errors"]]


def test_work_is_bounded_before_it_runs_and_more_with_a_key(client: TestClient) -> None:
    """200,000 requests of 8,000 decode tokens at 16 a step need at least 1e8 steps: refused
    at once, naming the field, with a key too; 20,001 short requests only without one."""
    huge = body(
        scheduler={"max_num_seqs": 16, "max_num_batched_tokens": 2048},
        workload=dict(
            BODY["workload"],
            num_requests=200_000,
            output_tokens={"p50": 8000, "p90": 8000, "p99": 8000},
        ),
    )
    started = time.perf_counter()
    response = client.post("/v1/simulations", json=huge, headers=AUTH)
    assert time.perf_counter() - started < 5.0  # refused up front, not after running
    assert response.status_code == 422, response.text
    error = response.json()["errors"][0]
    assert error["field"] == "workload.num_requests"
    assert "forward steps" in error["message"]

    many = body(
        workload=dict(
            BODY["workload"],
            requests_per_s=400.0,
            num_requests=20_001,
            prompt_tokens={"p50": 64, "p90": 64, "p99": 64},
            output_tokens={"p50": 2, "p90": 2, "p99": 2},
        )
    )
    anonymous = client.post("/v1/simulations", json=many)
    assert anonymous.status_code == 422
    assert "API key" in anonymous.json()["errors"][0]["message"]
    keyed = client.post("/v1/simulations", json=many, headers=AUTH)
    assert keyed.status_code == 200, keyed.text
    assert keyed.json()["num_requests"] == 20_001


def test_a_closed_loop_reaches_concurrency_over_e2e_plus_think(client: TestClient) -> None:
    """8 users, 0.2 s think time: the loop's throughput is 8 / (mean E2E + 0.2 s) (a closed
    system's Little's law, within the run's start and end)."""
    workload = {
        "concurrency": 8,
        "think_time_s": 0.2,
        "num_requests": 800,
        "prompt_tokens": CONSTANT_2K,
        "output_tokens": CONSTANT_256,
    }
    response = client.post("/v1/simulations", json=BODY | {"workload": workload})
    assert response.status_code == 200, response.text
    result = response.json()
    e2e_s = result["e2e_ms"]["mean"] / 1000
    assert result["requests_per_s"] == pytest.approx(8 / (e2e_s + 0.2), rel=0.02)
    assert result["max_running_requests"] <= 8
    assert not result["saturated"]


@pytest.mark.parametrize(
    "workload",
    [
        {"requests_per_s": 2.0, "concurrency": 4},
        {"num_requests": 10},
        {"requests_per_s": 2.0, "think_time_s": 1.0},
    ],
)
def test_a_workload_takes_one_kind_of_load(client: TestClient, workload: dict[str, Any]) -> None:
    body = BODY | {
        "workload": {"prompt_tokens": CONSTANT_2K, "output_tokens": CONSTANT_256, **workload}
    }
    response = client.post("/v1/simulations", json=body)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert any("closed loop" in e["message"] for e in response.json()["errors"])


def test_a_shared_system_prompt_shortens_ttft(client: TestClient) -> None:
    """2,048-token prompts of which 1,984 are a shared system prompt: at a low rate each
    request prefills 64 tokens over the cached 1,984, so TTFT falls to a fraction."""
    workload = BODY["workload"] | {"requests_per_s": 0.5, "num_requests": 50}
    cold = client.post("/v1/simulations", json=BODY | {"workload": workload}).json()
    warm = client.post(
        "/v1/simulations",
        json=BODY | {"workload": workload, "prefix_cache": {"shared_prefix_tokens": 1984}},
    ).json()
    assert warm["ttft_ms"]["p50"] < 0.3 * cold["ttft_ms"]["p50"]
    bad = client.post(
        "/v1/simulations",
        json=BODY | {"prefix_cache": {"shared_prefix_tokens": 100, "hit_rate": 0.5}},
    )
    assert bad.status_code == 422
    assert any(e["field"].startswith("prefix_cache") for e in bad.json()["errors"])


def test_speculative_decoding_pays_for_itself_only_with_a_cheap_drafter(
    client: TestClient,
) -> None:
    """Llama-3-8B drafted by Llama-2-7B (3 proposed, 2 accepted): three 7B draft steps cost
    more than the two target steps they save, so TPOT rises, and the draft's weights shrink
    the KV pool. DeepSeek-R1's own MTP layer (1 proposed, 0.85 accepted) costs one layer and
    the LM head a step, and TPOT falls. MTP on a model without MTP layers is refused."""
    workload = BODY["workload"] | {"requests_per_s": 0.5, "num_requests": 30}
    plain = client.post("/v1/simulations", json=BODY | {"workload": workload}).json()
    speculative = {
        "method": "draft",
        "draft_model": "llama-2-7b",
        "num_draft_tokens": 3,
        "mean_accepted_tokens": 2.0,
    }
    drafted = client.post(
        "/v1/simulations", json=BODY | {"workload": workload, "speculative": speculative}
    )
    assert drafted.status_code == 200, drafted.text
    result = drafted.json()
    assert result["tpot_ms"]["p50"] > plain["tpot_ms"]["p50"]
    assert result["kv_capacity_tokens"] < plain["kv_capacity_tokens"]

    deepseek = {
        "model": "deepseek-r1",
        "gpu": "h200-sxm-141gb",
        "tp": 8,
        "weight_dtype": "fp8-block",
        "workload": workload,
    }
    mtp = {"method": "mtp", "num_draft_tokens": 1, "mean_accepted_tokens": 0.85}
    alone = client.post("/v1/simulations", json=deepseek).json()
    with_mtp = client.post("/v1/simulations", json=deepseek | {"speculative": mtp}).json()
    assert with_mtp["tpot_ms"]["p50"] < 0.7 * alone["tpot_ms"]["p50"]

    refused = client.post("/v1/simulations", json=BODY | {"speculative": mtp})
    assert refused.status_code == 422
    assert any(e["field"] == "speculative.method" for e in refused.json()["errors"])


def test_a_simulation_is_drawn_on_request(client: TestClient) -> None:
    """Accept: image/svg+xml draws the queue over time and the percentiles against the SLOs;
    JSON stays the default."""
    body = BODY | {"slo": {"ttft_ms": 500, "tpot_ms": 50}}
    chart = client.post("/v1/simulations", json=body, headers={"Accept": "image/svg+xml"})
    assert chart.status_code == 200, chart.text
    assert chart.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in chart.text
    for words in ("waiting", "running", "SLO 500 ms", "SLO 50 ms", "TTFT percentiles"):
        assert words in chart.text, words
    plain = client.post("/v1/simulations", json=body)
    assert plain.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize(
    ("engine", "gpu", "seqs", "budget", "chunked"),
    [
        # vLLM V1 serve: 1,024 sequences and 8,192 tokens on >= 70 GiB GPUs but A100s.
        ("vllm", "h100-sxm5-80gb", 1024, 8192, True),
        ("vllm", "a100-sxm4-80gb", 256, 2048, True),
        # SGLang: chunked_prefill_size by memory; at least 2,048 running requests.
        ("sglang", "h100-sxm5-80gb", 2048, 8192, True),
        # TensorRT-LLM: max_num_tokens 8,192, max_batch_size 2,048, no chunked prefill.
        ("trtllm", "h100-sxm5-80gb", 2048, 8192, False),
        ("roofline", "h100-sxm5-80gb", 256, 2048, True),
    ],
)
def test_scheduler_defaults_are_the_engines(
    client: TestClient, engine: str, gpu: str, seqs: int, budget: int, chunked: bool
) -> None:
    workload = BODY["workload"] | {"num_requests": 20}
    answer = client.post(
        "/v1/simulations", json=BODY | {"engine": engine, "gpu": gpu, "workload": workload}
    )
    assert answer.status_code == 200, answer.text
    scheduler = answer.json()["scheduler"]
    assert (
        scheduler["max_num_seqs"],
        scheduler["max_num_batched_tokens"],
        scheduler["enable_chunked_prefill"],
    ) == (seqs, budget, chunked)
    # What the request gives wins.
    given = client.post(
        "/v1/simulations",
        json=BODY
        | {
            "engine": engine,
            "gpu": gpu,
            "workload": workload,
            "scheduler": {"max_num_seqs": 64, "max_num_batched_tokens": 1024},
        },
    ).json()["scheduler"]
    assert (given["max_num_seqs"], given["max_num_batched_tokens"]) == (64, 1024)


def test_a_named_dataset_is_vllms_lengths(client: TestClient) -> None:
    """`dataset: random` at vLLM's defaults is 1,024-token prompts and 128-token outputs: the
    same trace, so the same answer, as those constants given as percentiles. ShareGPT's
    outputs average the published 197.1 generated tokens (output tokens per completed request;
    2,000 draws of a spread-out length give a standard error near 2 %, so 6 % is three)."""
    workload = {"requests_per_s": 2.0, "num_requests": 300}
    named = client.post("/v1/simulations", json=body(workload=workload | {"dataset": "random"}))
    spelled = client.post(
        "/v1/simulations",
        json=body(
            workload=workload
            | {
                "prompt_tokens": {"p50": 1024, "p90": 1024, "p99": 1024},
                "output_tokens": {"dataset": "random", "mean_tokens": 128},
            }
        ),
    )
    assert named.status_code == 200, named.text
    assert named.json() == spelled.json()

    sharegpt = client.post(
        "/v1/simulations",
        json=body(workload={"requests_per_s": 2.0, "num_requests": 2000, "dataset": "sharegpt"}),
    )
    assert sharegpt.status_code == 200, sharegpt.text
    answer = sharegpt.json()
    mean_output = answer["throughput_tokens_per_s"] / answer["requests_per_s"]
    assert mean_output == pytest.approx(197.1, rel=0.06)


@pytest.mark.parametrize(
    ("workload", "field"),
    [
        # 8,000 +- 50 %: up to 12,000-token prompts, beyond Llama-3-8B's 8,192.
        (
            {"prompt_tokens": {"dataset": "random", "mean_tokens": 8000, "range_ratio": 0.5}},
            "workload.prompt_tokens.mean_tokens",
        ),
        ({"prompt_tokens": {"dataset": "sharegpt", "mean_tokens": 10}}, "workload.prompt_tokens"),
        (
            {"dataset": "sonnet", "output_tokens": {"dataset": "sonnet", "range_ratio": 0.1}},
            "workload.output_tokens",
        ),
        ({"dataset": "imagenet"}, "workload.dataset"),
    ],
)
def test_a_dataset_that_cannot_be_drawn_is_a_422(
    client: TestClient, workload: dict[str, Any], field: str
) -> None:
    base = {"requests_per_s": 2.0, "num_requests": 100, "dataset": "random"}
    answer = client.post("/v1/simulations", json=body(workload=base | workload))
    assert answer.status_code == 422, answer.text
    fields = [e["field"] for e in answer.json()["errors"]]
    assert any(f.startswith(field) for f in fields), fields


SWEEP: dict[str, Any] = {
    "model": "llama-3-8b",
    "gpu": "h100-sxm5-80gb",
    "engine": "roofline",
    "workload": {"num_requests": 300, "prompt_tokens": CONSTANT_2K, "output_tokens": CONSTANT_256},
    "slo": {"ttft_ms": 300, "tpot_ms": 20},
}


def _single(client: TestClient, **load: Any) -> dict[str, Any]:
    workload = SWEEP["workload"] | load
    answer = client.post("/v1/simulations", json=SWEEP | {"workload": workload})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_sweep_point_is_the_simulation_at_its_load(client: TestClient) -> None:
    """One seed, so the same requests at every load: each point is exactly what
    `POST /v1/simulations` answers at that rate (or that many users)."""
    rates = [2.0, 8.0, 30.0]
    sweep = client.post("/v1/simulations/sweeps", json=SWEEP | {"requests_per_s": rates})
    assert sweep.status_code == 200, sweep.text
    answer = sweep.json()
    assert answer["axis"] == "requests_per_s" and answer["saturation_requests_per_s"] is None
    assert [p["requests_per_s_offered"] for p in answer["points"]] == rates
    for point, rate in zip(answer["points"], rates, strict=True):
        alone = _single(client, requests_per_s=rate)
        for latency in ("ttft_ms", "tpot_ms", "e2e_ms"):
            assert point[latency] == pytest.approx(alone[latency], rel=1e-12)
        assert point["saturated"] == alone["saturated"]
        # Within the SLOs: p99s under 300 ms and 20 ms, and keeping up.
        within = (
            alone["ttft_ms"]["p99"] <= 300
            and alone["tpot_ms"]["p99"] <= 20
            and not alone["saturated"]
        )
        assert point["within_slo"] is within
    passing = [p["requests_per_s_offered"] for p in answer["points"] if p["within_slo"]]
    assert answer["max_load_within_slo"] == (max(passing) if passing else None)

    users = client.post("/v1/simulations/sweeps", json=SWEEP | {"concurrency": [4, 32]})
    assert users.status_code == 200, users.text
    for point, count in zip(users.json()["points"], (4, 32), strict=True):
        assert point["concurrency"] == count and point["requests_per_s_offered"] is None
        alone = _single(client, concurrency=count)
        assert point["ttft_ms"] == pytest.approx(alone["ttft_ms"], rel=1e-12)
        assert point["requests_per_s"] == pytest.approx(alone["requests_per_s"], rel=1e-12)


def test_chosen_rates_run_up_to_the_rate_that_saturates(client: TestClient) -> None:
    """Rates chosen by the search: evenly spaced from a tenth of the saturating rate up to it;
    the last point saturates (it is the search's own finding), the first keeps up, and tail
    latency does not fall as the load grows (same requests, more of them at once)."""
    answer = client.post("/v1/simulations/sweeps", json=SWEEP | {"points": 5})
    assert answer.status_code == 200, answer.text
    sweep = answer.json()
    saturation = sweep["saturation_requests_per_s"]
    rates = [p["requests_per_s_offered"] for p in sweep["points"]]
    assert rates == pytest.approx([saturation * f for f in (0.1, 0.325, 0.55, 0.775, 1.0)])
    assert sweep["points"][-1]["saturated"] and not sweep["points"][0]["saturated"]
    tails = [p["ttft_ms"]["p99"] for p in sweep["points"]]
    assert tails[-1] > tails[0]
    # Users: 1 to twice max_num_seqs (the roofline engine's 256) capped by the 300 requests.
    users = client.post(
        "/v1/simulations/sweeps", json=SWEEP | {"axis": "concurrency", "points": 4}
    ).json()
    assert [p["concurrency"] for p in users["points"]] == [1, 7, 45, 300]


def test_a_sweep_is_drawn_on_request(client: TestClient) -> None:
    chart = client.post(
        "/v1/simulations/sweeps",
        json=SWEEP | {"requests_per_s": [2.0, 8.0]},
        headers={"Accept": "image/svg+xml"},
    )
    assert chart.status_code == 200, chart.text
    assert chart.headers["content-type"].startswith("image/svg+xml")
    for words in ("TTFT p50", "TTFT p99", "TPOT p90", "SLO 300 ms", "SLO 20 ms", "requests/s"):
        assert words in chart.text, words


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"requests_per_s": [1.0], "concurrency": [2]}, "body"),
        ({"requests_per_s": [0.0]}, "requests_per_s.0"),
        ({"requests_per_s": [1.0] * 17}, "requests_per_s"),
        ({"points": 1}, "points"),
        ({"workload": SWEEP["workload"] | {"think_time_s": 1.0}}, "body"),
        ({"workload": {"num_requests": 10}}, "workload"),
    ],
)
def test_a_sweep_that_cannot_run_is_a_422_naming_the_field(
    client: TestClient, change: dict[str, Any], field: str
) -> None:
    answer = client.post("/v1/simulations/sweeps", json=SWEEP | change)
    assert answer.status_code == 422, answer.text
    assert any(e["field"] == field for e in answer.json()["errors"]), answer.json()["errors"]


def test_a_sweeps_work_is_bounded_over_all_its_points(client: TestClient) -> None:
    """Without a key one simulation may take 1,000,000 steps. 20,000 requests of 256 output
    tokens at 0.01 request/s decode alone: 255 steps each, about 5.1 million per point; refused
    before anything runs, naming the requests."""
    workload = SWEEP["workload"] | {"num_requests": 20_000}
    started = time.perf_counter()
    answer = client.post(
        "/v1/simulations/sweeps",
        json=SWEEP | {"workload": workload, "requests_per_s": [0.01, 0.02]},
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["errors"][0]["field"] == "workload.num_requests"
    assert "forward steps" in answer.json()["errors"][0]["message"]
    assert time.perf_counter() - started < 5


def test_sglangs_receive_interval_delays_first_tokens_and_other_engines_refuse_it(
    client: TestClient,
) -> None:
    """`scheduler.scheduler_recv_interval` (SGLang's --scheduler-recv-interval): 16 users of
    SGLang on an H100, 1,024/256 tokens, the scheduler looking for new requests once every 30
    decode steps (as InferenceX launches DeepSeek-R1 on B200s from 16 users): a request that
    arrives mid-batch waits up to 30 steps, about 15 on average, so the mean TTFT grows by
    several decode steps while TPOT barely moves; the answer echoes the setting. vLLM has no
    such flag (a 422 naming the field), nor does an SGLang release before 0.5.0."""
    workload = {
        "concurrency": 16,
        "num_requests": 160,
        "prompt_tokens": {"p50": 1024, "p90": 1024, "p99": 1024},
        "output_tokens": {"p50": 256, "p90": 256, "p99": 256},
    }
    request = BODY | {"engine": "sglang", "workload": workload}
    every = client.post("/v1/simulations", json=request)
    assert every.status_code == 200, every.text
    spaced = client.post(
        "/v1/simulations", json=request | {"scheduler": {"scheduler_recv_interval": 30}}
    )
    assert spaced.status_code == 200, spaced.text
    before, after = every.json(), spaced.json()
    assert before["scheduler"]["scheduler_recv_interval"] == 1
    assert after["scheduler"]["scheduler_recv_interval"] == 30
    step_ms = before["tpot_ms"]["mean"]
    # At least five steps more on average, at most the 30 of a whole interval.
    assert 5 * step_ms < after["ttft_ms"]["mean"] - before["ttft_ms"]["mean"] < 30 * step_ms
    assert after["tpot_ms"]["mean"] == pytest.approx(before["tpot_ms"]["mean"], rel=0.15)
    # (A release without tables is timed by the roofline at an ideal efficiency.)
    for other in ({"engine": "vllm"}, {"engine": "sglang@0.4.9", "efficiency": "ideal"}):
        refused = client.post(
            "/v1/simulations",
            json=request | other | {"scheduler": {"scheduler_recv_interval": 30}},
        )
        assert refused.status_code == 422, refused.text
        assert "scheduler.scheduler_recv_interval" in refused.text
