"""Liveness, readiness, metrics, request ids, and what the app does with unexpected faults."""

from __future__ import annotations

import json
import logging
from typing import Any, cast

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.db.session import make_engine


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_readyz_follows_the_database(client: TestClient, app: FastAPI) -> None:
    assert client.get("/readyz").status_code == 200
    real_engine = app.state.engine
    # Nothing listens on port 1: the database is "down".
    app.state.engine = make_engine(
        "postgresql+psycopg://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 1}
    )
    try:
        down = client.get("/readyz")
        assert down.status_code == 503
        assert down.headers["content-type"] == "application/problem+json"
        assert down.json()["type"] == "/problems/database-unavailable"
        assert down.headers["retry-after"] == "5"
    finally:
        app.state.engine.dispose()
        app.state.engine = real_engine
    assert client.get("/readyz").status_code == 200  # back when the database is


def test_request_id_is_honoured_or_made(client: TestClient) -> None:
    given = client.get("/healthz", headers={"X-Request-ID": "trace-abc.123"})
    assert given.headers["x-request-id"] == "trace-abc.123"
    made = client.get("/healthz")
    assert len(made.headers["x-request-id"]) == 32
    junk = client.get("/healthz", headers={"X-Request-ID": "has spaces and \x7f"})
    assert junk.headers["x-request-id"] != "has spaces and \x7f"


def test_metrics_count_by_route_template(fresh_client: TestClient) -> None:
    client = fresh_client
    client.get("/v1/gpus/l4-24gb")
    client.get("/v1/gpus/a10g-24gb")
    client.get("/v1/gpus/not-there")
    text = client.get("/metrics").text
    assert (
        'ridgeline_http_requests_total{method="GET",route="/v1/gpus/{entry_id}",status="200"} 2.0'
        in text
    )
    assert (
        'ridgeline_http_requests_total{method="GET",route="/v1/gpus/{entry_id}",status="404"} 1.0'
        in text
    )
    assert 'ridgeline_http_request_duration_seconds_bucket{le="0.005",method="GET"' in text


def test_access_log_is_json_with_request_id(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    from app.logs import JsonFormatter  # noqa: PLC0415

    with caplog.at_level(logging.INFO, logger="ridgeline.access"):
        client.get("/v1/gpus/l4-24gb", headers={"X-Request-ID": "log-me"})
    record = next(r for r in caplog.records if r.name == "ridgeline.access")
    line = json.loads(JsonFormatter().format(record))
    assert line["route"] == "/v1/gpus/{entry_id}"
    assert line["status"] == 200
    assert line["duration_ms"] > 0


def test_unexpected_error_is_a_problem_not_a_traceback(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.catalog import service as catalog  # noqa: PLC0415

    def explode(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(catalog.CatalogEntries, "get", explode)
    response = client.get("/v1/gpus/l4-24gb")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert "secret internals" not in response.text
    assert response.json()["request_id"] == response.headers["x-request-id"]


def _layers(app: Any) -> list[str]:
    names: list[str] = []
    while app is not None and len(names) < 20:
        names.append(type(app).__name__)
        app = getattr(app, "app", None)
    return names


def test_the_middleware_takes_the_place_of_starlettes_outer_error_handler() -> None:
    """Starlette's `ServerErrorMiddleware` would only ever re-raise what the middleware lets
    through (after a response started), so the app leaves it out; without the middleware it
    stays, or an unhandled error would reach the server unanswered."""
    from app.main import create_app  # noqa: PLC0415
    from app.web.middleware import ObservabilityMiddleware  # noqa: PLC0415

    app = create_app()
    observed = _layers(app.build_middleware_stack())
    assert "ServerErrorMiddleware" not in observed
    assert "ObservabilityMiddleware" in observed
    app.user_middleware = [
        m for m in app.user_middleware if cast(object, m.cls) is not ObservabilityMiddleware
    ]
    assert _layers(app.build_middleware_stack())[0] == "ServerErrorMiddleware"
