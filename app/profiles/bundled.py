"""Writing the bundled profiles: a document per (GPU, engine, version) in
`app/catalog/data/profiles/`, and `index.json`, which lists them (what
`app.catalog.profiles.bundled_refs` reads)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from app.formats.catalog_specs import gpu_spec_from_fields
from app.profiles.aiconfigurator import SYSTEMS, import_profile

__all__ = ["write_bundled_profile"]


def _catalog_gpu(gpu_id: str) -> dict[str, object]:
    text = resources.files("app.catalog").joinpath("data").joinpath("gpus.json").read_text()
    for entry in json.loads(text)["gpus"]:
        if entry["id"] == gpu_id:
            found: dict[str, object] = entry
            return found
    raise KeyError(f"the bundled catalog has no GPU {gpu_id}")


def write_bundled_profile(
    system: str,
    backend: str,
    *,
    version: str | None = None,
    systems: Path | None = None,
    out: Path,
    default: bool = False,
) -> Path:
    """Import `system` under `backend` and write it, with its entry in `out/index.json` (a
    default profile displaces the GPU's previous default)."""
    gpu = gpu_spec_from_fields(_catalog_gpu(SYSTEMS[system]))
    document = import_profile(system, backend, gpu, version=version, root=systems, default=default)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{document.id}.json"
    path.write_text(document.model_dump_json() + "\n")
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"profiles": []}
    entries = [e for e in index["profiles"] if e["id"] != document.id]
    if default:
        for entry in entries:
            if entry["gpu"] == document.gpu:
                entry["default"] = False
    entries.append(
        {
            "id": document.id,
            "gpu": document.gpu,
            "engine": document.engine,
            "version": document.version,
            "default": document.default,
            "source": document.source.title,
        }
    )
    index["profiles"] = sorted(entries, key=lambda e: e["id"])
    index_path.write_text(json.dumps(index, indent=2) + "\n")
    return path
