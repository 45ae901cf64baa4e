"""Engine differences live in the engine policies (`app/engine/serving/`, one module per engine):
nowhere else does code compare an engine by name, key a table by one or list the engines. So
adding an engine is adding its policy module (and its published arguments)."""

from __future__ import annotations

import ast
from pathlib import Path

from app.engine.serving import EngineName

ROOT = Path(__file__).resolve().parents[1]
NAMES = frozenset(name.value for name in EngineName)
POLICIES = "app/engine/serving/"
TOOLS = frozenset({"app/formats/serving_results.py", "app/serving_runs/schemas.py"})
"""Benchmark clients that share an engine's name (`vllm bench serve`, SGLang's bench_serving):
tools, not engines."""


def _is_name(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in NAMES


def offences(source: str) -> list[str]:
    """Where `source` tells engines apart by name: `EngineName.<MEMBER>`, a comparison with an
    engine's name, a mapping keyed by one, a list of two or more, an enum or `Literal` of
    them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "EngineName"
            and node.attr.isupper()
        ):
            found.append(f"{line}: EngineName.{node.attr}")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            listed = [
                element
                for operand in operands
                if isinstance(operand, ast.Tuple | ast.List | ast.Set)
                for element in operand.elts
            ]
            if any(_is_name(o) for o in [*operands, *listed]):
                found.append(f"{line}: a comparison with an engine's name")
        elif isinstance(node, ast.Dict) and any(_is_name(key) for key in node.keys):
            found.append(f"{line}: a mapping keyed by engine names")
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            if sum(_is_name(element) for element in node.elts) >= 2:
                found.append(f"{line}: a list of engine names")
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and _is_name(statement.value):
                    found.append(f"{statement.lineno}: an enum of engine names")
    return found


def test_the_check_finds_each_kind_of_comparison() -> None:
    snippet = """
if engine == "vllm": pass
if name in ("sglang", "x"): pass
flags = {"trtllm": 1}
choices = ["vllm", "sglang", "trtllm"]
class Engine(StrEnum):
    VLLM = "vllm"
if policy.name is EngineName.ROOFLINE: pass
example = {"engine": "vllm"}
"""
    assert len(offences(snippet)) == 6  # the example's value is not a comparison


def test_no_engine_name_is_compared_outside_the_policies() -> None:
    found = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(POLICIES) or relative in TOOLS:
            continue
        found += [f"{relative}:{where}" for where in offences(path.read_text("utf-8"))]
    assert found == []
