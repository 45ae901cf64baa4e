"""The job's command line where only the service is installed (`make run`): `--help` works,
and a run says which extra to install instead of dying on an import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Runs the job with torch and tqdm made unimportable, as on a machine without the bench extra.
_WITHOUT_EXTRA = """
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "tqdm"}:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, Blocked())
import runpy
sys.argv = ["ridgeline-bench", *sys.argv[1:]]
runpy.run_module("app.bench", run_name="__main__")
"""


def _job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRA, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_help_needs_neither_torch_nor_tqdm() -> None:
    result = _job("--help")
    assert result.returncode == 0, result.stderr
    assert "--model" in result.stdout and "--upload" in result.stdout


def test_a_run_names_the_extra_and_the_cpu_build() -> None:
    result = _job("--model", "llama-3-8b", "--device", "cpu", "--layers", "1")
    assert result.returncode == 2, result.stderr
    assert "pip install '.[bench]'" in result.stderr
    assert "download.pytorch.org/whl/cpu" in result.stderr
    assert "Traceback" not in result.stderr
