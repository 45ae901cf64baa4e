"""Serving engines over HTTP: every route resolves `engine` the same way (one 422 for a release
Ridgeline does not model), a named engine's own scheduler runs whether or not the GPU has its
profile, the answer says what timed it, and a target's formats default to the checkpoint's on
every route alike."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import AUTH

FIXED_1K = {"p50": 1024, "p90": 1024, "p99": 1024}
FIXED_128 = {"p50": 128, "p90": 128, "p99": 128}
TARGET = {"model": "llama-3-8b", "gpu": "b200-sxm-180gb"}
UNMEASURED = "mi300x-192gb"
"""A GPU the silicon database has no tables for, nor for any GPU of its vendor: no profile of
any engine, here or on a relative (every engine's steps timed by the roofline)."""
NO_TRTLLM_HERE = dict.fromkeys(
    ("gemm", "prefill_attention", "decode_attention", "elementwise", "overhead"),
    "roofline (no trtllm@1.3.0rc23 profile for this GPU)",
)
"""`basis` of Llama-3-8B on one GPU without TensorRT-LLM tables: every op family the roofline's."""
SCALED = "h100-pcie-80gb"
"""A GPU without tables whose nearest relative with them is the H100 SXM."""
ROUTES: dict[str, dict[str, Any]] = {
    "/v1/estimates/prefill": TARGET | {"prompt_tokens": 1024},
    "/v1/estimates/decode": TARGET | {"batch_size": 8, "context_tokens": 1024},
    "/v1/simulations": TARGET
    | {
        "workload": {
            "requests_per_s": 2.0,
            "num_requests": 50,
            "prompt_tokens": FIXED_1K,
            "output_tokens": FIXED_128,
        }
    },
    "/v1/simulations/sweeps": TARGET
    | {
        "requests_per_s": [1.0, 2.0],
        "workload": {"num_requests": 50, "prompt_tokens": FIXED_1K, "output_tokens": FIXED_128},
    },
    "/v1/capacity": TARGET
    | {
        "prompt_tokens": FIXED_1K,
        "output_tokens": FIXED_128,
        "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 50},
        "probe_requests": 500,
    },
    "/v1/plans": {
        "model": "llama-3-8b",
        "traffic": {"requests_per_s": 2, "prompt_tokens": FIXED_1K, "output_tokens": FIXED_128},
        "slo": {"ttft_p99_ms": 1000, "tpot_p99_ms": 50},
        "gpus": ["b200-sxm-180gb"],
        "tp_candidates": [1],
        "probe_requests": 500,
    },
}


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    ("engine", "says"),
    [
        ("vllm@9.9", "vLLM 9.9 is newer than the newest release Ridgeline models"),
        ("trtllm@0.0.1", "TensorRT-LLM 0.0.1 predates the releases Ridgeline models"),
        ("sglang@nightly", "'nightly' is not a SGLang release"),
        ("roofline@1.0", "the roofline has no versions"),
    ],
)
def test_an_unknown_release_is_the_same_422_on_every_route(
    client: TestClient, path: str, engine: str, says: str
) -> None:
    body = copy.deepcopy(ROUTES[path]) | {"engine": engine}
    response = client.post(path, json=body, headers=AUTH)
    assert response.status_code == 422, response.text
    (error,) = response.json()["errors"]
    assert error["field"] == "engine"
    assert says in error["message"]


