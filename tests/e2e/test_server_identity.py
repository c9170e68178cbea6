"""What a client and a scorer (mcpscore) read about the server: identity, capabilities, described outputs."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.e2e.modern import MODERN, modern
from tests.wire import spawn

pytestmark = pytest.mark.anyio

SERVER_INFO = "io.modelcontextprotocol/serverInfo"


async def test_from_2025_11_25_the_server_names_its_website_and_an_icon_that_needs_no_network() -> None:
    async with spawn() as wire:
        info = (await wire.initialize("2025-11-25"))["result"]["serverInfo"]
        assert info["websiteUrl"].startswith("https://")
        assert info["description"]
        (icon,) = info["icons"]
        assert icon["mimeType"] == "image/svg+xml"
        assert icon["src"].startswith("data:image/svg+xml;base64,")
        assert base64.b64decode(icon["src"].split(",", 1)[1]).startswith(b"<svg")


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18"])
async def test_older_versions_get_only_the_fields_they_define(version: str) -> None:
    async with spawn(version=version) as wire:
        info = (await wire.initialize(version))["result"]["serverInfo"]
        assert not {"websiteUrl", "icons", "description"} & set(info)


async def test_the_modern_era_declares_no_logging_capability_and_no_list_that_never_changes() -> None:
    async with spawn(version=MODERN) as wire:
        result = (await modern(wire, "server/discover"))["result"]
        capabilities = result["capabilities"]
        assert "logging" not in capabilities  # deprecated there (SEP-2577): logs are asked per request
        assert not any(spec.get("listChanged") for spec in capabilities.values() if isinstance(spec, dict))
        assert result["_meta"][SERVER_INFO]["icons"]


async def test_the_legacy_era_still_declares_logging() -> None:
    async with spawn() as wire:
        capabilities = (await wire.initialize("2025-11-25"))["result"]["capabilities"]
        assert capabilities["logging"] == {}
        assert capabilities["tools"] == {"listChanged": False} and capabilities["prompts"] == {
            "listChanged": False
        }


def undescribed(schema: Any, where: str) -> list[str]:
    """Every property, at any depth, without a description."""
    missing: list[str] = []
    if not isinstance(schema, dict):
        return missing
    for name, spec in schema.get("properties", {}).items():
        if isinstance(spec, dict) and not spec.get("description"):
            missing.append(f"{where}.{name}")
        missing += undescribed(spec, f"{where}.{name}")
    for key in ("items", "additionalProperties"):
        missing += undescribed(schema.get(key), f"{where}[]")
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, ()):
            missing += undescribed(sub, where)
    return missing


async def test_every_output_schema_property_of_every_tool_has_a_description() -> None:
    async with spawn() as wire:
        await wire.initialize("2025-11-25")
        tools = (await wire.request("tools/list", {}))["result"]["tools"]
    assert tools
    missing = [gap for tool in tools for gap in undescribed(tool["outputSchema"], tool["name"])]
    assert missing == []
