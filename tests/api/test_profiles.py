"""Profiles over HTTP: the bundled ones listed per GPU, the `engine` a request names and the
`basis` every answer reports, uploads, and the bundled tables against their source."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # the profiles extra, in the dev lock
import pytest
from fastapi.testclient import TestClient

from app.catalog.profiles import bundled_document, bundled_refs
from app.engine.dtypes import DType
from app.engine.profiles.profile import ELEMENTWISE_BASIS, Profile
from app.formats.profile_document import ProfileDocument
from app.profiles.aiconfigurator import SYSTEMS, systems_dir
from app.profiles.bundled import bundled_versions, write_bundled_profile
from tests.conftest import AUTH

PREFILL = {"model": "llama-3-8b", "gpu": "h100-sxm5-80gb", "prompt_tokens": 2048}
H100 = "h100-sxm5-80gb"


def upload(gpu: str = "l4-24gb", **changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = copy.deepcopy(ProfileDocument.model_json_schema()["examples"][0])
    document |= {"gpu": gpu, "id": f"{gpu}-vllm-0.11.0", "version": "0.11.0"}
    document |= changes
    return document


def test_a_gpu_lists_its_bundled_profiles_with_their_sources(client: TestClient) -> None:
    answer = client.get(f"/v1/gpus/{H100}/profiles").json()
    by_engine = {item["engine"]: item for item in answer["items"]}
    assert set(by_engine) == {"vllm", "sglang", "trtllm"}
    assert [item["default"] for item in answer["items"]].count(True) == 1
    assert by_engine["vllm"]["default"] is True
    assert "aiconfigurator-core 0.12.0" in by_engine["vllm"]["source"]["title"]
    assert 0.5 < by_engine["vllm"]["fitted"]["gemm"] < 1.0
    assert client.get("/v1/gpus/nope/profiles").status_code == 404
    whole = client.get(f"/v1/profiles/{by_engine['vllm']['id']}").json()
    assert whole["document"]["gemm"][0]["dtype"] == "bf16"


def test_every_engine_and_version_the_silicon_data_has_is_bundled(client: TestClient) -> None:
    """The B200: vLLM 0.24.0 (its default), SGLang 0.5.14 and TensorRT-LLM 1.3.0rc20 and
    rc23, each with the data's date (aiconfigurator-core 0.12.0, published 2026-09-18)."""
    items = client.get("/v1/gpus/b200-sxm-180gb/profiles").json()["items"]
    listed = {(item["engine"], item["version"]): item for item in items}
    assert set(listed) == {
        ("vllm", "0.24.0"),
        ("sglang", "0.5.14"),
        ("trtllm", "1.3.0rc20"),
        ("trtllm", "1.3.0rc23"),
    }
    assert [item["default"] for item in items].count(True) == 1
    assert listed[("vllm", "0.24.0")]["default"] is True
    assert {item["source"]["published"] for item in items} == {"2026-09-18"}
    # Every catalog GPU's system, engine and version in the installed database is bundled,
    # except SGLang 0.5.6.post2 on the H100, whose attention the database does not hold.
    bundled = {(ref.gpu, ref.engine, ref.version) for ref in bundled_refs()}
    found = {(SYSTEMS[system], engine, version) for system, engine, version in bundled_versions()}
    assert found - bundled == {("h100-sxm5-80gb", "sglang", "0.5.6.post2")}
    assert bundled <= found
    assert len(bundled) == 31


def test_a_bundled_profile_is_rebuilt_byte_for_byte_from_the_pinned_package(
    tmp_path: Path,
) -> None:
    """`ridgeline import-profiles aiconfigurator --all` wrote the bundled files: one rebuilt
    from the installed aiconfigurator-core is the same bytes (no date or path inside)."""
    written = write_bundled_profile("b200_sxm", "trtllm", version="1.3.0rc23", out=tmp_path)
    bundled = Path(__file__).parents[2] / "app/catalog/data/profiles" / written.name
    assert written.read_bytes() == bundled.read_bytes()


@pytest.mark.parametrize(
    ("engine", "label"),
    [
        (None, "vllm@0.24.0"),
        ("vllm", "vllm@0.24.0"),
        ("sglang", "sglang@0.5.14"),
        ("trtllm@1.3.0rc20", "trtllm@1.3.0rc20"),
    ],
)
def test_the_engine_chooses_the_profile_and_the_answer_says_so(
    client: TestClient, engine: str | None, label: str
) -> None:
    body = PREFILL | ({"engine": engine} if engine else {})
    answer = client.post("/v1/estimates/prefill", json=body).json()
    assert answer["target"]["engine"] == label
    assert answer["target"]["basis"]["gemm"] == f"profile {H100} {label}"
    assert answer["target"]["basis"]["overhead"] == f"profile {H100} {label}"
    assert set(answer["expected_error_pct"]) == {"prefill"}
    assert 0 < answer["expected_error_pct"]["prefill"] < 30


