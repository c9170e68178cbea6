"""A result dataclass is the one statement of a tool's output: schema, JSON and another host's JSON back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, ClassVar, Literal

import jsonschema
import pytest

from sysmcp.tools.schemas import with_exact_bytes
from sysmcp.tools.typed import ABSENT, Open, Opt, from_json, prop, result, schema_of, to_json
from tests.profile import child_env


@result
class Row:
    SCHEMA_OPTIONS: ClassVar = {"closed": False}
    path: str = prop("Where.")
    size: int = prop(minimum=0)


@result
class Answer:
    rows: list[Row] = prop("The rows.")
    kind: Literal["disk", "apparent"] = prop()
    ratio: float | None = prop()
    skipped: dict[str, int] = prop()
    extra: dict[str, Any] = prop()
    note: Opt[str | None] = prop(default=ABSENT)
    first: Row | None = prop(default=None)


def test_the_schema_follows_the_fields_their_types_descriptions_and_keywords() -> None:
    schema = schema_of(Answer)
    assert schema["required"] == ["rows", "kind", "ratio", "skipped", "extra", "first"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["rows"] == {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Where."},
                "size": {"type": "integer", "minimum": 0},
            },
            "required": ["path", "size"],
        },
        "description": "The rows.",
    }
    assert props["kind"] == {"type": "string", "enum": ["disk", "apparent"]}
    assert props["ratio"] == {"type": ["number", "null"]}
    assert props["skipped"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["extra"] == {"type": "object"}
    assert props["note"] == {"type": ["string", "null"]}
    assert props["first"]["type"] == ["object", "null"]
    assert schema_of(Answer) is not schema_of(Answer)  # fresh each time: described in place


def test_an_absent_field_is_left_out_of_the_json_and_null_is_kept() -> None:
    answer = Answer([Row("/a", 1)], "disk", None, {"denied": 2}, {"x": [1]})
    data = to_json(answer)
    assert "note" not in data and data["ratio"] is None and data["first"] is None
    assert data["rows"] == [{"path": "/a", "size": 1}]
    jsonschema.validate(data, schema_of(Answer))
    with_null = to_json(Answer([], "apparent", 0.5, {}, {}, note=None))
    assert with_null["note"] is None
    jsonschema.validate(with_null, schema_of(Answer))


def test_another_host_s_json_reads_back_into_the_same_result() -> None:
    answer = Answer([Row("/a", 1)], "disk", 2.0, {"denied": 2}, {}, note="n", first=Row("/b", 3))
    assert from_json(Answer, to_json(answer)) == answer
    sparse = from_json(Answer, {**to_json(answer), "ratio": 2})  # a JSON integer where a number is typed
    assert sparse.ratio == 2.0 and isinstance(sparse.ratio, float)
    gone = to_json(answer)
    del gone["note"]
    assert from_json(Answer, gone).note is ABSENT


def test_json_missing_a_required_field_is_refused() -> None:
    data = to_json(Answer([], "disk", None, {}, {}))
    del data["kind"]
    with pytest.raises(ValueError, match="kind is missing"):
        from_json(Answer, data)


@result
class Early:
    note: Opt[str] = prop()  # may be left out, yet declared before a required field: no default
    size: int = prop()


def test_a_field_that_may_be_absent_reads_back_absent_even_without_that_default() -> None:
    assert schema_of(Early)["required"] == ["size"]
    assert from_json(Early, {"size": 1}) == Early(ABSENT, 1)
    assert to_json(from_json(Early, {"size": 1})) == {"size": 1}


@result
class Classed:
    klass: str = prop("Its kind.", name="class")


def test_a_field_named_otherwise_in_json_takes_that_name_in_the_schema_the_json_and_back() -> None:
    schema = schema_of(Classed)
    assert schema["properties"] == {"class": {"type": "string", "description": "Its kind."}}
    assert schema["required"] == ["class"]
    assert to_json(Classed("apt")) == {"class": "apt"}
    assert from_json(Classed, {"class": "apt"}) == Classed("apt")


def test_a_result_based_on_open_allows_other_properties() -> None:
    @result
    class Opened(Open):
        path: str = prop()

    assert schema_of(Opened) == schema_of(Row) | {
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }
    assert "additionalProperties" not in schema_of(Opened)


@result
class Unlisted:
    SCHEMA_OPTIONS: ClassVar = {"closed": False, "required": False}
    size: int = prop("Bytes.")
    extra: Opt[dict[str, int]] = prop(listed=False, default=ABSENT)


def test_an_unlisted_field_is_in_the_json_and_read_back_but_not_in_the_schema() -> None:
    assert schema_of(Unlisted) == {
        "type": "object",
        "properties": {"size": {"type": "integer", "description": "Bytes."}},
    }
    data = to_json(Unlisted(3, {"a": 1}))
    assert data == {"size": 3, "extra": {"a": 1}}
    jsonschema.validate(data, schema_of(Unlisted))
    assert (
        from_json(Unlisted, data) == Unlisted(3, {"a": 1})
        and from_json(Unlisted, {"size": 3}).extra is ABSENT
    )


def test_a_dataclass_whose_types_cannot_be_resolved_is_still_written_field_by_field() -> None:
    import dataclasses

    @dataclasses.dataclass
    class Loose:
        inner: Unknown  # type: ignore[name-defined]  # noqa: F821 (a name only a type checker would see)

    assert to_json(Loose(Unlisted(2))) == {"inner": {"size": 2}}


@result
class Lists:
    names: tuple[str, ...] = prop()
    maybe: list[int] | None = prop()


def test_lists_of_plain_values_are_written_as_lists_and_a_null_list_as_null() -> None:
    assert to_json(Lists(("a", "b"), None)) == {"names": ["a", "b"], "maybe": None}
    assert to_json(Lists((), [1])) == {"names": [], "maybe": [1]}


# A fresh interpreter that has not imported disk_explain, where DiskUsageResult's explain field names
# its type: the data of a result with an explain comes on stdin, the findings go to stdout.
LATER = """
import json, sys
from sysmcp.tools.disk_usage import DiskUsageResult
from sysmcp.tools.typed import from_json, schema_of, to_json

