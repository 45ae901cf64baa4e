"""Warm the hot path before the server says it is ready.

A process's first estimate on a GPU parses that GPU's default profile (15-170 ms each, a
silicon-database profile being 9-15 MiB of tables) and builds its cost model and JSON writer.
Right after `/readyz` turned 200, 32 connections of memoised decode estimates had a p99 of
0.6-0.7 s against 0.3 s once warm (`scripts/bench_ready.py`, 2-core machine): the first
requests queued behind those parses. Answering one decode estimate per GPU with a profile of
its own at start-up, before the server accepts connections, moves that work ahead of ready.
At most `PROFILES_KEPT` profiles are parsed (the library keeps no more), the GPUs in catalog
order.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.catalog.profiles import PROFILES_KEPT, choose_engine, profile_refs
from app.catalog.repository import GpuRepository, ModelRepository
from app.catalog.spec_cache import SpecCache
from app.errors import DomainError
from app.estimates import schemas, service
from app.estimates.endpoints import _written

__all__ = ["WARM_MODEL", "warm_estimates"]

_log = logging.getLogger("ridgeline")

WARM_MODEL = "llama-3.1-8b"
"""The model the warming estimates ask about (any catalog model serves; this one fits every
catalog GPU)."""


def warm_estimates(session_factory: sessionmaker[Session], cache: SpecCache) -> list[str]:
    """Answer one decode estimate on each catalog GPU whose default profile is its own, until
    `PROFILES_KEPT` profiles are parsed; the GPUs warmed, in order."""
    started = time.perf_counter()
    try:
        defaults, model = _defaults(session_factory)
    except SQLAlchemyError:  # not migrated yet, or away: /readyz says so; nothing to warm
        _log.warning("nothing warmed: the catalog could not be read", exc_info=True)
        return []
    if model is None:
        return []
    warmed: list[str] = []
    parsed: set[str] = set()
    for gpu, profile_id in defaults:
        if profile_id in parsed:
            continue
        if len(parsed) == PROFILES_KEPT:
            break
        body = {"model": model, "gpu": gpu, "batch_size": 8, "context_tokens": 1024}
        try:
            query = schemas.DecodeRequest.model_validate(body).query()
            _written(schemas.DecodeResponse, service.decode(cache, query))
        except DomainError:  # a GPU the model does not fit: its first request pays instead
            continue
        parsed.add(profile_id)
        warmed.append(gpu)
    _log.info(
        "warmed the estimates of %d GPUs in %.2f s: %s",
        len(warmed),
        time.perf_counter() - started,
        ", ".join(warmed),
    )
    return warmed


def _defaults(
    session_factory: sessionmaker[Session],
) -> tuple[list[tuple[str, str]], str | None]:
    """(GPU, its default profile's id) for each catalog GPU with a profile of its own, in
    catalog order, and the model to ask about (None: the catalog has none)."""
    with session_factory() as session:
        models = [row.id for row in ModelRepository(session).all()]
        model = WARM_MODEL if WARM_MODEL in models else (models[0] if models else None)
        defaults: list[tuple[str, str]] = []
        for row in GpuRepository(session).all():
            choice = choose_engine(None, profile_refs(session, row.id), gpu=row.id)
            if choice.profile is not None:
                defaults.append((row.id, choice.profile.id))
    return defaults, model
