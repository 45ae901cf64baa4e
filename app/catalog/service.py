"""Use cases of the GPU and model catalogs: list, get, create, replace, patch, delete.

Writes are optimistic: each names the version it read (`If-Match`, or the version it just
loaded), and the UPDATE only matches that version. With `If-Match` a lost race is a 412; a patch
without it is re-read and re-applied, so two patches of different fields both land.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic

from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from app.catalog.lookup import nearest
from app.catalog.orm import GpuRow, ModelRow
from app.catalog.repository import CatalogRepository, GpuRepository, ModelRepository, RowT
from app.db.pages import Page
from app.engine.params import count_params
from app.engine.specs import GpuSpec, ModelSpec
from app.errors import (
    AlreadyExists,
    Conflict,
    FieldProblem,
    GpuNotFound,
    InvalidInput,
    ModelNotFound,
    NotFound,
    PreconditionFailed,
    spec_errors,
)
from app.formats.catalog_specs import gpu_spec_from_fields, model_spec_from_fields
from app.formats.specs import spec_document

__all__ = [
    "ANY_VERSION",
    "CHANGES",
    "CatalogEntries",
    "LoadOutcome",
    "Precondition",
    "Validator",
    "changes",
    "forget_changes_at_end",
    "gpu_entries",
    "gpu_spec_of",
    "list_gpus",
    "list_models",
    "merge_patch",
    "model_entries",
    "model_spec_of",
    "record_change",
    "upsert_bundled",
]


@dataclass(frozen=True, slots=True)
class Precondition:
    """What an `If-Match` header asks of the entry: to exist (`*`), or to be at one of
    `versions` (strong ETags `"3"` name versions; a tag naming none, or a weak one, leaves
    `versions` short of it, and an empty set matches nothing: RFC 9110 section 13.1.1)."""

    versions: frozenset[int] = frozenset()
    any_version: bool = False

    @classmethod
    def at(cls, version: int) -> Precondition:
        return cls(frozenset({version}))

    def admits(self, version: int) -> bool:
        return self.any_version or version in self.versions

    def describe(self) -> str:
        if self.any_version:
            return "any version"
        if not self.versions:
            return "an ETag no version has"
        return ", ".join(str(v) for v in sorted(self.versions))


ANY_VERSION = Precondition(any_version=True)
"""`If-Match: *`: the entry must exist, whatever its version."""
_PATCH_ATTEMPTS = 8

Validator = Callable[[dict[str, Any]], dict[str, Any]]
"""Checks a whole entry document as the API would take it; returns the fields to store."""


CHANGES = "catalog_changes"
"""The `Session.info` key of the catalog entries a transaction wrote: (kind, id) pairs."""


def record_change(session: Session, kind: str, entry_id: str) -> None:
    """Note a write of entry `entry_id` of `kind` (`gpu`, `model`), for what listens to commits:
    the spec cache drops the entry after it (`SpecCache.watch`); the runs package recomputes a
    GPU's expected error before it (`app.runs.validation.watch`)."""
    session.info.setdefault(CHANGES, set()).add((kind, entry_id))


def changes(session: Session) -> set[tuple[str, str]]:
    """The catalog writes noted in the session's transaction so far."""
    found: set[tuple[str, str]] = session.info.get(CHANGES, set())
    return found


