"""Which build of the event loop runs. Imported first by the package, for its effect.

`setup.py` compiles `loop.py` with mypyc into an extension module beside it, which Python
imports in preference to the source. An extension older than its source (the source edited or
checked out since the last `make install-dev`) would run code that is no longer there, so then
the source is imported instead, with a warning in the log, until the module is compiled again.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from importlib.machinery import EXTENSION_SUFFIXES, SourceFileLoader
from pathlib import Path

__all__ = ["COMPILED_MODULES", "is_compiled"]

COMPILED_MODULES = ("app.engine.simulation.loop",)
"""The modules setup.py compiles."""

_log = logging.getLogger("ridgeline")


def is_compiled(module: object) -> bool:
    """Whether `module` was loaded from a compiled extension."""
    return str(getattr(module, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))


def _import_source_when_stale(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None or not spec.origin.endswith(tuple(EXTENSION_SUFFIXES)):
        return
    built = Path(spec.origin)
    source = built.with_name(name.rpartition(".")[2] + ".py")
    if not source.exists() or source.stat().st_mtime <= built.stat().st_mtime:
        return
    _log.warning(
        "%s is newer than its compiled build %s; running the source (make install-dev "
        "compiles it again)",
        source,
        built.name,
    )
    loader = SourceFileLoader(name, str(source))
    source_spec = importlib.util.spec_from_file_location(name, source, loader=loader)
    assert source_spec is not None
    module = importlib.util.module_from_spec(source_spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


for _name in COMPILED_MODULES:
    if _name not in sys.modules:
        _import_source_when_stale(_name)
