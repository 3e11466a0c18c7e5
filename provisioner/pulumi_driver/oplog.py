"""The driver's record of each stack operation: a marker before, the result after.

Called by the stack driver around every operation that runs the CLI, and by `recover()`.
Before an `up`, `destroy` or recovery step the driver writes a marker (operation, start time,
host, pid) to ``<stateDir>/operations/<pool>.json`` and syncs it to disk; after, it writes the
result into the same file. A marker found without a result on restart means the process
died mid-operation: recovery records it as ``aborted`` and repairs the stack, and the caller
decides whether to run the operation again (STYLE 9: recovered, never blindly re-run).

The same `StackOperation` is returned to the caller, which persists it in
``GangNodePool.status.lastStackOperation`` / ``lastStackResult``: that copy survives the loss
of a state directory (an `s3://` backend with an ephemeral disk).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

__all__ = ["OperationLog", "Result", "StackOperation"]

Result = Literal["succeeded", "failed", "aborted"]
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
ABORTED: Final = "aborted"


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class StackOperation:
    pool: str
    operation: str
    started_at: datetime
    host: str
    pid: int
    finished_at: datetime | None = None
    result: Result | None = None
    reason: str | None = None
    message: str | None = None

    @property
    def in_progress(self) -> bool:
        return self.result is None

    def summary(self) -> str:
        """One line for a status field or a table cell."""
        if self.result is None:
            return f"{self.operation} in progress since {self.started_at:%Y-%m-%dT%H:%M:%SZ}"
        when = (self.finished_at or self.started_at).strftime("%Y-%m-%dT%H:%M:%SZ")
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.operation} {self.result}{why} at {when}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("started_at", "finished_at"):
            if data[key] is not None:
                data[key] = data[key].isoformat()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StackOperation:
        values = dict(data)
        for key in ("started_at", "finished_at"):
            if values.get(key):
                values[key] = datetime.fromisoformat(values[key])
        return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


class OperationLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, pool: str) -> Path:
        return self.directory / f"{pool}.json"

    def _write(self, op: StackOperation) -> StackOperation:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(op.pool)
        partial = path.with_suffix(".json.tmp")
        with partial.open("w") as handle:
            json.dump(op.to_dict(), handle)
            handle.flush()
            # The marker must be on disk before the CLI can change anything.
            os.fsync(handle.fileno())
        partial.replace(path)
        return op

    def begin(self, pool: str, operation: str) -> StackOperation:
        return self._write(
            StackOperation(pool, operation, _now(), socket.gethostname(), os.getpid())
        )

    def finish(
        self,
        op: StackOperation,
        result: Result,
        reason: str | None = None,
        message: str | None = None,
    ) -> StackOperation:
        return self._write(
            replace(op, finished_at=_now(), result=result, reason=reason, message=message)
        )

    def last(self, pool: str) -> StackOperation | None:
        try:
            return StackOperation.from_dict(json.loads(self._path(pool).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def abort_unfinished(self, pool: str) -> StackOperation | None:
        """Record a marker left without a result as aborted, and return it."""
        op = self.last(pool)
        if op is None or not op.in_progress:
            return None
        return self.finish(
            op,
            ABORTED,
            "Interrupted",
            "The controller stopped during this operation; the stack was recovered.",
        )