def test_trtllm_without_a_profile_runs_its_own_scheduler_and_says_what_timed_it(
    client: TestClient,
) -> None:
    """The MI300X has no profile: TensorRT-LLM's scheduler (2,048 sequences, 8,192 tokens, no
    chunked prefill, whole prompts beside the decodes) is simulated, the steps timed by the
    roofline, and the answer says so."""
    body = copy.deepcopy(ROUTES["/v1/simulations"]) | {"engine": "trtllm"}
    answer = client.post("/v1/simulations", json=body | {"gpu": UNMEASURED}).json()
    assert answer["target"]["engine"] == "trtllm@1.3.0rc23"  # its newest release modelled
    assert answer["target"]["basis"] == NO_TRTLLM_HERE
    assert answer["scheduler"] == {
        "max_num_seqs": 2048,
        "max_num_batched_tokens": 8192,
        "enable_chunked_prefill": False,
        "unchunked_policy": "mixed",
        "long_prefill_token_threshold": 0,
        "num_scheduler_steps": 1,
        "scheduler_recv_interval": 1,
    }
    assert any("has no trtllm@1.3.0rc23 profile" in w for w in answer["warnings"])
    # The same engine where it has profiles: the newest times it, without a warning (the
    # B200's 1.3.0rc23; the H100's only one is 1.3.0rc20).
    on_b200 = client.post("/v1/simulations", json=body).json()
    assert on_b200["target"]["engine"] == "trtllm@1.3.0rc23"
    assert on_b200["target"]["basis"]["gemm"] == "profile b200-sxm-180gb trtllm@1.3.0rc23"
    assert not any("profile" in w for w in on_b200["warnings"])
    on_h100 = client.post("/v1/simulations", json=body | {"gpu": "h100-sxm5-80gb"}).json()
    assert on_h100["target"]["engine"] == "trtllm@1.3.0rc20"
    assert on_h100["target"]["basis"]["gemm"] == "profile h100-sxm5-80gb trtllm@1.3.0rc20"
    assert not any("profile" in w for w in on_h100["warnings"])


def test_an_engine_without_tables_here_is_timed_from_the_nearest_relatives_scaled(
    client: TestClient,
) -> None:
    """The H100 PCIe has no tables; the H100 SXM (same architecture, the nearest datasheet) has
    TensorRT-LLM 1.3.0rc20's. Every route times TensorRT-LLM on the PCIe card from those,
    scaled to its datasheet, names them in `basis` and says so in `warnings`. A weight-bound
    decode step takes longer by up to the bandwidth ratio (3.35 / 2.0 TB/s = 1.675; the engine's
    own per-step cost is not scaled)."""
    scaled = "profile h100-sxm5-80gb trtllm@1.3.0rc20 scaled to h100-pcie-80gb by datasheet"
    said = "its steps are timed from h100-sxm5-80gb's"
    decode = ROUTES["/v1/estimates/decode"] | {"engine": "trtllm", "batch_size": 1}
    pcie = client.post("/v1/estimates/decode", json=decode | {"gpu": SCALED}).json()
    sxm = client.post("/v1/estimates/decode", json=decode | {"gpu": "h100-sxm5-80gb"}).json()
    assert pcie["target"]["engine"] == "trtllm@1.3.0rc20"
    assert pcie["target"]["basis"]["gemm"] == scaled
    assert pcie["target"]["basis"]["decode_attention"] == scaled
    assert any(said in w for w in pcie["warnings"])
    assert not any(said in w for w in sxm["warnings"])
    assert 1.2 < pcie["tpot_ms"] / sxm["tpot_ms"] < 1.675
    for path in ("/v1/simulations", "/v1/capacity", "/v1/plans"):
        body = copy.deepcopy(ROUTES[path]) | {"engine": "trtllm"}
        body |= {"gpus": [SCALED]} if path == "/v1/plans" else {"gpu": SCALED}
        response = client.post(path, json=body, headers=AUTH)
        assert response.status_code in (200, 201), response.text
        answer = response.json()
        if path == "/v1/plans":
            answer = answer["plans"][0]
        elif path == "/v1/simulations":
            answer = answer["target"]
        assert answer["engine"] == "trtllm@1.3.0rc20", path
        assert answer["basis"]["gemm"] == scaled, path
    simulated = client.post(
        "/v1/simulations",
        json=copy.deepcopy(ROUTES["/v1/simulations"]) | {"engine": "trtllm", "gpu": SCALED},
    ).json()
    assert any(said in w for w in simulated["warnings"])


