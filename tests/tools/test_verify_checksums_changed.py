"""verify_checksums on a file that changes while it is read: the answer says how much was read and
that it changed while being read, never "nothing hashed"."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from sysmcp.engine.hashing import ALGORITHMS, CHUNK
from sysmcp.engine.hashing._verdicts import UNREADABLE_CODE, Verdicts, Verification, check_file
from sysmcp.tools import verify_checksums
from sysmcp.tools.arguments import validate_arguments
from tests.harness import tool, tool_context


def test_a_file_that_changed_after_part_was_read_is_said_so_with_the_bytes_read(tmp_path: Path) -> None:
    """A log 4 MiB long is appended to once its first MiB is read: the check reads on to the end and
    finds it changed. The answer said "(nothing hashed; …)" though every byte of it was read."""
    big = tmp_path / "big"
    big.write_bytes(b"x" * (4 * CHUNK))
    digest = hashlib.sha256(big.read_bytes()).hexdigest()

    def on_chunk(done: int) -> None:
        if done == CHUNK:  # a writer appends, as to a log, once the first chunk is read
            with big.open("ab") as log:
                log.write(b"more")

    code, detail, read = check_file(
        os.fsencode(big), digest, (ALGORITHMS["sha256"],), None, {}, bytearray(CHUNK), on_chunk
    )
    assert code == UNREADABLE_CODE and "changed while being read" in detail and read >= 4 * CHUNK
    result = Verification(
        Verdicts(bytearray([code]), {0: detail}), names=lambda: iter([b"big"]), bytes_hashed=read
    )
    args = validate_arguments(tool("verify_checksums").input_schema, {"manifest": f"{digest}  big"})
    text = verify_checksums.answer(result, "(text)", str(tmp_path), args, tool_context()).text
    assert "nothing hashed" not in text, text
    assert text.splitlines()[1].startswith("(no digest settled: 4.0 MiB read in "), text
    assert text.splitlines()[1].endswith(
        ", of files that changed or could not be read to the end: see UNREADABLE)"
    )
    assert "big: changed while being read" in text, text
