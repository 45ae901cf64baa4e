"""The item routes every catalog resource shares: get, create, replace, patch, delete.

Each resource module adds its own list route (its filters differ) and calls `add_item_routes`
with its schemas, so GPUs and models behave alike by construction.

No `from __future__ import annotations` here: FastAPI must see the per-resource schema classes
of the nested route functions as objects, not as strings it cannot resolve.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Request, Response, status
from pydantic import BaseModel
from sqlalchemy.orm import Session

from app.catalog.orm import CatalogEntry
from app.catalog.service import CatalogEntries
from app.web.deps import (
    ApiKeyDep,
    IfMatchDep,
    etag_for,
    json_response,
    not_modified,
    read_in_session,
    write_in_session,
)
from app.web.schemas import ID_PATTERN, NO_NUL, Output, problem_responses

__all__ = ["add_item_routes", "entry_response", "writable_fields"]

_WRITE_PROBLEMS = problem_responses(400, 401, 403, 404, 409, 412, 413, 415, 422)


def entry_response(
    row: CatalogEntry, payload: BaseModel, status_code: int = 200, location: str | None = None
) -> Response:
    """The JSON of `payload` with the entry's ETag (and `Location` for a new entry)."""
    headers = {"ETag": etag_for(row.version)}
    if location is not None:
        headers["Location"] = location
    return json_response(payload, status_code, headers)


def writable_fields(fields_schema: type[BaseModel]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What a client may write of an entry, checked by `fields_schema` (bounds included) and
    put as the database stores it: JSON types, absent for null. Every client write (POST, PUT,
    PATCH, import) goes through it, so what it stores reads back through the read schema."""

    def fields_of(document: dict[str, Any]) -> dict[str, Any]:
        return fields_schema.model_validate(document).model_dump(mode="json", exclude_none=True)

    return fields_of


def add_item_routes(
    router: APIRouter,
    *,
    noun: str,
    collection_path: str,
    entries: Callable[[Session], CatalogEntries[Any]],
    fields_schema: type[BaseModel],
    create_schema: type[BaseModel],
    patch_schema: type[BaseModel],
    read_schema: type[Output],
    example_id: str,
) -> None:
    """Register `POST collection` and `GET/PUT/PATCH/DELETE collection/{id}` on `router`."""
    item_path = collection_path + "/{entry_id}"
    fields_of = writable_fields(fields_schema)
    # The examples name the entry the POST example creates, so Swagger UI's examples work in
    # order: create, read, replace, patch, delete.
    id_path = Path(pattern=ID_PATTERN, description="Catalog id.", examples=[example_id])
    # A read looks up any name: a near miss (`llama-3-8B`) is a 404 naming the nearest ids.
    lookup_path = Path(
        pattern=NO_NUL, max_length=200, description="Catalog id.", examples=[example_id]
    )

    def read(row: CatalogEntry) -> BaseModel:
        return read_schema.from_row(row)

    @router.get(
        item_path,
        response_model=read_schema,
        summary=f"Get a {noun}",
        responses=problem_responses(404) | {304: {"description": "Not modified."}},
        name=f"get_{noun}",
    )
    async def get_entry(
        entry_id: Annotated[str, lookup_path],
        request: Request,
        if_none_match: Annotated[
            str | None, Header(description="An ETag you hold: 304 while it is current.")
        ] = None,
    ) -> Response:
        def fetch(session: Session) -> tuple[int, bytes]:
            row = entries(session).get(entry_id)
            return row.version, read(row).model_dump_json().encode()

        version, payload = await read_in_session(request, fetch)
        etag = etag_for(version)
        if not_modified(if_none_match, etag):
            return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        return Response(payload, media_type="application/json", headers={"ETag": etag})

    @router.post(
        collection_path,
        response_model=read_schema,
        status_code=status.HTTP_201_CREATED,
        summary=f"Create a {noun}",
        responses=_WRITE_PROBLEMS,
        name=f"create_{noun}",
    )
    async def create_entry(
        body: Annotated[create_schema, Body()],  # type: ignore[valid-type]
        request: Request,
        _key: ApiKeyDep,
    ) -> Response:
        document = body.model_dump(mode="json", exclude_none=True)  # type: ignore[attr-defined]
        entry_id = document.pop("id")
        location = f"{router.prefix}{collection_path}/{entry_id}"
        return await write_in_session(
            request,
            lambda session: entries(session).create(entry_id, fields_of(document)),
            lambda row: entry_response(row, read(row), 201, location),
        )

    @router.put(
        item_path,
        response_model=read_schema,
        summary=f"Replace a {noun}",
        description="Replaces every writable field; `If-Match` makes it conditional.",
        responses=_WRITE_PROBLEMS,
        name=f"replace_{noun}",
    )
    async def replace_entry(
        entry_id: Annotated[str, id_path],
        body: Annotated[create_schema, Body()],  # type: ignore[valid-type]
        request: Request,
        if_match: IfMatchDep,
        _key: ApiKeyDep,
    ) -> Response:
        document = body.model_dump(mode="json", exclude_none=True)  # type: ignore[attr-defined]
        body_id = document.pop("id")
        return await write_in_session(
            request,
            lambda session: entries(session).replace(
                entry_id, fields_of(document), if_match, body_id=body_id
            ),
            lambda row: entry_response(row, read(row)),
        )

    @router.patch(
        item_path,
        response_model=read_schema,
        summary=f"Patch a {noun}",
        description=(
            "A JSON merge patch (RFC 7396). Without `If-Match` a patch that races another "
            "writer is re-applied to the newer version; with it, a stale version gets 412."
        ),
        responses=_WRITE_PROBLEMS,
        name=f"patch_{noun}",
    )
    async def patch_entry(
        entry_id: Annotated[str, id_path],
        body: Annotated[patch_schema, Body()],  # type: ignore[valid-type]
        request: Request,
        if_match: IfMatchDep,
        _key: ApiKeyDep,
    ) -> Response:
        patch = body.model_dump(mode="json", exclude_unset=True)  # type: ignore[attr-defined]
        return await write_in_session(
            request,
            lambda session: entries(session).patch(entry_id, patch, if_match, fields_of),
            lambda row: entry_response(row, read(row)),
        )

    @router.delete(
        item_path,
        status_code=status.HTTP_204_NO_CONTENT,
        summary=f"Delete a {noun}",
        description="A deleted bundled entry stays deleted: the catalog load will not restore it.",
        responses=problem_responses(400, 401, 403, 404, 412),
        name=f"delete_{noun}",
    )
    async def delete_entry(
        entry_id: Annotated[str, id_path],
        request: Request,
        if_match: IfMatchDep,
        _key: ApiKeyDep,
    ) -> Response:
        return await write_in_session(
            request,
            lambda session: entries(session).delete(entry_id, if_match),
            lambda _: Response(status_code=status.HTTP_204_NO_CONTENT),
        )