def _forget_changes(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # the outermost transaction, not a savepoint
        session.info.pop(CHANGES, None)


def forget_changes_at_end(session_factory: sessionmaker[Session]) -> None:
    """Forget the noted writes when a transaction of `session_factory` ends (after every
    `after_commit` listener has read them), so that what listens to commits reads them rather
    than taking them, and any number of listeners see each write."""
    if not event.contains(session_factory, "after_transaction_end", _forget_changes):
        event.listen(session_factory, "after_transaction_end", _forget_changes)


def merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7396 JSON merge patch: objects merge recursively, null removes, the rest replaces."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = value
    return merged


class CatalogEntries(Generic[RowT]):
    """The catalog use cases for one kind of entry, over one request's session."""

    def __init__(
        self,
        session: Session,
        repository: CatalogRepository[RowT],
        not_found: Callable[[str, str], NotFound],
        columns: Callable[[dict[str, Any], Session, str], dict[str, Any]],
        fields: Callable[[RowT], dict[str, Any]],
    ) -> None:
        self.session = session
        self.repository = repository
        self._not_found = not_found
        self._columns = columns
        self._fields = fields

    # reads

    def get(self, entry_id: str) -> RowT:
        """The entry; 404 saying which ids are near when there is none (`app.catalog.lookup`)."""
        row = self.repository.get(entry_id)
        if row is None:
            raise self._not_found(entry_id, nearest(self.repository, entry_id))
        return row

    def document(self, row: RowT) -> dict[str, Any]:
        """The writable fields of an entry, as a client would send them in a PUT."""
        return self._fields(row)

    # writes

    def create(self, entry_id: str, fields: dict[str, Any]) -> RowT:
        """A new user entry; 409 when the id is taken, also by a writer that raced this one."""
        if self.repository.get(entry_id) is not None:
            raise self._taken(entry_id)
        columns = self.columns(fields, entry_id)
        row = self.repository.row_type(id=entry_id, origin="user", **columns)
        self.repository.clear_tombstone(entry_id)
        try:
            self.repository.add(row)
        except IntegrityError:  # the primary key: another create of this id committed first
            self.session.rollback()
            raise self._taken(entry_id) from None
        self.wrote(entry_id, row.version, "created")
        return row

    def replace(
        self,
        entry_id: str,
        fields: dict[str, Any],
        if_match: Precondition | None,
        *,
        body_id: str | None = None,
    ) -> RowT:
        """Every writable field of the entry; `body_id`, the id a PUT body names, must be
        `entry_id`: ids never change."""
        if body_id is not None and body_id != entry_id:
            raise InvalidInput(
                "The body's id differs from the path's; ids cannot be changed.",
                (FieldProblem("id", f"must be {entry_id!r}"),),
            )
        row = self._current(entry_id, if_match)
        columns = self.columns(fields, entry_id)
        return self._write(row, columns, if_match, action="replaced")

    def patch(
        self,
        entry_id: str,
        patch: Mapping[str, Any],
        if_match: Precondition | None,
        validate: Validator,
    ) -> RowT:
        """Apply a merge patch to the current entry; `validate` checks the merged document."""
        for _ in range(_PATCH_ATTEMPTS):
            row = self._current(entry_id, if_match)
            merged = validate(merge_patch(self.document(row), patch))
            columns = self.columns(merged, entry_id)
            try:
                return self._write(row, columns, if_match, retrying=True, action="patched")
            except StaleDataError:
                # Another writer landed first (SQLite, which has no row locks): forget the
                # stale copy, re-read, re-apply.
                self.session.rollback()
                self.session.expunge_all()
        raise Conflict(f"{self.repository.kind} {entry_id!r} kept changing; try again.")

    def delete(self, entry_id: str, if_match: Precondition | None) -> None:
        row = self._current(entry_id, if_match)
        self.wrote(entry_id, row.version, "deleted")
        try:
            self.repository.delete(row)
        except StaleDataError:
            self.session.rollback()
            raise self._stale(entry_id) from None

    def columns(self, fields: dict[str, Any], entry_id: str) -> dict[str, Any]:
        """Validated column values for `fields`, derived figures included."""
        return self._columns(fields, self.session, entry_id)

    def wrote(self, entry_id: str, version: int, action: str) -> None:
        """A write of `entry_id` leaving (or deleting) `version`: in the entry's history, and
        noted for what listens to the commit (`record_change`)."""
        self.repository.note(entry_id, version, action)
        record_change(self.session, self.repository.kind, entry_id)

    # internals

    def _current(self, entry_id: str, if_match: Precondition | None) -> RowT:
        row = self.repository.get_for_update(entry_id)
        if row is None:
            raise self._not_found(entry_id, nearest(self.repository, entry_id))
        if if_match is not None and not if_match.admits(row.version):
            raise self._stale(entry_id, row.version, if_match)
        return row

    def _write(
        self,
        row: RowT,
        columns: dict[str, Any],
        if_match: Precondition | None,
        *,
        retrying: bool = False,
        action: str,
    ) -> RowT:
        for name, value in columns.items():
            setattr(row, name, value)
        if row.origin == "bundled":
            row.user_modified = True  # the next catalog load leaves this entry alone
        try:
            self.repository.flush()
        except StaleDataError:
            if retrying and if_match is None:
                raise
            self.session.rollback()
            raise self._stale(row.id) from None
        self.wrote(row.id, row.version, action)
        return row

    def _taken(self, entry_id: str) -> AlreadyExists:
        return AlreadyExists(
            f"A {self.repository.kind} with id {entry_id!r} exists already; "
            "PUT or PATCH it instead.",
            (FieldProblem("id", "already taken"),),
        )

    def _stale(
        self, entry_id: str, current: int | None = None, expected: Precondition | None = None
    ) -> PreconditionFailed:
        if current is not None and expected is not None:
            detail = (
                f"{self.repository.kind} {entry_id!r} is at version {current}, "
                f"not {expected.describe()}: fetch it again and reapply your change."
            )
        else:
            detail = (
                f"{self.repository.kind} {entry_id!r} was changed by another writer "
                "meanwhile: fetch it again and reapply your change."
            )
        return PreconditionFailed(detail)


GPU_FIELDS = (
    "name",
    "vendor",
    "architecture",
    "form_factor",
    "memory_bytes",
    "memory_type",
    "memory_bandwidth_bytes_per_s",
    "peak_flops_per_s",
    "interconnect",
    "tdp_watts",
    "aliases",
    "price_per_gpu_hour_usd",
    "price_note",
    "efficiency",
    "sources",
)

MODEL_FIELDS = ("name", "family", "hf_repo", "published_params", "sources")
"""What the catalog says of a model besides its architecture (a `ModelSpec`, stored as one
document)."""


def _gpu_columns(fields: dict[str, Any], session: Session, entry_id: str) -> dict[str, Any]:
    with spec_errors():
        gpu_spec_from_fields(fields)
    owners = GpuRepository(session).alias_owners()
    for alias in fields.get("aliases") or ():
        owner = owners.get(alias)
        if owner is not None and owner != entry_id:
            raise Conflict(
                f"Alias {alias!r} already names GPU {owner!r}; a device name maps to one GPU.",
                (FieldProblem("aliases", f"{alias!r} belongs to {owner!r}"),),
            )
    return {name: fields.get(name) for name in GPU_FIELDS} | {
        "aliases": list(fields.get("aliases") or []),
        "sources": list(fields.get("sources") or []),
    }


def _model_columns(fields: dict[str, Any], _session: Session, _entry_id: str) -> dict[str, Any]:
    with spec_errors():
        spec = model_spec_from_fields(fields)
    params = count_params(spec)
    return {name: fields.get(name) for name in MODEL_FIELDS} | {
        "architecture": spec_document(spec),
        "sources": list(fields.get("sources") or []),
        "params_total": params.total,
        "params_active": params.active,
    }


def _gpu_fields(row: GpuRow) -> dict[str, Any]:
    return {name: getattr(row, name) for name in GPU_FIELDS}


def gpu_spec_of(row: GpuRow) -> GpuSpec:
    """The engine spec of a stored GPU; `SpecError` if its figures are impossible."""
    return gpu_spec_from_fields(_gpu_fields(row) | {"id": row.id})


def model_spec_of(row: ModelRow) -> ModelSpec:
    """The engine spec of a stored model; `SpecError` if its architecture is impossible."""
    return model_spec_from_fields(row.architecture | {"id": row.id})


def gpu_entries(session: Session) -> CatalogEntries[GpuRow]:
    return CatalogEntries(session, GpuRepository(session), GpuNotFound, _gpu_columns, _gpu_fields)


def model_entries(session: Session) -> CatalogEntries[ModelRow]:
    return CatalogEntries(
        session, ModelRepository(session), ModelNotFound, _model_columns, ModelRow.fields
    )


class LoadOutcome(StrEnum):
    INSERTED = "inserted"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    KEPT_USER_EDIT = "kept_user_edit"
    KEPT_USER_ENTRY = "kept_user_entry"
    SKIPPED_DELETED = "skipped_deleted"


def upsert_bundled(
    entries: CatalogEntries[Any], entry_id: str, fields: dict[str, Any], digest: str
) -> LoadOutcome:
    """Bring one bundled entry in, never over a user's edit, entry or deletion."""
    repository = entries.repository
    if repository.is_tombstoned(entry_id):
        return LoadOutcome.SKIPPED_DELETED
    row = repository.get(entry_id)
    if row is None:
        columns = entries.columns(fields, entry_id)
        inserted = repository.row_type(
            id=entry_id, origin="bundled", bundled_digest=digest, **columns
        )
        repository.add(inserted)
        entries.wrote(entry_id, inserted.version, "loaded")
        return LoadOutcome.INSERTED
    if row.origin != "bundled":
        return LoadOutcome.KEPT_USER_ENTRY
    if row.user_modified:
        return LoadOutcome.KEPT_USER_EDIT
    if row.bundled_digest == digest:
        return LoadOutcome.UNCHANGED
    for name, value in entries.columns(fields, entry_id).items():
        setattr(row, name, value)
    row.bundled_digest = digest
    repository.flush()
    entries.wrote(entry_id, row.version, "loaded")
    return LoadOutcome.UPDATED


def list_gpus(
    session: Session, *, vendor: str | None, min_memory_bytes: int | None, limit: int, offset: int
) -> Page[GpuRow]:
    repository = GpuRepository(session)
    where = repository.filters(vendor=vendor, min_memory_bytes=min_memory_bytes)
    items, total = repository.page(where, limit=limit, offset=offset)
    return Page(items=items, total=total, limit=limit, offset=offset)


def list_models(
    session: Session,
    *,
    family: str | None,
    min_params: int | None,
    max_params: int | None,
    limit: int,
    offset: int,
) -> Page[ModelRow]:
    repository = ModelRepository(session)
    where = repository.filters(family=family, min_params=min_params, max_params=max_params)
    items, total = repository.page(where, limit=limit, offset=offset)
    return Page(items=items, total=total, limit=limit, offset=offset)
