"""The project's own contracts: lock files that agree with pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pins(lock: str) -> dict[str, Version]:
    pins = {}
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
    assert isinstance(extras, dict)
    for lock, requirements in (
        (service, project["dependencies"]),
        (dev, [*project["dependencies"], *extras["dev"]]),  # type: ignore[list-item]
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
