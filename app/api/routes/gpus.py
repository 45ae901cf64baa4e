"""`/v1/gpus`: the GPU catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import SessionDep
from app.api.routes.catalog import add_item_routes
from app.api.schemas.common import Page
from app.api.schemas.gpus import GpuCreate, GpuFields, GpuPatch, GpuRead
from app.services.catalog import gpu_entries, list_gpus

router = APIRouter(prefix="/v1", tags=["gpus"])


@router.get("/gpus", response_model=Page[GpuRead], summary="List GPUs")
def list_gpus_route(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500, description="Page size.")] = 50,
    offset: Annotated[int, Query(ge=0, le=10**6, description="Entries to skip.")] = 0,
    vendor: Annotated[str | None, Query(max_length=32, examples=["nvidia"])] = None,
    min_memory_bytes: Annotated[
        int | None, Query(ge=0, description="Only GPUs with at least this much memory.")
    ] = None,
) -> Page[GpuRead]:
    page = list_gpus(
        session, vendor=vendor, min_memory_bytes=min_memory_bytes, limit=limit, offset=offset
    )
    return Page[GpuRead](
        items=[GpuRead.model_validate(row) for row in page.items],
        total=page.total,
        limit=page.limit,
        offset=page.offset,
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
)
