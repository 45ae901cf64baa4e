"""The committed OpenAPI document is the served one, and it documents every field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from app.cli import openapi_document

COMMITTED = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def test_committed_document_matches_served() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == openapi_document(), (
        "openapi/openapi.json is stale: run `make openapi` and commit it"
    )


def test_served_at_openapi_json(client: TestClient) -> None:
    served = client.get("/openapi.json").json()
    assert served["info"]["title"] == "Ridgeline"
    assert "/v1/gpus/{entry_id}" in served["paths"]
    assert client.get("/docs").status_code == 200


def test_every_field_is_described() -> None:
    document: dict[str, Any] = json.loads(openapi_document())
    # FastAPI's own HTTPValidationError/ValidationError schemas are never served: every error is
    # a problem document.
    fastapi_own = {"HTTPValidationError", "ValidationError"}
    undescribed = [
        f"{name}.{field}"
        for name, schema in document["components"]["schemas"].items()
        if name not in fastapi_own
        for field, spec in schema.get("properties", {}).items()
        if "description" not in spec
    ]
    assert undescribed == []
