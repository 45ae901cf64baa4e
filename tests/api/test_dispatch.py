"""Static route dispatch (`app.web.dispatch`): a request for a path without parameters reaches
the route FastAPI's own routing would pick, with the same scope, and everything else is routed
by FastAPI unchanged. And FastAPI's native telemetry, off unless asked for; `app.state` as plain
attributes."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.testclient import TestClient
from opentelemetry import trace

from app.main import create_app
from app.settings import Settings
from app.web.dispatch import StaticDispatch, install_static_dispatch
from app.web.heavy import HeavyWork
from app.web.state import AppState
from tests.conftest import AUTH

PREFILL = {"model": "llama-3-8b", "gpu": "l4-24gb", "prompt_tokens": 2048}


def _dispatch(app: FastAPI) -> StaticDispatch:
    """The app's dispatch; tests put FastAPI's routing (`generic`) in its place for a while."""
    dispatch = app.router.middleware_stack
    assert isinstance(dispatch, StaticDispatch)
    return dispatch


def test_the_service_dispatches_its_hot_paths_by_table(app: FastAPI) -> None:
    # Fails when a FastAPI upgrade renames the internals the table reads (the table is empty
    # then, and requests are routed by FastAPI: correct, slower).
    table = _dispatch(app).table
    for path in (
        "/v1/estimates/prefill",
        "/v1/estimates/decode",
        "/v1/estimates/request",
        "/v1/estimates/batch-ceiling",
        "/v1/estimates/tp-feasibility",
        "/v1/recommendations/chunk-size",
        "/v1/roofline",
    ):
        assert ("POST", path) in table
        assert table["POST", path].route.path == path
    assert ("GET", "/healthz") in table
    assert ("GET", "/v1/gpus") in table and ("POST", "/v1/gpus") in table
    # Paths with parameters are FastAPI's to route.
    assert all("{" not in path for _, path in table)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/estimates/prefill", PREFILL),
        ("POST", "/v1/estimates/prefill", {**PREFILL, "prompt_tokens": -1}),  # 422
        ("POST", "/v1/estimates/prefill", {**PREFILL, "gpu": "no-such-gpu"}),  # 404
        ("GET", "/v1/estimates/prefill", None),  # 405 by FastAPI's routing
        ("GET", "/v1/gpus", None),
        ("GET", "/v1/gpus/l4-24gb", None),  # a parameter: FastAPI's routing
        ("GET", "/v1/nowhere", None),  # 404 by FastAPI's routing
        ("GET", "/healthz", None),
    ],
)
def test_answers_are_those_of_fastapis_routing(
    app: FastAPI, method: str, path: str, body: dict[str, Any] | None
) -> None:
    dispatch = _dispatch(app)
    with TestClient(app, raise_server_exceptions=False) as client:
        by_table = client.request(method, path, json=body, headers=AUTH)
        app.router.middleware_stack = dispatch.generic  # type: ignore[assignment]
        try:
            by_fastapi = client.request(method, path, json=body, headers=AUTH)
        finally:
            app.router.middleware_stack = dispatch
    assert by_table.status_code == by_fastapi.status_code
    assert _without_request_id(by_table) == _without_request_id(by_fastapi)
    same = {"content-type", "allow", "etag", "content-length"}
    assert {k: v for k, v in by_table.headers.items() if k in same} == {
        k: v for k, v in by_fastapi.headers.items() if k in same
    }


def test_estimate_routes_answer_through_their_direct_app(app: FastAPI) -> None:
    """Estimate routes are dispatched to their own direct app (no FastAPI exit stacks); other
    routes to FastAPI's handler."""
    table = _dispatch(app).table
    estimate = table["POST", "/v1/estimates/prefill"]
    assert estimate.app is not estimate.context.app
    health = table["GET", "/healthz"]
    assert health.app is health.context.app


@pytest.mark.parametrize(
    ("content", "content_type"),
    [
        (b'{"model": "llama-3-8b", "gpu": "l4-24gb", "prompt_tokens": 2048}', "application/json"),
        (b'{"model": "llama-3-8b", "gpu": "l4-24gb", "prompt_tokens": 0}', "application/json"),
        (b'{"model": "llama-3-8b", "gpu":', "application/json"),  # malformed: 400
        (b'{"model": "llama-3-8b", "gpu": "l4-24gb", "prompt_tokens": 8}', "text/plain"),  # 415
        (b"", "application/json"),
        (b'{"model": "llama-3-8b", "gpu": "l4-24gb", "prompt_tokens": 8}', "application/json; x=1"),
    ],
)
def test_the_direct_estimate_app_answers_as_fastapi_does(
    app: FastAPI, content: bytes, content_type: str
) -> None:
    """What the direct app refuses goes to FastAPI's handler with the body it read replayed:
    every answer is the one FastAPI's routing gives."""
    dispatch = _dispatch(app)
    headers = {"content-type": content_type}
    with TestClient(app, raise_server_exceptions=False) as client:
        by_table = client.post("/v1/estimates/prefill", content=content, headers=headers)
        app.router.middleware_stack = dispatch.generic  # type: ignore[assignment]
        try:
            by_fastapi = client.post("/v1/estimates/prefill", content=content, headers=headers)
        finally:
            app.router.middleware_stack = dispatch
    assert by_table.status_code == by_fastapi.status_code
    assert _without_request_id(by_table) == _without_request_id(by_fastapi)