def _every_family(label: str) -> dict[str, str]:
    """`basis` of a dense model on one GPU that one thing times: each of its op families (the
    norms and activations, which no table measures, by the memory-op model under a profile)."""
    families = ("gemm", "prefill_attention", "decode_attention", "overhead")
    elementwise = label if label.startswith("roofline") else ELEMENTWISE_BASIS
    return dict.fromkeys(families, label) | {"elementwise": elementwise}


def test_roofline_ideal_and_explicit_efficiencies_are_the_roofline(client: TestClient) -> None:
    for extra, engine in (
        ({"engine": "roofline"}, "roofline"),
        ({"efficiency": "ideal"}, "vllm@0.24.0"),  # the H100's default engine, not timed by it
        ({"engine": "sglang", "efficiency": "ideal"}, "sglang@0.5.14"),
    ):
        answer = client.post("/v1/estimates/prefill", json=PREFILL | extra).json()
        assert answer["target"]["engine"] == engine
        assert answer["target"]["basis"] == _every_family("roofline")
        # No engine warning: only why no error is stated (no run of the H100 validates the
        # roofline; an ideal efficiency is a bound), and for an ideal one why it states no
        # interval either.
        why, *interval = answer["warnings"]
        assert why.startswith("expected_error_pct prefill is null")
        assert answer["expected_error_pct"] == {"prefill": None}
        ideal = "efficiency" in extra
        assert (answer["error_interval_pct"]["prefill"] is None) == ideal
        assert [w.startswith("error_interval_pct prefill is null") for w in interval] == (
            [True] if ideal else []
        )


def test_an_engine_without_a_profile_here_or_on_a_relative_is_timed_by_the_roofline(
    client: TestClient,
) -> None:
    # No vLLM profile on the MI300X nor on any GPU of its vendor: the newest release's
    # behaviour, timed by the roofline, warned.
    amd = {"gpu": "mi300x-192gb", "engine": "vllm"}
    mi300x = client.post("/v1/estimates/prefill", json=PREFILL | amd)
    assert mi300x.status_code == 200
    assert mi300x.json()["target"]["engine"] == "vllm@0.26.0"
    assert mi300x.json()["target"]["basis"] == _every_family(
        "roofline (no vllm@0.26.0 profile for this GPU)"
    )
    assert "GPU mi300x-192gb has no vllm@0.26.0 profile" in mi300x.json()["warnings"][0]
    # The L4 has none either, but its relative the L40S (Ada, the nearest datasheet) has: its
    # tables, scaled, time it.
    l4 = client.post("/v1/estimates/prefill", json=PREFILL | {"gpu": "l4-24gb", "engine": "vllm"})
    assert l4.status_code == 200
    assert l4.json()["target"]["engine"] == "vllm@0.24.0"
    assert l4.json()["target"]["basis"]["gemm"] == (
        "profile l40s-48gb vllm@0.24.0 scaled to l4-24gb by datasheet"
    )
    assert any("timed from l40s-48gb's" in w for w in l4.json()["warnings"])
    # A release the H100 has no profile of, where it has others of the engine: a 422 on
    # `engine` naming those it has (another release's kernels are not that release's).
    old = client.post("/v1/estimates/prefill", json=PREFILL | {"engine": "vllm@0.1.0"})
    assert old.status_code == 422
    assert old.json()["errors"][0]["field"] == "engine"
    assert "profiles are of 0.24.0" in old.json()["errors"][0]["message"]
    # A release Ridgeline does not model, and an engine it does not know: 422s naming `engine`.
    for engine, says in (("vllm@9.9", "newer than the newest"), ("tgi", "pattern")):
        bad = client.post("/v1/estimates/prefill", json=PREFILL | {"engine": engine})
        assert bad.status_code == 422
        assert bad.json()["errors"][0]["field"] == "engine"
        assert says in bad.json()["errors"][0]["message"]


