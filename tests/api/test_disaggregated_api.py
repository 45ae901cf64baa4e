"""`POST /v1/simulations` with `disaggregated` (separate prefill and decode pools, the KV over a
link) and with `scheduler.num_scheduler_steps` (multi-step scheduling), over HTTP.

Expected numbers are worked by hand from the engine's `StepCostModel` built in the test from the
bundled catalog entries (Llama-3-8B on the calibrated H100, timed by the roofline: `engine:
roofline`), and from Llama-3-8B's KV format: 2 (K and V) x 32 layers x 8 KV heads x 128 head dim
x 2 bytes (bf16) = 131,072 bytes per token on one GPU at tp 1. Exact results use a relative
tolerance of 1e-9 (float rounding; decode steps of one sequence are interpolated between
memoised contexts, exact to rounding because they are affine in the context).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.engine.serving import ROOFLINE, parse_engine
from app.engine.step_cost import decode_load, prefill_load
from tests.api.test_simulations import catalog_cost

EXACT = 1e-9
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
assert KV_BYTES_PER_TOKEN == 131_072
FIXED_2K = {"p50": 2048, "p90": 2048, "p99": 2048}
FIXED_256 = {"p50": 256, "p90": 256, "p99": 256}
BODY: dict[str, Any] = {
    "model": "llama-3-8b",
    "gpu": "h100-sxm5-80gb",
    "engine": "roofline",
    "workload": {
        "requests_per_s": 4.0,
        "num_requests": 300,
        "prompt_tokens": FIXED_2K,
        "output_tokens": FIXED_256,
    },
}


def body(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(BODY) | changes


def post(client: TestClient, request: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/simulations", json=request)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


# -- Disaggregated prefill and decode --------------------------------------------------------------


@pytest.mark.parametrize(
    ("link", "bandwidth_bytes_per_s", "latency_s"),
    [
        (None, 50e9, 1e-3),  # the defaults: one 400 Gb/s port per GPU, 1 ms assumed
        ({"bandwidth_bytes_per_s": 25e9, "latency_s": 2e-3}, 25e9, 2e-3),
    ],
)
def test_each_transfer_is_latency_plus_the_prompts_kv_over_the_bandwidth(
    client: TestClient,
    link: dict[str, float] | None,
    bandwidth_bytes_per_s: float,
    latency_s: float,
) -> None:
    # Every prompt is 2,048 tokens: 2,048 x 131,072 B = 268,435,456 B, which cross in
    # latency + 268,435,456 / bandwidth: 1 ms + 5.36870912 ms = 6.36870912 ms by default,
    # 2 ms + 10.73741824 ms = 12.73741824 ms at 25 GB/s and 2 ms.
    settings: dict[str, Any] = {"prefill": {"replicas": 2}, "decode": {"replicas": 1}}
    if link is not None:
        settings["link"] = link
    answer = post(client, body(disaggregated=settings))
    pools = answer["disaggregated"]
    assert pools["kv_bytes_per_token"] == KV_BYTES_PER_TOKEN
    transfer_bytes = 2048 * KV_BYTES_PER_TOKEN
    assert transfer_bytes == 268_435_456
    transfer_ms = (latency_s + transfer_bytes / bandwidth_bytes_per_s) * 1e3
    assert transfer_ms == pytest.approx(6.36870912 if link is None else 12.73741824, rel=EXACT)
    for key in ("p50", "p90", "p99", "mean", "max"):
        assert pools["transfer_bytes"][key] == pytest.approx(transfer_bytes, rel=EXACT)
        assert pools["transfer_ms"][key] == pytest.approx(transfer_ms, rel=EXACT)
    assert pools["link"] == {"bandwidth_bytes_per_s": bandwidth_bytes_per_s, "latency_s": latency_s}
    assert (pools["prefill"]["replicas"], pools["decode"]["replicas"]) == (2, 1)
    assert pools["gpus_total"] == 3
    assert answer["completed_requests"] == 300
    # The prefill pool's requests end at their first token: one step each, alone or not.
    assert pools["prefill"]["steps"] <= 300


def test_lone_requests_pay_prefill_then_transfer_then_decode(client: TestClient) -> None:
    """Requests 100 s apart, so none waits in either pool: TTFT is one prefill step of the
    prompt (the aggregated TTFT), and the decode pool's steps are the aggregated replica's with
    the transfer in the gap before the second token: TPOT = (transfer + the T - 1 decode
    steps) / (T - 1), the aggregated TPOT plus transfer / (T - 1)."""
    rows = [[100.0 * i, 1000, 50] for i in range(4)]
    cost = catalog_cost()
    ttft_ms = cost.seconds(prefill_load(1000)) * 1e3
    decode_ms = sum(cost.seconds(decode_load(1, c)) for c in range(1001, 1050)) * 1e3
    transfer_ms = (1e-3 + 1000 * KV_BYTES_PER_TOKEN / 50e9) * 1e3
    aggregated = post(client, body(workload=None, trace=rows))
    disaggregated = post(client, body(workload=None, trace=rows, disaggregated={}))
    assert aggregated["disaggregated"] is None
    assert aggregated["ttft_ms"]["p50"] == pytest.approx(ttft_ms, rel=EXACT)
    assert aggregated["tpot_ms"]["p50"] == pytest.approx(decode_ms / 49, rel=EXACT)
    for key in ("p50", "max"):
        assert disaggregated["ttft_ms"][key] == pytest.approx(ttft_ms, rel=EXACT)
        assert disaggregated["tpot_ms"][key] == pytest.approx(
            (transfer_ms + decode_ms) / 49, rel=EXACT
        )
        assert disaggregated["e2e_ms"][key] == pytest.approx(
            ttft_ms + transfer_ms + decode_ms, rel=EXACT
        )
    # The longest token gap is the one with the transfer in it.
    assert disaggregated["itl_ms"]["max"] == pytest.approx(
        transfer_ms + cost.seconds(decode_load(1, 1001)) * 1e3, rel=EXACT
    )
    assert disaggregated["tpot_ms"]["p50"] - aggregated["tpot_ms"]["p50"] == pytest.approx(
        transfer_ms / 49, rel=1e-6
    )


def test_ttft_is_an_aggregated_run_of_the_prompts_at_the_prefill_pools_share(
    client: TestClient,
) -> None:
    """The TTFT of a disaggregated run is the prefill pool's: an aggregated replica serving
    the same prompts, each request ending at its first token, at the share of the rate one of
    the pool's k replicas sees (the arrival times times k). 400 requests at 12 per second
    with prompts of 500 to 4,000 tokens queue behind each other in a pool of two replicas."""
    rows = [[i / 12.0, 500 + (i * 733) % 3500, 64 + (i * 37) % 192] for i in range(400)]
    pools = {"prefill": {"replicas": 2}, "decode": {"replicas": 3}}
    disaggregated = post(client, body(workload=None, trace=rows, disaggregated=pools))
    prompts_only = [[2 * arrival, prompt, 1] for arrival, prompt, _ in rows]
    aggregated = post(client, body(workload=None, trace=prompts_only))
    assert aggregated["max_waiting_requests"] > 0  # the prompts do queue
    for key in ("p50", "p90", "p99", "mean", "max"):
        assert disaggregated["ttft_ms"][key] == pytest.approx(aggregated["ttft_ms"][key], rel=EXACT)
    prefill = disaggregated["disaggregated"]["prefill"]
    assert prefill["steps"] == aggregated["steps"]
    assert prefill["max_waiting_requests"] == aggregated["max_waiting_requests"]
    assert prefill["kv_capacity_tokens"] == aggregated["kv_capacity_tokens"]


def test_a_pool_takes_its_own_tp(client: TestClient) -> None:
    """A decode pool at tp 2: each of its GPUs holds half the weights, so its KV cache is
    larger and its replicas use two GPUs; the transfer is the prefill replica's (tp 1)."""
    pools = {"prefill": {"replicas": 1}, "decode": {"replicas": 2, "tp": 2}}
    answer = post(client, body(disaggregated=pools))
    used = answer["disaggregated"]
    assert (used["prefill"]["tp"], used["decode"]["tp"]) == (1, 2)
    assert (used["prefill"]["gpus_per_replica"], used["decode"]["gpus_per_replica"]) == (1, 2)
    assert used["gpus_total"] == 1 + 2 * 2
    assert used["decode"]["kv_capacity_tokens"] > 2 * used["prefill"]["kv_capacity_tokens"]
    assert used["kv_bytes_per_token"] == KV_BYTES_PER_TOKEN
    # The answer's own figures are one decode replica's.
    assert answer["target"]["tp"] == 2
    assert answer["kv_capacity_tokens"] == used["decode"]["kv_capacity_tokens"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (
            {
                "workload": dict(BODY["workload"], requests_per_s=None, concurrency=8),
                "disaggregated": {},
            },
            "workload.concurrency",
        ),
        ({"prefix_cache": {"hit_rate": 0.5}, "disaggregated": {}}, "prefix_cache"),
        (
            {
                "speculative": {
                    "method": "draft",
                    "num_draft_tokens": 3,
                    "mean_accepted_tokens": 2,
                    "draft_model": "llama-2-7b",
                },
                "disaggregated": {},
            },
            "speculative",
        ),
        ({"disaggregated": {"prefill": {"tp": 3}}}, "disaggregated.prefill.tp"),
        ({"disaggregated": {"decode": {"replicas": 0}}}, "disaggregated.decode.replicas"),
        (
            {"disaggregated": {"link": {"bandwidth_bytes_per_s": 0}}},
            "disaggregated.link.bandwidth_bytes_per_s",
        ),
        ({"disaggregated": {"link": {"latency_s": -1e-3}}}, "disaggregated.link.latency_s"),
        ({"disaggregated": {"surprise": 1}}, "disaggregated.surprise"),
        # Llama-3-70B's bf16 weights (141 GB) leave no KV cache on one 80 GB GPU.
        (
            {"model": "llama-3-70b", "tp": 4, "disaggregated": {"decode": {"tp": 1}}},
            "disaggregated.decode.tp",
        ),
    ],
)
def test_what_a_disaggregated_run_cannot_take_is_a_422_naming_the_field(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/simulations", json=body(**changes))
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert field in [error["field"] for error in response.json()["errors"]]


# -- Multi-step scheduling -------------------------------------------------------------------------


def test_multi_step_scheduling_delays_a_first_token_to_the_end_of_the_step_group(
    client: TestClient,
) -> None:
    """vLLM V0's --num-scheduler-steps 4: the scheduler decides before decode steps 0, 4, 8, ...
    A (1,000-token prompt, 20 tokens) prefills alone; B (500-token prompt, 2 tokens) arrives
    halfway through A's first decode step (decode step 0). Deciding every step, B's prefill
    joins A's decode step 1; with groups of four it waits for decode step 4: TTFT(B) grows by
    A's lone decode steps 1 to 3 (contexts 1,002 to 1,004) plus the difference between the
    step B prefills in (A's decode at 1,005 rather than 1,002 tokens). A's TTFT is unchanged,
    so the mean TTFT of the two grows by half of that."""
    cost = catalog_cost()

    def decode_s(context: int) -> float:
        return cost.seconds(decode_load(1, context))

    def mixed_s(context: int) -> float:
        return cost.seconds(prefill_load(500) + decode_load(1, context))

    t1 = cost.seconds(prefill_load(1000))
    arrival_b = t1 + 0.5 * decode_s(1001)
    rows = [[0.0, 1000, 20], [arrival_b, 500, 2]]
    every = post(client, body(workload=None, trace=rows))
    grouped = post(client, body(workload=None, trace=rows, scheduler={"num_scheduler_steps": 4}))
    assert grouped["scheduler"]["num_scheduler_steps"] == 4
    assert every["scheduler"]["num_scheduler_steps"] == 1
    ttft_b_every = t1 + decode_s(1001) + mixed_s(1002) - arrival_b
    ttft_b_grouped = t1 + sum(decode_s(c) for c in range(1001, 1005)) + mixed_s(1005) - arrival_b
    shift_ms = (ttft_b_grouped - ttft_b_every) * 1e3
    assert every["ttft_ms"]["mean"] == pytest.approx((t1 + ttft_b_every) / 2 * 1e3, rel=EXACT)
    assert grouped["ttft_ms"]["mean"] == pytest.approx((t1 + ttft_b_grouped) / 2 * 1e3, rel=EXACT)
    assert grouped["ttft_ms"]["mean"] - every["ttft_ms"]["mean"] == pytest.approx(
        shift_ms / 2, rel=1e-6
    )


@pytest.mark.parametrize("engine", ["vllm", "vllm@0.24.0", "sglang@0.5.14", "trtllm"])
def test_multi_step_is_a_422_where_the_engine_version_has_none(
    client: TestClient, engine: str
) -> None:
    request = body(engine=engine, scheduler={"num_scheduler_steps": 8})
    response = client.post("/v1/simulations", json=request)
    assert response.status_code == 422, response.text
    (error,) = response.json()["errors"]
    assert error["field"] == "scheduler.num_scheduler_steps"
    assert "no multi-step scheduling" in error["message"]
    # One step per decision is every engine's default, and allowed.
    request["scheduler"] = {"num_scheduler_steps": 1}
    assert client.post("/v1/simulations", json=request).status_code == 200


def test_num_scheduler_steps_is_at_least_one(client: TestClient) -> None:
    response = client.post("/v1/simulations", json=body(scheduler={"num_scheduler_steps": 0}))
    assert response.status_code == 422
    assert "scheduler.num_scheduler_steps" in [e["field"] for e in response.json()["errors"]]


@pytest.mark.parametrize(
    ("engine", "allowed"),
    [
        ("roofline", True),
        ("vllm@0.6.0", True),  # multi-step's first release (vllm-project/vllm#7000)
        ("vllm@0.8.5.post1", True),  # V1 by default, V0 when the flag is given
        ("vllm@0.10.0", True),  # the last before vllm-project/vllm#22138 removed it
        ("vllm@0.10.1", False),
        ("vllm@0.24.0", False),
        ("vllm@0.5.4", False),
        ("vllm", False),  # no version: the newest, V1
        ("sglang@0.5.14", False),
        ("trtllm@1.3.0rc20", False),
    ],
)
def test_which_engine_versions_have_multi_step_scheduling(engine: str, allowed: bool) -> None:
    named = parse_engine(engine).resolved()
    assert (named.policy.multi_step_refusal(named.version) is None) == allowed
    assert ROOFLINE.policy.multi_step_refusal(None) is None
