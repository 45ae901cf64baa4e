"""`/v1/gpus` and `/v1/models`: the GPU and model catalogs, and import from a Hugging Face
`config.json`.

The item routes every catalog resource shares (get, create, replace, patch, delete) are added by
`add_item_routes`, so GPUs and models behave alike by construction; each resource adds its own
list route (its filters differ).

No `from __future__ import annotations` here: FastAPI must see the per-resource schema classes
of the nested route functions as objects, not as strings it cannot resolve.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Path, Query, Request, Response, status
from pydantic import BaseModel
from sqlalchemy.orm import Session

from app.catalog.hf_import import import_hf_config
from app.catalog.orm import CatalogEntry
from app.catalog.representations import Representation
from app.catalog.schemas import (
    CatalogChangeRead,
    GpuCreate,
    GpuFields,
    GpuPatch,
    GpuRead,
    ModelCreate,
    ModelFields,
    ModelImportRead,
    ModelPatch,
    ModelRead,
)
from app.catalog.service import CatalogEntries, gpu_entries, list_gpus, list_models, model_entries
from app.web.deps import (
    ApiKeyDep,
    IfMatchDep,
    LimitQuery,
    OffsetQuery,
    ReaderDep,
    cached_page,
    cached_read,
    count_filter,
    etag_for,
    json_response,
    not_modified,
    read_in_session,
    text_filter,
    write_in_session,
)
from app.web.schemas import ID_PATTERN, NO_NUL, Output, Page, problem_responses

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
        def fetch(session: Session) -> Representation:
            row = entries(session).get(entry_id)
            return Representation(read(row).model_dump_json().encode(), etag_for(row.version))

        answer = await cached_read(request, noun, fetch)
        etag = answer.etag or ""
        if not_modified(if_none_match, etag):
            return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        return Response(answer.body, media_type="application/json", headers={"ETag": etag})

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

    @router.get(
        item_path + "/history",
        response_model=Page[CatalogChangeRead],
        summary=f"A {noun}'s history: every write, by whom",
        description=(
            "Each create, replace, patch, delete and catalog load of the id, newest first, with "
            "the version it left (or deleted) and the name of the principal whose key made it "
            "(null: the bundled catalog's load). Writes before the history began are not in it. "
            "Needs an API key of any role."
        ),
        responses=problem_responses(401, 403),
        name=f"{noun}_history",
    )
    async def entry_history(
        entry_id: Annotated[str, id_path],
        request: Request,
        _key: ReaderDep,
        limit: LimitQuery = 50,
        offset: OffsetQuery = 0,
    ) -> Response:
        def page(session: Session) -> Page[CatalogChangeRead]:
            rows, total = entries(session).repository.history(entry_id, limit=limit, offset=offset)
            return Page[CatalogChangeRead](
                items=[CatalogChangeRead.from_row(row) for row in rows],
                total=total,
                limit=limit,
                offset=offset,
            )

        answer = await read_in_session(request, page)
        return json_response(answer)


gpu_router = APIRouter(prefix="/v1", tags=["gpus"])


@gpu_router.get("/gpus", response_model=Page[GpuRead], summary="List GPUs, by id")
async def list_gpus_route(
    request: Request,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
    vendor: Annotated[
        str | None, text_filter("Only this vendor's GPUs.", max_length=32, example="nvidia")
    ] = None,
    min_memory_bytes: Annotated[
        int | None, count_filter("Only GPUs with at least this much memory.")
    ] = None,
) -> Response:
    return await cached_page(
        request,
        "gpu",
        lambda session: Page[GpuRead].of(
            list_gpus(
                session,
                vendor=vendor,
                min_memory_bytes=min_memory_bytes,
                limit=limit,
                offset=offset,
            ),
            GpuRead.from_row,
        ),
    )


add_item_routes(
    gpu_router,
    noun="gpu",
    collection_path="/gpus",
    entries=gpu_entries,
    fields_schema=GpuFields,
    create_schema=GpuCreate,
    patch_schema=GpuPatch,
    read_schema=GpuRead,
    example_id="a40-48gb",
)


model_router = APIRouter(prefix="/v1", tags=["models"])
_model_fields = writable_fields(ModelFields)


@model_router.get("/models", response_model=Page[ModelRead], summary="List models, by id")
async def list_models_route(
    request: Request,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
    family: Annotated[
        str | None, text_filter("Only this family's models.", max_length=32, example="llama")
    ] = None,
    min_params: Annotated[
        int | None, count_filter("Only models with at least this many parameters.")
    ] = None,
    max_params: Annotated[
        int | None, count_filter("Only models with at most this many parameters.")
    ] = None,
) -> Response:
    return await cached_page(
        request,
        "model",
        lambda session: Page[ModelRead].of(
            list_models(
                session,
                family=family,
                min_params=min_params,
                max_params=max_params,
                limit=limit,
                offset=offset,
            ),
            ModelRead.from_row,
        ),
    )


@model_router.post(
    "/models/hf-import",
    response_model=ModelImportRead,
    status_code=status.HTTP_201_CREATED,
    summary="Create a model from a Hugging Face config.json",
    description=(
        "Send the model's `config.json` as the body and the new catalog id as `id`. Llama, "
        "Mistral, Mixtral, Qwen2, Qwen3 (dense and MoE), Gemma 2/3 and Phi-3 are understood; "
        "anything else, or a missing field, gets a 422 naming it."
    ),
    responses=problem_responses(400, 401, 403, 409, 413, 415, 422),
)
async def import_model(
    entry_id: Annotated[
        str,
        Query(
            alias="id",
            pattern=ID_PATTERN,
            description="The new entry's catalog id.",
            examples=["llama-3-8b-imported"],
        ),
    ],
    config: Annotated[
        dict[str, Any],
        Body(
            description="A Hugging Face config.json, as published.",
            examples=[
                {
                    "architectures": ["LlamaForCausalLM"],
                    "hidden_size": 4096,
                    "intermediate_size": 14336,
                    "max_position_embeddings": 8192,
                    "num_attention_heads": 32,
                    "num_hidden_layers": 32,
                    "num_key_value_heads": 8,
                    "vocab_size": 128256,
                }
            ],
        ),
    ],
    request: Request,
    _key: ApiKeyDep,
    name: Annotated[
        str | None, text_filter("Display name; default: hf_repo or id.", max_length=200)
    ] = None,
    hf_repo: Annotated[
        str | None,
        text_filter(
            "The Hugging Face repository, cited as the entry's source.",
            max_length=200,
            example="meta-llama/Meta-Llama-3-8B",
        ),
    ] = None,
) -> Response:
    return await write_in_session(
        request,
        lambda session: import_hf_config(
            session, entry_id, config, name=name, hf_repo=hf_repo, validate=_model_fields
        ),
        lambda created: entry_response(
            created[0],
            ModelImportRead.model_validate(
                ModelRead.from_row(created[0]).model_dump() | {"notes": list(created[1])}
            ),
            201,
            f"/v1/models/{entry_id}",
        ),
    )


add_item_routes(
    model_router,
    noun="model",
    collection_path="/models",
    entries=model_entries,
    fields_schema=ModelFields,
    create_schema=ModelCreate,
    patch_schema=ModelPatch,
    read_schema=ModelRead,
    example_id="mistral-nemo-12b",
)
