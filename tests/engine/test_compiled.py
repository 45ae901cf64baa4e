"""The engine's compiled modules (setup.py: the step, its op families, the measured ones, the
profiled timer and the simulator's event loop, compiled together with mypyc) against their
sources: the same answers, float for float, with no tolerance; which build runs; and a build
older than its source giving way."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import app.engine.simulation.loop
import app.engine.step_cost
from app.engine import _native
from tests.engine.compiled_answers import answers

ROOT = Path(__file__).resolve().parents[2]


def a_compiler_is_at_hand() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return importlib.util.find_spec("mypyc") is not None and shutil.which(compiler) is not None


def test_the_modules_are_compiled_where_they_can_be() -> None:
    """`make install-dev` compiles them where mypyc and a C compiler are; without them (or with
    RIDGELINE_PURE_PYTHON) the sources run, and this says so rather than passing."""
    if os.environ.get("RIDGELINE_PURE_PYTHON") or not a_compiler_is_at_hand():
        pytest.skip("no mypyc or C compiler here: the engine runs as pure Python")
    for module in (app.engine.step_cost, app.engine.simulation.loop):
        assert _native.is_compiled(module), (
            f"{module.__file__} is not compiled: run `make install-dev` (a source changed "
            "since it was compiled, or the build failed)"
        )


@pytest.mark.slow
def test_the_compiled_modules_answer_as_their_sources() -> None:
    """Every recorded answer (`compiled_answers`): step times of the regression targets with
    and without CUDA-graph padding, measured timers of five profiles and layouts, their
    breakdowns and sums, and the simulator's runs of every scheduling case; the sources' run in
    a process with RIDGELINE_PURE_PYTHON set."""
    if not _native.is_compiled(app.engine.step_cost):
        pytest.skip("the engine runs as pure Python here: nothing to compare")
    completed = subprocess.run(
        [sys.executable, "-m", "tests.engine.compiled_answers"],
        cwd=ROOT,
        env={**os.environ, "RIDGELINE_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    source = json.loads(completed.stdout)
    compiled = answers()
    assert source.keys() == compiled.keys()
    for key, values in compiled.items():
        assert values == source[key], key
    assert len(compiled) > 40


def test_pure_python_runs_the_sources() -> None:
    probe = (
        "import app.engine.step_cost as s, app.engine.simulation.loop as l, "
        "app.engine.profiles.timer as t; print(s.__file__, l.__file__, t.__file__)"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**os.environ, "RIDGELINE_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert all(path.endswith(".py") for path in completed.stdout.split())


def _package(tmp_path: Path, *, recorded: str | None) -> Path:
    """An engine directory holding `mod.py`, a stand-in for its compiled build, and setup.py's
    record of the source compiled (`recorded`: the text it compiled; None: no record)."""
    (tmp_path / f"mod{EXTENSION_SUFFIXES[0]}").write_bytes(b"not a real extension")
    source = tmp_path / "mod.py"
    source.write_text("WHERE = 'source'\n")
    if recorded is not None:
        compiled = tmp_path / "compiled.py"
        compiled.write_text(recorded)
        record = f"{_native.digest(compiled)} app.engine.mod\n"
        (tmp_path / _native.RECORD).write_text(record)
    return tmp_path


def test_a_build_of_another_source_is_stale(tmp_path: Path) -> None:
    engine = _package(tmp_path, recorded="WHERE = 'before the edit'\n")
    assert _native.stale_sources(["app.engine.mod"], engine) == [engine / "mod.py"]


def test_a_build_of_this_source_is_not(tmp_path: Path) -> None:
    engine = _package(tmp_path, recorded="WHERE = 'source'\n")
    assert _native.stale_sources(["app.engine.mod"], engine) == []


def test_without_a_record_a_build_counts_as_current(tmp_path: Path) -> None:
    engine = _package(tmp_path, recorded=None)
    assert _native.stale_sources(["app.engine.mod"], engine) == []


def test_the_record_is_of_the_sources_here() -> None:
    """What `make install-dev` compiled is what the checkout holds (else the sources run and
    this says why)."""
    if not _native.is_compiled(app.engine.step_cost):
        pytest.skip("the engine runs as pure Python here")
    assert _native.stale_sources(_native.COMPILED_MODULES) == []


def test_the_finder_imports_the_source(tmp_path: Path) -> None:
    engine = _package(tmp_path, recorded=None)
    finder = _native.SourceFinder({"ridgeline_probe_mod": engine / "mod.py"})
    spec = finder.find_spec("ridgeline_probe_mod", None)
    assert spec is not None and spec.origin == str(engine / "mod.py")
    assert finder.find_spec("something_else", None) is None


def test_the_build_and_the_guard_name_the_same_modules() -> None:
    """setup.py compiles, the Makefile recompiles on a change of, and `_native` guards the same
    modules (each names them its own way: paths, a make variable, module names)."""
    paths = {name.replace(".", "/") + ".py" for name in _native.COMPILED_MODULES}
    setup = (ROOT / "setup.py").read_text()
    listed = re.search(r"^COMPILED = \[(.*?)\]$", setup, re.MULTILINE | re.DOTALL)
    assert listed is not None
    assert set(re.findall(r'"([^"]+)"', listed.group(1))) == paths
    make = re.search(r"^COMPILED := (.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert make is not None
    assert set(make.group(1).split()) == paths
    group = re.search(r'group_name="([^"]+)"', setup)
    assert group is not None and f"{group.group(1).rsplit('.', 1)[1]}__mypyc" == _native.GROUP
