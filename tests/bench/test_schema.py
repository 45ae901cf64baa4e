"""The run document: what it accepts, what it refuses (naming the field), and round trips."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.formats.run_document import (
    INTERRUPTED_REASON,
    Phase,
    ProvenanceKind,
    RunDocument,
    RunPoint,
)

from .conftest import valid_document_dict

REFERENCE = (
    Path(__file__).parents[2] / "app/formats/reference/seed000-a100-sxm4-80gb-llama-3-8b.json"
)

Mutation = Callable[[dict[str, Any]], None]


def test_valid_document_validates(document_dict: dict[str, Any]) -> None:
    document = RunDocument.model_validate(document_dict)
    assert [p.phase for p in document.points] == [Phase.PREFILL, Phase.DECODE, Phase.DECODE]
    assert len(document.measured_points()) == 2
    assert document.model.to_model_spec().group_size == 2  # 4 query heads over 2 KV heads


def test_json_round_trip_is_equal_and_stable(document_dict: dict[str, Any]) -> None:
    original = RunDocument.model_validate(document_dict)
    dumped = original.model_dump_json()
    again = RunDocument.model_validate_json(dumped)
    assert again == original
    assert again.model_dump_json() == dumped
    # The JSON form is exactly the data it came from (times, nulls, the [m, n, k] list).
    assert json.loads(dumped) == document_dict | {"created_at": "2026-11-29T08:00:00Z"}


def _set(path: str, value: Any) -> Mutation:
    """A mutation that sets `a.b.0.c` (list indexes as numbers) to `value`."""

    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value

    return mutate


def _delete_microbenchmarks_of_completed_run(data: dict[str, Any]) -> None:
    data["microbenchmarks"] = None


def _duplicate_first_point(data: dict[str, Any]) -> None:
    data["points"].append(copy.deepcopy(data["points"][0]))


REJECTED: list[tuple[str, Mutation, str]] = [
    ("schema version 2", _set("schema_version", 2), "schema_version: 2 is not supported"),
    ("zero median", _set("points.0.median_ms", 0.0), "median_ms"),
    ("negative median", _set("points.0.median_ms", -10.0), "median_ms"),
    ("NaN median", _set("points.0.median_ms", float("nan")), "median_ms"),
    ("p10 above median", _set("points.0.p10_ms", 10.5), "p10_ms: 10.5 exceeds median_ms"),
    ("p90 below median", _set("points.0.p90_ms", 9.9), "p90_ms: 9.9 is below median_ms"),
    ("skipped point with times", _set("points.2.median_ms", 3.0), "median_ms: must be null"),
    ("skipped point with repeats", _set("points.2.repeats", 3), "repeats: must be 0"),
    ("measured point without p90", _set("points.1.p90_ms", None), "p90_ms: required"),
    ("measured point with 0 repeats", _set("points.1.repeats", 0), "repeats"),
    ("unknown top-level field", _set("ttft_ms", 3.0), "ttft_ms"),
    ("unknown point field", _set("points.0.tpot_ms", 3.0), "tpot_ms"),
    ("unknown model field", _set("model.num_experts", 8), "num_experts"),
    ("prefill without prompt", _set("points.0.prompt_tokens", None), "prompt_tokens: required"),
    ("prefill with context", _set("points.0.context_tokens", 64), "context_tokens: must be null"),
    ("decode without context", _set("points.1.context_tokens", None), "context_tokens: required"),
    ("decode with prompt", _set("points.1.prompt_tokens", 64), "prompt_tokens: must be null"),
    ("batch size 0", _set("points.0.batch_size", 0), "batch_size"),
    ("heads not divisible", _set("model.num_kv_heads", 3), "num_kv_heads: 4 query heads"),
    ("more KV than query heads", _set("model.num_kv_heads", 8), "num_kv_heads: 8 KV heads"),
    ("zero hidden size", _set("model.hidden_size", 0), "hidden_size"),
    (
        "prompt beyond max context",
        _set("points.0.prompt_tokens", 4096),
        "points[0].prompt_tokens: 4096 exceeds the model's max_context_tokens 2048",
    ),
    (
        "context beyond max context",
        _set("points.1.context_tokens", 2049),
        "points[1].context_tokens: 2049 exceeds",
    ),
    ("wrong phase name", _set("points.0.phase", "generate"), "phase"),
    ("wrong ffn type", _set("model.ffn_type", "swiglu"), "ffn_type"),
    ("wrong dtype", _set("dtype", "bfloat16"), "dtype"),
    ("wrong provenance kind", _set("provenance.kind", "guessed"), "kind"),
    ("published without source", _set("provenance", {"kind": "published"}), "source: a published"),
    ("naive timestamp", _set("created_at", "2026-11-29T08:00:00"), "created_at"),
    ("no points", _set("points", []), "points"),
    ("duplicate point", _duplicate_first_point, "points[3]: repeats the configuration"),
    ("empty skip reason", _set("points.2.skipped", {"reason": ""}), "reason"),
    ("zero matmul rate", _set("microbenchmarks.matmul_flops_per_s", 0.0), "matmul_flops_per_s"),
    ("two-number matmul shape", _set("microbenchmarks.matmul_shape", [8, 8]), "matmul_shape"),
    ("tp 0", _set("tp", 0), "tp"),
    (
        "completed job run without microbenchmarks",
        _delete_microbenchmarks_of_completed_run,
        "microbenchmarks: required",
    ),
]


@pytest.mark.parametrize(
    ("mutation", "message"), [(m, msg) for _, m, msg in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_document_rejects(mutation: Mutation, message: str) -> None:
    data = valid_document_dict()
    mutation(data)
    with pytest.raises(ValidationError) as raised:
        RunDocument.model_validate(data)
    assert message in str(raised.value)


def test_schema_version_error_is_clear_from_json(document_dict: dict[str, Any]) -> None:
    document_dict["schema_version"] = 2
    with pytest.raises(ValidationError) as raised:
        RunDocument.model_validate_json(json.dumps(document_dict))
    errors = raised.value.errors()
    assert [e["loc"] for e in errors] == [("schema_version",)]
    assert "this service reads version 1" in errors[0]["msg"]


def test_interrupted_job_run_may_lack_microbenchmarks(document_dict: dict[str, Any]) -> None:
    document_dict["microbenchmarks"] = None
    document_dict["points"][2]["skipped"] = {"reason": INTERRUPTED_REASON}
    assert RunDocument.model_validate(document_dict).microbenchmarks is None


def test_published_run_may_lack_microbenchmarks(document_dict: dict[str, Any]) -> None:
    document_dict["microbenchmarks"] = None
    document_dict["provenance"] = {"kind": "published", "source": "a paper", "note": None}
    document = RunDocument.model_validate(document_dict)
    assert document.provenance.kind is ProvenanceKind.PUBLISHED


def test_point_of_one_repeat_has_equal_percentiles() -> None:
    point = RunPoint(
        phase=Phase.PREFILL,
        prompt_tokens=1024,
        batch_size=1,
        median_ms=81.0,
        p10_ms=81.0,
        p90_ms=81.0,
        repeats=1,
    )
    assert point.tokens == 1024


def test_every_field_is_described() -> None:
    schema = RunDocument.model_json_schema()
    undescribed = [
        f"{name}.{field}"
        for name, definition in [("RunDocument", schema), *schema["$defs"].items()]
        for field, spec in definition.get("properties", {}).items()
        if not spec.get("description")
    ]
    assert undescribed == []


class TestReferenceRun:
    """The bundled article A run: Llama-3-8B, A100 SXM4 80GB, FlashAttention-2, batch 1."""

    def test_validates_and_round_trips(self) -> None:
        text = REFERENCE.read_text(encoding="utf-8")
        document = RunDocument.model_validate_json(text)
        assert RunDocument.model_validate_json(document.model_dump_json()) == document
        assert json.loads(document.model_dump_json(indent=2)) == json.loads(text)

    def test_carries_the_seed_table(self) -> None:
        document = RunDocument.model_validate_json(REFERENCE.read_text(encoding="utf-8"))
        # article A's table: 1K 81 ms, 10K 832, 50K 7,717, 100K 21,731, 128K 32,863 (K = 1024).
        assert [(p.prompt_tokens, p.median_ms) for p in document.points] == [
            (1024, 81.0),
            (10240, 832.0),
            (51200, 7717.0),
            (102400, 21731.0),
            (131072, 32863.0),
        ]
        for point in document.points:
            assert point.phase is Phase.PREFILL
            assert point.batch_size == 1
            assert point.p10_ms == point.median_ms == point.p90_ms
            assert point.repeats == 1

    def test_states_its_provenance_and_setting(self) -> None:
        document = RunDocument.model_validate_json(REFERENCE.read_text(encoding="utf-8"))
        assert document.provenance.kind is ProvenanceKind.PUBLISHED
        assert document.provenance.source is not None
        assert "Article A of docs/model.md" in document.provenance.source
        assert document.provenance.note is not None
        assert "K = 1024" in document.provenance.note
        assert document.gpu == "a100-sxm4-80gb"
        assert document.environment.device_name == "NVIDIA A100-SXM4-80GB"
        assert document.environment.torch_version is None
        assert document.microbenchmarks is None
        assert document.dtype == "bf16"
        assert document.attention_backend == "flash"

    def test_model_is_llama_3_8b(self) -> None:
        model = RunDocument.model_validate_json(REFERENCE.read_text(encoding="utf-8")).model
        # Llama-3-8B config.json: L=32, d=4096, H=32, K=8, h=128, f=14336 gated, V=128256.
        assert (
            model.id,
            model.num_layers,
            model.hidden_size,
            model.num_attention_heads,
            model.num_kv_heads,
            model.head_dim,
            model.intermediate_size,
            model.ffn_type,
            model.vocab_size,
            model.tie_word_embeddings,
            model.attention_bias,
            model.moe,
        ) == ("llama-3-8b", 32, 4096, 32, 8, 128, 14336, "gated", 128256, False, False, None)
        assert model.max_context_tokens == 131072  # article A measured up to 128K tokens