def test_no_engine_named_says_which_engine_it_got(client: TestClient) -> None:
    h100 = client.post("/v1/estimates/decode", json=ROUTES["/v1/estimates/decode"]).json()
    assert h100["target"]["engine"] == "vllm@0.24.0"  # the B200's default profile
    mi300x = client.post(
        "/v1/estimates/decode", json=ROUTES["/v1/estimates/decode"] | {"gpu": "mi300x-192gb"}
    ).json()
    assert mi300x["target"]["engine"] == "roofline"  # no profile: Ridgeline's own scheduler
    # Swagger says the same of the field, on every request that has it.
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    described = [
        schema["properties"]["engine"]["description"]
        for schema in schemas.values()
        if "engine" in schema.get("properties", {})
        and "description" in schema["properties"]["engine"]
        and "serving engine whose behaviour" in schema["properties"]["engine"]["description"]
    ]
    assert len(described) >= 5
    for description in described:
        assert "names no engine gets vLLM's scheduler and kernels" in description
        assert "`target.engine` says so" in description


@pytest.mark.parametrize("path", ROUTES)
def test_a_release_the_gpu_has_no_profile_of_is_refused_with_those_it_has(
    client: TestClient, path: str
) -> None:
    """The B200 has vLLM 0.24.0 and TensorRT-LLM 1.3.0rc20 and rc23 tables: another release's
    step times are not measured there, so naming one is a 422 on `engine` that lists the
    releases measured (every route resolves the engine the same way); the engine alone is its
    newest, and an ideal efficiency (a roofline what-if) takes any release."""
    for engine, listed in (("vllm@0.10.0", "0.24.0"), ("trtllm@1.0.0", "1.3.0rc20, 1.3.0rc23")):
        body = copy.deepcopy(ROUTES[path]) | {"engine": engine}
        response = client.post(path, json=body, headers=AUTH)
        assert response.status_code == 422, response.text
        (error,) = response.json()["errors"]
        assert error["field"] == "engine"
        assert f"no {engine} profile" in error["message"]
        assert f"profiles are of {listed}" in error["message"]
    ideal = copy.deepcopy(ROUTES[path]) | {"engine": "vllm@0.10.0", "efficiency": "ideal"}
    assert client.post(path, json=ideal, headers=AUTH).status_code in (200, 201, 202)


def test_a_vllm_v0_release_runs_v0s_scheduler(client: TestClient) -> None:
    """vLLM 0.6 (V0 by default) prefilled whole prompts in steps of their own: 256 sequences,
    a budget of max(context, 2,048) tokens (Llama-3-8B: 8,192), chunked prefill off. (On a GPU
    without vLLM profiles: where the GPU has some, a release without one is refused.)"""
    body = copy.deepcopy(ROUTES["/v1/simulations"]) | {"engine": "vllm@0.6.0", "gpu": UNMEASURED}
    answer = client.post("/v1/simulations", json=body).json()
    assert answer["scheduler"]["max_num_seqs"] == 256
    assert answer["scheduler"]["max_num_batched_tokens"] == 8192
    assert answer["scheduler"]["enable_chunked_prefill"] is False
    assert answer["scheduler"]["unchunked_policy"] == "prefill_first"
    given = body | {"scheduler": {"max_num_seqs": 64, "num_scheduler_steps": 4}}
    answer = client.post("/v1/simulations", json=given).json()
    assert (answer["scheduler"]["max_num_seqs"], answer["scheduler"]["num_scheduler_steps"]) == (
        64,
        4,
    )


def test_formats_default_to_the_checkpoint_as_plans_do(client: TestClient) -> None:
    """DeepSeek-V3 is published in block-scaled FP8: an estimate that names no format is of that
    checkpoint (its plan's default too), not of bf16 weights it would not fit."""
    body = {"model": "deepseek-v3", "gpu": "h200-sxm-141gb", "tp": 8, "batch_size": 1}
    answer = client.post("/v1/estimates/decode", json=body | {"context_tokens": 1024}).json()
    assert (answer["target"]["weight_dtype"], answer["target"]["kv_dtype"]) == ("fp8-block", "bf16")
    given = client.post(
        "/v1/estimates/decode", json=body | {"context_tokens": 1024, "weight_dtype": "bf16"}
    ).json()
    assert given["target"]["weight_dtype"] == "bf16"
    # Weights in fp8-block take about half the bytes of bf16 ones: decode reads them each step.
    assert answer["bytes"]["weights"] == pytest.approx(given["bytes"]["weights"] / 2, rel=0.05)
    llama = client.post("/v1/estimates/decode", json=ROUTES["/v1/estimates/decode"]).json()
    assert (llama["target"]["weight_dtype"], llama["target"]["kv_dtype"]) == ("bf16", "bf16")


