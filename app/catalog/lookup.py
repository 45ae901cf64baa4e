"""Finding a catalog entry by what a caller calls it: its id, a GPU's device name, a model's
Hugging Face repository, any of them in any case; and, when nothing matches, the nearest names.
"""

from __future__ import annotations

import difflib

from app.catalog.repository import CatalogRepository, RowT

__all__ = ["MAX_SHOWN", "find_entry", "nearest", "shown"]

MAX_SHOWN = 80
"""Characters of a caller's text that an error message repeats."""


def shown(text: str) -> str:
    """`text` quoted for an error message, cut to `MAX_SHOWN` characters."""
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "...")


def find_entry(repository: CatalogRepository[RowT], name: str) -> RowT | None:
    """The entry `name` names: its id (ids are exact), else one of its other names in any
    case (a GPU's device name, a model's Hugging Face repository)."""
    row = repository.get(name)
    if row is not None:
        return row
    _, others = repository.names()
    entry_id = others.get(name.lower())
    return repository.get(entry_id) if entry_id is not None else None


def nearest(repository: CatalogRepository[RowT], name: str) -> str:
    """`"; did you mean 'a' or 'b'?"` naming the ids nearest `name` (by id or other name, in
    any case), or "" when none is near."""
    ids, others = repository.names()
    candidates = {entry_id.lower(): entry_id for entry_id in ids} | others
    close = difflib.get_close_matches(name.lower()[:MAX_SHOWN], list(candidates), n=5, cutoff=0.6)
    near = list(dict.fromkeys(candidates[match] for match in close))[:3]
    if not near:
        return ""
    return "; did you mean " + " or ".join(repr(entry_id) for entry_id in near) + "?"
