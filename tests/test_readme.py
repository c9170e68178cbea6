"""The README as a newcomer meets it: short, the two commands first, sysmcp on PATH before it is used."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
MAX_WORDS = 2500


def test_the_readme_is_at_most_2500_words() -> None:
    assert len(README.split()) <= MAX_WORDS


def test_the_first_section_gives_exactly_the_two_commands() -> None:
    first = README.split("\n## ", 1)[0]
    blocks = re.findall(r"```[a-z]*\n(.*?)```", first, flags=re.S)
    assert len(blocks) == 1, blocks
    commands = [line.strip() for line in blocks[0].splitlines() if line.strip()]
    assert commands == ["uvx --from . sysmcp", "uv run pytest -n auto"]
    assert re.findall(r"`(uvx? [^`]+)`", first) == [], "a further command in the first section"


def test_sysmcp_is_put_on_path_before_any_example_runs_it() -> None:
    installed = README.find("uv tool install .")
    first_call = README.find("sysmcp call")
    assert 0 <= installed < first_call


def test_once_on_pypi_is_said_once() -> None:
    assert len(re.findall(r"once (?:sysmcp is )?on pypi", README, flags=re.I)) == 1


def test_every_local_link_leads_to_a_file() -> None:
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README):
        assert (REPO / target).exists(), target


def test_the_test_command_says_how_long_it_takes_and_the_development_section_names_the_quick_lane() -> None:
    first = README.split("\n## ", 1)[0]
    assert "minutes on a 2-core machine" in first
    development = README.split("\n## Development\n", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"quick check[^`]*`uv run pytest -m [^`]+`", development)


def test_every_script_the_readme_runs_runs_in_the_project_environment() -> None:
    """A script imports the project's dependencies (``psutil``...), which only ``uv run`` provides."""
    for line in re.findall(r"`([^`]*scripts/[^`]+\.py[^`]*)`", README):
        assert line.startswith("uv run python "), line


def test_the_license_the_packages_declare_is_there() -> None:
    assert (REPO / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")
