"""Malformed and impossible requests: each gets the right 4xx problem document and leaves
every catalog row exactly as it was."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.settings import Settings
from app.web.route_table import template_of
from tests.api.catalog_helpers import new_gpu, new_model, snapshot
from tests.api.test_openapi import COMMITTED
from tests.conftest import AUTH


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    status: int
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    problem_type: str | None = None
    error_field: str | None = None
    params: dict[str, str] | None = None


def _gpu(**changes: Any) -> dict[str, Any]:
    return new_gpu(**changes)


def _model(**changes: Any) -> dict[str, Any]:
    return new_model(**changes)


JSON = {"content-type": "application/json"}

CASES = [
    Case(
        "memory as string",
        "POST",
        "/v1/gpus",
        422,
        _gpu(memory_bytes="lots"),
        error_field="memory_bytes",
    ),
    Case(
        "negative memory",
        "POST",
        "/v1/gpus",
        422,
        _gpu(memory_bytes=-1),
        error_field="memory_bytes",
    ),
    Case(
        "zero bandwidth",
        "POST",
        "/v1/gpus",
        422,
        _gpu(memory_bandwidth_bytes_per_s=0),
        error_field="memory_bandwidth_bytes_per_s",
    ),
    Case(
        "negative peak",
        "POST",
        "/v1/gpus",
        422,
        _gpu(peak_flops_per_s={"bf16": -5e12}),
        error_field="peak_flops_per_s.bf16",
    ),
    Case(
        "unknown dtype",
        "POST",
        "/v1/gpus",
        422,
        _gpu(peak_flops_per_s={"bf17": 5e12}),
        error_field="peak_flops_per_s.bf17",
    ),
    Case(
        "no peaks at all",
        "POST",
        "/v1/gpus",
        422,
        _gpu(peak_flops_per_s={}),
        problem_type="invalid-input",
        error_field="peak_flops_per_s",
    ),
    Case(
        "unknown interconnect kind",
        "POST",
        "/v1/gpus",
        422,
        _gpu(interconnect={"kind": "carrier-pigeon", "bandwidth_bytes_per_s": 1e9}),
        error_field="interconnect.kind",
    ),
    Case("unknown gpu field", "POST", "/v1/gpus", 422, _gpu(colour="green"), error_field="colour"),
    Case(
        "missing gpu field",
        "POST",
        "/v1/gpus",
        422,
        {k: v for k, v in _gpu().items() if k != "memory_bytes"},
        error_field="memory_bytes",
    ),
    Case("bad id", "POST", "/v1/gpus", 422, _gpu(id="Not An Id!"), error_field="id"),
    Case(
        "efficiency above 1",
        "POST",
        "/v1/gpus",
        422,
        _gpu(efficiency={"gemm": 1.5, "attention": 0.5, "memory": 0.8, "source": "x"}),
        error_field="efficiency.gemm",
    ),
    Case(
        "duplicate id",
        "POST",
        "/v1/gpus",
        409,
        _gpu(id="h100-sxm5-80gb"),
        problem_type="already-exists",
        error_field="id",
    ),
    Case(
        "bad json",
        "POST",
        "/v1/gpus",
        400,
        content=b'{"id": "x",',
        headers=JSON,
        problem_type="malformed-json",
    ),
    Case("json array body", "POST", "/v1/gpus", 422, json=[1, 2, 3]),
    Case(
        "form body",
        "POST",
        "/v1/gpus",
        415,
        content=b"id=x",
        headers={"content-type": "application/x-www-form-urlencoded"},
        problem_type="unsupported-media-type",
    ),
    Case(
        "oversized body",
        "POST",
        "/v1/gpus",
        413,
        content=b"[" + b"1," * 1_100_000 + b"1]",
        headers=JSON,
        problem_type="payload-too-large",
    ),
    Case(
        "heads not divisible by kv heads",
        "POST",
        "/v1/models",
        422,
        _model(num_attention_heads=32, num_kv_heads=5),
        problem_type="invalid-input",
        error_field="num_kv_heads",
    ),
    Case(
        "more kv heads than heads",
        "POST",
        "/v1/models",
        422,
        _model(num_attention_heads=8, num_kv_heads=16),
        problem_type="invalid-input",
        error_field="num_kv_heads",
    ),
    Case("zero layers", "POST", "/v1/models", 422, _model(num_layers=0), error_field="num_layers"),
    Case(
        "layers as float",
        "POST",
        "/v1/models",
        422,
        _model(num_layers=3.5),
        error_field="num_layers",
    ),
    Case(
        "unknown ffn type",
        "POST",
        "/v1/models",
        422,
        _model(ffn_type="swirly"),
        error_field="ffn_type",
    ),
    Case(
        "experts per token above experts",
        "POST",
        "/v1/models",
        422,
        _model(moe={"num_experts": 8, "experts_per_token": 9, "expert_intermediate_size": 4096}),
        problem_type="invalid-input",
        error_field="moe.experts_per_token",
    ),
    Case(
        "unknown moe field",
        "POST",
        "/v1/models",
        422,
        _model(
            moe={
                "num_experts": 8,
                "experts_per_token": 2,
                "expert_intermediate_size": 1,
                "capacity_factor": 1.25,
            }
        ),
        error_field="moe.capacity_factor",
    ),
    Case(
        "patch makes heads inconsistent",
        "PATCH",
        "/v1/models/llama-3-8b",
        422,
        {"num_kv_heads": 7},
        problem_type="invalid-input",
        error_field="num_kv_heads",
    ),
    Case(
        "patch negative size",
        "PATCH",
        "/v1/gpus/l4-24gb",
        422,
        {"memory_bytes": -24},
        error_field="memory_bytes",
    ),
    Case(
        "patch unknown field",
        "PATCH",
        "/v1/gpus/l4-24gb",
        422,
        {"speed": "fast"},
        error_field="speed",
    ),
    Case(
        "stale etag",
        "PATCH",
        "/v1/gpus/l4-24gb",
        412,
        {"tdp_watts": 1},
        headers={"If-Match": '"7"'},
        problem_type="precondition-failed",
    ),
    Case(
        "malformed etag",
        "PATCH",
        "/v1/gpus/l4-24gb",
        400,
        {"tdp_watts": 1},
        headers={"If-Match": "seven"},
        problem_type="bad-etag",
    ),
    Case(  # RFC 9110 13.1.1: If-Match compares strongly, so a weak tag never matches
        "weak etag",
        "PUT",
        "/v1/gpus/l4-24gb",
        412,
        _gpu(id="l4-24gb", aliases=[]),
        headers={"If-Match": 'W/"1"'},
        problem_type="precondition-failed",
    ),
    Case(  # a well-formed entity-tag that names no version: 412, not 400
        "etag naming no version",
        "PATCH",
        "/v1/gpus/l4-24gb",
        412,
        {"tdp_watts": 1},
        headers={"If-Match": '"abc"'},
        problem_type="precondition-failed",
    ),
    Case(
        "etag null",
        "PATCH",
        "/v1/gpus/l4-24gb",
        400,
        {"tdp_watts": 1},
        headers={"If-Match": "null"},
        problem_type="bad-etag",
    ),
    Case(
        "put with other id",
        "PUT",
        "/v1/gpus/l4-24gb",
        422,
        _gpu(id="l4-24gb-b", aliases=[]),
        problem_type="invalid-input",
        error_field="id",
    ),
    Case(
        "unknown gpu id",
        "PATCH",
        "/v1/gpus/no-such-gpu",
        404,
        {"tdp_watts": 1},
        problem_type="not-found",
    ),
    Case(
        "unknown model id",
        "DELETE",
        "/v1/models/no-such-model",
        404,
        None,
        problem_type="not-found",
    ),
    Case(
        "delete with stale etag",
        "DELETE",
        "/v1/gpus/l4-24gb",
        412,
        None,
        headers={"If-Match": '"9"'},
        problem_type="precondition-failed",
    ),
    Case("limit above 500", "GET", "/v1/gpus", 422, params={"limit": "501"}, error_field="limit"),
    Case(
        "negative offset", "GET", "/v1/models", 422, params={"offset": "-1"}, error_field="offset"
    ),
    Case(
        "filter beyond a 64-bit column",  # used to reach the database and come back a 500
        "GET",
        "/v1/gpus",
        422,
        params={"min_memory_bytes": str(10**20)},
        error_field="min_memory_bytes",
    ),
    # PostgreSQL cannot store a NUL in text, nor compare with one: these were 500s there.
    Case("NUL in a name", "POST", "/v1/gpus", 422, _gpu(name="H\x00100"), error_field="name"),
    Case(
        "NUL in an alias", "POST", "/v1/gpus", 422, _gpu(aliases=["H\x00"]), error_field="aliases"
    ),
    Case(
        "NUL in a filter", "GET", "/v1/gpus", 422, params={"vendor": "nv\x00"}, error_field="vendor"
    ),
    # An estimate body's NUL check is skipped only when its bytes hold no \u0000 escape.
    Case(
        "NUL in an estimate's engine",
        "POST",
        "/v1/estimates/prefill",
        422,
        {"model": "llama-3-8b", "gpu": "h100-sxm5-80gb", "prompt_tokens": 8, "engine": "v\x00"},
        error_field="engine",
    ),
    Case(
        "NUL in an estimate's model, as the JSON escape",
        "POST",
        "/v1/estimates/decode",
        422,
        content=b'{"model": "llama\\u0000", "gpu": "h100-sxm5-80gb", "batch_size": 1, '
        b'"context_tokens": 8}',
        headers={"content-type": "application/json"},
        error_field="model",
    ),
    Case(
        "published params beyond a 64-bit column",
        "POST",
        "/v1/models",
        422,
        _model(published_params=10**20),
        error_field="published_params",
    ),
    Case(
        "no api key",
        "POST",
        "/v1/models",
        401,
        _model(),
        headers={"Authorization": ""},
        problem_type="unauthenticated",
    ),
    Case(
        "wrong api key",
        "POST",
        "/v1/models",
        403,
        _model(),
        headers={"Authorization": "Bearer nope"},
        problem_type="forbidden",
    ),
    Case("method not allowed", "DELETE", "/v1/gpus", 405, None, problem_type="method-not-allowed"),
    Case(
        "hf import without id",
        "POST",
        "/v1/models/hf-import",
        422,
        {"architectures": ["LlamaForCausalLM"]},
        error_field="id",
    ),
]


@functools.cache
def _committed_openapi() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(COMMITTED.read_text(encoding="utf-8"))
    return document


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_refused_and_nothing_written(client: TestClient, settings: Settings, case: Case) -> None:
    before = snapshot(settings.database_url)
    headers = {**AUTH, **case.headers}
    if headers.get("Authorization") == "":
        del headers["Authorization"]
    response = client.request(
        case.method,
        case.path,
        json=case.json if case.content is None else None,
        content=case.content,
        headers=headers,
        params=case.params,
    )
    assert response.status_code == case.status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == case.status
    assert problem["title"] and problem["detail"]
    assert problem["instance"] == case.path
    assert problem["request_id"] == response.headers["x-request-id"]
    if case.problem_type is not None:
        assert problem["type"] == f"/problems/{case.problem_type}"
    if case.error_field is not None:
        assert case.error_field in [error["field"] for error in problem["errors"]], problem
    assert snapshot(settings.database_url) == before
    # ... and the status is one the OpenAPI document declares for the operation (the committed
    # document, which test_openapi holds to the served one).
    assert isinstance(client.app, FastAPI)
    template = template_of(client.app, case.path)
    assert template is not None
    operation = _committed_openapi()["paths"][template].get(case.method.lower())
    if operation is not None:  # a 405 has no operation to declare it
        assert str(case.status) in operation["responses"], (template, case.method, case.status)


def test_there_are_at_least_25_distinct_cases() -> None:
    assert len({case.name for case in CASES}) == len(CASES) >= 25