def test_engines_give_different_answers_each_from_its_own_kernels(client: TestClient) -> None:
    times = {
        engine: client.post("/v1/estimates/prefill", json=PREFILL | {"engine": engine}).json()
        for engine in ("vllm", "sglang", "trtllm", "roofline")
    }
    # No engine waits per layer to dispatch a prefill any more (vLLM's was 0.8 ms: 25.6 ms of
    # Llama-3-8B's 32 layers); each is timed by its own GEMM and attention tables.
    assert abs(times["vllm"]["ttft_ms"] - times["sglang"]["ttft_ms"]) < 20
    assert len({round(t["ttft_ms"], 3) for t in times.values()}) == 4


def test_an_uploaded_default_profile_times_the_gpu_from_then_on(client: TestClient) -> None:
    body = PREFILL | {"gpu": "l4-24gb"}
    before = client.post("/v1/estimates/prefill", json=body).json()
    assert before["target"]["basis"] == _every_family("roofline")
    created = client.post("/v1/profiles", json=upload(default=True), headers=AUTH)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/profiles/l4-24gb-vllm-0.11.0"
    after = client.post("/v1/estimates/prefill", json=body).json()
    assert after["target"]["engine"] == "vllm@0.11.0"
    assert after["target"]["basis"]["gemm"] == "profile l4-24gb vllm@0.11.0"
    assert after["ttft_ms"] != pytest.approx(before["ttft_ms"], rel=0.01)
    listed = client.get("/v1/gpus/l4-24gb/profiles").json()["items"]
    assert [p["id"] for p in listed] == ["l4-24gb-vllm-0.11.0"]
    again = client.post("/v1/profiles", json=upload(default=True), headers=AUTH)
    assert again.status_code == 409


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"gpu": "no-such-gpu", "id": "x-1"}, "gpu"),
        ({"engine": "tgi"}, "engine"),
        ({"version": "9.9.9", "id": "l4-24gb-vllm-9.9.9"}, "version"),
        ({"engine": "roofline"}, "engine"),
        ({"gemm": [{"dtype": "bf16", "m": [1, 2], "n": [1], "k": [1], "ms": [0.1]}]}, "gemm.0"),
        (
            {"gemm": [{"dtype": "bf16", "m": [2, 1], "n": [1], "k": [1], "ms": [0.1, 0.2]}]},
            "gemm.0",
        ),
        # Physical bounds: a kernel of 1e308 ms, a table with no measured cell, no GEMM table.
        (
            {"gemm": [{"dtype": "bf16", "m": [1, 2], "n": [1], "k": [1], "ms": [0.1, 1e308]}]},
            "gemm.0.ms.1",
        ),
        (
            {"gemm": [{"dtype": "bf16", "m": [1, 2], "n": [1], "k": [1], "ms": [None, None]}]},
            "gemm.0",
        ),
        ({"gemm": []}, "gemm"),
        ({"replaces": "h100-sxm5-80gb-vllm-0.24.0"}, "replaces"),
    ],
)
def test_bad_uploads_are_422_naming_the_field_and_store_nothing(
    client: TestClient, changes: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/profiles", json=upload(**changes), headers=AUTH)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["field"].startswith(field)
    assert client.get("/v1/gpus/l4-24gb/profiles").json()["items"] == []


def test_an_upload_of_a_release_the_gpu_has_replaces_it_only_when_asked(
    client: TestClient,
) -> None:
    """The H100 has a bundled vLLM 0.24.0 profile: another upload of that release is a 409
    naming it (it used to take its place silently, being newer); with `replaces` set to its
    id, the upload times `vllm@0.24.0` from then on, and the bundled one stays readable."""
    ours = upload(H100, id="our-h100-vllm-0.24.0", version="0.24.0")
    refused = client.post("/v1/profiles", json=ours, headers=AUTH)
    assert refused.status_code == 409, refused.text
    assert "h100-sxm5-80gb-vllm-0.24.0" in refused.json()["detail"]
    body = PREFILL | {"engine": "vllm@0.24.0"}
    before = client.post("/v1/estimates/prefill", json=body).json()
    assert before["target"]["basis"]["gemm"] == "profile h100-sxm5-80gb vllm@0.24.0"
    taken = client.post(
        "/v1/profiles", json=ours | {"replaces": "h100-sxm5-80gb-vllm-0.24.0"}, headers=AUTH
    )
    assert taken.status_code == 201, taken.text
    after = client.post("/v1/estimates/prefill", json=body).json()
    assert after["ttft_ms"] != pytest.approx(before["ttft_ms"], rel=0.01)
    assert client.get("/v1/profiles/h100-sxm5-80gb-vllm-0.24.0").status_code == 200


def test_uploads_need_a_key(client: TestClient) -> None:
    assert client.post("/v1/profiles", json=upload()).status_code == 401


def test_calibrating_a_gpu_leaves_its_profiled_answers_unchanged(client: TestClient) -> None:
    """A calibration fits the roofline's efficiencies to benchmark runs: answers timed by a
    measured profile (another team's engine) do not move; roofline answers do."""
    body = {"model": "llama-3.1-8b", "gpu": "a100-sxm4-80gb", "prompt_tokens": 4096}
    profiled = client.post("/v1/estimates/prefill", json=body).json()
    roofline = client.post("/v1/estimates/prefill", json=body | {"engine": "roofline"}).json()
    calibration = client.post(
        "/v1/gpus/a100-sxm4-80gb/calibrations",
        json={"parameters": ["gemm"], "run_ids": ["ref-seed000-a100-sxm4-80gb-llama-3-8b"]},
        headers=AUTH,
    )
    assert calibration.status_code == 201, calibration.text
    profiled_after = client.post("/v1/estimates/prefill", json=body).json()
    roofline_after = client.post("/v1/estimates/prefill", json=body | {"engine": "roofline"}).json()
    assert profiled_after["ttft_ms"] == pytest.approx(profiled["ttft_ms"], rel=1e-12)
    assert roofline_after["target"]["efficiency"]["calibration_id"] is not None
    assert roofline["target"]["efficiency"]["calibration_id"] is None


_SYSTEMS = {gpu: system for system, gpu in SYSTEMS.items()}


@pytest.mark.parametrize("profile_id", [r.id for r in bundled_refs()])
def test_bundled_profiles_reproduce_their_source_points(profile_id: str) -> None:
    """400 GEMM and 200 attention measurements drawn from aiconfigurator-core's own Parquet
    tables, read back from the bundled profile within 2 %."""
    document = bundled_document(profile_id)
    profile = document.to_profile()
    data = systems_dir() / "data" / _SYSTEMS[document.gpu]
    engine_dir = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}[document.engine]
    note = document.source.note or ""
    gemm_dir = Path(note.split("gemm from ")[1].split(",")[0])
    rows = pq.read_table(data / gemm_dir / "gemm_perf.parquet").to_pylist()
    fastest: dict[tuple[str, int, int, int], float] = {}
    for row in rows:
        if row["gemm_dtype"] in ("bfloat16", "fp8") and row["m"] & (row["m"] - 1) == 0:
            key = (row["gemm_dtype"], row["m"], row["n"], row["k"])
            fastest[key] = min(fastest.get(key, float("inf")), row["latency"])
    sample = random.Random(0).sample(sorted(fastest), 400)
    for dtype, m, n, k in sample:
        grid = profile.gemm[DType.BF16 if dtype == "bfloat16" else DType.FP8]
        assert grid.at(m, n, k) == pytest.approx(fastest[(dtype, m, n, k)], rel=0.02)
    assert engine_dir in str(gemm_dir)
    attention_dir = Path(note.split("attention from ")[1].split(",")[0])
    rows = pq.read_table(data / attention_dir / "context_attention_perf.parquet").to_pylist()
    kept = [
        r
        for r in rows
        if r["attn_dtype"] == "bfloat16"
        and r["kv_cache_dtype"] == "bfloat16"
        and not r.get("window_size", 0)
        and r["head_dim"] == 128
    ]
    for row in random.Random(1).sample(kept, 200):
        found = profile.attention(
            True, DType.BF16, row["num_heads"], row["num_key_value_heads"], 128
        )
        assert found is not None
        grid, scale = found
        assert scale == 1.0
        measured = grid.at(row["batch_size"], row["isl"])
        assert measured is not None
        assert measured <= row["latency"] * 1.02  # the fastest kernel of its shape


