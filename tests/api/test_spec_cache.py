"""`SpecCache` shared by the event loop and the thread pool: a write's invalidation is never
undone by a fill that read the row before the write, and the loop never reads the database."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.catalog.profiles import PROFILES_KEPT, ProfileLibrary, bundled_refs
from app.catalog.spec_cache import NotCached, SpecCache
from app.db.session import make_engine, make_session_factory
from app.settings import Settings

GPU = "h100-sxm5-80gb"


@pytest.fixture
def sessions(settings: Settings) -> Iterator[Any]:
    engine = make_engine(settings.database_url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


def test_a_fill_that_raced_an_invalidation_is_returned_but_not_kept(sessions: Any) -> None:
    cache: SpecCache

    @contextmanager
    def session_with_a_write_meanwhile() -> Iterator[Session]:
        with sessions() as session:
            yield session
        # What get_session does when another request's write commits during this read.
        cache.invalidate("gpu", GPU)

    cache = SpecCache(session_with_a_write_meanwhile, ttl_s=300.0)  # type: ignore[arg-type]
    entry = cache.gpu(GPU)
    assert entry.spec.id == GPU
    assert cache.peek_gpu(GPU) is None  # the next estimate reads the row again
    assert cache.generations(gpu=GPU) is None


def test_a_quiet_fill_is_kept_with_a_new_generation(sessions: Any) -> None:
    cache = SpecCache(sessions, ttl_s=300.0)
    cache.gpu(GPU)
    first = cache.generations(gpu=GPU)
    assert first is not None and cache.peek_gpu(GPU) is not None
    cache.invalidate("gpu", GPU)
    cache.gpu(GPU)
    second = cache.generations(gpu=GPU)
    assert second is not None and second != first


def test_cached_only_raises_on_a_miss_without_reading(sessions: Any) -> None:
    def no_database() -> Session:
        raise AssertionError("the event loop read the database")

    cache = SpecCache(no_database, ttl_s=300.0)  # type: ignore[arg-type]
    with cache.cached_only(), pytest.raises(NotCached):
        cache.gpu(GPU)
    filled = SpecCache(sessions, ttl_s=300.0)
    filled.gpu(GPU)
    with filled.cached_only():
        assert filled.gpu(GPU).spec.id == GPU  # a hit needs no database


@pytest.mark.parametrize(
    ("gpu", "nearest"),
    [
        # The same architecture only, the nearest datasheet (bf16 peak, bandwidth) first.
        ("h100-pcie-80gb", ("h100-sxm5-80gb", "h200-sxm-141gb")),
        ("h20-96gb", ("h100-sxm5-80gb", "h200-sxm-141gb")),
        ("a10g-24gb", ("a100-sxm4-80gb",)),
        ("l4-24gb", ("l40s-48gb",)),
        # A GPU with tables of its own still has relatives (for an engine it has none of).
        ("h100-sxm5-80gb", ("h200-sxm-141gb",)),
        # Blackwell: the RTX PRO 6000 (GDDR7) is far from all; equal datasheets by id.
        ("rtx-pro-6000-96gb", ("b300-sxm-288gb", "b200-sxm-180gb", "gb200-186gb", "gb300-288gb")),
        # Another vendor's kernels are other software: no relatives.
        ("mi300x-192gb", ()),
    ],
)
def test_a_gpus_relatives_are_its_architectures_gpus_with_tables_nearest_first(
    sessions: Any, gpu: str, nearest: tuple[str, ...]
) -> None:
    relatives = SpecCache(sessions, ttl_s=300.0).gpu(gpu).relatives
    assert relatives == nearest


def test_a_profile_still_in_use_is_parsed_once_however_often_it_is_asked_for(
    sessions: Any,
) -> None:
    """Past the most recent `PROFILES_KEPT` a profile leaves the library; asked for again while
    a timer still holds it, the library answers that same copy (re-parsing made a second one
    of 9-15 MiB); once nothing holds it, the library lets it go."""
    library = ProfileLibrary(sessions)
    refs = bundled_refs()
    first = library.profile(refs[0])
    for ref in refs[1 : PROFILES_KEPT + 2]:
        library.profile(ref)  # refs[0] leaves the most recent
    assert library.profile(refs[0]) is first
    del first
    for ref in refs[1 : PROFILES_KEPT + 2]:
        library.profile(ref)
    gc.collect()
    assert library.cached(refs[0]) is None  # held by nothing: gone, not kept aside