# Another valid value of each field every estimate request shares (`TargetRequest`).
OTHER_VALUE: dict[str, Any] = {
    "model": "llama-3-70b",
    "gpu": "h100-sxm5-80gb",
    "efficiency": "ideal",
    "engine": "sglang",
    "tp": 2,
    "pp": 2,
    "dp": 2,
    "ep": 2,
    "expert_imbalance": 1.5,
    "weight_dtype": "fp8",
    "kv_dtype": "fp8",
    "expert_dtype": "fp8",
}


def test_every_target_field_changes_the_kept_target_key() -> None:
    """The estimate routes keep a request's target by a key derived from `TargetRequest`'s
    fields: each field changes it (a field added there is keyed without a hand-kept list)."""
    from app.estimates.schemas import DecodeRequest, _KnownTarget  # noqa: PLC0415
    from app.targets.schemas import TargetRequest  # noqa: PLC0415

    assert set(OTHER_VALUE) == set(TargetRequest.model_fields), "give the new field a value"
    base = {"model": "llama-3-8b", "gpu": "b200-sxm-180gb", "batch_size": 8, "context_tokens": 64}
    key = _KnownTarget.key_of(DecodeRequest.model_validate(base))
    assert key is not None
    for name, value in OTHER_VALUE.items():
        changed = DecodeRequest.model_validate(base | {name: value})
        assert _KnownTarget.key_of(changed) != key, name
        assert changed.target_query() != DecodeRequest.model_validate(base).target_query(), name


def _trtllm_plan(client: TestClient, full: bool) -> dict[str, Any]:
    body = copy.deepcopy(ROUTES["/v1/plans"]) | {"engine": "trtllm", "gpus": [UNMEASURED]}
    params = {"detail": "full"} if full else {}
    response = client.post("/v1/plans", json=body, headers=AUTH, params=params)
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.mark.parametrize("full", [False, True])
def test_a_plan_simulates_the_engine_it_is_asked_for_and_says_so(
    client: TestClient, full: bool
) -> None:
    """TensorRT-LLM on an MI300X (no profile there or on a relative): every candidate runs its own
    scheduler (2,048 sequences, 8,192 tokens, prompts whole: its 1.0 defaults), names the
    release simulated and what timed it, and carries the warning the estimates carry."""
    answer = _trtllm_plan(client, full)
    candidates = answer["plans"] + (answer["pruned"] or [])
    assert answer["plans"], answer
    for candidate in candidates:
        assert candidate["engine"] == "trtllm@1.3.0rc23"
        assert candidate["basis"] == NO_TRTLLM_HERE
        assert any("has no trtllm@1.3.0rc23 profile" in w for w in candidate["warnings"])
        if candidate["max_num_seqs"] is not None:
            assert (candidate["max_num_seqs"], candidate["chunk_tokens"]) == (2048, 8192)
        assert set(candidate["expected_error_pct"]) == {"ttft", "tpot"}