@pytest.mark.parametrize("profile_id", ["h100-sxm5-80gb-vllm-0.24.0", "a100-sxm4-80gb-vllm-0.14.0"])
def test_bundled_moe_tables_reproduce_their_source_points(profile_id: str) -> None:
    document = bundled_document(profile_id)
    profile = document.to_profile()
    note = document.source.note or ""
    moe_dir = Path(note.split("moe from ")[1].split(",")[0])
    data = systems_dir() / "data" / _SYSTEMS[document.gpu]
    fastest: dict[tuple[Any, ...], float] = {}
    for row in pq.read_table(data / moe_dir / "moe_perf.parquet").to_pylist():
        if row["moe_dtype"] != "bfloat16" or row["distribution"] != "power_law_1.01":
            continue
        key = (
            row["hidden_size"],
            row["inter_size"],
            row["topk"],
            row["num_experts"],
            row["moe_tp_size"],
            row["moe_ep_size"],
            row["num_tokens"],
        )
        fastest[key] = min(fastest.get(key, float("inf")), row["latency"])
    assert fastest
    assert any(key[5] > 1 for key in fastest)  # expert-parallel splits among them
    for key in random.Random(2).sample(sorted(fastest), min(200, len(fastest))):
        hidden, inter, topk, experts, tp, ep, tokens = key
        grid = profile.moe[(DType.BF16, hidden, inter, topk, experts, tp, ep)]
        assert grid.at(tokens) == pytest.approx(fastest[key], rel=0.02)


