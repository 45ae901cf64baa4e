"""The service validates uploaded runs without PyTorch: the schema and the package import
without it, and the engine stays free of the job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _run_without_torch(code: str) -> subprocess.CompletedProcess[str]:
    # `sys.modules["torch"] = None` makes any `import torch` raise ImportError.
    program = f"import sys\nsys.modules['torch'] = None\n{code}"
    return subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_schema_and_package_import_without_torch() -> None:
    result = _run_without_torch(
        "import app.bench, app.formats.run_document, app.bench.timing, app.bench.config\n"
        "import app.bench.runner, app.bench.cli, app.bench.upload, app.bench.catalog\n"
        "import app.bench.memory\n"
        "print('ok')"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_job_without_torch_says_how_to_get_it(tmp_path: Path) -> None:
    result = _run_without_torch(
        "from app.bench.__main__ import main\n"
        f"raise SystemExit(main(['--model', 'llama-3-8b', '--out', '{tmp_path / 'r.json'}']))"
    )
    assert result.returncode == 2
    assert "needs PyTorch" in result.stderr
    assert ".[bench]" in result.stderr


def test_python_dash_m_runs_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.bench", "--help"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0
    for flag in ("--model", "--config", "--prompt-lens", "--kv-lens", "--upload", "--api-key"):
        assert flag in result.stdout
