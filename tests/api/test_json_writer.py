"""`JsonWriter`: an answer's JSON written from the engine's objects is, byte for byte, what
pydantic writes after validating them into the response schema; and every estimate endpoint
answers that way."""

from __future__ import annotations

import dataclasses
import enum
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer

from app.estimates import endpoints
from app.web.json_writer import JsonWriter

GIVEN_ANSWERS: list[tuple[str, dict[str, Any]]] = [
    ("/v1/estimates/prefill", {"prompt_tokens": 2048}),
    ("/v1/estimates/prefill", {"prompt_tokens": 7000, "chunk_tokens": 2048, "batch_size": 2}),
    ("/v1/estimates/prefill-curve", {"prompt_tokens": [128, 1024, 8192]}),
    ("/v1/estimates/decode", {"batch_size": 32, "context_tokens": 4096}),
    ("/v1/estimates/decode", {"batch_size": 1, "context_tokens": 1, "efficiency": "ideal"}),
    ("/v1/estimates/request", {"prompt_tokens": 2048, "output_tokens": 256}),
    ("/v1/estimates/batch-ceiling", {"context_tokens": 4096}),
    ("/v1/estimates/batch-ceiling", {"context_tokens": 8192, "gpu_memory_utilization": 0.2}),
    ("/v1/estimates/tp-feasibility", {"context_tokens": 2048}),
    ("/v1/estimates/tp-feasibility", {"context_tokens": 7000, "ttft_slo_ms": 200}),
    (
        "/v1/recommendations/chunk-size",
        {"itl_slo_ms": 50, "decode_batch_size": 32, "decode_context_tokens": 2048},
    ),
    ("/v1/recommendations/chunk-size", {"itl_slo_ms": 1, "short_ttft_slo_ms": 300}),
    ("/v1/roofline", {"prompt_tokens": 2048}),
]


