"""Every operation's example, as Swagger UI offers it, is a request the API answers with a 2xx.

The walk runs the examples in the order a person trying them would: creations first (the POST
examples create the entries the other examples name), then reads, replacements, patches, and
deletions last. Ids only a response can give (a plan's, a calibration's) come from the
`Location` of the request that created them.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import AUTH

_ORDER = {"post": 0, "get": 1, "put": 2, "patch": 3, "delete": 4}
# Bodies naming what another example creates: sent after it, with the id it got.
_NEEDS_CREATED = {"/v1/profiles/{profile_id}/calibrations": ("serving_run_ids", "serving_run_id")}


def _example(parameter: dict[str, Any]) -> Any:
    for holder in (parameter, parameter.get("schema", {})):
        if "example" in holder:
            return holder["example"]
        if holder.get("examples"):
            examples = holder["examples"]
            return examples[0] if isinstance(examples, list) else next(iter(examples.values()))
    return None


@pytest.mark.slow
def test_every_example_answers_2xx(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    operations = sorted(
        (
            (method, path, operation)
            for path, item in document["paths"].items()
            for method, operation in item.items()
        ),
        key=lambda entry: (_ORDER[entry[0]], entry[1] in _NEEDS_CREATED, entry[1]),
    )
    created: dict[str, str] = {}
    answered = []
    for method, path, operation in operations:
        url = path
        params: dict[str, Any] = {}
        for parameter in operation.get("parameters", []):
            name, where = parameter["name"], parameter["in"]
            value = _example(parameter) if name not in created else created[name]
            if where == "path":
                assert value is not None, f"{method} {path}: no example for {name}"
                url = url.replace("{" + name + "}", str(value))
            elif where == "query" and parameter.get("required"):
                params[name] = value
        body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        if "requestBody" in operation:
            assert "example" in body, f"{method} {path}: no request example"
        example = body.get("example")
        if path in _NEEDS_CREATED:
            field, made = _NEEDS_CREATED[path]
            example = example | {field: [created[made]]}
        response = client.request(method.upper(), url, json=example, params=params, headers=AUTH)
        assert 200 <= response.status_code < 300, (method, url, response.text)
        location = response.headers.get("location", "")
        if method == "post" and "/plans/" in location:
            created["plan_id"] = location.rsplit("/", 1)[-1]
        if method == "post" and "/calibrations/" in location:
            created["calibration_id"] = location.rsplit("/", 1)[-1]
        if method == "post" and "/serving-runs/" in location:
            created["serving_run_id"] = location.rsplit("/", 1)[-1]
        answered.append(f"{method.upper()} {path}")
    assert len(answered) == sum(len(item) for item in document["paths"].values()) >= 30


def test_estimate_examples_are_realistic(client: TestClient) -> None:
    """Swagger UI's generated bodies used to ask for `chunk_tokens: 1` (a 14.7 s TTFT) and
    `"model": "string"`: the examples are catalog ids and real lengths, and answer without a
    warning."""
    document = client.get("/openapi.json").json()
    body = document["paths"]["/v1/estimates/prefill"]["post"]["requestBody"]["content"]
    example = body["application/json"]["example"]
    assert example == {"model": "llama-3-8b", "gpu": "h100-sxm5-80gb", "prompt_tokens": 2048}
    answer = client.post("/v1/estimates/prefill", json=example).json()
    assert answer["warnings"] == []
    assert 20 < answer["ttft_ms"] < 200


def test_security_schemes_offer_both_headers(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["bearer"]["description"],
    }
    assert schemes["apiKey"]["in"] == "header"
    assert schemes["apiKey"]["name"] == "X-API-Key"
    create = document["paths"]["/v1/gpus"]["post"]
    assert create["security"] == [{"bearer": []}, {"apiKey": []}]
    # Problems are documented as they are served.
    problem = document["paths"]["/v1/gpus/{entry_id}"]["get"]["responses"]["422"]
    assert list(problem["content"]) == ["application/problem+json"]
    assert "304" in document["paths"]["/v1/gpus/{entry_id}"]["get"]["responses"]
    assert "HTTPValidationError" not in document["components"]["schemas"]
