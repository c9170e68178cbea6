"""A tool's result written once, as dataclasses: its ``outputSchema`` and ``structuredContent`` follow.

Why: a result written as a schema literal, again as the dict a handler builds, and again where the fleet
merge and history read that dict back with ``.get()`` drifts apart in three places. Here the dataclass
is the one statement; ``schema_of`` derives the JSON Schema from its type hints, ``to_json`` gives the
``structuredContent``, and ``from_json`` turns another host's JSON back into the same dataclass.

Types map as JSON Schema reads them (``X | None`` → ``[X, "null"]``, ``Literal`` → an ``enum``, a
dataclass → an object of its fields, all required and no others unless its ``SCHEMA_OPTIONS`` say
``closed=False``, as ``Open`` does, or ``required=False``), with two of our own:

- ``Opt[X]``: a field that may be left out (default ``ABSENT``), absent from the JSON while its value is
  ``ABSENT``; ``from_json`` gives it ``ABSENT`` when the JSON leaves it out, even where it is declared
  without that default, as a field before a required one must be;
- ``imported_later("module", "Name")``: a field's type from a module its tool imports only for some calls,
  bound at run time to that name in place of the import (which only the type checker sees); the schema
  and ``from_json`` import the module when they first need the type, ``to_json`` never does.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import math
import time
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, Literal, TypeVar, Union

from sysmcp.tools import schemas as js

__all__ = ["ABSENT", "Open", "Opt", "from_json", "imported_later", "prop", "result", "schema_of", "to_json"]

T = TypeVar("T")


class _Absent(enum.Enum):
    ABSENT = "absent"

    def __bool__(self) -> Literal[False]:  # so that ``if value:`` leaves ABSENT out, for mypy too
        return False


#: The value of an ``Opt`` field that is left out of the JSON.
ABSENT: Final = _Absent.ABSENT
Opt = Union[T, Literal[_Absent.ABSENT]]  # noqa: UP007 (a generic alias needs Union on 3.11)

_DOC = "sysmcp.doc"
_KEYWORDS = "sysmcp.keywords"
_NAME = "sysmcp.name"
_UNLISTED = "sysmcp.unlisted"


def prop(
    description: str | None = None,
    *,
    default: Any = dataclasses.MISSING,
    name: str | None = None,
    listed: bool = True,
    **keywords: Any,
) -> Any:
    """A result field: its description (None: ``descriptions.COMMON`` may give one), the schema's other
    keywords, its JSON name when that is no Python name (``class``). ``listed=False``: in the JSON but
    not among the schema's properties (its object allows others)."""
    metadata = {_DOC: description, _KEYWORDS: keywords, _NAME: name, _UNLISTED: not listed}
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=type(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@typing.dataclass_transform(frozen_default=True, field_specifiers=(prop,))
def result(cls: type[T]) -> type[T]:
    """A result dataclass, its fields declared with ``prop``: frozen for the type checker, and at run
    time a dataclass whose ``__init__``, ``__eq__`` and ``__repr__`` are shared functions, not code
    generated and compiled for each class. Why: a fleet host's remote start makes a tool's dozen result
    classes to answer one call, and compiling a frozen dataclass's methods cost it about 1 ms each."""
    made = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    spec = tuple(
        (item.name, item.default, item.default_factory) for item in dataclasses.fields(typing.cast(Any, made))
    )
    for name, value in (
        ("__result_init__", spec),
        ("__init__", _init),
        ("__eq__", _equal),
        ("__repr__", _shown),
    ):
        setattr(made, name, value)
    made.__hash__ = None  # type: ignore[assignment]  # equal by value, so not hashable by identity
    return made


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    spec = type(self).__result_init__
    if len(args) > len(spec):
        raise TypeError(f"{type(self).__name__}() takes {len(spec)} arguments, {len(args)} given")
    for index, (name, default, factory) in enumerate(spec):
        if index < len(args):
            if name in kwargs:
                raise TypeError(f"{type(self).__name__}() got two values for {name!r}")
            value = args[index]
        elif name in kwargs:
            value = kwargs.pop(name)
        elif default is not dataclasses.MISSING:
            value = default
        elif factory is not dataclasses.MISSING:
            value = factory()
        else:
            raise TypeError(f"{type(self).__name__}() is missing {name!r}")
        object.__setattr__(self, name, value)
    if kwargs:
        raise TypeError(f"{type(self).__name__}() got unknown arguments {sorted(kwargs)}")


def _equal(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return all(getattr(self, name) == getattr(other, name) for name, _, _ in self.__result_init__)


def _shown(self: Any) -> str:
    fields = ", ".join(f"{name}={getattr(self, name)!r}" for name, _, _ in self.__result_init__)
    return f"{type(self).__name__}({fields})"


class Open:
    """The base of a result object that allows other properties (a newer host may add some)."""

    SCHEMA_OPTIONS: ClassVar = {"closed": False}


def imported_later(module: str, name: str) -> Any:
    """The type ``name`` of ``module``, named without importing it (a forward reference to that
    module): type hints keep it as it is, and the schema and ``from_json`` import it when first needed."""
    return typing.ForwardRef(name, module=module)


def _imported(hint: Any) -> Any:
    """``hint``, or the type it names if it is ``imported_later``'s, its module imported now."""
    if isinstance(hint, typing.ForwardRef) and hint.__forward_module__:
        return getattr(importlib.import_module(hint.__forward_module__), hint.__forward_arg__)
    return hint


# -- the schema -----------------------------------------------------------------------------


def schema_of(cls: type) -> dict[str, Any]:
    """The JSON Schema of the dataclass ``cls``; a fresh dict each call (schemas are described in place)."""
    return _object(cls, None, null=False)


def _object(cls: type, description: str | None, *, null: bool) -> dict[str, Any]:
    options: Mapping[str, Any] = getattr(cls, "SCHEMA_OPTIONS", {})
    schema = js.typed("object", description, null=null)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for item, key, hint, may_be_absent in _fields(cls):
        if item.metadata.get(_UNLISTED):
            continue
        properties[key] = _schema(hint, item.metadata.get(_DOC), item.metadata.get(_KEYWORDS, {}))
        if not may_be_absent:
            required.append(key)
    schema["properties"] = properties
    if options.get("required", True):
        schema["required"] = required
    if options.get("closed", True):
        schema["additionalProperties"] = False
    return schema


def _schema(
    hint: Any, description: str | None = None, keywords: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    hint, null = _strip(hint, _NULL)
    hint = _imported(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _object(hint, description, null=null)
    origin = typing.get_origin(hint)
    extra: dict[str, Any] = dict(keywords or {})
    if origin is Literal:
        # A nullable choice lists null among its values too: ``enum`` alone would refuse it.
        choices = [*typing.get_args(hint), *([None] if null else [])]
        kind, extra = "string", {"enum": choices, **extra}
    elif origin in (list, tuple):
        kind = "array"
        extra = {"items": _schema(typing.get_args(hint)[0]), **extra}
    elif origin is dict:
        kind = "object"
        value = typing.get_args(hint)[1]
        if value is not Any:
            extra = {"additionalProperties": _schema(value), **extra}
    elif hint is dict:
        kind = "object"
    else:
        kind = _SCALARS[hint]
    return js.typed(kind, description, null=null, **extra)


_SCALARS: Final = {int: "integer", float: "number", str: "string", bool: "boolean"}
_SCALAR_NAMES: Final = frozenset(kind.__name__ for kind in _SCALARS)
_NULL: Final = type(None)
_LEFT_OUT: Final = Literal[ABSENT]


def _strip(hint: Any, member: Any) -> tuple[Any, bool]:
    """``hint`` without ``member`` (``None``'s type, or ``ABSENT``'s literal) if it is a union holding
    it, and whether it did."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (Union, types.UnionType) and member in args:
        rest = tuple(arg for arg in args if arg != member)
        return (rest[0] if len(rest) == 1 else Union[rest]), True  # noqa: UP007
    return hint, False


def _json_name(item: dataclasses.Field[Any]) -> str:
    return item.metadata.get(_NAME) or item.name


@functools.cache
def _fields(cls: Any) -> tuple[tuple[dataclasses.Field[Any], str, Any, bool], ...]:
    """Each field of the dataclass ``cls``: its JSON name, its type hint without ``Opt``, and whether
    it was an ``Opt`` (may be absent)."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (item, _json_name(item), *_strip(hints[item.name], _LEFT_OUT)) for item in dataclasses.fields(cls)
    )


# -- the JSON -------------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """``value`` as JSON data: a dataclass as an object of its fields in order (``ABSENT`` ones left out),
    tuples as lists; anything else as it is."""
    kind: Any = type(value)
    if kind in _PLAIN:  # most values: answered before any other look at their type
        return value
    plan = _plan(kind)
    if plan is not None:
        data = {}
        for name, key, how in plan:
            item = getattr(value, name)
            if item is not ABSENT:
                data[key] = item if how is _AS_IT_IS else list(item) if how is _LISTED else to_json(item)
        return data
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


_PLAIN: Final = frozenset({str, int, float, bool, type(None)})


_AS_IT_IS, _LISTED, _LOOKED_AT = "as it is", "listed", "looked at"  # how to_json writes a field


@functools.cache
def _plan(cls: Any) -> tuple[tuple[str, str, str], ...] | None:
    """The dataclass ``cls``'s fields in order, each with its JSON name and how its annotation says its
    value is written: as it is (a number, a string, a literal), as a list of such (a copy), or looked
    at again; None for no dataclass. Read from the annotation's text, not from evaluated type hints:
    a fleet host's remote start writes one answer, and evaluating every class's hints was a good part
    of its CPU. What the text does not plainly say is looked at, which is always right."""
    if not dataclasses.is_dataclass(cls):
        return None
    return tuple((item.name, _json_name(item), _how(item.type)) for item in dataclasses.fields(cls))


def _how(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if text.startswith("Opt[") and text.endswith("]"):
        text = text[4:-1]
    nullable = text.endswith(" | None")
    text = text.removesuffix(" | None")
    if _plain(text):
        return _AS_IT_IS
    for opening, closing in (("list[", "]"), ("tuple[", ", ...]")):
        if (
            not nullable
            and text.startswith(opening)
            and text.endswith(closing)
            and _plain(text[len(opening) : -len(closing)])
        ):
            return _LISTED
    return _LOOKED_AT


def _plain(text: str) -> bool:
    """A scalar or a ``Literal`` of plain values, by the annotation's text."""
    return text in _SCALAR_NAMES or (
        text.startswith("Literal[") and "]" not in text[8:-1] and text[-1:] == "]"
    )


def from_json(cls: type[T], data: Any) -> T:
    """The dataclass ``cls`` from JSON data shaped by ``schema_of(cls)`` (another host's
    ``structuredContent``): a field the data leaves out is ``ABSENT`` where it may be, else an error."""
    value: T = _reader(typing.cast(Any, cls))(data)
    return value


@functools.cache
def _reader(hint: Any) -> Callable[[Any], Any]:
    hint, null = _strip(hint, _NULL)
    read = _plain_reader(_imported(hint))
    if null:
        return lambda data: None if data is None else read(data)
    return read


def _plain_reader(hint: Any) -> Callable[[Any], Any]:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        plan = [(item.name, key, _reader(inner), absent) for item, key, inner, absent in _fields(hint)]

        def read_object(data: Any) -> Any:
            values = {}
            for name, key, read, may_be_absent in plan:
                if key in data:
                    values[name] = read(data[key])
                elif may_be_absent:
                    values[name] = ABSENT  # whether or not the field declares that default
                else:
                    raise ValueError(f"{hint.__name__}: {key} is missing")
            return hint(**values)

        return read_object
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        item_reader = _reader(typing.get_args(hint)[0])
        return lambda data: origin(item_reader(item) for item in data)
    if origin is dict and typing.get_args(hint)[1] is not Any:
        value_reader = _reader(typing.get_args(hint)[1])
        return lambda data: {key: value_reader(item) for key, item in data.items()}
    if hint is float:
        return float
    return lambda data: data


# The seconds ``datetime`` can show (years 1 to 9999): outside them a time is not shown (None).
_FIRST_SECOND, _LAST_SECOND = -62_135_596_800, 253_402_300_799


def iso_utc(mtime: float) -> str | None:
    """A result's time (``2026-12-04T20:21:11Z``): ``mtime`` as ``datetime.fromtimestamp(mtime, UTC)`` would print it, without an aware ``datetime``.

    Why by hand: the full listing dates up to a thousand files on every call, and an aware
    ``datetime``'s ``strftime`` made the render 4.6 ms of a 0.6 s call (2.6 ms this way). Rounding as
    ``datetime`` does it: to the microsecond, half to even, then the whole second below.
    """
    try:
        fraction, whole = math.modf(mtime)
        micro = round(fraction * 1e6)
        seconds = int(whole) + (1 if micro >= 1_000_000 else -1 if micro < 0 else 0)
    except (OverflowError, ValueError):  # inf, nan
        return None
    if not _FIRST_SECOND <= seconds <= _LAST_SECOND:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
