"""The operator's OpenSSH, driven for one host: the argv, and what its failures mean.

Everything here is plain data in, plain data out: the argv for a host, the argv that ends its
ControlMaster, and a status with a one-line reason from an exit code and stderr. The pool runs them.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from sysmcp.fleet.inventory import Host

DEFAULT_REMOTE_COMMAND = "uvx sysmcp"
DEFAULT_CONNECT_TIMEOUT = 10.0
CONTROL_PERSIST = 60  # seconds a master outlives its last session (it is ended at exit anyway)
REASON_LIMIT = 200
REMOTE_REASON_LIMIT = 400  # a failed remote start's first lines: room for uv's or Python's own words
BOUNDED_READ = 64 << 10  # characters of a text a reason is made from


@dataclass(frozen=True, slots=True)
class SshSettings:
    """How every ssh is started: the operator's choices (command line), never the model's."""

    control_dir: str  # sysmcp's own private (0700) directory for ControlPath sockets
    config_file: str | None = None  # --ssh-config: passed as -F
    remote_command: str = DEFAULT_REMOTE_COMMAND  # --remote-command; a host's sysmcp_command wins
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    program: str = "ssh"


def _options(*options: str) -> list[str]:
    """``-o OPTION`` for each option."""
    return [word for option in options for word in ("-o", option)]


def _as_written(value: str) -> str:
    """``value`` with each ``%`` doubled, where ssh would read ``%h``, ``%C``… as tokens."""
    return value.replace("%", "%%")


def _common(settings: SshSettings, host: Host) -> list[str]:
    argv = [settings.program]
    if settings.config_file is not None:
        argv += ["-F", settings.config_file]
    # ssh expands %-tokens in ProxyJump (a jump "%h": the host itself): given as written
    jump = host.jump and _as_written(host.jump)
    given = (("Port", host.port), ("User", host.user), ("ProxyJump", jump))
    # One master per inventory host, in our own directory (never the operator's masters). Not ssh's %C: it
    # hashes %l%h%p%r run together (127.0.0.1 port 2222 and 127.0.0.12 port 222 are one) without the jump
    # host (one address behind two bastions), and a second host on the first one's master is answered by it.
    master = hashlib.sha256(host.name.encode()).hexdigest()[:40]
    return argv + _options(
        "BatchMode=yes",  # no prompt can ever wait: a password or passphrase fails at once
        f"ControlPath={_as_written(settings.control_dir)}/{master}",
        *(f"{key}={value}" for key, value in given if value is not None),
        # a HostName given as an inventory's -o is expanded by ssh the same way
        *(_as_written(o) if o.lower().startswith("hostname=") else o for o in host.options),
    )


def destination(host: Host) -> str:
    """What ssh is told to connect to: the host's address when the inventory gives one, as Ansible's
    ssh does (``ansible_host``), so the operator's ssh_config stanzas for that address (``Host 10.1.*``
    with its ProxyJump, User, IdentityFile) apply as they do for ``ansible -m ping``; else its name,
    an ssh_config alias or a DNS name."""
    return host.address or host.name


def session_argv(settings: SshSettings, host: Host, *, refuse_changed_keys: bool = False) -> list[str]:
    """``ssh -T -o BatchMode=yes … HOST COMMAND``: one MCP session over the host's stdio.

    Host key checking is the operator's config's, never weakened; ``refuse_changed_keys`` (where
    that config says ``StrictHostKeyChecking no``: ``accepts_changed_keys``) makes it ``accept-new``,
    which takes a host never seen as ``no`` does but refuses a host whose key changed.
    """
    argv = _common(settings, host)
    # -T: no terminal, the wire is bytes and a pty would echo and mangle them. accept-new goes first: ssh
    # takes an option's first value, and the inventory's own -o StrictHostKeyChecking=no follows.
    argv[1:1] = ["-T", *(_options("StrictHostKeyChecking=accept-new") if refuse_changed_keys else [])]
    return [
        *argv,
        *_options(
            f"ConnectTimeout={max(1, math.ceil(settings.connect_timeout))}",
            "ControlMaster=auto",  # the first session to a host becomes the master, later ones reuse it
            f"ControlPersist={CONTROL_PERSIST}",
            "ServerAliveInterval=15",  # a session whose peer vanished (a blackholed network) is noticed
            "ServerAliveCountMax=3",
        ),
        "--",
        destination(host),
        host.command or settings.remote_command,
    ]


def config_argv(settings: SshSettings, host: Host) -> list[str]:
    """``ssh -G …``: the configuration ssh would connect to the host with, printed; nothing connects."""
    argv = _common(settings, host)
    argv[1:1] = ["-G"]
    return [*argv, "--", destination(host)]


def accepts_changed_keys(config: str) -> bool:
    """Whether ``ssh -G``'s output says ``StrictHostKeyChecking no`` (or ``off``): ssh would then go on
    with a host whose key is not the one known_hosts holds, which may be another machine."""
    return any(line.strip().lower() == "stricthostkeychecking false" for line in config.splitlines())


def control_argv(settings: SshSettings, host: Host) -> list[str]:
    """``ssh -O exit …``: end this host's master on sysmcp's own control path."""
    argv = _common(settings, host)
    argv[1:1] = ["-O", "exit"]
    return [*argv, "--", destination(host)]


# -- what a failure means ---------------------------------------------------------------------------

#: What ssh's own failure lines say, by status, in the order they are tried.
_SAYS = {
    "host_key_mismatch": r"remote host identification has changed|host key verification failed"
    r"|host key for .* has changed|no (?:\w+ )?host key is known",
    "auth_failed": r"permission denied|too many authentication failures|no more authentication methods"
    r"|authentication failed",
    "timeout": r"timed out|operation timed out",
    "unreachable": r"connection refused|no route to host|could not resolve hostname|name or service not known"
    r"|nodename nor servname|network is unreachable|connection closed by|connection reset"
    r"|kex_exchange_identification|broken pipe|temporary failure in name resolution",
}
_PATTERNS = {status: re.compile(pattern, re.I) for status, pattern in _SAYS.items()}
#: The remote command itself was not found (bash, dash, zsh, csh, env, exec): only this is no_sysmcp.
_NOT_FOUND = re.compile(
    r"command not found|^\S*sh: (?:line )?\d+: [^:]+: not found$|^\S*sh: [^:]+: not found$"
    r"|^env: [^:]+: No such file or directory$|exec: [^:]+: not found",
    re.I,
)
MEANINGFUL_LINES = 3  # lines of a failed remote start's stderr quoted in its reason

_NOISE = re.compile(r"^(warning: permanently added|@{5,}|pseudo-terminal will not be allocated)", re.I)
#: What ssh says when its ProxyJump/ProxyCommand transport broke: a consequence, whose cause the jump's
#: own ssh says on another line of the same stderr, in either order.
_THROUGH_PROXY = re.compile(r"Connection to UNKNOWN port 65535", re.I)


def bounded(text: str, limit: int = REASON_LIMIT) -> str:
    """One line, printable, at most ``limit`` characters: a reason, never a dump. Made of the text's
    first ``BOUNDED_READ`` characters: a host's 80 MiB error or progress message took the gateway's event
    loop for seconds, and gigabytes, for a 200-character line."""
    head = text[:BOUNDED_READ]
    line = " ".join("".join(c if c.isprintable() else " " for c in head).split())
    return line if len(line) <= limit and len(head) == len(text) else line[: limit - 1] + "…"


def classify(
    returncode: int | None, stderr: str, *, not_mcp: str | None = None, cut: bool = False
) -> tuple[str, str]:
    """The status and a one-line reason for an ssh that ended before the session was usable, from
    its whole stderr.

    ssh exits 255 for its own failures and says why on stderr; otherwise the exit code is the
    remote command's. ``no_sysmcp`` only when the remote command was not found (127, or the shell's
    own words); a remote command that started and failed (a uvx that cannot resolve, a Python that
    raised) is ``remote_error`` with its first meaningful lines. ``not_mcp`` is set when the remote
    wrote something that is not JSON-RPC (a shell banner, another program); ``cut`` when its output
    ended in the middle of a message (it died answering).
    """
    lines = [line.strip(" @\t\r") for line in stderr.splitlines() if not _NOISE.match(line.strip())]
    lines = sorted((line for line in lines if line), key=lambda line: bool(_THROUGH_PROXY.search(line)))
    ssh_failed = returncode == 255 or returncode is None
    # Killed (by us, at a timeout) ssh said its own words too; a remote command that ran and exited said
    # its own: "Permission denied" from a uv cache or a script without its x bit is no refused login,
    # and behind a jump host it would be read as the bastion's refusal of every host alike.
    ssh_words = returncode is None or returncode == 255 or returncode < 0
    if ssh_words and (ssh_failed or not_mcp is None):
        for status, pattern in _PATTERNS.items():
            for line in lines:
                if pattern.search(line) and (ssh_failed or status != "unreachable"):
                    return status, bounded(line)
    for line in lines:
        if _NOT_FOUND.search(line):
            return "no_sysmcp", bounded(line)
    if returncode == 127:
        return "no_sysmcp", bounded(
            lines[0] if lines else "the remote command was not found (exit status 127)"
        )
    if not_mcp is not None:
        return "remote_error", bounded(f"the remote command does not speak MCP: {not_mcp}")
    if ssh_failed:
        silent = (
            "ssh failed (exit status 255) without saying why"
            if returncode == 255
            else "the connection ended before the remote sysmcp answered"
        )
        return "unreachable", bounded(lines[-1] if lines else silent)
    first = " / ".join(lines[:MEANINGFUL_LINES])
    return "remote_error", bounded(
        f"the remote command exited with status {returncode}"
        + (" in the middle of its answer" if cut else "")
        + (f": {first}" if first else "" if cut else " before answering"),
        REMOTE_REASON_LIMIT,
    )


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_REMOTE_COMMAND",
    "SshSettings",
    "accepts_changed_keys",
    "bounded",
    "classify",
    "config_argv",
    "control_argv",
    "destination",
    "session_argv",
]
