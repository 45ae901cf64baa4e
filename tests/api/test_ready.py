"""Ready means ready: before the server accepts connections (and so before `/readyz` can say
200), each catalog GPU with a profile of its own has answered a decode estimate, so its
default profile is parsed and the first requests do not queue behind that
(`scripts/bench_ready.py` measures the first seconds; docs/performance.md)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.catalog.profiles import PROFILES_KEPT, choose_engine, profile_refs
from app.main import create_app
from app.settings import Settings
from app.targets import service as targets
from app.web.heavy import HeavyWork


def _default_ref(app_state: object, gpu: str) -> object:
    with app_state.session_factory() as session:  # type: ignore[attr-defined]
        choice = choose_engine(None, profile_refs(session, gpu), gpu=gpu)
    assert choice.profile is not None
    return choice.profile


def test_the_gpus_default_profiles_are_parsed_before_the_first_request(
    settings: Settings, heavy_work: HeavyWork, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process's kept timers (one app per process in production) may hold another test
    # app's parsed profiles: start from none, as a server does.
    monkeypatch.setattr(targets, "_PROFILED", targets._Recent(targets.PROFILED_TIMERS_KEPT))
    warm = create_app(settings.model_copy(update={"warm_on_start": True}), heavy_work)
    with TestClient(warm) as client:
        cache = warm.state.spec_cache
        parsed = [
            gpu
            for gpu in ("h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb", "b200-sxm-180gb")
            if cache.profiles.cached(_default_ref(warm.state, gpu)) is not None
        ]
        assert parsed == ["h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb", "b200-sxm-180gb"]
        assert client.get("/readyz").status_code == 200
    monkeypatch.setattr(targets, "_PROFILED", targets._Recent(targets.PROFILED_TIMERS_KEPT))
    cold = create_app(settings.model_copy(update={"warm_on_start": False}), heavy_work)
    with TestClient(cold):
        ref = _default_ref(cold.state, "h100-sxm5-80gb")
        assert cold.state.spec_cache.profiles.cached(ref) is None
    assert PROFILES_KEPT == 8  # the warm-up parses no more than the library keeps


def test_warming_without_a_catalog_leaves_the_server_to_start(
    settings: Settings, heavy_work: HeavyWork, tmp_path: object
) -> None:
    """An empty database (nothing migrated): nothing to warm, and the server still starts;
    `/readyz` is what says whether it can serve."""
    empty = settings.model_copy(
        update={"warm_on_start": True, "database_url": f"sqlite:///{tmp_path}/empty.db"}
    )
    with TestClient(create_app(empty, heavy_work), raise_server_exceptions=False) as client:
        assert client.get("/healthz").status_code == 200