imported_first = "sysmcp.tools.disk_explain" in sys.modules
plain = DiskUsageResult("/", [], 90, 5.0)
explained = json.load(sys.stdin)
print(json.dumps({
    "imported_first": imported_first,
    "plain_round_trip": from_json(DiskUsageResult, to_json(plain)) == plain,
    "explained": to_json(from_json(DiskUsageResult, explained)),
    "schema": schema_of(DiskUsageResult),
}))
"""


def test_a_field_type_imported_later_is_imported_by_from_json_and_the_schema_in_any_import_order() -> None:
    from sysmcp.tools import disk_explain as ex
    from sysmcp.tools.disk_usage import TOOL, DiskUsageResult

    step = "."
    explain = ex.Explain(
        mount_point="/",
        used_bytes=10,
        reserved_bytes=ABSENT,
        partial=ABSENT,
        files=ex.Files(bytes=1, files=2, stopped=None, scanned_at=None, next_step=step),
        deleted_open=ex.DeletedOpen(1, [], 0, 0, 0, True, step),
        hidden_under_mounts=ex.HiddenUnderMounts(1, False, "needs root", 0, [], 0, 0, step),
        unreadable_directories=ABSENT,
        snapshots=ABSENT,
        overhead=ex.OverheadPart(bytes=None, source="ext4"),
        remainder=ex.Remainder(bytes=1, percent=10.0, not_walked=False, next_step=step),
        seconds=ABSENT,
    )
    explained = DiskUsageResult("/", [], 90, 5.0, explain=explain)
    data = to_json(explained)
    done = subprocess.run(
        [sys.executable, "-c", LATER],
        input=json.dumps(data),
        env=child_env(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["imported_first"] is False
    assert found["plain_round_trip"] is True
    assert found["explained"] == data
    assert from_json(DiskUsageResult, data) == explained  # and here, where disk_explain was imported first
    assert found["schema"] == schema_of(DiskUsageResult)
    assert (
        with_exact_bytes(schema_of(DiskUsageResult)) == TOOL.output_schema
    )  # and exact_bytes, as every tool


@result
class _Stopped:
    why: Literal["budget", "cancelled"] | None = prop("Why it stopped; null when it did not.")


def test_a_nullable_choice_accepts_null_and_its_values_and_nothing_else() -> None:
    schema = schema_of(_Stopped)
    for why in (None, "budget", "cancelled"):
        jsonschema.validate(to_json(_Stopped(why)), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"why": "other"}, schema)