def _trtllm_moe_rows(
    profile_id: str, shape: tuple[int, int, int, int], split: tuple[int, int], by: str
) -> tuple[Profile, dict[str, dict[int, float]]]:
    """A bundled TensorRT-LLM 1.3.0rc20 profile, and its source's MoE latencies of one layer
    shape (hidden, expert width, top-k, experts) and split (tp, ep) at the kept routing skew,
    by token count, grouped by the row field `by`."""
    document = bundled_document(profile_id)
    data = systems_dir() / "data" / _SYSTEMS[document.gpu]
    path = data / "moe" / "trtllm" / "1.3.0rc20" / "moe_perf.parquet"
    found: dict[str, dict[int, float]] = {}
    for row in pq.read_table(path).to_pylist():
        if (
            row["distribution"] == "power_law_1.01"
            and (row["hidden_size"], row["inter_size"], row["topk"], row["num_experts"]) == shape
            and (row["moe_tp_size"], row["moe_ep_size"]) == split
            and (by == "moe_dtype" or row["moe_dtype"] == "nvfp4")
        ):
            found.setdefault(row[by], {})[row["num_tokens"]] = row["latency"]
    return document.to_profile(), found


def test_trtllm_moe_tables_hold_the_kernel_a_default_deployment_runs() -> None:
    """TensorRT-LLM's B200 tables measure two NVFP4 MoE flows: the default CUTLASS one and
    the low-latency one a deployment opts into (3.8 times faster at 16,384 tokens for
    Qwen3-30B-A3B's shape: 0.48 ms against 1.8). The bundled table is the default flow's at
    every token count, so saturated steps are not timed by a kernel they do not run."""
    profile, flows = _trtllm_moe_rows(
        "b200-sxm-180gb-trtllm-1.3.0rc20", (2048, 768, 8, 128), (1, 1), "kernel_source"
    )
    cutlass, low_latency = flows["moe_torch_flow_cutlass"], flows["moe_torch_flow_min_latency"]
    assert low_latency[16384] < cutlass[16384] / 3
    grid = profile.moe[(DType.NVFP4, 2048, 768, 8, 128, 1, 1)]
    for tokens in (1, 64, 1024, 16384):
        assert grid.at(tokens) == pytest.approx(cutlass[tokens], rel=0.02)


def test_fp8_moe_tables_keep_the_faster_of_the_two_scalings() -> None:
    """The H200's per-tensor FP8 MoE table (TensorRT-LLM 1.3.0rc20) is 3-4x slower than its
    block-scaled FP8 for Llama 4 Scout's experts (5,120 x 8,192, 16 experts, top-1, ep 4) while
    the engine's published H200 runs are 2.3x the H100's: both FP8 tables hold, per token
    count, the faster of the two scalings (the same bytes through the same tensor cores)."""
    profile, scalings = _trtllm_moe_rows(
        "h200-sxm-141gb-trtllm-1.3.0rc20", (5120, 8192, 1, 16), (1, 4), "moe_dtype"
    )
    per_tensor, block = scalings["fp8"], scalings["fp8_block"]
    assert per_tensor[256] > 3 * block[256]
    for dtype in (DType.FP8, DType.FP8_BLOCK):
        grid = profile.moe[(dtype, 5120, 8192, 1, 16, 1, 4)]
        for tokens in (1, 256, 4096):
            fastest = min(per_tensor[tokens], block[tokens])
            assert grid.at(tokens) == pytest.approx(fastest, rel=0.02)


