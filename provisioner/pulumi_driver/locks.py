"""Who holds a stack's lock, and whether that holder is gone.

Called by the stack driver on two paths: `recover()` (on becoming leader, read every
stack's lock files on a `file://` backend) and any operation that fails with "the stack is
currently locked" (parse the holders from the CLI's message, whatever the backend).

A lock is stale when its holder provably died: same host and no such process (a container
restart keeps the pod's hostname), or when it is older than the driver's `stale_after`
(another pod that never came back). A lock held by a live process on this host, or a young
lock from another host (a previous leader still finishing its last `up` during a
hand-over), is left alone: cancelling it would let two updates write one stack.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

__all__ = ["LockHolder", "holders_from_files", "holders_from_message", "is_stale", "pid_alive"]

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


def holders_from_files(paths: Iterable[Path]) -> list[LockHolder]:
    """The holders recorded in a `file://` backend's lock files (JSON: pid, username,
    hostname, timestamp). An unreadable file counts as a holder of unknown age."""
    holders = []
    for path in paths:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            holders.append(LockHolder("", "", 0, None))
            continue
        holders.append(
            LockHolder(
                str(raw.get("username", "")),
                str(raw.get("hostname", "")),
                int(raw.get("pid", 0)),
                _parse_time(str(raw.get("timestamp", ""))),
            )
        )
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


def is_stale(
    holder: LockHolder,
    *,
    now: datetime,
    hostname: str,
    alive: Callable[[int], bool],
    stale_after: timedelta,
) -> bool:
    """True when ``holder`` cannot be running any more (module docstring)."""
    if holder.host == hostname and holder.pid and not alive(holder.pid):
        return True
    return holder.created_at is not None and now - holder.created_at > stale_after
