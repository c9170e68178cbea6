"""The portable profile: sysmcp as it would run on macOS, on a Linux test machine.

Put this directory first on ``PYTHONPATH`` (``SYSMCP_TEST_PROFILE=posix`` makes tests/conftest.py and
the spawn helper in tests/wire.py do so) and every Python started with it sees, from inside sysmcp's
own modules:

- no ``os.O_PATH`` (absent on macOS and the BSDs);
- no ``/proc`` and no ``/sys``: opening, listing, stat-ing, ``access`` or ``readlink`` of a path below
  them fails with ENOENT (or is False) when the call comes from a ``sysmcp`` module. Libraries
  (psutil, anyio …) and the tests themselves still see the real ones, so psutil keeps its Linux
  backend and gives the mount table sysmcp reads where there is no mountinfo;
- no Linux-only calls of ``os`` (``posix_fadvise``, ``sched_getaffinity``, ``pipe2`` …, see
  ``LINUX_ONLY``) in sysmcp's modules: they are absent from macOS's Python;
- ``sys.platform == "darwin"`` in sysmcp's modules (only there: the standard library and the
  libraries would break on a Mac's modules), so fork counts as unsafe and walks use one process.

It is a proxy for a Mac, not a Mac: it finds import-time and /proc-only assumptions, not APFS or
getfsstat behaviour (those have their own units on recorded data).
"""

from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import os
import posix
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

PROFILE = "posix"
PROFILE_ENV = "SYSMCP_TEST_PROFILE"
HIDDEN_TREES = ("/proc", "/sys")
PACKAGE = "sysmcp"
#: What Python's ``os`` has on Linux and not on macOS (the Python documentation's availability notes).
LINUX_ONLY = frozenset(
    {
        "O_DIRECT",
        "O_LARGEFILE",
        "O_NOATIME",
        "O_PATH",
        "O_RSYNC",
        "O_TMPFILE",
        "POSIX_FADV_DONTNEED",
        "POSIX_FADV_NOREUSE",
        "POSIX_FADV_NORMAL",
        "POSIX_FADV_RANDOM",
        "POSIX_FADV_SEQUENTIAL",
        "POSIX_FADV_WILLNEED",
        "copy_file_range",
        "eventfd",
        "eventfd_read",
        "eventfd_write",
        "getrandom",
        "getxattr",
        "listxattr",
        "memfd_create",
        "pidfd_open",
        "pipe2",
        "posix_fadvise",
        "posix_fallocate",
        "removexattr",
        "sched_getaffinity",
        "sched_setaffinity",
        "setxattr",
        "splice",
        "waitid",  # macOS has it from Python 3.13 on
    }
)
ACTIVE = False  # True once applied (the conftest checks it)


def _library_dirs() -> tuple[str, ...]:
    """Where the standard library lives: its frames are looked through to find the real caller."""
    stdlib = os.path.dirname(os.__file__)
    return (stdlib + os.sep,)


_STDLIB = _library_dirs()
_HERE = os.path.abspath(__file__)


def _is_helper(frame: FrameType) -> bool:
    """A standard-library frame (os.path, pathlib, shutil …) or this file: not the one deciding."""
    filename = frame.f_code.co_filename
    if filename.startswith("<frozen ") or filename == _HERE:
        return True
    return filename.startswith(_STDLIB) and "-packages" not in filename


def _called_from_sysmcp() -> bool:
    """True when the nearest caller outside the standard library is a sysmcp module."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and _is_helper(frame):
        frame = frame.f_back
    if frame is None:
        return False
    name = str(frame.f_globals.get("__name__", ""))
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def _hidden(path: Any) -> bool:
    if isinstance(path, int):
        return False  # a descriptor: whatever it names was opened (and so allowed) already
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        return False
    text = os.path.normpath(text) if text.startswith("/") else text
    return any(text == tree or text.startswith(tree + "/") for tree in HIDDEN_TREES)


def _missing(path: Any) -> FileNotFoundError:
    return FileNotFoundError(2, "No such file or directory (portable profile)", os.fsdecode(os.fspath(path)))


def _raising(real: Callable[..., Any]) -> Callable[..., Any]:
    def hidden_from_sysmcp(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _hidden(path) and _called_from_sysmcp():
            raise _missing(path)
        return real(path, *args, **kwargs)

    hidden_from_sysmcp.__wrapped__ = real  # type: ignore[attr-defined]
    return hidden_from_sysmcp


def _false(real: Callable[..., Any]) -> Callable[..., Any]:
    def hidden_from_sysmcp(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _hidden(path) and _called_from_sysmcp():
            return False
        return real(path, *args, **kwargs)

    hidden_from_sysmcp.__wrapped__ = real  # type: ignore[attr-defined]
    return hidden_from_sysmcp


class _SysSeenFromSysmcp:
    """``sys`` as sysmcp's modules see it: ``platform`` reads "darwin", everything else is the real one.

    Only sysmcp is told it runs on a Mac: the interpreter, the standard library (urllib, sysconfig …)
    and the libraries keep their Linux selves, since they would break on a Mac's modules.
    """

    @property
    def platform(self) -> str:
        """Says darwin for the Linux this runs on; whatever else a test makes the interpreter say."""
        return "darwin" if sys.platform.startswith("linux") else sys.platform

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(sys, name, value)


class _OsSeenFromSysmcp:
    """``os`` as sysmcp's modules see it: without ``LINUX_ONLY``, everything else the real (live) one."""

    def __getattr__(self, name: str) -> Any:
        if name in LINUX_ONLY:
            raise AttributeError(f"module 'os' has no attribute '{name}' (portable profile: not on macOS)")
        return getattr(os, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(os, name, value)


class _SysmcpSeesDarwin(importlib.abc.MetaPathFinder):
    """Loads sysmcp's modules as usual, then gives each the ``sys`` and ``os`` above for the real ones."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _DarwinLoader(spec.loader)
                return spec
        return None


class _DarwinLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        if module.__dict__.get("sys") is sys:
            module.sys = _SysSeenFromSysmcp()
        if module.__dict__.get("os") is os:
            module.os = _OsSeenFromSysmcp()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def apply() -> None:
    """Apply the profile to this process (idempotent); refuses once sysmcp is imported: too late."""
    global ACTIVE
    if ACTIVE:
        return
    early = sorted(name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + "."))
    if early:
        raise RuntimeError(f"portable profile applied after sysmcp was imported ({', '.join(early)})")
    for module in (os, posix):
        if hasattr(module, "O_PATH"):
            delattr(module, "O_PATH")
    builtins.open = _raising(builtins.open)
    for name in ("open", "stat", "lstat", "listdir", "scandir", "readlink"):
        setattr(os, name, _raising(getattr(os, name)))
    os.access = _false(os.access)
    sys.meta_path.insert(0, _SysmcpSeesDarwin())
    os.environ[PROFILE_ENV] = PROFILE
    ACTIVE = True


apply()
