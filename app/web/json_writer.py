"""`JsonWriter`: a response schema's JSON written from the attributes of the objects it
describes (the engine's frozen dataclasses), without building the pydantic model first.

An estimate's answer used to be read into its response schema (pydantic validation from
attributes) and then serialised: for TP feasibility's five candidates that took ~20 µs, about a
sixth of the request. The engine's values already have the schema's types, so validating them
only copied them. Here each (schema, source class) pair gets a function, generated once from the
schema's fields, that builds the JSON-ready dict in one expression: a value of its field's exact
type (`float`, `int`, `bool`, `str`, None where allowed) is taken as it is, a nested schema or a
list or dict of values is built the same way, and orjson writes the dict. Any other value (an
`int` where a `float` is declared, an enumeration where text is, a type this module does not
know) goes through pydantic's own validation and serialisation of that field's annotation, so
each is written as pydantic writes it.

The bytes are those of `schema.model_validate(fields, from_attributes=True).model_dump_json()`
(`tests/api/test_json_writer.py` holds them equal for every estimate answer). A schema whose
serialisation pydantic changes (serialisers, aliases, excluded fields, its own JSON settings)
is always written by pydantic, a field whose annotation carries metadata is converted by
pydantic, and when a generated function fails on a value the whole answer goes pydantic's way,
which raises what it would have raised.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter

__all__ = ["JsonWriter"]

Build = Callable[[Any, Mapping[str, Any]], dict[str, Any]]
Convert = Callable[[Any], Any]

M = TypeVar("M", bound=BaseModel)

_EXACT = (float, int, bool, str)
"""Scalar types a value of exactly that class is written as it is."""

_KEPT_DUMPS = 256
"""Frozen model instances whose JSON-ready dumps are kept (by identity)."""


class JsonWriter(Generic[M]):
    """Writes `schema`'s JSON from a source object's attributes (`dumps`), or builds the model
    the same way (`model`, for what needs the model itself: charts)."""

    def __init__(self, schema: type[M]) -> None:
        self.schema = schema
        self._generated = _generated(schema)
        self._builds: dict[tuple[type, tuple[str, ...]], Build | None] = {}

    @staticmethod
    def of(schema: type[M]) -> JsonWriter[M]:
        """The writer of `schema`, one per schema and process."""
        writer = _WRITERS.get(schema)
        if writer is None:
            writer = _WRITERS[schema] = JsonWriter(schema)
        return writer

    def fields(self, source: object, given: Mapping[str, Any]) -> dict[str, Any]:
        """The schema's fields: those in `given` from it, the others read from `source` where
        it has them (the schema's defaults stand for the rest)."""
        fields = dict(given)
        for name in self.schema.model_fields:
            if name not in given and hasattr(source, name):
                fields[name] = getattr(source, name)
        return fields

    def model(self, source: object, given: Mapping[str, Any] = types.MappingProxyType({})) -> M:
        """The schema's model of `source` and `given`, validated by pydantic."""
        return self.schema.model_validate(self.fields(source, given), from_attributes=True)

    def dumps(self, source: object, given: Mapping[str, Any] = types.MappingProxyType({})) -> bytes:
        """`model(source, given).model_dump_json()`, encoded, written without the model."""
        build = self._build(source, tuple(given))
        if build is not None:
            try:
                return orjson.dumps(build(source, given))
            except Exception:  # pydantic's way, below, says what was wrong
                pass
        return self.model(source, given).model_dump_json().encode()

    def _build(self, source: object, given: tuple[str, ...]) -> Build | None:
        """The generated function for sources of `source`'s class with `given` fields, made on
        first use; None where pydantic writes: a schema it serialises its own way, a source
        that is a model or a dict (pydantic reads those otherwise than by attribute)."""
        key = (source.__class__, given)
        try:
            return self._builds[key]
        except KeyError:
            pass
        attributes = self._generated and not isinstance(source, BaseModel | dict)
        build = self._builds[key] = _compile(self.schema, source, given) if attributes else None
        return build


_WRITERS: dict[type[BaseModel], Any] = {}


def _generated(schema: type[BaseModel]) -> bool:
    """Whether pydantic writes `schema` field by field as declared: no serialisers, computed
    fields, aliases, exclusions or JSON settings of its own."""
    config = schema.model_config
    if any(key.startswith("ser_") or key in _SERIALISING_CONFIG for key in config):
        return False
    decorators = schema.__pydantic_decorators__
    if decorators.field_serializers or decorators.model_serializers or decorators.computed_fields:
        return False
    return all(
        field.alias is None
        and field.serialization_alias is None
        and not field.exclude
        and field.exclude_if is None
        for field in schema.model_fields.values()
    )


_SERIALISING_CONFIG = frozenset({"json_encoders", "use_enum_values", "serialize_by_alias"})


def _compile(schema: type[BaseModel], sample: object, given: tuple[str, ...]) -> Build | None:
    """`build(source, given)`: the JSON-ready dict of `schema` for sources of `sample`'s class;
    None when a required field is neither given nor an attribute of `sample` (pydantic then
    raises the error)."""
    namespace: dict[str, Any] = {}
    items: list[str] = []
    for index, (name, field) in enumerate(schema.model_fields.items()):
        annotation: Any = field.annotation
        metadata = tuple(field.metadata)
        if name in given:
            source = f"g[{name!r}]"
        elif hasattr(sample, name):
            source = f"o.{name}"
        elif field.is_required():
            return None
        else:  # pydantic writes the default
            default = field.get_default(call_default_factory=True)
            namespace[f"d{index}"] = _adapter(annotation, metadata).dump_python(
                default, mode="json"
            )
            items.append(f"{name!r}: d{index}")
            continue
        exact, optional = (None, False) if metadata else _scalar(annotation)
        namespace[f"c{index}"] = _slow(annotation, metadata) if metadata else _converter(annotation)
        if exact is None:
            items.append(f"{name!r}: c{index}({source})")
            continue
        # A value of exactly its class as it is, any other converted.
        namespace[f"t{index}"] = exact
        held = f"(_v := {source})"
        test = (
            f"{held} is None or _v.__class__ is t{index}"
            if optional
            else f"{held}.__class__ is t{index}"
        )
        items.append(f"{name!r}: (_v if {test} else c{index}(_v))")
    code = "def build(o, g):\n    return {" + ", ".join(items) + "}\n"
    exec(compile(code, f"<JsonWriter {schema.__name__}>", "exec"), namespace)
    build: Build = namespace["build"]
    return build


def _scalar(annotation: Any) -> tuple[type | None, bool]:
    """(the exact scalar class, whether None is allowed) of `float`, `int`, `bool`, `str` and
    those `| None`; (None, _) for any other annotation."""
    if annotation in _EXACT:
        return annotation, False
    args = _union_args(annotation)
    if args is not None and len(args) == 2 and type(None) in args:
        (inner,) = (arg for arg in args if arg is not type(None))
        if inner in _EXACT:
            return inner, True
    return None, False


def _union_args(annotation: Any) -> tuple[Any, ...] | None:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return None


@cache
def _adapter(annotation: Any, metadata: tuple[Any, ...] = ()) -> TypeAdapter[Any]:
    if metadata:
        return TypeAdapter(typing.Annotated[(annotation, *metadata)])
    return TypeAdapter(annotation)


@cache
def _slow(annotation: Any, metadata: tuple[Any, ...] = ()) -> Convert:
    """pydantic's own conversion of a value of `annotation`: validated (from attributes) and
    dumped JSON-ready."""
    adapter = _adapter(annotation, metadata)

    def convert(value: Any) -> Any:
        return adapter.dump_python(
            adapter.validate_python(value, from_attributes=True), mode="json"
        )

    return convert


@cache
def _converter(annotation: Any) -> Convert:
    """A value of `annotation` made JSON-ready as pydantic would write it: exact scalars, nested
    schemas, lists and string-keyed dicts of them here, anything else by `_slow`."""
    slow = _slow(annotation)
    args = _union_args(annotation)
    if args is not None:
        if len(args) != 2 or type(None) not in args:
            return slow
        (inner_annotation,) = (arg for arg in args if arg is not type(None))
        inner = _converter(inner_annotation)
        return lambda value: None if value is None else inner(value)
    if annotation is float:
        # pydantic writes an int declared float as a float (`1.0`).
        return lambda value: float(value) if value.__class__ is int else slow(value)
    if annotation in _EXACT:
        return lambda value: value if value.__class__ is annotation else slow(value)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _nested(annotation, slow)
    return _container(annotation, slow) or slow


def _container(annotation: Any, slow: Convert) -> Convert | None:
    """A list (or variadic tuple) or string-keyed dict of convertible values; None for any
    other annotation."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if (origin in (list, Sequence) and len(args) == 1) or (origin is tuple and _variadic(args)):
        item = _converter(args[0])
        exact = args[0] if args[0] in _EXACT else None

        def items(value: Any) -> Any:
            if value.__class__ is not list and value.__class__ is not tuple:
                return slow(value)
            if exact is not None:  # text, say: each element as it is when exactly that
                return [e if e.__class__ is exact else item(e) for e in value]
            return [item(element) for element in value]

        return items
    if origin is dict and len(args) == 2 and args[0] is str:
        entry = _converter(args[1])

        def entries(value: Any) -> Any:
            if value.__class__ is not dict:
                return slow(value)
            written = {}
            for key, element in value.items():
                if key.__class__ is not str:
                    return slow(value)
                written[key] = entry(element)
            return written

        return entries
    return None


def _variadic(args: tuple[Any, ...]) -> bool:
    return len(args) == 2 and args[1] is Ellipsis


def _nested(schema: type[BaseModel], slow: Convert) -> Convert:
    """A nested schema's value: an instance of exactly that schema dumped (kept by identity
    when the schema is deeply frozen), an attribute source written by its own generated
    function, anything else (a dict, another model) by pydantic."""
    writer = JsonWriter.of(schema)
    frozen = _deeply_frozen(schema)
    kept: dict[int, tuple[BaseModel, Any]] = {}

    def convert(value: Any) -> Any:
        if value.__class__ is schema:
            if not frozen:
                return value.model_dump(mode="json")
            found = kept.get(id(value))
            if found is not None and found[0] is value:
                return found[1]
            dumped = value.model_dump(mode="json")
            if len(kept) >= _KEPT_DUMPS:
                kept.clear()
            kept[id(value)] = (value, dumped)  # the instance kept too: its id stays its own
            return dumped
        build = writer._build(value, ())
        return slow(value) if build is None else build(value, _NOTHING)

    return convert


_NOTHING: Mapping[str, Any] = types.MappingProxyType({})


def _deeply_frozen(schema: type[BaseModel]) -> bool:
    """Whether `schema` and every schema its fields nest are frozen (an instance's dump can
    then be kept)."""
    if not schema.model_config.get("frozen"):
        return False
    for field in schema.model_fields.values():
        for nested in _models_in(field.annotation):
            if nested is not schema and not _deeply_frozen(nested):
                return False
    return True


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]
