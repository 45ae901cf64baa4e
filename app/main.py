"""The FastAPI application: `create_app()` wires settings, database, routes and middleware.

Run it with `uvicorn --factory app.main:create_app` (what `make run` does).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from anyio import to_thread
from fastapi import FastAPI

from app import __version__
from app.bundled import load_bundled_catalog
from app.capacity import endpoints as capacity
from app.catalog import endpoints as catalog
from app.catalog.invalidation import catalog_caches
from app.catalog.representations import Representation, Representations, target_of
from app.db.session import DatabaseLimits, make_engine, make_session_factory
from app.deployments import endpoints as deployments
from app.estimates import endpoints as estimates
from app.estimates.warm import warm_estimates
from app.logs import configure_logging
from app.plans import endpoints as plans
from app.plans.jobs import worker_limits
from app.plans.queue import plan_jobs
from app.profiles import endpoints as profiles
from app.runs import endpoints as runs
from app.runs.validation import watch as watch_expected_errors
from app.serving_runs import endpoints as serving_runs
from app.settings import Settings, get_settings
from app.simulations import endpoints as simulations
from app.validation import endpoints as validation
from app.web import health
from app.web.dispatch import install_static_dispatch
from app.web.docs_ui import install_docs
from app.web.heavy import HeavyWork, HeavyWorkLimits
from app.web.memo import ResponseMemo
from app.web.metrics import HttpMetrics
from app.web.middleware import KeptAnswers, ObservabilityMiddleware, ObservedFastAPI
from app.web.openapi import install_openapi
from app.web.problems import install_problem_handlers
from app.web.state import AppState

__all__ = ["create_app"]

_log = logging.getLogger("ridgeline")

DESCRIPTION = """
Ridgeline answers the questions asked before and while serving a large language model on GPUs:
time to first token, time per output token, how many sequences fit, which tensor-parallel degree
works, which prefill chunk keeps a latency SLA, and how many GPUs of which kind a traffic needs.

Reads are open. Writes need an API key (`Authorization: Bearer <key>` or `X-API-Key`).
Every entry has an `ETag`; send it back in `If-Match` to make a write conditional (412 when
stale). Errors are RFC 9457 `application/problem+json`.
"""


def database_limits(settings: Settings) -> DatabaseLimits:
    return DatabaseLimits(
        pool_size=settings.worker_threads,
        max_overflow=4,
        pool_timeout_s=settings.db_pool_timeout_s,
        lock_timeout_ms=settings.db_lock_timeout_ms,
        statement_timeout_ms=settings.db_statement_timeout_ms,
        idle_in_transaction_timeout_ms=settings.db_idle_in_transaction_timeout_ms,
        sqlite_busy_timeout_ms=settings.sqlite_busy_timeout_ms,
    )


def heavy_work_limits(settings: Settings) -> HeavyWorkLimits:
    return HeavyWorkLimits(
        processes=settings.heavy_work_processes,
        queue=settings.heavy_work_queue,
        timeout_s=settings.heavy_work_timeout_s,
        memory_bytes=settings.heavy_work_memory_bytes,
    )


def create_app(settings: Settings | None = None, heavy_work: HeavyWork | None = None) -> FastAPI:
    """The app. `heavy_work` shares one pool of heavy-work processes between apps (the tests
    do); by default the app starts its own with the first heavy job and stops it at shutdown."""
    settings = settings or get_settings()
    configure_logging(settings.log_level)
    owns_heavy_work = heavy_work is None
    heavy = heavy_work or HeavyWork(heavy_work_limits(settings))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limits = database_limits(settings)
        engine = make_engine(settings.database_url, limits)
        app.state.database_limits = limits
        session_factory = make_session_factory(engine)
        app.state.engine = engine
        app.state.session_factory = session_factory
        # Catalog specs for estimates and catalog answers as sent: a committed catalog write
        # drops what it changed from both at once, and on PostgreSQL from every other
        # process's too (app.catalog.invalidation).
        invalidation, spec_cache, app.state.representations = catalog_caches(
            session_factory, settings.database_url, settings.catalog_cache_ttl_s
        )
        watch_expected_errors(session_factory)  # and refreshes the GPU's expected error
        app.state.spec_cache = spec_cache
        app.state.response_memo = ResponseMemo(
            settings.response_memo_entries, settings.response_memo_mib * 1024 * 1024
        )
        # Thread-pool work here is CPU-bound Python (ORM reads, plans): more threads than a few
        # only fight over the GIL. Starlette's default is 40.
        to_thread.current_default_thread_limiter().total_tokens = settings.worker_threads
        if settings.load_catalog_on_start:
            with session_factory.begin() as session:
                load_bundled_catalog(session)
        if not settings.api_keys:
            _log.warning("no API keys configured (RIDGELINE_API_KEYS): every write gets 403")
        try:
            async with (
                invalidation.listening(settings.database_url),
                plan_jobs(
                    settings, session_factory, spec_cache, heavy, worker_limits(settings)
                ) as app.state.plan_jobs,
            ):
                # Plans: procrastinate's queue on PostgreSQL, an in-process worker on SQLite;
                # this process runs `plan_workers` plans at once (app.plans.queue).
                if settings.warm_on_start:
                    # Before the server accepts connections, and after the catalog listener
                    # (whose every connection clears the caches): ready means warm.
                    await to_thread.run_sync(warm_estimates, session_factory, spec_cache)
                yield
        finally:
            if owns_heavy_work:
                heavy.close()
            engine.dispose()

    app = ObservedFastAPI(
        title="Ridgeline",
        version=__version__,
        summary="Capacity planning for large-language-model inference.",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served from the package's own assets: app.web.docs_ui
        redoc_url=None,
        telemetry=None
        if settings.opentelemetry
        else {"tracing": False, "metrics": False, "logs": False},
    )
    app.state = AppState()  # app.state reads on the hot path at plain-attribute cost
    app.state.settings = settings
    app.state.heavy_work = heavy
    app.state.metrics = HttpMetrics(heavy)
    install_problem_handlers(app)
    # Routes are matched in order: probes, then the scheduler's hot path (estimates; repeated
    # catalog reads are answered before routing). Paths without parameters are then looked up
    # by one dict (app.web.dispatch).
    for router in (
        health.router,
        estimates.router,
        catalog.gpu_router,
        catalog.model_router,
        runs.run_router,
        runs.calibration_router,
        simulations.router,
        plans.router,
        deployments.router,
        capacity.router,
        profiles.router,
        serving_runs.router,
        validation.router,
    ):
        app.include_router(router)
    install_docs(app)
    install_openapi(app)
    install_static_dispatch(app)
    app.add_middleware(
        ObservabilityMiddleware,
        metrics=app.state.metrics,
        max_body_bytes=settings.max_body_bytes,
        fastapi_app=app,
        kept_answers=_kept_catalog_reads(app),
    )
    return app


def _kept_catalog_reads(app: FastAPI) -> KeptAnswers:
    """The catalog reads the app keeps (`app.state.representations`, made at start-up), as the
    middleware answers repeats of them before routing."""

    def kept(path: str, query: bytes) -> Representation | None:
        cache: Representations | None = getattr(app.state, "representations", None)
        return None if cache is None else cache.get(target_of(path, query))

    return kept