def test_a_plan_tries_the_engines_budget_and_a_quarter_of_it(client: TestClient) -> None:
    """vLLM V1 on a B200 (180 GB): `vllm serve` runs 1,024 sequences and 8,192 tokens a step;
    the plan tries that and a quarter of the budget (2,048 tokens), both timed by the B200's
    vLLM profile. The roofline keeps its own 256 sequences with 512 and 2,048 tokens."""
    body = copy.deepcopy(ROUTES["/v1/plans"]) | {"engine": "vllm"}
    response = client.post("/v1/plans", json=body, headers=AUTH, params={"detail": "full"})
    assert response.status_code == 201, response.text
    answer = response.json()
    tried = {
        (c["max_num_seqs"], c["chunk_tokens"])
        for c in answer["plans"] + answer["pruned"]
        if c["max_num_seqs"] is not None
    }
    assert tried == {(1024, 2048), (1024, 8192)}
    best = answer["plans"][0]
    assert best["engine"] == "vllm@0.24.0"
    assert best["basis"]["gemm"].startswith("profile b200-sxm-180gb vllm@")
    roofline = client.post(
        "/v1/plans", json=body | {"engine": "roofline"}, headers=AUTH, params={"detail": "full"}
    ).json()
    tried = {
        (c["max_num_seqs"], c["chunk_tokens"])
        for c in roofline["plans"] + roofline["pruned"]
        if c["max_num_seqs"] is not None
    }
    assert tried == {(256, 512), (256, 2048)}
    given = client.post(
        "/v1/plans",
        json=body | {"chunk_tokens": [4096]},
        headers=AUTH,
        params={"detail": "full"},
    ).json()
    tried = {
        (c["max_num_seqs"], c["chunk_tokens"])
        for c in given["plans"] + given["pruned"]
        if c["max_num_seqs"] is not None
    }
    assert tried == {(1024, 4096)}  # the engine's batch cap with the chunk asked for


def test_capacity_runs_the_engines_scheduler_and_says_what_timed_it(client: TestClient) -> None:
    body = copy.deepcopy(ROUTES["/v1/capacity"]) | {"engine": "trtllm", "gpu": UNMEASURED}
    response = client.post("/v1/capacity", json=body, headers=AUTH)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["engine"] == "trtllm@1.3.0rc23"
    assert (answer["max_num_seqs"], answer["chunk_tokens"]) == (2048, 8192)
    assert answer["basis"] == NO_TRTLLM_HERE
    assert set(answer["expected_error_pct"]) == {"ttft", "tpot"}
    given = client.post(
        "/v1/capacity", json=body | {"max_num_seqs": 64, "chunk_tokens": 1024}, headers=AUTH
    ).json()
    assert (given["max_num_seqs"], given["chunk_tokens"]) == (64, 1024)


@pytest.mark.parametrize("path", ROUTES)
def test_every_answer_states_its_error_or_why_not(client: TestClient, path: str) -> None:
    """The MI300X has no profile and, on a fresh catalog, no benchmark run: every answer keys
    its metrics with null and says why, never an empty object. An ideal efficiency is a bound,
    and says that."""
    body = copy.deepcopy(ROUTES[path])
    if path == "/v1/plans":
        body["gpus"] = ["mi300x-192gb"]
    else:
        body["gpu"] = "mi300x-192gb"
    response = client.post(path, json=body, headers=AUTH)
    assert response.status_code in (200, 201), response.text
    answer = response.json()
    stated = answer["plans"][0] if path == "/v1/plans" else answer
    metrics = {"prefill"} if "prefill" in path else {"decode"} if "decode" in path else None
    assert set(stated["expected_error_pct"]) == (metrics or {"ttft", "tpot"})
    assert all(error is None for error in stated["expected_error_pct"].values())
    (why,) = [w for w in stated["warnings"] if w.startswith("expected_error_pct")]
    assert "no stored benchmark run of GPU mi300x-192gb" in why
    if path.startswith("/v1/estimates"):
        ideal = client.post(path, json=body | {"efficiency": "ideal"}).json()
        assert "lower bound" in " ".join(ideal["warnings"])


ENGINES = ["vllm", "sglang", "trtllm", "roofline"]
LLAMA_31_8B_NVFP4: dict[str, Any] = {
    # nvidia/Llama-3.1-8B-Instruct-FP4 as its quantisation config declares it (ModelOpt NVFP4
    # weights, an FP8 KV cache with scales): Llama-3.1-8B's shape, NVFP4 weights.
    "num_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_kv_heads": 8,
    "head_dim": 128,
    "intermediate_size": 14336,
    "ffn_type": "gated",
    "vocab_size": 128256,
    "max_context_tokens": 131072,
    "checkpoint_dtype": "nvfp4",
    "checkpoint_kv_dtype": "fp8",
}


