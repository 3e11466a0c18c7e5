"""Log set-up for `atomic-gang controller`: text for a terminal, JSON lines for a pipeline.

Called once by `provisioner.commands.controller`. The format is `--log-format text|json`,
defaulting to `$ATOMIC_GANG_LOG_FORMAT` (the image sets `json`), else `text`.

A JSON line is one object per record: `time` (RFC 3339, UTC, milliseconds), `level`,
`logger`, `message`, then every field the caller passed with `extra=` (`pool`, `workload`,
`generation`, `stack_operation`, ...) under its own name, and `exception` when the record
carries one. A value JSON cannot hold is written as its `str()`: a log line never fails.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import IO, Any

FORMATS = ("text", "json")
ENV_FORMAT = "ATOMIC_GANG_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the record's `extra=` fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        doc: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def default_format() -> str:
    chosen = os.environ.get(ENV_FORMAT, "text").strip().lower()
    return chosen if chosen in FORMATS else "text"


def configure(level: str, log_format: str, stream: IO[str] | None = None) -> None:
    """Route the root logger to `stream` (stderr) in the chosen format, replacing handlers."""
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
