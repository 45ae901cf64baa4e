"""Schemas shared by several resources."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from functools import cache
from typing import Annotated, Any, Generic, Self, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationInfo,
    create_model,
    field_validator,
)

from app.db.pages import Page as ServicePage
from app.engine.dtypes import STORAGE_DTYPES, DType

__all__ = [
    "BF16_FORMAT",
    "CATALOG_REF",
    "ENTRY_ID",
    "ID_PATTERN",
    "MAX_BIGINT",
    "MAX_NESTING",
    "MAX_SLO_MS",
    "MAX_TOKENS",
    "NO_NUL",
    "NUL_MESSAGE",
    "FieldError",
    "Format",
    "Input",
    "Lax",
    "MemoryShare",
    "Output",
    "Page",
    "Problem",
    "Seed",
    "SloMs",
    "SourceRef",
    "StorageFormat",
    "Tokens",
    "merge_patch_model",
    "problem_responses",
]

T = TypeVar("T")

MAX_TOKENS = 2**24
"""Longest prompt, context or output any request may name: 16,777,216 tokens."""
MAX_BIGINT = 2**63 - 1
"""Largest integer a 64-bit column (or a filter on one) takes."""
MAX_SLO_MS = 86_400_000.0
"""Longest latency objective a request may set: a day."""

Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS)]
"""A positive number of tokens."""
SloMs = Annotated[float, Field(gt=0, le=MAX_SLO_MS, allow_inf_nan=False)]
"""A latency objective, milliseconds."""
MemoryShare = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
"""A share of GPU memory the serving engine may use (vLLM's `gpu_memory_utilization`)."""
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]
"""A random seed: the same seed draws the same requests."""

ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
"""Every id the service names things by: catalog entries, runs, calibrations."""

CATALOG_REF = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description=(
            "A catalog id (`llama-3-8b`), or another name of the entry: a GPU's device name "
            "(`NVIDIA H100 80GB HBM3`), a model's Hugging Face repository "
            "(`meta-llama/Meta-Llama-3-8B`)."
        ),
    ),
]
"""How a request names a catalog entry."""

RESERVED_IDS = frozenset({"hf-import"})
"""Ids that name a route beside the entries (`POST /v1/models/hf-import`): an entry under one
would be unreachable at its own path."""


def _not_reserved(entry_id: str) -> str:
    if entry_id in RESERVED_IDS:
        raise ValueError(f"{entry_id!r} is reserved: it names a route of its own")
    return entry_id


ENTRY_ID = Annotated[
    str,
    Field(
        pattern=ID_PATTERN,
        description=(
            "Catalog id: lower-case letters, digits, `.`, `_`, `-`; at most 64 characters "
            "(not `hf-import`)."
        ),
        examples=["h100-sxm5-80gb"],
    ),
    AfterValidator(_not_reserved),
]


Lax = Strict(False)
"""Marks a field of an `Input` that takes its value by conversion: enumerations and tuples,
which JSON spells as strings and arrays. Every other field of a request is strict."""


# The API's name for the engine's storage formats: derived, so a format the engine learns is one
# the API takes. Requests convert it to the engine's `DType` at once.
StorageFormat = StrEnum(  # type: ignore[misc]
    "StorageFormat", [(dtype.name, dtype.value) for dtype in STORAGE_DTYPES]
)
StorageFormat.__doc__ = "Formats weights and the KV cache can be stored in."
BF16_FORMAT = StorageFormat(DType.BF16.value)
"""The default weight and KV format of requests."""

Format = Annotated[StorageFormat, Lax]
"""A storage format in a request (`"bf16"`)."""


class Input(BaseModel):
    """Base of request bodies: unknown fields are an error, not silently dropped; values are
    never coerced (`"causal": 0`, `"overhead_ms": false`, `"tp": "2"` are 422s: `strict`, with
    enumerations and tuples marked `Lax`); and no text holds a NUL character (PostgreSQL cannot
    store one, and no name needs one)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any, info: ValidationInfo) -> Any:
        if info.context is STORED or info.context is NUL_FREE:
            return value  # read back from the database, or a body that cannot hold a NUL
        if info.field_name in _text_fields(cls) and _holds_nul(value):
            raise ValueError(NUL_MESSAGE)
        return value


STORED: dict[str, bool] = {"stored": True}
"""Validation context of a response read from stored rows: input-only checks are skipped."""

NUL_FREE: dict[str, bool] = {"nul_free": True}
"""Validation context of a JSON body whose bytes hold no `\\u0000` escape: JSON can carry a
NUL only as that escape (a raw control character is invalid JSON), so no text in it holds one
and the NUL check is skipped."""


NUL_MESSAGE = "text must not contain the NUL character (U+0000)"
NO_NUL = r"^[^\x00]*$"
"""A pattern for query parameters that reach the database: any text but NUL."""


@cache
def _text_fields(model: type[BaseModel]) -> frozenset[str]:
    """The fields of `model` whose type has text in it (`str`, `list[str]`, `str | Spec`):
    only these are searched, so a 200,000-row trace of numbers costs nothing."""
    return frozenset(
        name for name, field in model.model_fields.items() if _mentions_str(field.annotation)
    )


def _mentions_str(annotation: Any) -> bool:
    return annotation is str or any(_mentions_str(arg) for arg in get_args(annotation))


MAX_NESTING = 32
"""Deepest nesting of objects and arrays a request field may have (a config.json has 3)."""


def _holds_nul(value: Any) -> bool:
    """Whether `value`, or a string in it (list items, dict keys and values), holds a NUL;
    `ValueError` when it nests deeper than `MAX_NESTING` (iterative: no recursion limit to hit
    on a hostile body)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
            continue
        if isinstance(item, list | tuple | dict):
            if depth >= MAX_NESTING:
                raise ValueError(f"nests deeper than {MAX_NESTING} levels")
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
    return False


