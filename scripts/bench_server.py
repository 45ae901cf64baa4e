"""The apps the benchmarks serve.

`create_plain_app`: a plain FastAPI app (no middleware; `GET /constant` returns a constant), the
yardstick every figure is divided by; its `POST /constant` parses a small pydantic body.
`create_bench_app`: Ridgeline as `make run` serves it. `create_bare_ridgeline_app`: Ridgeline
without its middleware, to price the middleware alone.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from app.main import create_app
from app.web.middleware import ObservabilityMiddleware


class _Body(BaseModel):
    model: str
    gpu: str
    prompt_tokens: int = 1


def create_plain_app() -> FastAPI:
    app = FastAPI()

    @app.get("/constant")
    async def constant_get() -> dict[str, Any]:
        return {"status": "ok"}

    @app.post("/constant")
    async def constant_post(body: _Body) -> dict[str, Any]:
        return {"status": "ok"}

    return app


def create_bench_app() -> FastAPI:
    return create_app()


def create_bare_ridgeline_app() -> FastAPI:
    app = create_app()
    app.user_middleware = [
        m
        for m in app.user_middleware
        if getattr(m.cls, "__name__", None) != ObservabilityMiddleware.__name__
    ]
    return app
