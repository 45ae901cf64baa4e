"""The project's own contracts: lock files that agree with pyproject.toml."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import app

ROOT = Path(__file__).resolve().parents[1]


def _pins(lock: str) -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "requirements" / lock).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line)
        if match:
            pins[canonicalize_name(match.group(1))] = Version(match.group(2))
    return pins


def _project() -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project


def test_every_dependency_is_pinned_within_its_lower_bound() -> None:
    project = _project()
    service, dev, bench = _pins("service.lock"), _pins("dev.lock"), _pins("bench.lock")
    extras = project["optional-dependencies"]
    dependencies = project["dependencies"]
    assert isinstance(extras, dict)
    assert isinstance(dependencies, list)
    for lock, requirements in (
        (service, dependencies),
        (dev, [*dependencies, *extras["dev"]]),
        (bench, [r for r in extras["bench"] if not r.startswith("torch")]),
    ):
        assert isinstance(requirements, list)
        for text in requirements:
            requirement = Requirement(text)
            name = canonicalize_name(requirement.name)
            assert name in lock, f"{name} is not in the lock file"
            assert requirement.specifier.contains(lock[name]), (name, str(lock[name]))
    # The service's pins are the development environment's too: tests run what ships.
    assert {name: dev[name] for name in service} == service
    # The simulator's compiler (setup.py) is the type checker the tests run, at the same pins.
    build = _pins("build.lock")
    assert "mypy" in build
    assert {name: dev[name] for name in build if name != "setuptools"} == {
        name: pin for name, pin in build.items() if name != "setuptools"
    }


def test_one_version_number() -> None:
    """The package, the app (OpenAPI info.version) and the committed document agree."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"], "the version lives in app/__init__.py only"
    assert pyproject["project"]["dynamic"] == ["version"]
    assert metadata.version("ridgeline") == app.__version__
    document = json.loads((ROOT / "openapi" / "openapi.json").read_text(encoding="utf-8"))
    assert document["info"]["version"] == app.__version__


_CITED = re.compile(
    r"(?<![\w/.-])((?:app|tests|scripts|docs|migrations|requirements|openapi)/[\w./*-]*[\w*])"
)


def test_every_file_cited_in_the_repository_exists(repo_root: Path) -> None:
    """Paths named in the docs, the code and its comments (`docs/model.md`, `app/web/heavy.py`,
    `app/catalog/data/*.json`) name files of this repository; nothing points outside it."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=repo_root, capture_output=True, text=True, check=True
    ).stdout.split()
    missing = []
    for name in tracked:
        if not name.endswith((".py", ".md", ".toml", ".cfg", ".ini", "Makefile", "Dockerfile")):
            continue
        for found in _CITED.findall((repo_root / name).read_text()):
            cited = found.rstrip(".")
            if not any(repo_root.glob(cited)):
                missing.append(f"{name}: {cited}")
    assert not missing, missing
    for outside in ("DESIGN.md", "STYLE.md", "seeds/"):
        holders = [
            n
            for n in tracked
            if n.endswith((".py", ".md")) and n != "tests/test_project.py"
            if outside in (repo_root / n).read_text()
        ]
        assert not holders, (outside, holders)


def test_only_the_job_imports_the_job(repo_root: Path) -> None:
    """The service and the benchmark job share `app.formats`; no service module imports
    `app.bench` (which needs PyTorch)."""
    importers = [
        str(path.relative_to(repo_root))
        for path in (repo_root / "app").rglob("*.py")
        if "bench" not in path.relative_to(repo_root / "app").parts[:1]
        if re.search(r"^\s*(from|import) app\.bench\b", path.read_text(), re.M)
    ]
    assert not importers


def test_the_tree_check_finds_stray_files() -> None:
    """`make test` runs scripts/check_tree.py (in `lint`): it would have caught the file a
    mistyped redirection once left in the root, and passes on the repository as it is."""
    from tests.scripts import load_script  # noqa: PLC0415

    check_tree = load_script("check_tree")
    stray = "hat setup.py compiled (app.engine._native)#"
    (problem,) = check_tree.problems(["README.md", "app/main.py", stray])
    assert stray in problem
    (problem,) = check_tree.problems(["notes.txt"])
    assert problem.startswith("'notes.txt': not one of the root's files")
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert check_tree.problems(p for p in listed.stdout.split("\0") if p) == []
    assert "scripts/check_tree.py" in (ROOT / "Makefile").read_text()
