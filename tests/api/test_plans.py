"""`/v1/plans` over HTTP: the planned replica count agrees with simulations asked for separately,
plans are stored with the catalog versions they used, and bad input is a 422 naming the field.

The hand-checked case of issue 5 on the bundled catalog: Llama-3-8B on the calibrated H100 SXM5,
10 requests/s of 2,048-token prompts and 256-token outputs, TTFT p99 1 s, TPOT p99 50 ms, 20 %
headroom. The second, independent calculation is `POST /v1/simulations` at the per-replica
rates 12/k with the planner's probe settings (same seed, same number of requests, same
scheduler): the plan's k must be the smallest k whose simulation meets both objectives.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from app.web.heavy import HeavyWork
from tests.conftest import AUTH

CONSTANT_2K = {"p50": 2048, "p90": 2048, "p99": 2048}
CONSTANT_256 = {"p50": 256, "p90": 256, "p99": 256}
PROBE_REQUESTS = 1000
PLAN: dict[str, Any] = {
    "model": "llama-3-8b",
    "traffic": {"requests_per_s": 10, "prompt_tokens": CONSTANT_2K, "output_tokens": CONSTANT_256},
    "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 50},
    "gpus": ["h100-sxm5-80gb"],
    "tp_candidates": [1],
    "weight_dtypes": ["bf16"],
    "chunk_tokens": [2048],
    "probe_requests": PROBE_REQUESTS,
    "engine": "roofline",  # the hand-checked figures below are the roofline's
}
CONTRACT = {
    "gpu",
    "tp",
    "weight_dtype",
    "kv_dtype",
    "max_num_seqs",
    "chunk_tokens",
    "replicas",
    "gpus_total",
    "cost_per_hour_usd",
    "cost_per_million_output_tokens_usd",
    "predicted",
    "feasible",
    "reasons",
}


def plan_body(**changes: Any) -> dict[str, Any]:
    return copy.deepcopy(PLAN) | changes


def post_plan(client: TestClient, *, full: bool = False, **changes: Any) -> dict[str, Any]:
    """The plan's answer (201): compact, or with every candidate when `full`."""
    params = {"detail": "full"} if full else {}
    response = client.post("/v1/plans", json=plan_body(**changes), headers=AUTH, params=params)
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def meets(client: TestClient, requests_per_s: float, engine: str | None = "roofline") -> bool:
    """One replica at `requests_per_s`, simulated as the planner probes it."""
    response = client.post(
        "/v1/simulations",
        json={
            "model": "llama-3-8b",
            "gpu": "h100-sxm5-80gb",
            "engine": engine,
            "seed": 0,
            "scheduler": {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
            "workload": {
                "requests_per_s": requests_per_s,
                "num_requests": PROBE_REQUESTS,
                "prompt_tokens": CONSTANT_2K,
                "output_tokens": CONSTANT_256,
            },
        },
    )
    assert response.status_code == 200, response.text
    run = response.json()
    return not run["saturated"] and run["ttft_ms"]["p99"] <= 1000 and run["tpot_ms"]["p99"] <= 50


@pytest.mark.slow
def test_hand_checked_plan_agrees_with_separate_simulations(client: TestClient) -> None:
    answer = post_plan(client)
    best = answer["plans"][0]
    assert set(best) >= CONTRACT
    assert best["feasible"] is True and best["status"] == "planned"
    # 12 requests/s with headroom; one calibrated H100 replica sustains 9-11 of them.
    assert answer["demand_requests_per_s"] == pytest.approx(12.0, rel=1e-12)
    assert best["replicas"] == 2
    assert [meets(client, 12.0 / k) for k in (1, 2)] == [False, True]
    # The analytic bound is above what the simulation sustains, below what one replica misses.
    assert 6.0 <= best["max_requests_per_s_per_replica"] < 12.0
    assert best["max_requests_per_s_per_replica"] <= best["analytic_max_requests_per_s_per_replica"]
    assert meets(client, best["max_requests_per_s_per_replica"])
    assert not meets(client, best["failing_requests_per_s_per_replica"])

    price = client.get("/v1/gpus/h100-sxm5-80gb").json()["price_per_gpu_hour_usd"]
    assert best["gpus_total"] == 2
    assert best["cost_per_hour_usd"] == pytest.approx(2 * price, rel=1e-12)
    # Per million output tokens: 10 requests/s x 256 tokens x 3,600 s = 9.216 M tokens an hour.
    assert best["cost_per_million_output_tokens_usd"] == pytest.approx(2 * price / 9.216, rel=1e-12)
    predicted = best["predicted"]
    assert predicted["requests_per_s_per_replica"] == 5.0  # traffic / replicas, no headroom
    assert predicted["ttft_p50_ms"] <= predicted["ttft_p99_ms"] <= 1000
    assert predicted["tpot_p50_ms"] <= predicted["tpot_p99_ms"] <= 50


@pytest.mark.slow
def test_without_engine_plans_are_timed_by_each_gpus_default_profile(client: TestClient) -> None:
    """The planner probes with the same profile a simulation without `engine` uses: its
    sustained rate meets the SLOs in a separate simulation, its failing rate does not."""
    best = post_plan(client, engine=None)["plans"][0]
    roofline = post_plan(client)["plans"][0]
    assert best["max_requests_per_s_per_replica"] != pytest.approx(
        roofline["max_requests_per_s_per_replica"], rel=0.05
    )
    assert meets(client, best["max_requests_per_s_per_replica"], engine=None)
    assert not meets(client, best["failing_requests_per_s_per_replica"], engine=None)


def test_plans_are_stored_with_the_catalog_versions_they_used(client: TestClient) -> None:
    response = client.post("/v1/plans", json=plan_body(), headers=AUTH)
    assert response.status_code == 201
    created = response.json()
    location = response.headers["location"]
    assert location == f"/v1/plans/{created['id']}"
    assert created["catalog_versions"] == {
        "gpus": {"h100-sxm5-80gb": 1},
        "models": {"llama-3-8b": 1},
    }
    assert created["request"]["traffic"]["requests_per_s"] == 10
    assert created["request"]["headroom"] == 0.2  # defaults are stored too
    # The catalog moves on; the stored plan still says what it used.
    patched = client.patch(
        "/v1/gpus/h100-sxm5-80gb", json={"price_per_gpu_hour_usd": 9.99}, headers=AUTH
    )
    assert patched.status_code == 200
    stored = client.get(location)
    assert stored.status_code == 200
    assert stored.json() == created
    again = post_plan(client)
    assert again["catalog_versions"]["gpus"] == {"h100-sxm5-80gb": 2}
    assert again["plans"][0]["cost_per_hour_usd"] == pytest.approx(2 * 9.99, rel=1e-12)

    listed = client.get("/v1/plans", params={"limit": 1}, headers=AUTH).json()
    assert listed["total"] == 2 and listed["limit"] == 1
    (newest,) = listed["items"]
    assert newest["id"] == again["id"]  # newest first
    assert newest["model"] == "llama-3-8b" and newest["requests_per_s"] == 10
    assert newest["best"]["replicas"] == again["plans"][0]["replicas"]
    assert (
        client.get("/v1/plans", params={"model": "mistral-7b"}, headers=AUTH).json()["total"] == 0
    )
    missing = client.get("/v1/plans/" + "0" * 32)
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"


def test_writing_a_plan_needs_a_key(client: TestClient) -> None:
    assert client.post("/v1/plans", json=plan_body()).status_code == 401
    wrong = {"Authorization": "Bearer not-a-key-we-know"}
    assert client.post("/v1/plans", json=plan_body(), headers=wrong).status_code == 403
    assert client.get("/v1/plans", headers=AUTH).json()["total"] == 0


@pytest.mark.slow
def test_default_candidates_are_the_priced_gpus_ranked_by_cost(client: TestClient) -> None:
    answer = post_plan(client, gpus=None, max_plans=3, full=True)
    candidates = answer["plans"] + answer["pruned"]
    gpus = {c["gpu"] for c in candidates}
    priced = {
        g["id"]
        for g in client.get("/v1/gpus", params={"limit": 500}).json()["items"]
        if g["price_per_gpu_hour_usd"] is not None
    }
    assert gpus == priced
    assert "mi325x-256gb" not in gpus  # the catalog has no price for it
    planned = [c for c in answer["plans"] if c["feasible"]]
    assert len(planned) == 3
    costs = [c["cost_per_hour_usd"] for c in planned]
    assert costs == sorted(costs)
    # Feasible first, then infeasible; pruned ones could not have been cheaper.
    feasible = [c["feasible"] for c in answer["plans"]]
    assert feasible == sorted(feasible, reverse=True)
    for c in answer["pruned"]:
        assert c["status"] == "pruned" and c["reasons"]
        assert c["cost_lower_bound_per_hour_usd"] >= costs[-1] - 1e-9  # the 3rd plan's
    # A price override brings the unpriced GPU in.
    override = post_plan(
        client, gpus=None, price_overrides={"mi325x-256gb": 3.0}, max_plans=1, full=True
    )
    assert "mi325x-256gb" in {c["gpu"] for c in override["plans"] + override["pruned"]}


def test_infeasible_candidates_are_listed_with_reasons(client: TestClient) -> None:
    answer = post_plan(client, tp_candidates=[1, 3], weight_dtypes=["bf16", "fp8"], full=True)
    infeasible = [c for c in answer["plans"] if not c["feasible"]]
    reasons = {(c["tp"], c["weight_dtype"]): c["reasons"][0] for c in infeasible}
    assert "cannot be split evenly across 3 GPUs" in reasons[(3, "bf16")]
    assert all(c["replicas"] is None and c["status"] == "infeasible" for c in infeasible)
    tight = post_plan(client, slo={"ttft_p99_ms": 50, "tpot_p99_ms": 50}, full=True)
    (candidate,) = tight["plans"]
    assert candidate["feasible"] is False
    assert "unreachable even at low load" in candidate["reasons"][0]


def test_a_disaggregated_deployment_is_sized_beside(client: TestClient) -> None:
    answer = post_plan(client, disaggregated=True)
    split = answer["disaggregated"]
    best = answer["plans"][0]
    assert split["gpu"] == best["gpu"] and split["tp"] == best["tp"]
    assert split["aggregated_cost_per_hour_usd"] == best["cost_per_hour_usd"]
    total = split["prefill_replicas"] + split["decode_replicas"]
    assert split["gpus_total"] == total
    cheaper = split["cheaper"]
    if math.isclose(split["cost_per_hour_usd"], best["cost_per_hour_usd"]):
        assert cheaper == "equal"
    else:
        assert (cheaper == "disaggregated") == (
            split["cost_per_hour_usd"] < best["cost_per_hour_usd"]
        )
    assert split["verdict"].startswith(cheaper)
    assert "not modelled" in split["method"]


def test_a_disaggregated_plan_moves_kv_over_the_link_it_is_given(client: TestClient) -> None:
    # 2,048 prompt tokens x 131,072 B (Llama-3-8B bf16) = 268 MB: at 1 GB/s the transfer alone
    # takes 0.27 s, spread over 255 token gaps 1.05 ms of TPOT; at 10 MB/s 26.8 s, 105 ms of
    # TPOT, over the 50 ms objective whatever the decode pool's size.
    fast = post_plan(client, disaggregated=True, disaggregated_link={"bandwidth_bytes_per_s": 1e9})
    assert fast["disaggregated"]["decode_replicas"] is not None
    slow = post_plan(client, disaggregated=True, disaggregated_link={"bandwidth_bytes_per_s": 1e7})
    assert slow["disaggregated"]["decode_replicas"] is None
    assert slow["disaggregated"]["prefill_replicas"] == fast["disaggregated"]["prefill_replicas"]


def test_per_bucket_slos_are_reported(client: TestClient) -> None:
    slo = {
        "ttft_p99_ms": 2000,
        "tpot_p99_ms": 50,
        "ttft_p99_ms_by_prompt_tokens": [{"max_prompt_tokens": 4096, "ttft_p99_ms": 1000}],
    }
    answer = post_plan(client, slo=slo)
    (bucket,) = answer["plans"][0]["predicted"]["ttft_p99_ms_by_bucket"]
    assert bucket["max_prompt_tokens"] == 4096
    assert bucket["ttft_p99_ms"] <= 1000


def test_a_trace_is_planned(client: TestClient) -> None:
    rows = [[0.1 * i, 2048, 256] for i in range(600)]  # 10 requests/s, evenly
    traffic = {"trace": rows}
    answer = post_plan(client, traffic=traffic)
    assert answer["demand_requests_per_s"] == pytest.approx(12.0, rel=1e-9)
    assert answer["plans"][0]["feasible"] is True


def problem_fields(response: Any) -> list[str]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    return [error["field"] for error in response.json()["errors"]]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"traffic": dict(PLAN["traffic"], requests_per_s=-1)}, "traffic.requests_per_s"),
    ({"traffic": dict(PLAN["traffic"], requests_per_s=0)}, "traffic.requests_per_s"),
    ({"traffic": dict(PLAN["traffic"], requests_per_s=1e-300)}, "traffic.requests_per_s"),
    # A p99 needs 100 requests; a trace's own rate must be plannable.
    ({"traffic": {"trace": [[0.1 * i, 2048, 256] for i in range(99)]}}, "traffic.trace"),
    ({"traffic": {"trace": [[1e-300 * i, 2048, 256] for i in range(100)]}}, "traffic.trace"),
    ({"traffic": {"trace": [[0.1 * i, 9000, 256] for i in range(100)]}}, "traffic.trace"),
    (
        {
            "gpus": None,
            "tp_candidates": [1, 2, 4, 8],
            "weight_dtypes": ["bf16", "fp8", "int4", "int8"],
            "kv_dtypes": ["bf16", "fp8"],
            "max_num_seqs": [128, 256],
            "chunk_tokens": [512, 2048],
        },
        "candidates",
    ),
    ({"gpus": []}, "gpus"),
    ({"slo": {"ttft_p99_ms": 0, "tpot_p99_ms": 50}}, "slo.ttft_p99_ms"),
    ({"slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 0}}, "slo.tpot_p99_ms"),
    ({"gpus": ["mi325x-256gb"]}, "gpus.0"),  # no price in the catalog, none given
    ({"gpus": ["h100-sxm5-80gb", "no-such-gpu"]}, "gpus.1"),
    ({"price_overrides": {"no-such-gpu": 1.0}}, "price_overrides.no-such-gpu"),
    ({"price_overrides": {"h100-sxm5-80gb": -1.0}}, "price_overrides.h100-sxm5-80gb"),
    ({"tp_candidates": []}, "tp_candidates"),
    ({"tp_candidates": [0]}, "tp_candidates.0"),
    ({"chunk_tokens": [-5]}, "chunk_tokens.0"),
    ({"headroom": -0.1}, "headroom"),
    ({"model": "no-such-model"}, "model"),
    ({"weight_dtypes": ["fp64"]}, "weight_dtypes.0"),
    (
        {"traffic": dict(PLAN["traffic"], prompt_tokens={"p50": 2048, "p90": 1024, "p99": 4096})},
        "traffic.prompt_tokens.p90",
    ),
    ({"traffic": {"trace": [[-1.0, 100, 10], [1.0, 100, 10]]}}, "traffic.trace.0.0"),
    ({"traffic": {"requests_per_s": 10}}, "traffic"),
    (
        {
            "slo": {
                "ttft_p99_ms": 1000,
                "tpot_p99_ms": 50,
                "ttft_p99_ms_by_prompt_tokens": [
                    {"max_prompt_tokens": 4096, "ttft_p99_ms": 500},
                    {"max_prompt_tokens": 1024, "ttft_p99_ms": 200},
                ],
            }
        },
        "slo.ttft_p99_ms_by_prompt_tokens.1.max_prompt_tokens",
    ),
    ({"probe_requests": 10}, "probe_requests"),
    ({"unexpected": True}, "unexpected"),
]


@pytest.mark.parametrize(("changes", "field"), BAD, ids=[field for _, field in BAD])
def test_bad_input_is_a_422_naming_the_field_and_stores_nothing(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/plans", json=plan_body(**changes), headers=AUTH)
    assert field in problem_fields(response)
    assert client.get("/v1/plans", headers=AUTH).json()["total"] == 0


@pytest.mark.slow
def test_plans_serve_the_checkpoint_format_unless_asked_and_flag_quantisation(
    client: TestClient,
) -> None:
    """Without weight_dtypes a plan considers the model's own format only (bf16 for
    Llama-3-8B, fp16 for Llama-2-7B); asked for fp8 too, the fp8 candidates say they quantise
    the checkpoint, and the plan's notes say what that means."""
    default = post_plan(client, weight_dtypes=None, full=True)
    formats = {c["weight_dtype"] for c in default["plans"] + default["pruned"]}
    assert formats == {"bf16"}
    assert all(c["quantized_from"] is None for c in default["plans"])
    llama2 = post_plan(client, model="llama-2-7b", weight_dtypes=None, full=True)
    assert {c["weight_dtype"] for c in llama2["plans"] + llama2["pruned"]} == {"fp16"}
    both = post_plan(client, weight_dtypes=["bf16", "fp8"], full=True)
    by_format = {c["weight_dtype"]: c for c in both["plans"] + both["pruned"]}
    assert by_format["fp8"]["quantized_from"] == "bf16"
    assert by_format["bf16"]["quantized_from"] is None
    assert any("quantise the model's bf16 checkpoint" in note for note in both["notes"])


def test_a_plan_over_its_step_budget_is_refused_before_it_runs(client: TestClient) -> None:
    """0.05 requests/s of 256-token outputs probed with 20,000 requests: each probe decodes
    every request alone, about 5 million steps, five probes for the one plan: over the
    15 million a plan may take. Refused in well under the seconds one probe would take."""
    started = time.perf_counter()
    response = client.post(
        "/v1/plans",
        json=plan_body(
            traffic=dict(PLAN["traffic"], requests_per_s=0.05),
            probe_requests=20_000,
            max_plans=1,
        ),
        headers=AUTH,
    )
    assert time.perf_counter() - started < 5.0
    assert response.status_code == 422, response.text
    error = response.json()["errors"][0]
    assert error["field"] == "probe_requests"
    assert "known before any ran" in error["message"]


def test_a_stored_plan_is_drawn_on_request(client: TestClient) -> None:
    """GET with Accept: image/svg+xml draws the candidates' cost against predicted p99 TTFT,
    the cheapest marked and the SLO drawn; JSON stays the default."""
    created = post_plan(client, tp_candidates=[1, 2])
    location = f"/v1/plans/{created['id']}"
    chart = client.get(location, headers={"Accept": "image/svg+xml"})
    assert chart.status_code == 200, chart.text
    assert chart.headers["content-type"].startswith("image/svg+xml")
    for words in ("cheapest", "TTFT p99 SLO 1000 ms", "cost (USD per hour)"):
        assert words in chart.text, words
    assert client.get(location).headers["content-type"].startswith("application/json")
    missing = client.get("/v1/plans/" + "0" * 32, headers={"Accept": "image/svg+xml"})
    assert missing.status_code == 404


ALICE_KEY, BOB_KEY, AUDITOR_KEY, ROOT_KEY = (f"{name}-key-0123456789abcdef" for name in "abcd")


def test_plans_belong_to_their_principal_and_only_an_admin_sees_or_touches_others(
    settings: Settings, heavy_work: HeavyWork
) -> None:
    """Keys are principals with roles (`name:role:key`): a plan belongs to whoever created
    it. Listing needs a key and shows one's own plans (an admin's: everyone's); cancelling or
    deleting another's plan is a 403 but for an admin; a read-only key lists but cannot
    create; no key lists nothing (401)."""
    keys = [
        f"alice:write:{ALICE_KEY}",
        f"bob:write:{BOB_KEY}",
        f"auditor:read:{AUDITOR_KEY}",
        f"root:admin:{ROOT_KEY}",
    ]
    app = create_app(settings.model_copy(update={"api_keys": keys}), heavy_work)

    def as_(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    with TestClient(app) as client:
        made = client.post("/v1/plans", json=plan_body(), headers=as_(ALICE_KEY))
        assert made.status_code == 201, made.text
        plan_id = made.json()["id"]
        assert client.get("/v1/plans").status_code == 401
        assert client.get("/v1/plans", headers=as_(ALICE_KEY)).json()["total"] == 1
        assert client.get("/v1/plans", headers=as_(BOB_KEY)).json()["total"] == 0
        assert client.get("/v1/plans", headers=as_(ROOT_KEY)).json()["total"] == 1
        assert client.get("/v1/plans", headers=as_(AUDITOR_KEY)).json()["total"] == 0
        refused = client.post("/v1/plans", json=plan_body(), headers=as_(AUDITOR_KEY))
        assert refused.status_code == 403 and "read-only" in refused.json()["detail"]
        bobs = client.delete(f"/v1/plans/{plan_id}", headers=as_(BOB_KEY))
        assert bobs.status_code == 403 and "not bob's" in bobs.json()["detail"]
        assert client.get(f"/v1/plans/{plan_id}").status_code == 200  # still there
        assert client.delete(f"/v1/plans/{plan_id}", headers=as_(ROOT_KEY)).status_code == 204
        again = client.post("/v1/plans", json=plan_body(), headers=as_(BOB_KEY)).json()["id"]
        assert client.delete(f"/v1/plans/{again}", headers=as_(BOB_KEY)).status_code == 204