def test_deepseek_mla_is_timed_by_the_measured_module_with_its_projections(
    client: TestClient,
) -> None:
    """DeepSeek-V3 at tp 8 on a B200 under TensorRT-LLM (fp8-block weights, bf16 KV): each
    decode step's attention is 61 layers of the MLA module measured at 16 heads a GPU, read
    back from aiconfigurator-core's own table (generation module, batch 8, context 1,025 =
    isl 1,024 + step 1) within 2 %; QKV and O cost nothing apart (the module holds them), and
    the answer says what timed it."""
    from app.catalog.loader import bundled_gpus, bundled_models  # noqa: PLC0415
    from app.engine.profiles import ProfiledStepCost  # noqa: PLC0415
    from app.engine.profiles.measured import (  # noqa: PLC0415
        MeasuredDecodeAttention,
        MeasuredLinear,
    )
    from app.engine.specs import Deployment  # noqa: PLC0415
    from app.engine.step_cost import StepCostModel  # noqa: PLC0415
    from app.formats.catalog_specs import (  # noqa: PLC0415
        gpu_spec_from_fields,
        model_spec_from_fields,
    )

    rows = pq.read_table(
        systems_dir() / "data/b200_sxm/mla/trtllm/1.3.0rc20/mla_generation_module_perf.parquet"
    ).to_pylist()
    measured = min(
        r["latency"]
        for r in rows
        if (r["num_heads"], r["batch_size"], r["isl"] + r["step"]) == (16, 8, 1025)
        and (r["kv_cache_dtype"], r["gemm_type"]) == ("bfloat16", "fp8_block")
    )
    deployment = Deployment(
        tp=8, weight_dtype=DType.FP8_BLOCK, kv_dtype=DType.BF16, activation_dtype=DType.BF16
    )
    profile = bundled_document("b200-sxm-180gb-trtllm-1.3.0rc23").to_profile()
    model = model_spec_from_fields(next(m for m in bundled_models() if m["id"] == "deepseek-v3"))
    gpu = gpu_spec_from_fields(next(g for g in bundled_gpus() if g["id"] == "b200-sxm-180gb"))
    cost = ProfiledStepCost(model, gpu, deployment, profile)
    compute_s, memory_s = cost.decode_attention.parts(8, 8 * 1025)
    assert max(compute_s, memory_s) == pytest.approx(61 * measured / 1000, rel=0.02)
    assert cost.qkv.parts(8) == (0.0, 0.0)
    assert cost.o.parts(8) == (0.0, 0.0)
    # Beyond the table's longest context (131,072): the roofline's attention with the
    # projections the zeroed QKV and O no longer count, timed from the GEMM table.
    roofline = StepCostModel(model, gpu, deployment, profile.fitted)
    beyond = cost.decode_attention.parts(1, 150_000)
    attention = roofline.decode_attention.parts(1, 150_000)
    assert isinstance(cost.decode_attention, MeasuredDecodeAttention)
    projections = cost.decode_attention.projections
    assert all(isinstance(p, MeasuredLinear) for p in projections)
    qkv, o = (p.parts(1) for p in projections)
    assert qkv[1] > 0 and o[1] > 0
    assert beyond[0] == pytest.approx(attention[0] + qkv[0] + o[0], rel=1e-9)
    assert beyond[1] == pytest.approx(attention[1] + qkv[1] + o[1], rel=1e-9)
    body = {
        "model": "deepseek-v3",
        "gpu": "b200-sxm-180gb",
        "engine": "trtllm",
        "tp": 8,
        "kv_dtype": "bf16",
        "batch_size": 8,
        "context_tokens": 1025,
    }
    answer = client.post("/v1/estimates/decode", json=body).json()
    label = "profile b200-sxm-180gb trtllm@1.3.0rc23"
    assert answer["target"]["basis"]["decode_attention"] == label
    assert answer["target"]["basis"]["prefill_attention"] == label


