"""Checks tool arguments against the tool's own input schema, so the schema is the one declaration.

A deliberately small JSON Schema subset — the keywords sysmcp's schemas use — with messages that name
the field and the rule, because a model reads them and retries.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sysmcp.engine.paths import echo
from sysmcp.engine.units import parse_size
from sysmcp.protocol.failures import ArgumentError
from sysmcp.render import plural
from sysmcp.tools.schemas import string, typed

#: ``format`` values this validator acts on (JSON Schema leaves ``format`` to the validator): each turns
#: the friendly text a person or model writes into the one value the tool works with.
SIZE = "byte-size"
SHA256 = "sha256-digest"

_HEX64 = re.compile(r"(?<![0-9a-fA-F])[0-9a-fA-F]{64}(?![0-9a-fA-F])")
#: A line sha256sum writes, plain or ``--tag`` (a leading backslash when the name is escaped): its digest
#: field is the digest, whatever hex the name holds (an OCI layout's ``blobs/sha256/<hex>``).
_SUMS_LINE = re.compile(
    r"\\?(?:(?P<gnu>[0-9a-fA-F]{64}) [ *].*|SHA(?:2-)?256 ?\(.*\) ?= ?(?P<bsd>[0-9a-fA-F]{64}))",
    re.DOTALL,
)


def size_argument(description: str, *, minimum: int = 0, default: int = 0) -> dict[str, Any]:
    """A size in bytes that also takes '4k', '100M', '1.5G' (binary units, as du and find)."""
    description += " Bytes, or '4k', '100M', '1.5G'."
    return typed(["integer", "string"], description, format=SIZE, minimum=minimum, default=default)


def sha256_argument(description: str) -> dict[str, Any]:
    """A SHA-256 digest as people find it: bare hex, 'sha256:<hex>', or a line copied from SHA256SUMS."""
    return string(f"{description} Hex, 'sha256:<hex>' or a SHA256SUMS line.", format=SHA256, minLength=64)


def find_sha256(text: str) -> str | None:
    """The digest field of a SHA256SUMS line, else the one SHA-256 digest in ``text`` (lowercased), or
    None if there is none or more than one."""
    line = _SUMS_LINE.fullmatch(text.strip())
    if line is not None:
        return str(line["gnu"] or line["bsd"]).lower()
    found = _HEX64.findall(text)
    return str(found[0]).lower() if len(found) == 1 else None


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


_NONE: dict[str, Any] = {}  # read-only default: no empty dict built per call


def validate_arguments(schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """Return the arguments with schema defaults filled in, or raise ``ArgumentError``."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ArgumentError("Invalid arguments: 'arguments' must be an object")
    problems: list[str] = []
    result = _check_object(schema, arguments, "", problems)
    if problems:
        raise ArgumentError("Invalid arguments: " + "; ".join(problems))
    return result


def _check_object(
    schema: dict[str, Any], value: dict[str, Any], where: str, problems: list[str]
) -> dict[str, Any]:
    properties: dict[str, Any] = schema.get("properties", _NONE)
    result: dict[str, Any] = {}
    for name in schema.get("required", ()):
        if name not in value:
            problems.append(f"{_join(where, name)} is required")
    for name, item in value.items():
        if name not in properties:
            if schema.get("additionalProperties", True) is False:
                known = ", ".join(sorted(properties)) or "none"
                problems.append(f"{_join(where, name)} is not a known argument (known: {known})")
            continue
        result[name] = _check(properties[name], item, _join(where, name), problems)
    for name, prop in properties.items():
        if name not in result and "default" in prop:
            result[name] = prop["default"]
    return result


def _check(schema: dict[str, Any], value: Any, where: str, problems: list[str]) -> Any:
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_is_type(value, name) for name in names):
            problems.append(
                f"{where} must be {' or '.join(_article(n) for n in names)}, got {_describe(value)}"
            )
            return value
        if "integer" in names and isinstance(value, float):
            value = int(value)
    if schema.get("format") == SIZE and isinstance(value, str):
        try:
            value = parse_size(value)
        except ValueError:
            problems.append(
                f"{where} must be a size such as 4096, '4k', '100M' or '1.5G', got {value!r}"[:160]
            )
            return value
    elif schema.get("format") == SHA256 and isinstance(value, str):
        digest = find_sha256(value)
        if digest is None:
            problems.append(
                f"{where} must be one SHA-256 digest: 64 hex digits, bare, as 'sha256:<hex>' or a "
                f"SHA256SUMS line; got {value[:80]!r}"
            )
            return value
        value = digest
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(repr(choice) for choice in schema["enum"])
        got = echo(value) if isinstance(value, str) else repr(value)
        problems.append(f"{where} must be one of {choices}, got {got}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where} must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where} must be <= {schema['maximum']}, got {value}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            problems.append(f"{where} must be > {schema['exclusiveMinimum']}, got {value}")
    if isinstance(value, str):
        _check_length(schema, len(value), ("minLength", "maxLength", "character"), where, problems)
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            problems.append(f"{where} must match the pattern {schema['pattern']}")
    if isinstance(value, list):
        _check_length(schema, len(value), ("minItems", "maxItems", "item"), where, problems)
        if schema.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) < len(value):
            problems.append(f"{where} must not repeat an item")
        if "items" in schema:
            return [_check(schema["items"], item, f"{where}[{i}]", problems) for i, item in enumerate(value)]
    if isinstance(value, dict) and ("properties" in schema or "additionalProperties" in schema):
        return _check_object(schema, value, where, problems)
    return value


def _check_length(
    schema: dict[str, Any], length: int, words: tuple[str, str, str], where: str, problems: list[str]
) -> None:
    """The bounds on a string's or an array's length: ``words`` are the two keywords and the unit."""
    low, high, unit = words
    if low in schema and length < schema[low]:
        problems.append(f"{where} must have at least {plural(schema[low], unit)}")
    if high in schema and length > schema[high]:
        problems.append(f"{where} must have at most {plural(schema[high], unit)}")


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if isinstance(value, bool) and name != "boolean":
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else echo(name)


def _article(name: str) -> str:
    return {"integer": "an integer", "array": "an array", "object": "an object"}.get(name, f"a {name}")


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    kind = {bool: "boolean", str: "string", int: "integer", float: "number", list: "array", dict: "object"}
    return f"{kind.get(type(value), type(value).__name__)} {value!r}"[:80]
