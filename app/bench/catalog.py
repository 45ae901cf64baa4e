"""Where the job gets an architecture and a GPU id: the bundled catalog, the service, or a
Hugging Face `config.json`.

The job reads the catalog files that ship with Ridgeline (`app/catalog/data/models.json`,
`{"models": [...]}`, and `gpus.json`, `{"gpus": [...]}`) directly, or asks a running service
(`GET {URL}/v1/models/{id}`); it never touches the database. Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from app.formats.hf_config import parse_hf_config
from app.formats.run_document import RunModelSpec

__all__ = [
    "ModelResolutionError",
    "bundled_entries",
    "fetch_service_model",
    "find_model",
    "match_gpu_alias",
    "model_from_config_file",
    "run_model_spec",
]

_DATA_PACKAGE = "app.catalog"
_SPEC_KEYS = tuple(name for name in RunModelSpec.model_fields if name != "id")
_REQUIRED_KEYS = tuple(name for name in _SPEC_KEYS if RunModelSpec.model_fields[name].is_required())
_HTTP_TIMEOUT_S = 30.0


class ModelResolutionError(ValueError):
    """The architecture to run cannot be found, read, or run by the job."""


def bundled_entries(kind: str) -> list[dict[str, Any]]:
    """The entries of the bundled `{kind}.json` (`models` or `gpus`); empty when not shipped."""
    path = resources.files(_DATA_PACKAGE).joinpath("data", f"{kind}.json")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    entries: list[dict[str, Any]] = document[kind]
    return entries


def find_model(model_id: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The catalog entry with `id` `model_id`."""
    for entry in entries:
        if entry.get("id") == model_id:
            return entry
    known = ", ".join(sorted(str(entry.get("id")) for entry in entries))
    raise ModelResolutionError(f"--model: no model {model_id!r} in the catalog (known: {known})")


def fetch_service_model(
    service_url: str, model_id: str, *, client: httpx.Client | None = None
) -> dict[str, Any]:
    """The model entry a Ridgeline service returns for `GET {service_url}/v1/models/{model_id}`."""
    url = f"{service_url.rstrip('/')}/v1/models/{model_id}"
    owned = client is None
    http = client if client is not None else httpx.Client(timeout=_HTTP_TIMEOUT_S)
    try:
        response = http.get(url)
    except httpx.HTTPError as error:
        raise ModelResolutionError(f"--service: GET {url} failed: {error}") from error
    finally:
        if owned:
            http.close()
    if response.status_code != httpx.codes.OK:
        raise ModelResolutionError(
            f"--service: GET {url} answered {response.status_code}: {response.text[:500]}"
        )
    entry: dict[str, Any] = response.json()
    return entry


def model_from_config_file(path: Path) -> dict[str, Any]:
    """The model fields of a Hugging Face `config.json` (through the catalog's own parser)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ModelResolutionError(f"--config: cannot read {path}: {error}") from error
    try:
        return parse_hf_config(config).as_dict()
    except ValueError as error:
        raise ModelResolutionError(f"--config: {path}: {error}") from error


def run_model_spec(
    entry: Mapping[str, Any], *, model_id: str | None, layers: int | None = None
) -> RunModelSpec:
    """The spec the job runs for a catalog-shaped `entry`, with `layers` layers if given.

    Raises `ModelResolutionError` for an architecture the job's model does not implement
    (mixture of experts, latent attention, windowed attention, attention sinks: its layers are
    Llama's), a missing key, or an impossible spec.
    """
    name = model_id or "the config.json model"
    if entry.get("moe") is not None:
        raise ModelResolutionError(
            f"{name} is a mixture-of-experts model; the benchmark job does not run MoE "
            "models yet (pick a dense model)"
        )
    if entry.get("mla") is not None:
        raise ModelResolutionError(
            f"{name} uses multi-head latent attention; the benchmark job runs Llama-shaped "
            "attention only"
        )
    if entry.get("window_layers") or entry.get("attention_sinks"):
        raise ModelResolutionError(
            f"{name} has windowed attention or attention sinks; the benchmark job runs full "
            "attention only, which would time another model"
        )
    missing = [key for key in _REQUIRED_KEYS if key not in entry]
    if missing:
        raise ModelResolutionError(f"{name}: the entry lacks {', '.join(missing)}")
    fields = {key: entry[key] for key in _SPEC_KEYS if key in entry}
    if layers is not None:
        fields["num_layers"] = layers
    try:
        return RunModelSpec.model_validate({"id": model_id, **fields})
    except ValidationError as error:
        raise ModelResolutionError(f"{name}: not a runnable spec: {error}") from error


def _normalised(name: str) -> str:
    return " ".join(name.casefold().split())


def match_gpu_alias(device_name: str, entries: list[dict[str, Any]]) -> str | None:
    """The id of the GPU whose `aliases` (or name) equals `device_name`, ignoring case and
    runs of spaces; None when no entry or more than one matches (an ambiguous name says
    nothing)."""
    wanted = _normalised(device_name)
    matches = {
        str(entry["id"])
        for entry in entries
        if any(_normalised(str(alias)) == wanted for alias in entry.get("aliases", []))
        or _normalised(str(entry.get("name", ""))) == wanted
    }
    return matches.pop() if len(matches) == 1 else None