class Output(BaseModel):
    """Base of responses: read from ORM rows by attribute."""

    model_config = ConfigDict(from_attributes=True, extra="ignore")

    @classmethod
    def from_row(cls, row: object) -> Self:
        """The response of a stored row (input-only checks skipped: they passed on the way in)."""
        return cls.model_validate(row, context=STORED)


class SourceRef(Input):
    title: str = Field(min_length=1, max_length=300, description="What the source is.")
    url: str = Field(
        pattern=r"^https?://\S+$",
        max_length=1000,
        description="Where to read it.",
        examples=["https://www.nvidia.com/en-us/data-center/h100/"],
    )
    covers: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Which fields this source gives (dotted paths, e.g. `peak_flops_per_s.bf16`).",
    )
    note: str | None = Field(
        default=None, max_length=2000, description="How the figure was read or converted."
    )


class Page(Output, Generic[T]):
    """One page of a list, and how many entries there are in all."""

    items: list[T] = Field(description="This page of entries, in the order the list states.")
    total: int = Field(description="How many entries match the filters in all.")
    limit: int = Field(description="Page size asked for.")
    offset: int = Field(description="Entries skipped before this page.")

    @classmethod
    def of(cls, page: ServicePage[Any], item: Callable[[Any], Any]) -> Self:
        """The service's page, each entry shaped by `item`."""
        return cls(
            items=[item(entry) for entry in page.items],
            total=page.total,
            limit=page.limit,
            offset=page.offset,
        )


class FieldError(BaseModel):
    """One invalid field of a refused request."""

    field: str = Field(description="Dotted path of the offending field.", examples=["num_kv_heads"])
    location: str = Field(description="`body`, `query`, `path` or `header`.")
    message: str = Field(description="What is wrong with it.")


class Problem(BaseModel):
    """RFC 9457 problem details."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="A URI reference naming the kind of problem.")
    title: str = Field(description="Short summary of the kind of problem.")
    status: int = Field(description="The HTTP status code.")
    detail: str = Field(description="What went wrong with this request.")
    instance: str = Field(description="The path of the request that failed.")
    request_id: str | None = Field(default=None, description="Quote it when reporting a fault.")
    errors: list[FieldError] | None = Field(
        default=None, description="Each invalid field, for validation problems."
    )


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for the problem statuses a route can answer."""
    return {
        status: {"model": Problem, "content": {"application/problem+json": {}}}
        for status in statuses
    }


def merge_patch_model(
    fields_model: type[BaseModel], name: str, example: dict[str, Any] | None = None
) -> type[BaseModel]:
    """The schema of a JSON merge patch (RFC 7396) of `fields_model`: every field optional, null
    to remove it, nested objects partial (the merged document is validated in full), with
    `example` as the body Swagger UI offers."""
    definitions: dict[str, Any] = {}
    for field_name, info in fields_model.model_fields.items():
        annotation: Any = info.annotation
        nested = [arg for arg in getattr(annotation, "__args__", (annotation,)) if arg is not None]
        if any(isinstance(arg, type) and issubclass(arg, BaseModel) for arg in nested):
            annotation = dict[str, Any]
        definitions[field_name] = (
            annotation | None,
            Field(default=None, description=info.description),
        )
    base: type[BaseModel] = Input
    if example is not None:
        config = ConfigDict(json_schema_extra={"examples": [example]})
        base = type(f"_{name}Base", (Input,), {"model_config": config, "__doc__": Input.__doc__})
    model: type[BaseModel] = create_model(
        name,
        __base__=base,
        __doc__=f"A JSON merge patch of a {fields_model.__name__.removesuffix('Fields')}: fields "
        "present replace, nested objects merge, null removes.",
        **definitions,
    )
    return model
