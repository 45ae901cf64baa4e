"""The one build step beyond pyproject.toml: the serving simulator's event loop
(`app/engine/simulation/loop.py`) compiled to a C extension with mypyc, where mypyc and a C
compiler are at hand.

The module stays plain, type-annotated Python, and the package runs the same without the
extension, only slower: a run of 100,000 requests takes about half the time compiled
(`scripts/bench_simulator.py`). `make install` and `make install-dev` install mypyc first
(requirements/build.lock) and build without isolation, so the compiler type-checks the module
against the installed dependencies. Elsewhere, or with `RIDGELINE_PURE_PYTHON=1`, or when the
compiler fails, the package installs as pure Python with a warning.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from setuptools import setup

COMPILED = ["app/engine/simulation/loop.py"]


def _extensions() -> list[Any]:
    if os.environ.get("RIDGELINE_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify  # noqa: PLC0415 - optional at build time
    except ImportError:
        print("warning: mypyc is not installed; the simulator runs as pure Python", file=sys.stderr)
        return []
    try:
        extensions = mypycify(COMPILED, opt_level="3")
    except (Exception, SystemExit) as error:  # mypyc exits on a type error
        print(
            f"warning: mypyc failed ({error}); the simulator runs as pure Python", file=sys.stderr
        )
        return []
    for extension in extensions:
        extension.optional = True  # no C compiler: pure Python, with setuptools' warning
        if os.name != "nt":
            # No fused multiply-adds (the default on ARM): every float as the source computes it.
            extension.extra_compile_args = [*extension.extra_compile_args, "-ffp-contract=off"]
    return extensions


setup(ext_modules=_extensions())
