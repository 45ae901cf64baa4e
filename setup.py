"""The one build step beyond pyproject.toml: the engine's numeric core compiled to C extensions
with mypyc, where mypyc and a C compiler are at hand: the step (`app/engine/step_cost.py`, its
op families `app/engine/ops.py` and the measured ones with their tables' interpolation and the
profiled timer) and the serving simulator's event loop (`app/engine/simulation/loop.py`), as one
group whose classes call each other directly.

The modules stay plain, type-annotated Python, and the package runs the same without the
extensions, only slower: a run of 100,000 requests takes about half the time compiled
(`scripts/bench_simulator.py`); tests/engine/test_compiled.py compares the builds number for
number. `make install` and `make install-dev` install mypyc first
(requirements/build.lock) and build without isolation, so the compiler type-checks the modules
against the installed dependencies. Elsewhere, or with `RIDGELINE_PURE_PYTHON=1`, or when the
compiler fails, the package installs as pure Python with a warning.
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

from setuptools import setup

COMPILED = [
    "app/engine/ops.py",
    "app/engine/step_cost.py",
    "app/engine/profiles/grid.py",
    "app/engine/profiles/measured.py",
    "app/engine/profiles/timer.py",
    "app/engine/simulation/loop.py",
]


def _extensions() -> list[Any]:
    if os.environ.get("RIDGELINE_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify  # noqa: PLC0415 - optional at build time
    except ImportError:
        print("warning: mypyc is not installed; the simulator runs as pure Python", file=sys.stderr)
        return []
    try:
        extensions = mypycify(COMPILED, opt_level="3", group_name="app.engine.compiled")
    except (Exception, SystemExit) as error:  # mypyc exits on a type error
        print(
            f"warning: mypyc failed ({error}); the simulator runs as pure Python", file=sys.stderr
        )
        return []
    _record(COMPILED)
    for extension in extensions:
        extension.optional = True  # no C compiler: pure Python, with setuptools' warning
        if os.name != "nt":
            # No fused multiply-adds (the default on ARM): every float as the source computes it.
            extension.extra_compile_args = [*extension.extra_compile_args, "-ffp-contract=off"]
    return extensions


def _record(paths: list[str]) -> None:
    """`app/engine/compiled.sha256`: the digest of each source compiled, which
    `app.engine._native` compares the sources with at import (a build of other sources gives
    way to them)."""
    lines = []
    for path in paths:
        with open(path, "rb") as source:
            digest = hashlib.sha256(source.read()).hexdigest()
        lines.append(f"{digest} {path.removesuffix('.py').replace('/', '.')}\n")
    with open("app/engine/compiled.sha256", "w") as record:
        record.writelines(lines)


setup(ext_modules=_extensions())
