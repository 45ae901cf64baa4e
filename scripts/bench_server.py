"""The app as `make run` serves it, plus two bare endpoints that return a constant.

The bare endpoints pass through the same middleware and server, so the ratio of an endpoint's
throughput to theirs cancels most of the machine's noise.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.main import create_app


def create_bench_app() -> FastAPI:
    app = create_app()

    @app.get("/bench/constant", include_in_schema=False)
    async def constant_get() -> dict[str, Any]:
        return {"status": "ok"}

    @app.post("/bench/constant", include_in_schema=False)
    async def constant_post(body: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok"}

    return app
