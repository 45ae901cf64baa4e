"""`/v1/gpus`: the GPU catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from app.catalog.gpu_schemas import GpuCreate, GpuFields, GpuPatch, GpuRead
from app.catalog.item_routes import add_item_routes
from app.catalog.service import gpu_entries, list_gpus
from app.web.deps import LimitQuery, OffsetQuery, read_json
from app.web.schemas import MAX_BIGINT, NO_NUL, Page

router = APIRouter(prefix="/v1", tags=["gpus"])


@router.get("/gpus", response_model=Page[GpuRead], summary="List GPUs, by id")
async def list_gpus_route(
    request: Request,
    limit: LimitQuery = 50,
    offset: OffsetQuery = 0,
    vendor: Annotated[
        str | None,
        Query(
            pattern=NO_NUL,
            max_length=32,
            description="Only this vendor's GPUs.",
            examples=["nvidia"],
        ),
    ] = None,
    min_memory_bytes: Annotated[
        int | None,
        Query(ge=0, le=MAX_BIGINT, description="Only GPUs with at least this much memory."),
    ] = None,
) -> Response:
    return await read_json(
        request,
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
    router,
    noun="gpu",
    collection_path="/gpus",
    entries=gpu_entries,
    fields_schema=GpuFields,
    create_schema=GpuCreate,
    patch_schema=GpuPatch,
    read_schema=GpuRead,
    example_id="a40-48gb",
)
