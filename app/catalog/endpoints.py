"""`/v1/models`: the model catalog, and import from a Hugging Face `config.json`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response, status

from app.catalog.hf_import import import_hf_config
from app.catalog.item_routes import add_item_routes, entry_response, writable_fields
from app.catalog.schemas import (
    ModelCreate,
    ModelFields,
    ModelImportRead,
    ModelPatch,
    ModelRead,
)
from app.catalog.service import list_models, model_entries
from app.web.deps import ApiKeyDep, LimitQuery, OffsetQuery, read_json, write_in_session
from app.web.schemas import ID_PATTERN, MAX_BIGINT, NO_NUL, Page, problem_responses

router = APIRouter(prefix="/v1", tags=["models"])
_model_fields = writable_fields(ModelFields)


@router.get("/models", response_model=Page[ModelRead], summary="List models, by id")
async def list_models_route(
    request: Request,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
    family: Annotated[
        str | None,
        Query(
            pattern=NO_NUL,
            max_length=32,
            description="Only this family's models.",
            examples=["llama"],
        ),
    ] = None,
    min_params: Annotated[
        int | None,
        Query(ge=0, le=MAX_BIGINT, description="Only models with at least this many parameters."),
    ] = None,
    max_params: Annotated[
        int | None,
        Query(ge=0, le=MAX_BIGINT, description="Only models with at most this many parameters."),
    ] = None,
) -> Response:
    return await read_json(
        request,
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


@router.post(
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
        str | None,
        Query(pattern=NO_NUL, max_length=200, description="Display name; default: hf_repo or id."),
    ] = None,
    hf_repo: Annotated[
        str | None,
        Query(
            pattern=NO_NUL,
            max_length=200,
            description="The Hugging Face repository, cited as the entry's source.",
            examples=["meta-llama/Meta-Llama-3-8B"],
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
    router,
    noun="model",
    collection_path="/models",
    entries=model_entries,
    fields_schema=ModelFields,
    create_schema=ModelCreate,
    patch_schema=ModelPatch,
    read_schema=ModelRead,
    example_id="mistral-nemo-12b",
)
