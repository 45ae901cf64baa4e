"""docs/api.md is a tour whose answers are real: every request it shows is sent to a fresh server
with the bundled catalog, and every value it shows is checked against the answer (numbers to
three significant figures: a relative 0.5 %)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import AUTH

TOUR = Path(__file__).resolve().parents[1] / "docs" / "api.md"
_BLOCK = re.compile(r"```(http|json)\n(.*?)```", re.S)


def _exchanges() -> list[tuple[str, str, Any, Any]]:
    """(method, path, body or None, the answer as shown) for each request of the tour."""
    blocks = _BLOCK.findall(TOUR.read_text())
    exchanges = []
    for (kind, request), (answer_kind, answer) in zip(blocks[::2], blocks[1::2], strict=True):
        assert (kind, answer_kind) == ("http", "json"), request
        line, _, body = request.partition("\n")
        method, path = line.split(" ", 1)
        sent = json.loads(body) if body.strip() else None
        exchanges.append((method, path, sent, json.loads(answer)))
    return exchanges


def _shown_in(shown: Any, actual: Any, where: str) -> None:
    """Every value of `shown` is in `actual` at the same place (a list: its first elements)."""
    if isinstance(shown, dict):
        assert isinstance(actual, dict), where
        for key, value in shown.items():
            assert key in actual, f"{where}.{key} is not in the answer"
            _shown_in(value, actual[key], f"{where}.{key}")
    elif isinstance(shown, list):
        assert isinstance(actual, list) and len(actual) >= len(shown), where
        for index, value in enumerate(shown):
            _shown_in(value, actual[index], f"{where}[{index}]")
    elif isinstance(shown, float) or (isinstance(shown, int) and isinstance(actual, float)):
        assert isinstance(actual, int | float), where
        assert math.isclose(actual, shown, rel_tol=5e-3), f"{where}: {actual} shown as {shown}"
    else:
        assert actual == shown, f"{where}: {actual!r} shown as {shown!r}"


def test_the_tour_has_an_example_of_every_endpoint_kind() -> None:
    paths = {re.sub(r"\?.*", "", path) for _, path, _, _ in _exchanges()}
    for needed in ("/v1/estimates/prefill", "/v1/simulations", "/v1/plans", "/v1/roofline"):
        assert needed in paths


@pytest.mark.slow
def test_every_answer_in_the_tour_is_what_the_service_answers(client: TestClient) -> None:
    location = ""
    for method, shown_path, body, shown in _exchanges():
        path = shown_path.replace("{location}", location)
        response = client.request(method, path, json=body, headers=AUTH)
        assert response.is_success, (method, path, response.text)
        location = response.headers.get("location", location)
        _shown_in(shown, response.json(), f"{method} {path}")
