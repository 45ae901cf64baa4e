"""Schemas shared by several resources."""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = [
    "ENTRY_ID",
    "FieldError",
    "Input",
    "Output",
    "Page",
    "Problem",
    "SourceRef",
    "merge_patch_model",
    "problem_responses",
]

T = TypeVar("T")

ENTRY_ID = Annotated[
    str,
    Field(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="Catalog id: lower-case letters, digits, `.`, `_`, `-`; at most 64 characters.",
        examples=["h100-sxm5-80gb"],
    ),
]


class Input(BaseModel):
    """Base of request bodies: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Output(BaseModel):
    """Base of responses: read from ORM rows by attribute."""

    model_config = ConfigDict(from_attributes=True, extra="ignore")


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

    items: list[T] = Field(description="This page of entries, ordered by id.")
    total: int = Field(description="How many entries match the filters in all.")
    limit: int = Field(description="Page size asked for.")
    offset: int = Field(description="Entries skipped before this page.")


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


def merge_patch_model(fields_model: type[BaseModel], name: str) -> type[BaseModel]:
    """The schema of a JSON merge patch (RFC 7396) of `fields_model`: every field optional, null
    to remove it, nested objects partial (the merged document is validated in full)."""
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
    model: type[BaseModel] = create_model(
        name,
        __base__=Input,
        __doc__=f"A JSON merge patch of a {fields_model.__name__.removesuffix('Fields')}: fields "
        "present replace, nested objects merge, null removes.",
        **definitions,
    )
    return model
