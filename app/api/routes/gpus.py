"""`/v1/gpus`: the GPU catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy.orm import Session

from app.api.deps import read_in_session
from app.api.routes.catalog import add_item_routes
from app.api.schemas.common import Page
from app.api.schemas.gpus import GpuCreate, GpuFields, GpuPatch, GpuRead
from app.services.catalog import gpu_entries, list_gpus

router = APIRouter(prefix="/v1", tags=["gpus"])


@router.get("/gpus", response_model=Page[GpuRead], summary="List GPUs")
async def list_gpus_route(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=500, description="Page size.")] = 50,
    offset: Annotated[int, Query(ge=0, le=10**6, description="Entries to skip.")] = 0,
    vendor: Annotated[str | None, Query(max_length=32, examples=["nvidia"])] = None,
    min_memory_bytes: Annotated[
        int | None, Query(ge=0, description="Only GPUs with at least this much memory.")
    ] = None,
) -> Response:
    def fetch(session: Session) -> bytes:
        page = list_gpus(
            session, vendor=vendor, min_memory_bytes=min_memory_bytes, limit=limit, offset=offset
        )
        return (
            Page[GpuRead](
                items=[GpuRead.model_validate(row) for row in page.items],
                total=page.total,
                limit=page.limit,
                offset=page.offset,
            )
            .model_dump_json()
            .encode()
        )

    return Response(await read_in_session(request, fetch), media_type="application/json")


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