def test_deepseek_mla_without_a_module_table_is_the_kernel_with_its_gemms_and_bmms(
    client: TestClient,
) -> None:
    """SGLang 0.5.14's database measures MLA's attention kernel and absorption BMMs, not the
    module: DeepSeek-V3 at tp 8 on an H200 (16 heads a GPU, fp8-block weights, bf16 KV).
    A decode step's attention of 8 sequences at context 1,024 is 61 layers of the decode
    kernel plus the two FP8 BMMs at 8 tokens, read back from aiconfigurator-core's own tables
    within 2 %; a 1,024-token prompt's is 61 layers of the context kernel plus kv_b_proj's
    latent expansion (1,024 x 4,096 x 512) from the GEMM table. The answer says the profile
    timed both."""
    from app.catalog.loader import bundled_gpus, bundled_models  # noqa: PLC0415
    from app.engine.profiles import ProfiledStepCost  # noqa: PLC0415
    from app.engine.specs import Deployment  # noqa: PLC0415
    from app.formats.catalog_specs import (  # noqa: PLC0415
        gpu_spec_from_fields,
        model_spec_from_fields,
    )

    data = systems_dir() / "data/h200_sxm"

    def fastest(path: str, **match: Any) -> float:
        rows = pq.read_table(data / path).to_pylist()
        found = [float(r["latency"]) for r in rows if all(r[k] == v for k, v in match.items())]
        assert found, match
        return min(found)

    kernel = fastest(
        "mla/sglang/0.5.14/generation_mla_perf.parquet",
        num_heads=16,
        batch_size=8,
        step=1023,
        kv_cache_dtype="bfloat16",
    )
    bmms = sum(
        fastest(
            "mla_bmm/sglang/0.5.14/mla_bmm_perf.parquet",
            op_name=op,
            num_heads=16,
            num_tokens=8,
            bmm_dtype="fp8",
        )
        for op in ("mla_gen_pre", "mla_gen_post")
    )
    context = fastest(
        "mla/sglang/0.5.14/context_mla_perf.parquet",
        num_heads=16,
        batch_size=1,
        isl=1024,
        kv_cache_dtype="bfloat16",
    )
    deployment = Deployment(
        tp=8, weight_dtype=DType.FP8_BLOCK, kv_dtype=DType.BF16, activation_dtype=DType.BF16
    )
    profile = bundled_document("h200-sxm-141gb-sglang-0.5.14").to_profile()
    expansion = profile.gemm[DType.FP8_BLOCK].at(1024, 4096, 512)
    assert expansion is not None
    model = model_spec_from_fields(next(m for m in bundled_models() if m["id"] == "deepseek-v3"))
    gpu = gpu_spec_from_fields(next(g for g in bundled_gpus() if g["id"] == "h200-sxm-141gb"))
    cost = ProfiledStepCost(model, gpu, deployment, profile)
    decode = max(cost.decode_attention.parts(8, 8 * 1024))
    assert decode == pytest.approx(61 * (kernel + bmms) / 1000, rel=0.02)
    prefill = max(cost.prefill_attention.parts(1024, 1, 1024 * 1025 / 2, 1024))
    assert prefill == pytest.approx(61 * (context + expansion) / 1000, rel=0.02)
    body = {
        "model": "deepseek-v3",
        "gpu": "h200-sxm-141gb",
        "engine": "sglang",
        "tp": 8,
        "kv_dtype": "bf16",
        "batch_size": 8,
        "context_tokens": 1024,
    }
    answer = client.post("/v1/estimates/decode", json=body).json()
    label = "profile h200-sxm-141gb sglang@0.5.14"
    basis = answer["target"]["basis"]
    assert basis["decode_attention"] == basis["prefill_attention"] == basis["gemm"] == label


def test_pipeline_stages_keep_the_measured_experts_and_all_to_all() -> None:
    """DeepSeek-R1 (fp8-block) on H200s under SGLang 0.5.14: split into two pipeline stages,
    a step still passes every layer on its stage's GPUs, so the experts read the same MoE table
    as without stages (tp 4), and the expert-parallel all-to-all (dp 8, ep 8) the same NCCL
    table; what the stages add is the roofline's hand-off between them (per token and its
    latency), which the database has no point-to-point table for, so communication's basis
    says the roofline."""
    from app.catalog.loader import bundled_gpus, bundled_models  # noqa: PLC0415
    from app.engine.profiles import ProfiledStepCost  # noqa: PLC0415
    from app.engine.specs import Deployment  # noqa: PLC0415
    from app.engine.step_cost import StepCostModel  # noqa: PLC0415
    from app.formats.catalog_specs import (  # noqa: PLC0415
        gpu_spec_from_fields,
        model_spec_from_fields,
    )

    profile = bundled_document("h200-sxm-141gb-sglang-0.5.14").to_profile()
    model = model_spec_from_fields(next(m for m in bundled_models() if m["id"] == "deepseek-r1"))
    gpu = gpu_spec_from_fields(next(g for g in bundled_gpus() if g["id"] == "h200-sxm-141gb"))
    label = "profile h200-sxm-141gb sglang@0.5.14"
    for flat in (
        Deployment(tp=4, weight_dtype=DType.FP8_BLOCK),
        Deployment(tp=1, dp=8, ep=8, weight_dtype=DType.FP8_BLOCK),
    ):
        piped = Deployment(tp=flat.tp, dp=flat.dp, ep=flat.ep, pp=2, weight_dtype=DType.FP8_BLOCK)
        one, two = (ProfiledStepCost(model, gpu, d, profile) for d in (flat, piped))
        assert one.basis["moe"] == two.basis["moe"] == label
        assert one.basis["communication"] == label
        assert two.basis["communication"] == f"roofline fitted to {label}"
        rooflines = [StepCostModel(model, gpu, d, profile.fitted) for d in (flat, piped)]
        for tokens in (8.0, 512.0):
            assert two.experts.parts(tokens) == one.experts.parts(tokens)
            hand_off = rooflines[1].communication.layout(tokens) - rooflines[
                0
            ].communication.layout(tokens)
            assert hand_off > 0
            assert two.communication.layout(tokens) == pytest.approx(
                one.communication.layout(tokens) + hand_off, rel=1e-9
            )


