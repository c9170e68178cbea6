"""platform.py answers by looking; native Windows is refused before anything POSIX-only is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sysmcp import platform
from tests.profile import UNDER_POSIX_PROFILE


def test_each_missing_facility_is_named_in_a_plain_sentence() -> None:
    probes = {
        "O_PATH": platform.has_o_path(),
        "/proc/self/mountinfo": platform.has_mountinfo(),
        "/proc/self/fd": platform.has_proc_fd(),
        "/sys/dev/block": platform.has_sys_dev_block(),
        "cpu.max": platform.has_cgroup_cpu_max(),
        "fork": platform.fork_is_safe(),
    }
    sentences = platform.missing_facilities()
    for word, present in probes.items():
        assert any(word in sentence for sentence in sentences) is not present, word


def test_the_answers_follow_what_the_system_has() -> None:
    if UNDER_POSIX_PROFILE:  # the profile hides them as macOS lacks them
        assert not platform.has_o_path() and not platform.has_mountinfo() and not platform.has_proc_fd()
        assert not platform.has_sys_dev_block() and not platform.fork_is_safe() and platform.is_macos()
    else:  # the Linux CI machine
        assert platform.has_o_path() and platform.has_mountinfo() and platform.has_proc_fd()
        assert platform.has_sys_dev_block() and platform.fork_is_safe() and not platform.is_macos()
    assert not platform.is_native_windows()


def test_a_stand_in_for_sys_dev_block_is_looked_at_where_it_is(tmp_path: object) -> None:
    assert platform.has_sys_dev_block(str(tmp_path))
    assert not platform.has_sys_dev_block(f"{tmp_path}/missing")


# Python on Windows as far as sysmcp can tell: sys.platform reads "win32" before sysmcp starts.
NATIVE_WINDOWS = """
import runpy, sys
sys.platform = "win32"
try:
    runpy.run_module("sysmcp", run_name="__main__")
except SystemExit as stop:
    loaded = sorted(m for m in sys.modules if m.startswith("sysmcp"))
    sys.stdout.write(" ".join(loaded))
    raise
"""


@pytest.mark.parametrize("kernel_refuses", [True, False], ids=["atomic", "look-then-rename"])
def test_an_exclusive_rename_never_replaces_a_taken_name_even_a_dangling_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel_refuses: bool
) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "taken").write_bytes(b"taken")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    if not kernel_refuses:  # as where the kernel offers no flag (the BSDs)
        monkeypatch.setattr(platform, "rename_noreplace", lambda *_: False)
    elif platform.rename_noreplace(fd, b"a", fd, b"b"):
        os.rename(b"b", b"a", src_dir_fd=fd, dst_dir_fd=fd)
    else:
        os.close(fd)
        pytest.skip("no RENAME_NOREPLACE here")
    try:
        for name in (b"taken", b"dangling"):
            with pytest.raises(FileExistsError):
                platform.rename_exclusive(fd, b"a", fd, name)
        platform.rename_exclusive(fd, b"a", fd, b"free")
    finally:
        os.close(fd)
    assert (tmp_path / "taken").read_bytes() == b"taken" and (tmp_path / "dangling").is_symlink()
    assert (tmp_path / "free").read_bytes() == b"a" and not (tmp_path / "a").exists()


def test_a_native_windows_start_fails_with_one_sentence_pointing_at_wsl() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NATIVE_WINDOWS], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "native Windows" in done.stderr and "WSL" in done.stderr and "wsl.exe" in done.stderr
    # Nothing but the platform check was loaded: not the CLI, the wire or any tool.
    assert done.stdout.split() == ["sysmcp", "sysmcp.platform"]


def test_the_console_script_runs_the_same_guarded_entry_point() -> None:
    from sysmcp.__main__ import main

    assert main.__module__ == "sysmcp.__main__"
    done = subprocess.run(
        [sys.executable, "-c", "from sysmcp.__main__ import main; raise SystemExit(main())", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("sysmcp ")


@pytest.mark.parametrize(
    ("machine", "long_size", "number"),
    [
        # asm-generic/ioctl.h: size 14 bits at 16, direction 2 bits at 30, _IOC_READ 2
        ("x86_64", 8, 0x80086601),
        ("i686", 4, 0x80046601),
        ("aarch64", 8, 0x80086601),
        ("armv7l", 4, 0x80046601),
        ("riscv64", 8, 0x80086601),
        ("s390x", 8, 0x80086601),
        # alpha, mips, powerpc, sparc: size 13 bits at 16, direction 3 bits at 29, _IOC_READ 2
        ("ppc64le", 8, 0x40086601),
        ("ppc64", 8, 0x40086601),
        ("ppc", 4, 0x40046601),
        ("mips", 4, 0x40046601),
        ("mips64", 8, 0x40086601),
        ("mips64", 4, 0x40046601),  # the n32 ABI: a 64-bit kernel, a 4-byte long
        ("sparc64", 8, 0x40086601),
        ("alpha", 8, 0x40086601),
        # parisc: the generic layout, _IOC_READ 1
        ("parisc", 4, 0x40046601),
    ],
)
def test_fs_ioc_getflags_is_numbered_as_each_architectures_kernel_numbers_it(
    machine: str, long_size: int, number: int
) -> None:
    """``_IOR('f', 1, long)``: one number on x86 was taken for every machine, so powerpc, mips and sparc
    asked the kernel something else (ENOTTY) and never saw a file marked immutable or append-only."""
    assert platform.fs_ioc_getflags(machine, long_size) == number
