"""The engine imports nothing but the standard library, NumPy, SciPy and itself: the engine is
pure (docs/architecture.md)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import app.engine

FORBIDDEN = ("fastapi", "sqlalchemy", "torch", "starlette", "pydantic")

PROBE = """
import importlib, json, pkgutil, sys
import app.engine
names = sorted(
    f"app.engine.{m.name}" for m in pkgutil.iter_modules(app.engine.__path__)
)
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "modules": sorted(sys.modules)}))
"""


def test_engine_modules_import_no_framework_and_nothing_else_of_app() -> None:
    completed = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    report = json.loads(completed.stdout)
    expected = {m.name for m in pkgutil.iter_modules(app.engine.__path__)}
    assert {name.rsplit(".", 1)[1] for name in report["imported"]} == expected
    assert {"counting", "step_cost", "estimates", "roofline"} <= expected
    modules = report["modules"]
    framework = [m for m in modules if m.split(".")[0] in FORBIDDEN]
    assert framework == []
    outside = [m for m in modules if m.startswith("app.") and not m.startswith("app.engine")]
    assert outside == []
