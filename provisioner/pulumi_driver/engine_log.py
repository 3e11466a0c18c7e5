"""Engine events of one stack operation, streamed into the controller's log.

The stack driver makes one `EngineLog` per operation and passes its `on_event` and
`on_output` to the Automation API. Each resource step, diagnostic and the final summary
becomes a log record tagged with the pool and the operation (``extra={"pool": ...,
"stack_operation": ...}``), so `kubectl logs` shows what a stack is doing while it does it.
Error diagnostics are also kept: when the operation fails, the driver's error mapping
reads the provider's reason from them. So are the root stack resource's outputs and the
summary's change counts: they are the operation's result, read from the update itself rather
than from more CLI processes afterwards (``sdk.PoolStack``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pulumi.automation import EngineEvent

__all__ = ["REFRESH", "EngineLog"]

_ROOT_TYPE = "pulumi:pulumi:Stack"
# The operation name under which the driver runs `pulumi refresh` (``drift``).
REFRESH = "refresh"

_SEVERITY = {
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "info#err": logging.INFO,
    "debug": logging.DEBUG,
}
# Steps that change nothing are logged at DEBUG, so a no-change update stays quiet.
_QUIET_OPS = frozenset({"same", "read", "refresh"})


class EngineLog:
    def __init__(
        self,
        logger: logging.Logger,
        pool: str,
        operation: str,
        resource_order: Sequence[str] = (),
    ) -> None:
        self._logger = logger
        self.operation = operation
        self._extra = {"pool": pool, "stack_operation": operation}
        self._prefix = f"stack {pool} {operation}"
        self._order = {name: n for n, name in enumerate(resource_order)}
        self._errors: list[tuple[int, int, str]] = []
        self.failed_urns: list[str] = []
        self.changes: dict[str, int] = {}
        # Resources a refresh found gone from AWS and dropped from the state: (name, old id).
        self.dropped: list[tuple[str, str]] = []
        # The stack's outputs as the update registered them; None until it does.
        self.stack_outputs: dict[str, Any] | None = None

    def reporting(self) -> dict[str, Any]:
        """How every engine run reports: its events to this log, no colour, no progress."""
        return {
            "on_event": self.on_event,
            "on_output": self.on_output,
            "on_error": self.on_error,
            "color": "never",
            "suppress_progress": True,
        }

    @property
    def diagnostics(self) -> list[str]:
        """Error diagnostics, in the program's resource order (independent resources fail
        in whatever order they ran; a user should read the same report every time)."""
        return [text for _, _, text in sorted(self._errors)]

    def _error(self, text: str, urn: str | None) -> None:
        name = (urn or "").rsplit("::", 1)[-1]
        self._errors.append((self._order.get(name, len(self._order)), len(self._errors), text))

    def _log(self, level: int, text: str, *args: Any) -> None:
        self._logger.log(level, f"{self._prefix}: {text}", *args, extra=self._extra)

    def on_event(self, event: EngineEvent) -> None:
        if event.resource_pre_event is not None:
            meta = event.resource_pre_event.metadata
            op = str(getattr(meta.op, "value", meta.op))
            level = logging.DEBUG if op in _QUIET_OPS else logging.INFO
            self._log(level, "%s %s", op, _short(meta.urn))
        elif event.res_outputs_event is not None:
            meta = event.res_outputs_event.metadata
            op = str(getattr(meta.op, "value", meta.op))
            level = logging.DEBUG if op in _QUIET_OPS else logging.INFO
            self._log(level, "%s %s done", op, _short(meta.urn))
            if meta.type == _ROOT_TYPE and meta.new is not None:
                self.stack_outputs = dict(meta.new.outputs or {})
            # (The root stack resource has no id, before or after: it is never "gone".)
            if (
                self.operation == REFRESH
                and meta.old is not None
                and meta.old.id
                and _gone(meta.new)
            ):
                # The provider's read found nothing: the engine drops it from the state and
                # reports the step's outcome as a "delete" with no new state.
                self.dropped.append((meta.urn.rsplit("::", 1)[-1], str(meta.old.id or "")))
        elif event.res_op_failed_event is not None:
            urn = event.res_op_failed_event.metadata.urn
            self.failed_urns.append(urn)
            self._log(logging.ERROR, "step failed on %s", _short(urn))
        elif event.diagnostic_event is not None:
            diag = event.diagnostic_event
            message = diag.message.strip()
            if diag.severity == "error":
                self._error(message, diag.urn)
            if message:
                level = _SEVERITY.get(diag.severity, logging.INFO)
                where = f" {_short(diag.urn)}" if diag.urn else ""
                self._log(level, "%s%s: %s", diag.severity, where, message)
        elif event.summary_event is not None:
            summary = event.summary_event
            self.changes = {
                str(getattr(k, "value", k)): int(v) for k, v in summary.resource_changes.items()
            }
            self._log(
                logging.INFO, "finished in %ss, changes %s", summary.duration_seconds, self.changes
            )

    def on_output(self, line: str) -> None:
        if line.strip():
            self._log(logging.DEBUG, "%s", line)

    def on_error(self, line: str) -> None:
        if line.strip():
            self._error(line, None)
            self._log(logging.WARNING, "%s", line)


def _gone(new: Any) -> bool:
    """A refreshed resource's new state says it no longer exists (none, or no id)."""
    return new is None or not getattr(new, "id", None)


def _short(urn: str | None) -> str:
    """`urn:pulumi:stack::project::type::name` -> `type::name`."""
    if not urn:
        return ""
    parts = urn.split("::")
    return "::".join(parts[-2:]) if len(parts) >= 2 else urn
