"""Who holds a stack's lock, and whether this replica may break it.

Called by the stack driver on two paths: `recover()` (on becoming leader, every stack's
locks) and any operation that fails with "the stack is currently locked" (holders parsed
from the CLI's message, whatever the backend).

The rule is leadership, not age or host. Only the Lease holder runs stack operations, and
this driver runs one operation per stack at a time, so a lock this replica meets while it
leads, on a stack it is not itself updating, belongs to a process that is not the Lease
holder: a dead pod, a crashed earlier run, or an old leader that lost the Lease. It is stale
the moment this replica leads, whatever its age. A replica that does not lead (a standby,
or a leader that has just stepped down) never breaks a lock: the lock may be the live
leader's. Safety does not rest on the Lease alone: an old leader stops its reconcilers the
moment it loses the Lease, and every launch carries its ClientToken, so an `up` it was still
finishing cannot launch a second gang.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

__all__ = [
    "LockHolder",
    "holder_from_json",
    "holders_from_files",
    "holders_from_message",
    "is_stale",
    "pid_alive",
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


def is_stale(holder: LockHolder, *, leading: bool) -> bool:
    """True when ``holder``'s lock may be broken (module docstring): exactly when this
    replica leads. ``holder`` is what the log names; its age and host do not matter."""
    del holder
    return leading
