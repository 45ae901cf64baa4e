"""scripts/device_bench.sh, the one script run on a lent H200, in its CPU smoke mode: its checks,
the job under a deadline, the document under $OUT and the summary, all without a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.formats.run_document import Phase, RunDocument

pytest.importorskip("torch")

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "device_bench.sh"

pytestmark = pytest.mark.skipif(shutil.which("timeout") is None, reason="needs coreutils timeout")


@pytest.mark.slow
def test_device_script_smoke_run_writes_the_document_and_a_summary(tmp_path: Path) -> None:
    environment = os.environ | {
        "OUT": str(tmp_path),
        "PYTHON": sys.executable,
        "DEVICE_BENCH_SMOKE": "1",
        "BENCH_DEADLINE_S": "120",
    }
    result = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=tmp_path,  # the script finds the repository itself
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    document = RunDocument.model_validate_json(
        (tmp_path / "h200-llama-3-8b.json").read_text(encoding="utf-8")
    )
    assert [p.skipped for p in document.points] == [None] * 6
    assert (tmp_path / "h200-llama-3-8b.log").read_text(encoding="utf-8")
    summary = result.stdout
    assert "prefill, batch 1: TTFT" in summary
    assert summary.count("tokens/s") == sum(p.phase is Phase.DECODE for p in document.points)
    assert "device_bench: job exited 0" in result.stderr
