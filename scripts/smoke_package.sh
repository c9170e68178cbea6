#!/usr/bin/env bash
# The package, not the checkout: build the sdist and the wheel (uv builds the wheel from the sdist),
# install the wheel into a clean virtual environment, and use it from a directory outside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

uv build --quiet --out-dir "$work/dist"
ls "$work/dist"
uv venv --quiet "$work/venv"
uv pip install --quiet --python "$work/venv/bin/python" "$work"/dist/sysmcp-*.whl
checkout="$PWD"
cd "$work"
"$work/venv/bin/sysmcp" --version
"$work/venv/bin/sysmcp" call disk_usage path=/
"$work/venv/bin/python" - "$checkout" <<'PY'
import sys
from pathlib import Path

import sysmcp
from sysmcp.views import VIEWS, html

where = Path(sysmcp.__file__).resolve()
assert not where.is_relative_to(Path(sys.argv[1]).resolve()), f"imported from the checkout: {where}"
for uri in VIEWS:
    size = len(html(uri).encode())
    assert 10_000 < size < 60_000, (uri, size)
    print(f"{uri}: {size:,} bytes from {where.parent}")
PY
cd "$checkout"
uv run python scripts/build_mcpb.py --out "$work/dist"
