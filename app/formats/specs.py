"""Schemas and documents derived from the engine's spec dataclasses, so that a model's
architecture is defined once: in `app.engine.specs` (`ModelSpec`, `MoeSpec`), whose fields carry
their description, bounds and example (`spec_field`).

- `spec_schema(ModelSpec, ...)` is a pydantic model with one field per spec field: the API's
  `ModelArchitecture` (bounds and examples shown), the run document's `RunModelSpec` (no caps:
  it records what ran). Its `to_spec()` builds the engine spec.
- `build_spec(ModelSpec, document)` builds a spec from a JSON-ready document (a stored
  architecture, an inline request's fields); `spec_document(spec)` is the inverse.
- `SPEC_FIELDS[ModelSpec]` names the fields, for the catalog's stored architecture and the tests.

A field added to `ModelSpec` appears in all of them; the Hugging Face mapping
(`app.formats.hf_config`) sets it where `config.json` has it, and a test fails while it does not
say what it does with a new field.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from enum import Enum
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from pydantic import BaseModel, Field, Strict, create_model

from app.engine.specs import SpecError

__all__ = ["SpecSchema", "build_spec", "derived_from", "spec_document", "spec_fields"]

S = TypeVar("S")
_NONE = type(None)


_FIELDS: dict[type[Any], tuple[str, ...]] = {}
_HINTS: dict[type[Any], dict[str, Any]] = {}


def spec_fields(spec: type[Any]) -> tuple[str, ...]:
    """The fields of a spec dataclass, in their order."""
    names = _FIELDS.get(spec)
    if names is None:
        names = _FIELDS[spec] = tuple(f.name for f in dataclasses.fields(spec))
    return names


def _hints(spec: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(spec)
    if hints is None:
        hints = _HINTS[spec] = get_type_hints(spec)
    return hints


def _optional_of(annotation: Any) -> tuple[Any, bool]:
    """(X, True) for `X | None`, else (annotation, False)."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not _NONE]
        if len(members) == 1 and len(get_args(annotation)) == 2:
            return members[0], True
    return annotation, False


def build_spec(spec: type[S], document: Mapping[str, Any]) -> S:
    """The spec `document` describes: nested specs built likewise, enumerations from their
    values, absent (or null) keys left to the spec's defaults, keys the spec does not have
    ignored.
    `SpecError` naming the field when a required one is missing or a value is impossible."""
    kwargs: dict[str, Any] = {}
    for name in spec_fields(spec):
        if name not in document:
            continue
        value = document[name]
        kind, optional = _optional_of(_hints(spec)[name])
        if value is None and not optional:
            continue  # null where the spec takes no None: the default applies
        if value is None:
            kwargs[name] = None
        elif dataclasses.is_dataclass(kind) and isinstance(value, Mapping):
            kwargs[name] = build_spec(kind, value)  # type: ignore[arg-type]
        elif isinstance(kind, type) and issubclass(kind, Enum):
            try:
                kwargs[name] = kind(value if not isinstance(value, Enum) else value.value)
            except ValueError:
                choices = ", ".join(str(member.value) for member in kind)
                raise SpecError(name, f"{value!r} is not one of {choices}") from None
        else:
            kwargs[name] = value
    missing = [
        f.name
        for f in dataclasses.fields(spec)  # type: ignore[arg-type]
        if f.name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SpecError(missing[0], "is required")
    return spec(**kwargs)


def spec_document(spec: Any, exclude: tuple[str, ...] = ("id",)) -> dict[str, Any]:
    """The JSON-ready document of a spec: enumerations as their values, nested specs as
    documents (the inverse of `build_spec`)."""
    document: dict[str, Any] = {}
    for name in spec_fields(type(spec)):
        if name in exclude:
            continue
        value = getattr(spec, name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = spec_document(value, ())
        elif isinstance(value, Enum):
            value = value.value
        document[name] = value
    return document


class SpecSchema(BaseModel):
    """Base of the schemas `spec_schema` derives; `to_spec()` builds the engine spec."""

    __spec_type__: type[Any]

    if TYPE_CHECKING:
        # The fields are derived at import (`derived_from`): to a type checker, any of them.
        def __getattr__(self, name: str) -> Any: ...

    def to_spec(self) -> Any:
        """The engine spec of these fields (`SpecError` when it is impossible)."""
        document = self.model_dump()
        return build_spec(type(self).__spec_type__, document)


M = TypeVar("M", bound=SpecSchema)


def derived_from(
    spec: type[Any],
    *,
    caps: bool = True,
    examples: bool = True,
    exclude: tuple[str, ...] = ("id",),
    nested: Mapping[type[Any], type[BaseModel]] | None = None,
    enums: Mapping[type[Enum], tuple[Any, Callable[[Enum], Any]]] | None = None,
    partial: bool = False,
    required: bool = False,
) -> Callable[[type[M]], type[M]]:
    """Give the decorated schema (a `SpecSchema` subclass) one field per field of `spec` (except
    `exclude`), after the fields it declares itself, derived from their `spec_field` metadata:
    the description, `gt`/`ge` always, `le` when `caps`, the example when `examples`. Nested
    spec dataclasses become the `nested` schema given for them; an enumeration becomes
    `enums[E] = (annotation, convert a default)` when given, else itself, taken from its value
    (`Strict(False)`). `partial`: every field optional, null by default (what a request leaves
    to someone else); `required`: none has a default (an answer's echo)."""
    nested = nested or {}
    enums = enums or {}

    def decorate(cls: type[M]) -> type[M]:
        definitions: dict[str, Any] = {}
        for spec_field in dataclasses.fields(spec):
            if spec_field.name in exclude:
                continue
            kind, optional = _optional_of(_hints(spec)[spec_field.name])
            annotation, default = _annotation(kind, spec_field.default, nested, enums)
            if optional or partial:
                annotation = annotation | None
            if partial:
                default = None
            meta = spec_field.metadata
            constraints: dict[str, Any] = {}
            for bound in ("gt", "ge", *(("le",) if caps else ())):
                if meta.get(bound) is not None:
                    constraints[bound] = meta[bound]
            if examples and meta.get("example") is not None:
                constraints["examples"] = [meta["example"]]
            field_default = ... if default is dataclasses.MISSING or required else default
            definitions[spec_field.name] = (
                annotation,
                Field(field_default, description=meta.get("doc"), **constraints),
            )
        derived: type[M] = create_model(
            cls.__name__,
            __base__=cls,
            __doc__=cls.__doc__,
            __module__=cls.__module__,
            **definitions,
        )
        derived.__spec_type__ = spec
        return derived

    return decorate


def _annotation(
    kind: Any,
    default: Any,
    nested: Mapping[type[Any], type[BaseModel]],
    enums: Mapping[type[Enum], tuple[Any, Callable[[Enum], Any]]],
) -> tuple[Any, Any]:
    """(the schema's annotation, its default) of a spec field of type `kind` (see
    `derived_from`)."""
    if dataclasses.is_dataclass(kind):
        return nested[kind], default  # type: ignore[index]
    if isinstance(kind, type) and issubclass(kind, Enum):
        if kind not in enums:
            return _lax(kind), default
        annotation, convert = enums[kind]
        return annotation, convert(default) if isinstance(default, Enum) else default
    return kind, default


def _lax(kind: type[Enum]) -> Any:
    """`kind` taken from its value (`"gated"`), as JSON spells an enumeration."""
    return Annotated[kind, Strict(False)]