def test_every_estimate_answer_is_written_as_pydantic_writes_it(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each endpoint's answer (computed, not from the memo) checked against the model pydantic
    validates from the same engine result: the same bytes."""
    written_by = endpoints._written
    checked: list[str] = []

    def written(schema: type[BaseModel], answer: object) -> bytes:
        payload = written_by(schema, answer)
        assert payload == endpoints._shaped(schema, answer).model_dump_json().encode()
        checked.append(schema.__name__)
        return payload

    monkeypatch.setattr(endpoints, "_written", written)
    targets: list[dict[str, Any]] = [
        {"model": "llama-3-8b", "gpu": "h100-sxm5-80gb"},
        {"model": "llama-3-70b", "gpu": "a100-sxm4-80gb", "tp": 4},
        {"model": "mixtral-8x7b", "gpu": "h100-sxm5-80gb", "tp": 2},
    ]
    for target in targets:
        for path, fields in GIVEN_ANSWERS:
            response = client.post(path, json={**target, **fields})
            assert response.status_code == 200, (path, response.text)
    tp = {"model": "mixtral-8x7b", "gpu": "h100-sxm5-80gb", "layouts": True, "batch_size": 64}
    assert client.post("/v1/estimates/tp-feasibility", json=tp).status_code == 200
    roofline = client.post("/v1/roofline", json={"gpu": "h100-sxm5-80gb"})
    assert roofline.status_code == 200
    assert len(checked) == len(targets) * len(GIVEN_ANSWERS) + 2
    assert set(checked) >= {
        "PrefillResponse",
        "PrefillCurveResponse",
        "DecodeResponse",
        "RequestResponse",
        "BatchCeilingResponse",
        "TpFeasibilityResponse",
        "ChunkSizeResponse",
        "RooflineResponse",
    }


# ---- the writer itself, on schemas of every kind of field it handles


class Colour(enum.StrEnum):
    RED = "red"


class Part(BaseModel):
    name: str
    weight: float
    tags: list[str] = Field(default_factory=list)


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)

    label: str


class Loose(BaseModel):
    label: str


class Whole(BaseModel):
    count: int
    share: float
    maybe: float | None
    flag: bool
    colour: str
    parts: list[Part]
    by_name: dict[str, float]
    frozen: Frozen
    loose: Loose
    pair: tuple[int, ...]
    note: str = "none"
    limit: int = Field(default=3, ge=0)


@dataclasses.dataclass
class PartSource:
    name: Any
    weight: Any
    tags: Any = ()


@dataclasses.dataclass
class WholeSource:
    count: Any = 2
    share: Any = 0.5
    maybe: Any = None
    flag: Any = True
    colour: Any = "blue"
    parts: Any = dataclasses.field(default_factory=lambda: [PartSource("a", 1.5, ("x",))])
    by_name: Any = dataclasses.field(default_factory=lambda: {"a": 1.25})
    frozen: Any = dataclasses.field(default_factory=lambda: Frozen(label="f"))
    loose: Any = dataclasses.field(default_factory=lambda: Loose(label="l"))
    pair: Any = (1, 2)


def _pydantic(source: object, given: dict[str, Any] | None = None) -> bytes:
    return JsonWriter.of(Whole).model(source, given or {}).model_dump_json().encode()


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"share": 1, "maybe": 3},  # ints where floats are declared: written 1.0 and 3.0
        {"maybe": 2.5, "flag": False},
        {"colour": Colour.RED},  # an enumeration where text is declared: its value
        {"parts": (PartSource("b", 2, ["y", "z"]), PartSource("c", 0.0))},
        {"parts": [{"name": "d", "weight": 1}]},  # a dict: pydantic reads its keys
        {"parts": [Part(name="e", weight=2.0)]},  # instances of the schema itself
        {"by_name": {"a": 1, "b": float("inf")}},  # infinity: null, as pydantic writes it
        {"share": Decimal("0.25"), "count": 7.0},  # types the writer leaves to pydantic
        {"pair": [3], "colour": "é\u2028\x00"},
    ],
)
def test_written_bytes_are_pydantics(changes: dict[str, Any]) -> None:
    source = dataclasses.replace(WholeSource(), **changes)
    written = JsonWriter.of(Whole).dumps(source)
    assert written == _pydantic(source)


def test_given_fields_win_over_attributes_and_defaults_fill_the_rest() -> None:
    source = WholeSource()
    given = {"count": 9, "note": "given"}
    written = JsonWriter.of(Whole).dumps(source, given)
    assert written == _pydantic(source, given)
    answer = Whole.model_validate_json(written)
    assert (answer.count, answer.note, answer.limit) == (9, "given", 3)


def test_a_value_pydantic_refuses_raises_pydantics_error() -> None:
    writer = JsonWriter.of(Whole)
    with pytest.raises(ValidationError, match="count"):
        writer.dumps(dataclasses.replace(WholeSource(), count="many"))
    with pytest.raises(ValidationError, match="share"):
        writer.dumps(dataclasses.replace(WholeSource(), share=None))

    @dataclasses.dataclass
    class Lacking:
        count: int = 1

    with pytest.raises(ValidationError, match="share"):
        writer.dumps(Lacking())


def test_a_frozen_instance_is_dumped_once_a_mutable_one_each_time() -> None:
    source = WholeSource()
    writer = JsonWriter.of(Whole)
    first = writer.dumps(source)
    source.loose.label = "changed"
    second = writer.dumps(source)
    assert b'"loose":{"label":"changed"}' in second
    assert first.replace(b'"label":"l"', b'"label":"changed"') == second


class Serialised(BaseModel):
    value: float

    @field_serializer("value")
    def _rounded(self, value: float) -> float:
        return round(value, 1)


def test_a_schema_with_its_own_serialiser_is_written_by_pydantic() -> None:
    @dataclasses.dataclass
    class Source:
        value: float = 1.26

    assert JsonWriter.of(Serialised).dumps(Source()) == b'{"value":1.3}'
