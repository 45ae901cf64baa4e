"""The event loop as setup.py compiles it (mypyc) against its source: the same run, number for
number, with no tolerance; which build runs; and a build older than its source giving way."""

import importlib.util
import logging
import os
import re
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable, Iterator
from importlib.machinery import EXTENSION_SUFFIXES, SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest

from app.engine.simulation import _native
from app.engine.simulation import loop as loaded
from tests.engine.test_simulator_shortcuts import CASES, TIMERS, assert_same_run, run

LOOP_SOURCE = Path(_native.__file__).with_name("loop.py")


def source_module() -> ModuleType:
    """loop.py run as Python source, under a name of its own."""
    name = "ridgeline_loop_source"
    loader = SourceFileLoader(name, str(LOOP_SOURCE))
    spec = importlib.util.spec_from_file_location(name, LOOP_SOURCE, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def a_compiler_is_at_hand() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return importlib.util.find_spec("mypyc") is not None and shutil.which(compiler) is not None


def test_the_loop_is_compiled_where_it_can_be() -> None:
    """`make install-dev` compiles the loop where mypyc and a C compiler are; without them (or
    with RIDGELINE_PURE_PYTHON) the source runs, and this says so rather than passing."""
    if os.environ.get("RIDGELINE_PURE_PYTHON") or not a_compiler_is_at_hand():
        pytest.skip("no mypyc or C compiler here: the loop runs as pure Python")
    assert _native.is_compiled(loaded), (
        f"{loaded.__file__} is not the compiled loop: run `make install-dev` (loop.py changed "
        "since it was compiled, or the build failed)"
    )


@pytest.mark.parametrize("timer", TIMERS)
@pytest.mark.parametrize("case", CASES)
def test_the_compiled_loop_runs_as_its_source(case: str, timer: str) -> None:
    source = source_module()
    assert not _native.is_compiled(source)
    compiled = run(case, 3, TIMERS[timer], run_trace=loaded._run)
    plain = run(case, 3, TIMERS[timer], run_trace=source._run)
    assert_same_run(compiled, plain)
    assert plain.steps > 0


@pytest.fixture
def stale_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[bool], str]]:
    """Makes a package `stalepkg` on the path holding `mod.py` and a stand-in for its compiled
    build (a file with an extension's name: importing it would fail), the source newer or older
    than it, and returns the module's name; the modules are forgotten afterwards."""

    def make(source_newer: bool) -> str:
        package = tmp_path / "stalepkg"
        package.mkdir()
        (package / "__init__.py").write_text("")
        built = package / f"mod{EXTENSION_SUFFIXES[0]}"
        built.write_bytes(b"not a real extension")
        source = package / "mod.py"
        source.write_text("WHERE = 'source'\n")
        now = time.time()
        older, newer = (built, source) if source_newer else (source, built)
        os.utime(older, (now - 60, now - 60))
        os.utime(newer, (now, now))
        return "stalepkg.mod"

    monkeypatch.syspath_prepend(str(tmp_path))
    yield make
    for name in ("stalepkg.mod", "stalepkg"):
        sys.modules.pop(name, None)


def test_a_build_older_than_its_source_gives_way(
    stale_package: Callable[[bool], str], caplog: pytest.LogCaptureFixture
) -> None:
    name = stale_package(True)
    with caplog.at_level(logging.WARNING, logger="ridgeline"):
        _native._import_source_when_stale(name)
    assert sys.modules[name].WHERE == "source"
    assert "newer than its compiled build" in caplog.text


def test_a_current_build_is_left_to_the_import_system(
    stale_package: Callable[[bool], str], caplog: pytest.LogCaptureFixture
) -> None:
    name = stale_package(False)
    with caplog.at_level(logging.WARNING, logger="ridgeline"):
        _native._import_source_when_stale(name)
    assert name not in sys.modules
    assert not caplog.text


def test_the_build_and_the_guard_name_the_same_modules() -> None:
    """setup.py compiles, the Makefile recompiles on a change of, and `_native` guards the same
    modules (each names them its own way: paths, a make variable, module names)."""
    root = LOOP_SOURCE.parents[3]
    paths = {name.replace(".", "/") + ".py" for name in _native.COMPILED_MODULES}
    setup = (root / "setup.py").read_text()
    listed = re.search(r"^COMPILED = \[(.*)\]$", setup, re.MULTILINE)
    assert listed is not None
    assert set(re.findall(r'"([^"]+)"', listed.group(1))) == paths
    make = re.search(r"^COMPILED := (.*)$", (root / "Makefile").read_text(), re.MULTILINE)
    assert make is not None
    assert set(make.group(1).split()) == paths
