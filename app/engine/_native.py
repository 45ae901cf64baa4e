"""Which build of the engine's compiled modules runs. Imported first by `app.engine`, for its
effect.

`setup.py` compiles the step (`step_cost`, `ops`, the measured families, their tables' reads
(`grid`) and the profiled timer) and the simulator's event loop with mypyc, together, into
extension modules beside their sources, which Python imports in preference to the source. An
extension built from another source (the source edited or checked out since the last `make
install-dev`: setup.py records the digest of each source it compiled) would run code that is no
longer there; and the compiled modules call each other's classes directly, so one cannot run
compiled beside another from source. When any is stale, all of them are imported from source,
with a warning in the log, until they are compiled again; and so, without a warning, when
`RIDGELINE_PURE_PYTHON` is set (what the parity tests compare the builds with).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec, SourceFileLoader
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED_MODULES", "SourceFinder", "is_compiled", "source_of", "stale_sources"]

COMPILED_MODULES = (
    "app.engine.ops",
    "app.engine.step_cost",
    "app.engine.profiles.grid",
    "app.engine.profiles.measured",
    "app.engine.profiles.timer",
    "app.engine.simulation.loop",
)
"""The modules setup.py compiles (as one group: their compiled classes call each other)."""

GROUP = "compiled__mypyc"
"""The group's shared library, in `app/engine` (setup.py's `group_name`)."""
RECORD = "compiled.sha256"
"""What setup.py compiled, in `app/engine`: a line `<sha256> <module>` per module."""

_log = logging.getLogger("ridgeline")


def is_compiled(module: object) -> bool:
    """Whether `module` was loaded from a compiled extension."""
    return str(getattr(module, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))


_ENGINE = Path(__file__).parent


def source_of(name: str, engine_dir: Path = _ENGINE) -> Path:
    """Where the source of `name` (an `app.engine` module) lies under `engine_dir`; found
    without importing its package, whose `__init__` may import the module itself."""
    return engine_dir.joinpath(*name.split(".")[2:]).with_suffix(".py")


def digest(source: Path) -> str:
    """The SHA-256 of a source file, as setup.py records it beside the build (`RECORD`)."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def stale_sources(names: Sequence[str], engine_dir: Path = _ENGINE) -> list[Path]:
    """The sources of `names` that differ from what was compiled: setup.py records the digest
    of each source it compiled in `RECORD` (in `engine_dir`); a module with a build beside it
    whose source no longer has its recorded digest is stale. Without a record (a build from
    before records), every build counts as current."""
    try:
        recorded = dict(
            line.split(maxsplit=1)[::-1]
            for line in (engine_dir / RECORD).read_text().splitlines()
            if line.strip()
        )
    except OSError:
        return []
    stale = []
    for name in names:
        source = source_of(name, engine_dir)
        builds = [source.with_suffix(suffix) for suffix in EXTENSION_SUFFIXES]
        if not source.exists() or not any(build.exists() for build in builds):
            continue
        if recorded.get(name) != digest(source):
            stale.append(source)
    return stale


class SourceFinder(MetaPathFinder):
    """Finds the compiled modules' sources instead of their builds."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self._sources = sources

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        source = self._sources.get(fullname)
        if source is None:
            return None
        loader = SourceFileLoader(fullname, str(source))
        return importlib.util.spec_from_file_location(fullname, source, loader=loader)


def _choose_build() -> None:
    if os.environ.get("RIDGELINE_PURE_PYTHON"):
        why = "RIDGELINE_PURE_PYTHON is set"
    else:
        stale = stale_sources(COMPILED_MODULES)
        if not stale:
            return
        why = f"{', '.join(map(str, stale))} newer than the compiled build"
        _log.warning(
            "%s; running every compiled module from source (make install-dev compiles them again)",
            why,
        )
    sys.meta_path.insert(0, SourceFinder({name: source_of(name) for name in COMPILED_MODULES}))


_choose_build()
