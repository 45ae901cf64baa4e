"""Writing the bundled profiles: a gzip-compressed document per (GPU, engine, version) in
`app/catalog/data/profiles/`, and `index.json`, which lists them (what
`app.catalog.profiles.bundled_refs` reads).

`write_all_bundled` writes every system x engine x version of the pinned silicon database for
the catalog's GPUs (`ridgeline import-profiles aiconfigurator --all`); each GPU's default is the
newest profile of the engine whose policy says so (`EnginePolicy.bundled_default`)."""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path

from app.catalog.profiles import bundled_file
from app.engine.serving import EngineName, policy_of
from app.formats.catalog_specs import gpu_spec_from_fields
from app.formats.profile_document import ProfileDocument
from app.profiles.aiconfigurator import SYSTEMS, engine_versions, import_profile, systems_dir

__all__ = ["bundled_versions", "write_all_bundled", "write_bundled_profile"]


def _catalog_gpu(gpu_id: str) -> dict[str, object]:
    text = resources.files("app.catalog").joinpath("data").joinpath("gpus.json").read_text()
    for entry in json.loads(text)["gpus"]:
        if entry["id"] == gpu_id:
            found: dict[str, object] = entry
            return found
    raise KeyError(f"the bundled catalog has no GPU {gpu_id}")


def _write_document(document: ProfileDocument, out: Path) -> Path:
    """The document as gzip-compressed JSON, byte-identical for identical documents."""
    path = out / bundled_file(document.id)
    data = (document.model_dump_json(exclude_none=True) + "\n").encode()
    path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    return path


def _index_entry(document: ProfileDocument) -> dict[str, object]:
    entry: dict[str, object] = {
        "id": document.id,
        "gpu": document.gpu,
        "engine": str(document.engine),
        "version": document.version,
        "default": document.default,
        "source": document.source.title,
    }
    if document.source.published is not None:
        entry["published"] = document.source.published.isoformat()
    return entry


def _write_index(out: Path, entries: list[dict[str, object]]) -> None:
    index = {"profiles": sorted(entries, key=lambda e: str(e["id"]))}
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")


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
    path = _write_document(document, out)
    index_path = out / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"profiles": []}
    entries = [e for e in index["profiles"] if e["id"] != document.id]
    if default:
        for entry in entries:
            if entry["gpu"] == document.gpu:
                entry["default"] = False
    _write_index(out, [*entries, _index_entry(document)])
    return path


def bundled_versions(systems: Path | None = None) -> list[tuple[str, str, str]]:
    """(system, engine, version) for every catalog GPU's system, engine and version whose GEMM
    table the silicon database holds, in order."""
    data = systems_dir(systems) / "data"
    return [
        (system, engine.value, version)
        for system in sorted(SYSTEMS)
        for engine in EngineName
        for version in engine_versions(data / system, "gemm", engine)
    ]


def write_all_bundled(systems: Path | None = None, *, out: Path) -> list[Path]:
    """Every profile `bundled_versions` lists whose attention is measured too (at that version
    or an older one: SGLang 0.5.6.post2 on H100 has GEMMs only), replacing what `out` held;
    each GPU's newest profile of the `bundled_default` engine is its default."""
    chosen = bundled_versions(systems)
    newest: dict[str, tuple[str, str]] = {}
    for system, engine, version in chosen:
        if policy_of(engine).bundled_default:
            newest[system] = (engine, version)  # in version order: the last is the newest
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("*.json.gz"), *out.glob("*.json")]:
        stale.unlink()
    paths, entries = [], []
    for system, engine, version in chosen:
        gpu = gpu_spec_from_fields(_catalog_gpu(SYSTEMS[system]))
        default = newest.get(system) == (engine, version)
        try:
            document = import_profile(
                system, engine, gpu, version=version, root=systems, default=default
            )
        except FileNotFoundError:
            continue
        paths.append(_write_document(document, out))
        entries.append(_index_entry(document))
    _write_index(out, entries)
    return paths