def test_fp16_checkpoints_are_timed_by_the_bf16_tables(client: TestClient) -> None:
    """Llama 2's checkpoints are fp16; the silicon database measures bf16, the same tensor-core
    rate on the same bytes: a Llama-2-7B prefill on an H100 under vLLM is timed by the profile's
    GEMM and attention tables (the roofline timed its GEMMs before), and the prompt's time is
    Llama-2-7B's shapes read from the bf16 GEMM table."""
    from app.catalog.loader import bundled_gpus, bundled_models  # noqa: PLC0415
    from app.engine.profiles import ProfiledStepCost  # noqa: PLC0415
    from app.engine.specs import Deployment  # noqa: PLC0415
    from app.formats.catalog_specs import (  # noqa: PLC0415
        gpu_spec_from_fields,
        model_spec_from_fields,
    )

    body = {"model": "llama-2-7b", "gpu": H100, "engine": "vllm", "prompt_tokens": 1024}
    answer = client.post("/v1/estimates/prefill", json=body).json()
    assert answer["target"]["weight_dtype"] == "fp16"
    label = "profile h100-sxm5-80gb vllm@0.24.0"
    basis = answer["target"]["basis"]
    assert basis["gemm"] == basis["prefill_attention"] == basis["decode_attention"] == label
    profile = bundled_document("h100-sxm5-80gb-vllm-0.24.0").to_profile()
    model = model_spec_from_fields(next(m for m in bundled_models() if m["id"] == "llama-2-7b"))
    gpu = gpu_spec_from_fields(next(g for g in bundled_gpus() if g["id"] == H100))
    deployment = Deployment(weight_dtype=DType.FP16, kv_dtype=DType.FP16)
    cost = ProfiledStepCost(model, gpu, deployment, profile)
    table = profile.gemm[DType.BF16]
    # QKV of 1,024 tokens: 32 layers of one (1,024 x 4,096) @ (4,096 x 12,288) GEMM.
    one = table.at(1024.0, 12288.0, 4096.0)
    assert one is not None
    assert max(cost.qkv.parts(1024)) == pytest.approx(32 * one / 1000, rel=1e-6)


def test_a_group_size_no_table_has_is_interpolated_in_the_query_heads(
    client: TestClient,
) -> None:
    """Qwen2.5-7B has 28 query heads on 4 KV heads (7 per group); the A100's vLLM tables have
    24 and 32 query heads on 4 KV heads of its width: its attention is read halfway between
    them, cell by cell, and the answer says the profile timed it (the roofline did before)."""
    body = {
        "model": "qwen2.5-7b",
        "gpu": "a100-sxm4-80gb",
        "engine": "vllm",
        "batch_size": 8,
        "context_tokens": 1024,
    }
    answer = client.post("/v1/estimates/decode", json=body).json()
    assert answer["target"]["engine"] == "vllm@0.14.0"
    label = "profile a100-sxm4-80gb vllm@0.14.0"
    assert answer["target"]["basis"]["decode_attention"] == label
    assert answer["target"]["basis"]["prefill_attention"] == label
    profile = bundled_document("a100-sxm4-80gb-vllm-0.14.0").to_profile()
    tables = {
        (t.heads, t.kv_heads, t.head_dim): t.grid for t in profile.decode_attention[DType.BF16]
    }
    found = profile.attention(False, DType.BF16, 28, 4, 128)
    assert found is not None
    grid, scale = found
    assert scale == 1.0
    low, high = tables[(24, 4, 128)].at2(8, 1024), tables[(32, 4, 128)].at2(8, 1024)
    assert low is not None and high is not None
    assert grid.at2(8, 1024) == pytest.approx((low + high) / 2, rel=1e-9)
    # Nothing above 64 query heads on 4 KV heads and no table of groups of 18: none, as before.
    assert profile.attention(False, DType.BF16, 72, 4, 128) is None
