"""Uploading a run: the request the service gets, and what a refusal looks like."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from app.bench.upload import UploadError, upload_run
from app.formats.run_document import RunDocument


@pytest.fixture
def document(document_dict: dict[str, Any]) -> RunDocument:
    return RunDocument.model_validate(document_dict)


def test_upload_posts_the_document_with_the_key(document: RunDocument) -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"id": "run-42"})

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        run_id = upload_run(document, "https://ridgeline.test/", "s3cret", client=client)
    assert run_id == "run-42"
    (request,) = seen
    assert request.method == "POST"
    assert str(request.url) == "https://ridgeline.test/v1/benchmark-runs"
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert request.headers["Content-Type"] == "application/json"
    assert RunDocument.model_validate(json.loads(request.content)) == document


def test_refusal_carries_the_problem_detail(document: RunDocument) -> None:
    problem = {
        "type": "about:blank",
        "title": "Unprocessable Content",
        "status": 422,
        "detail": "points[0].prompt_tokens: 4096 exceeds the model's max_context_tokens",
    }

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422, json=problem, headers={"Content-Type": "application/problem+json"}
        )

    with (
        httpx.Client(transport=httpx.MockTransport(answer)) as client,
        pytest.raises(UploadError) as raised,
    ):
        upload_run(document, "https://ridgeline.test", "s3cret", client=client)
    assert raised.value.status == 422
    assert "HTTP 422: Unprocessable Content: points[0].prompt_tokens: 4096 exceeds" in str(
        raised.value
    )


def test_refusal_without_problem_document_shows_the_body(document: RunDocument) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="Bad Gateway from the proxy")

    with (
        httpx.Client(transport=httpx.MockTransport(answer)) as client,
        pytest.raises(UploadError, match="HTTP 502: Bad Gateway from the proxy"),
    ):
        upload_run(document, "https://ridgeline.test", "k", client=client)


def test_unreachable_service_is_an_upload_error(document: RunDocument) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (
        httpx.Client(transport=httpx.MockTransport(answer)) as client,
        pytest.raises(UploadError, match="connection refused") as raised,
    ):
        upload_run(document, "https://ridgeline.test", "k", client=client)
    assert raised.value.status is None


def test_success_without_an_id_is_an_upload_error(document: RunDocument) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json={"status": "stored"})

    with (
        httpx.Client(transport=httpx.MockTransport(answer)) as client,
        pytest.raises(UploadError, match="without a run id"),
    ):
        upload_run(document, "https://ridgeline.test", "k", client=client)
