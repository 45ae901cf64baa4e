"""The container image as far as this machine can check it without a Docker engine: what the
build context holds (after .dockerignore), that every COPY in the Dockerfile finds its source
there, and that the files the image gets are enough to migrate, load the catalog and serve."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pathspec
import pytest

from tests.servers import served

ROOT = Path(__file__).resolve().parents[1]
CONTEXT_LIMIT_BYTES = 12 * 2**20
"""The service and its data: about 6 MiB of it the bundled kernel profiles (31, compressed)
(app/catalog/data/profiles)."""


def build_context() -> list[Path]:
    """Files `docker build .` would send, by .dockerignore's rules (last match wins, `!`
    re-includes), relative to the repository root."""
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line for line in lines if line.strip() and not line.startswith("#")]
    spec = pathspec.PathSpec.from_lines("gitignore", patterns)
    files = []
    for path in ROOT.rglob("*"):
        if path.is_file() and not spec.match_file(str(path.relative_to(ROOT))):
            files.append(path.relative_to(ROOT))
    return sorted(files)


@pytest.mark.slow
def test_the_build_context_is_the_service_only() -> None:
    files = build_context()
    names = {str(path) for path in files}
    assert {"pyproject.toml", "alembic.ini", "requirements/service.lock", "app/main.py"} <= names
    assert any(name.startswith("migrations/versions/") for name in names)
    leaked = [
        name
        for name in names
        if name.startswith((".venv/", ".git/", "tests/", "scripts/", "docs/"))
        or name.endswith((".db", ".pyc"))
        or "__pycache__" in name
        or name == ".dev-api-key"
    ]
    assert leaked == []
    size = sum((ROOT / path).stat().st_size for path in files)
    assert size < CONTEXT_LIMIT_BYTES, f"{size / 2**20:.1f} MiB"


def test_every_copy_of_the_dockerfile_finds_its_source() -> None:
    context = {str(path) for path in build_context()}
    dockerfile = (ROOT / "Dockerfile").read_text()
    sources: list[str] = []
    for line in dockerfile.splitlines():
        match = re.match(r"^COPY\s+(?!--from)(.+?)\s+\S+$", line.strip())
        if match:
            sources += match.group(1).split()
    assert sources
    for source in sources:
        assert source in context or any(name.startswith(source + "/") for name in context), source
    # Dependencies are installed from the lock before the application is copied.
    assert dockerfile.index("service.lock") < dockerfile.index("COPY app")
    assert "VOLUME" in dockerfile


@pytest.mark.slow
def test_the_image_files_migrate_load_and_serve(tmp_path: Path) -> None:
    """The Dockerfile's commands, run from a copy of exactly the files the image gets."""
    image = tmp_path / "srv"
    for path in build_context():
        target = image / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, target)
    database = f"sqlite:///{tmp_path / 'data' / 'ridgeline.db'}"
    (tmp_path / "data").mkdir()
    env = {**os.environ, "PYTHONPATH": str(image), "RIDGELINE_DATABASE_URL": database}
    for command in ("migrate", "load-catalog"):
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", command],
            cwd=image,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    with served(database, cwd=image, pythonpath=image) as (base, _):
        assert httpx.get(f"{base}/readyz").status_code == 200
        answer = httpx.post(
            f"{base}/v1/estimates/prefill",
            json={"model": "llama-3-8b", "gpu": "h100-sxm5-80gb", "prompt_tokens": 2048},
        )
        assert answer.status_code == 200, answer.text
        assert httpx.get(f"{base}/docs").status_code == 200