def _without_request_id(response: Any) -> object:
    """The body, less a problem document's request id (each request has its own)."""
    if response.headers.get("content-type") != "application/problem+json":
        return response.content
    problem = response.json()
    assert problem.pop("request_id") == response.headers["x-request-id"]
    return problem


def _scope_app(*, shadowed: bool) -> tuple[FastAPI, list[dict[str, Any]]]:
    """An app whose routes record the scope they were called with; with `shadowed`, a
    parameterised route declared first also matches the static path."""
    seen: list[dict[str, Any]] = []
    router = APIRouter(prefix="/items")

    if shadowed:

        @router.get("/{item}")
        async def by_id(item: str, request: Request) -> dict[str, str]:
            seen.append(dict(request.scope))
            return {"route": "by_id", "item": item}

    @router.get("/latest")
    async def latest(request: Request) -> dict[str, str]:
        seen.append(dict(request.scope))
        return {"route": "latest"}

    app = FastAPI()
    app.include_router(router)
    return app, seen


@pytest.mark.parametrize("shadowed", [False, True])
def test_the_route_and_scope_are_fastapis(shadowed: bool) -> None:
    app, seen = _scope_app(shadowed=shadowed)
    generic = app.router.middleware_stack
    dispatch = install_static_dispatch(app)
    # A static path that an earlier parameterised route matches is not in the table: FastAPI
    # gives it to the earlier route, and so does the service.
    assert (("GET", "/items/latest") in dispatch.table) is not shadowed
    with TestClient(app) as client:
        by_table = client.get("/items/latest").json()
        app.router.middleware_stack = generic
        by_fastapi = client.get("/items/latest").json()
    assert (
        by_table
        == by_fastapi
        == ({"route": "by_id", "item": "latest"} if shadowed else {"route": "latest"})
    )
    table_scope, fastapi_scope = seen
    for key in ("route", "endpoint", "path_params", "router", "path", "method"):
        assert table_scope[key] == fastapi_scope[key], key
    assert table_scope["fastapi"].keys() == fastapi_scope["fastapi"].keys()


def test_behind_a_proxy_prefix_fastapi_routes() -> None:
    app, seen = _scope_app(shadowed=False)
    install_static_dispatch(app)
    with TestClient(app, root_path="/api") as client:
        assert client.get("/items/latest").json() == {"route": "latest"}
    assert seen[0]["root_path"] == "/api"


def test_a_route_added_after_the_table_is_routed_by_fastapi() -> None:
    app, _ = _scope_app(shadowed=False)
    dispatch = install_static_dispatch(app)

    @app.get("/later")
    async def later() -> dict[str, str]:
        return {"route": "later"}

    assert ("GET", "/later") not in dispatch.table
    with TestClient(app) as client:
        assert client.get("/later").json() == {"route": "later"}


@pytest.mark.parametrize("opentelemetry", [False, True])
def test_opentelemetry_is_asked_for_only_when_turned_on(
    settings: Settings, heavy_work: HeavyWork, monkeypatch: pytest.MonkeyPatch, opentelemetry: bool
) -> None:
    # FastAPI's native telemetry looks up the global providers on every request; off (the
    # default), a request never does.
    asked: list[int] = []
    real = trace.get_tracer_provider

    def counted() -> trace.TracerProvider:
        asked.append(1)
        return real()

    monkeypatch.setattr(trace, "get_tracer_provider", counted)
    app = create_app(settings.model_copy(update={"opentelemetry": opentelemetry}), heavy_work)
    with TestClient(app) as client:
        for _ in range(3):
            assert client.get("/healthz").status_code == 200
    assert (len(asked) >= 3) is opentelemetry


def test_app_state_reads_as_plain_attributes_and_behaves_as_state(app: FastAPI) -> None:
    assert isinstance(app.state, AppState)
    state = AppState()
    state.cache = {"a": 1}
    assert state.cache == {"a": 1}
    assert vars(state)["cache"] is state._state["cache"]  # a plain attribute, and State's entry
    state.cache = None
    assert state.cache is None and state._state["cache"] is None
    del state.cache
    assert "cache" not in state._state and "cache" not in vars(state)
    with pytest.raises(AttributeError):
        _ = state.cache
    assert getattr(state, "cache", "missing") == "missing"


def test_fastapi_and_starlette_are_the_releases_the_internals_were_checked_against() -> None:
    """The fast paths read FastAPI's private routing names; on another release they may fall
    back silently to FastAPI's routing (still correct, only slower). Moving the bounds in
    pyproject.toml means checking them again and updating `CHECKED_AGAINST`."""
    from importlib.metadata import version  # noqa: PLC0415

    from app.web.dispatch import _INTERNALS, CHECKED_AGAINST  # noqa: PLC0415

    for package, checked in CHECKED_AGAINST.items():
        assert version(package).split(".")[:2] == checked.split(".")[:2], package
    assert _INTERNALS
