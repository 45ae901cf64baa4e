"""`GET /v1/validation`: the record of Ridgeline's answers against published serving runs (JSON,
or on `Accept: image/svg+xml` a chart of predicted against measured per family)."""

from __future__ import annotations

from functools import cache
from typing import Annotated

from fastapi import APIRouter, Header, Response
from starlette.concurrency import run_in_threadpool

from app.validation.record import shipped
from app.validation.schemas import ValidationRecord
from app.web.charts import SVG_MEDIA_TYPE, validation_svg, wants_svg

router = APIRouter(prefix="/v1", tags=["validation"])


@cache
def _record() -> ValidationRecord:
    return ValidationRecord.model_validate(shipped())


@cache
def _chart() -> str:
    return validation_svg(_record())


@router.get(
    "/validation",
    response_model=ValidationRecord,
    summary="Ridgeline against published serving runs (JSON, or an SVG chart)",
    responses={200: {"content": {SVG_MEDIA_TYPE: {"schema": {"type": "string"}}}}},
)
async def get_validation(
    accept: Annotated[
        str | None, Header(description="`image/svg+xml` for a chart instead of JSON.")
    ] = None,
) -> Response | ValidationRecord:
    """Per kind of answer (architecture family x engine x what timed it x load x metric): how
    many published figures it was compared with, from how many sources, its mean absolute and
    median error, and the interval every such answer states in `error_interval_pct`, with the
    share of comparisons inside it when their own source is left out; every comparison with its
    source. The chart plots each answer against the measured figure, per family."""
    if wants_svg(accept):
        return Response(await run_in_threadpool(_chart), media_type=SVG_MEDIA_TYPE)
    return _record()