def _kv_of(client: TestClient, body: dict[str, Any]) -> tuple[str, str]:
    request = {"gpu": "b200-sxm-180gb", "batch_size": 1, "context_tokens": 1024} | body
    response = client.post("/v1/estimates/decode", json=request)
    assert response.status_code == 200, response.text
    target = response.json()["target"]
    return target["weight_dtype"], target["kv_dtype"]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_kv_cache_is_16_bit_beside_fp8_weights_on_every_engine(
    client: TestClient, engine: str
) -> None:
    """`--kv-cache-dtype auto` is the model's compute dtype (vLLM's CacheConfig.cache_dtype,
    SGLang's configure_kv_cache_dtype, TensorRT-LLM's KvCacheConfig.dtype): fp8 weights do not
    make an fp8 cache. DeepSeek-V3 keeps a 70,272-byte latent a token (61 x 576 x 2), not
    35,136."""
    for weights in (None, "fp8", "fp8-block"):
        body: dict[str, Any] = {"model": "deepseek-v3", "tp": 8, "engine": engine}
        if weights is not None:
            body["weight_dtype"] = weights
        assert _kv_of(client, body) == (weights or "fp8-block", "bf16")
    llama = {"model": "llama-3.1-8b", "weight_dtype": "fp8", "engine": engine}
    assert _kv_of(client, llama) == ("fp8", "bf16")
    sixteen = {"model": "llama-3.1-8b", "weight_dtype": "fp16", "engine": engine}
    assert _kv_of(client, sixteen) == ("fp16", "fp16")
    asked = llama | {"kv_dtype": "fp8"}
    assert _kv_of(client, asked) == ("fp8", "fp8")


def test_deepseek_latent_bytes_follow_the_kv_format(client: TestClient) -> None:
    body = {
        "model": "deepseek-v3",
        "gpu": "h200-sxm-141gb",
        "tp": 8,
        "weight_dtype": "fp8",
        "batch_size": 1,
        "context_tokens": 1000,
        "engine": "vllm",
    }
    bf16 = client.post("/v1/estimates/decode", json=body).json()
    fp8 = client.post("/v1/estimates/decode", json=body | {"kv_dtype": "fp8"}).json()
    # One sequence of 1,000 tokens and the new one: each of the 8 GPUs reads the whole latent
    # (MLA's cache is not split by tp), 61 layers x 576 values a token, 2 bytes each in bf16.
    assert bf16["bytes"]["kv_cache"] == 8 * 1001 * 61 * 576 * 2 == 562_738_176
    assert fp8["bytes"]["kv_cache"] == 8 * 1001 * 61 * 576


@pytest.mark.parametrize(
    ("engine", "kv"),
    [
        ("vllm", "fp8"),  # 0.14.0 and later read the checkpoint's scheme (vllm#30785)
        # earlier: auto is the model's dtype whatever it declares (a release without a B200
        # profile: timed as an ideal what-if)
        ("vllm@0.10.0", "bf16"),
        ("sglang", "fp8"),
        ("trtllm", "fp8"),
        ("roofline", "fp8"),
    ],
)
def test_a_checkpoint_that_declares_an_fp8_cache_gets_it_where_the_engine_reads_it(
    client: TestClient, engine: str, kv: str
) -> None:
    body: dict[str, Any] = {"model": LLAMA_31_8B_NVFP4, "engine": engine}
    if engine == "vllm@0.10.0":
        body["efficiency"] = "ideal"
    assert _kv_of(client, body) == ("nvfp4", kv)
    # Serving other weights than the checkpoint's is another checkpoint: no declared scheme.
    assert _kv_of(client, body | {"weight_dtype": "bf16"}) == ("bf16", "bf16")
