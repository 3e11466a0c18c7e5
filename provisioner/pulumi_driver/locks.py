"""Who holds a stack's lock, and whether this replica may break it.

Called by the stack driver on two paths: `recover()` (on becoming leader, every stack's
locks) and any operation that fails with "the stack is currently locked" (holders parsed
from the CLI's message, or read from the backend's lock files).

A lock is broken only when its holder cannot still be writing (`BreakRule`):
- a replica that does not hold a valid fencing token (``fence``: a standby, or a leader
  whose renew deadline passed) breaks none: the lock may be the live leader's;
- a lock of a process on *this* host goes only when no Pulumi CLI runs under that pid (a
  live one may be a CLI this process, or a neighbour replica on the same node, still runs).
  "No CLI" rather than "no process": a restarted container keeps its pod's host name and
  numbers its processes afresh, so the pid a lock names may belong to another program;

- a lock of a process on *another* host goes only once that host's fence has certainly
  closed: this replica holds the Lease, and its Lease ran out on our clock since the earlier
  holder's last renewal we saw (``FencingToken.others_fenced_since``). From then on the
  earlier holder's CLI can write nothing: its controller killed it when its renew deadline
  passed, and its S3 requests pass through its fence (``s3_fence``), which refuses writes
  past that deadline even after a pause. Its pod being gone proves the same, later.
The lock's age is not used: a lock can be old and its holder alive (a long `up`).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

from provisioner.pulumi_driver.fence import FencingToken

__all__ = [
    "BreakRule",
    "LockHolder",
    "holder_from_json",
    "holders_from_files",
    "holders_from_message",
    "is_stale",
    "pid_alive",
    "pulumi_alive",
]

_IN_MESSAGE: Final = re.compile(
    r"created by (?P<user>[^@\s]*)@(?P<host>\S+) \(pid (?P<pid>\d+)\) at (?P<at>\S+)"
)


@dataclass(frozen=True)
class LockHolder:
    user: str
    host: str
    pid: int
    created_at: datetime | None

    def describe(self) -> str:
        when = self.created_at.isoformat() if self.created_at else "an unknown time"
        return f"{self.user}@{self.host} pid {self.pid} since {when}"


def _parse_time(text: str) -> datetime | None:
    # Go writes nanoseconds; Python takes microseconds at most.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.strip()).replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def holders_from_message(text: str) -> list[LockHolder]:
    """The holders a "stack is currently locked" error names."""
    return [
        LockHolder(m["user"], m["host"], int(m["pid"]), _parse_time(m["at"]))
        for m in _IN_MESSAGE.finditer(text)
    ]


def holder_from_json(raw: bytes | str) -> LockHolder:
    """The holder a lock file records (JSON: pid, username, hostname, timestamp), the same
    on every backend. One that does not parse counts as a holder of unknown age."""
    try:
        found = json.loads(raw)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        return LockHolder("", "", 0, None)
    try:
        pid = int(found.get("pid", 0))
    except (TypeError, ValueError):
        pid = 0
    return LockHolder(
        str(found.get("username", "")),
        str(found.get("hostname", "")),
        pid,
        _parse_time(str(found.get("timestamp", ""))),
    )


def holders_from_files(paths: Iterable[Path]) -> list[LockHolder]:
    """The holders recorded in a `file://` backend's lock files; an unreadable file counts
    as a holder of unknown age."""
    holders = []
    for path in paths:
        try:
            raw = path.read_bytes()
        except OSError:
            holders.append(LockHolder("", "", 0, None))
            continue
        holders.append(holder_from_json(raw))
    return holders


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited; only its parent has not collected it yet.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@dataclass(frozen=True)
class BreakRule:
    """What this replica knows when it meets a lock (module docstring)."""

    # The valid token of the term this replica recovered under; None when it does not lead.
    token: FencingToken | None
    now: float  # time.monotonic()
    host: str = field(default_factory=socket.gethostname)

    @classmethod
    def not_leading(cls) -> BreakRule:
        return cls(None, 0.0)


def pulumi_alive(pid: int) -> bool:
    """Whether ``pid`` is a live Pulumi CLI (or cannot be told apart from one)."""
    if not pid_alive(pid):
        return False
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return True  # no /proc to read: it may be one
    if not command:
        # A process in the middle of execve shows no arguments until the kernel has laid out
        # its new stack (after close-on-exec, so after the parent saw the exec succeed): a
        # CLI that has just started cannot yet be told apart from what it was.
        return True
    return Path(command.decode(errors="replace")).name.startswith("pulumi")


def is_stale(holder: LockHolder, rule: BreakRule) -> bool:
    """True when ``holder``'s lock may be broken (module docstring)."""
    if rule.token is None or rule.now >= rule.token.valid_until:
        return False
    if holder.host and holder.host == rule.host:
        return not pulumi_alive(holder.pid)
    return rule.now >= rule.token.others_fenced_since
