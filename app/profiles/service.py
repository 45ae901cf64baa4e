"""Profiles: list a GPU's, read one, store an upload (which may become the GPU's default)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from app.catalog.orm import GpuRow
from app.catalog.profile_rows import ProfileRow
from app.catalog.profiles import ProfileRef, bundled_document, bundled_refs, profile_refs
from app.catalog.service import record_change
from app.errors import AlreadyExists, GpuNotFound, InvalidInput, ProfileNotFound
from app.formats.profile_document import ProfileDocument

__all__ = ["StoredProfile", "get_profile", "gpu_profiles", "store_profile"]


@dataclass(frozen=True, slots=True)
class StoredProfile:
    """A profile and where it lives."""

    document: ProfileDocument
    bundled: bool
    default: bool


def gpu_profiles(session: Session, gpu_id: str) -> list[StoredProfile]:
    """The GPU's profiles, uploaded ones first; 404 for a GPU the catalog lacks."""
    if session.get(GpuRow, gpu_id) is None:
        raise GpuNotFound(gpu_id)
    return [_stored(session, ref) for ref in profile_refs(session, gpu_id)]


def get_profile(session: Session, profile_id: str) -> StoredProfile:
    row = session.get(ProfileRow, profile_id)
    if row is not None:
        return StoredProfile(
            ProfileDocument.model_validate(row.document, strict=False), False, row.is_default
        )
    for ref in bundled_refs():
        if ref.id == profile_id:
            return _stored(session, ref)
    raise ProfileNotFound(profile_id)


def _stored(session: Session, ref: ProfileRef) -> StoredProfile:
    if ref.bundled:
        return StoredProfile(bundled_document(ref.id), True, ref.default)
    row = session.get(ProfileRow, ref.id)
    if row is None:  # deleted meanwhile with its GPU
        raise ProfileNotFound(ref.id)
    return StoredProfile(
        ProfileDocument.model_validate(row.document, strict=False), False, ref.default
    )


def store_profile(
    session: Session, document: ProfileDocument, raw: dict[str, Any]
) -> StoredProfile:
    """Store an uploaded profile; a default one displaces the GPU's other uploaded defaults
    (and, being uploaded, comes before a bundled default). 409 for an id already taken, 422
    for a GPU the catalog lacks."""
    if session.get(GpuRow, document.gpu, with_for_update=True) is None:
        raise InvalidInput.at("gpu", f"no GPU with id {document.gpu!r} in the catalog")
    taken = session.get(ProfileRow, document.id) is not None or any(
        ref.id == document.id for ref in bundled_refs()
    )
    if taken:
        raise AlreadyExists(f"A profile with id {document.id!r} exists; profiles never change.")
    same = [
        ref.id
        for ref in profile_refs(session, document.gpu)
        if (ref.engine, ref.version) == (document.engine, document.version)
    ]
    if same and document.replaces not in same:
        if document.replaces is not None:
            raise InvalidInput.at(
                "replaces",
                f"{document.replaces!r} is not a profile of {document.gpu} under "
                f"{document.engine} {document.version}; that is {', '.join(same)}",
            )
        raise AlreadyExists(
            f"{document.gpu} has a profile of {document.engine} {document.version} already "
            f"({', '.join(same)}); set replaces to its id to time that release with this one "
            "instead."
        )
    if document.replaces is not None and not same:
        raise InvalidInput.at(
            "replaces",
            f"{document.gpu} has no profile of {document.engine} {document.version} to replace",
        )
    if document.default:
        session.execute(
            update(ProfileRow).where(ProfileRow.gpu_id == document.gpu).values(is_default=False)
        )
    session.add(
        ProfileRow(
            id=document.id,
            gpu_id=document.gpu,
            engine=document.engine,
            version=document.version,
            is_default=document.default,
            document=raw,
        )
    )
    session.flush()
    record_change(session, "gpu", document.gpu)  # its profiles changed: cached answers go
    return StoredProfile(document, False, document.default)
