"""The S3 write log: every PUT, POST and DELETE the emulator's S3 received, in order.

What S3 itself offers for the same question is server access logging ("Amazon S3 server
access log format", Amazon S3 User Guide): one record per request with its Time, Requester
(the IAM identity that signed it), Operation, Key, HTTP status and User-Agent. This log keeps
those fields for the write requests, readable at once (S3 delivers its logs with a delay of
hours), so a test can say who wrote a stack's state and when:

    GET /_emulator/s3-writes?after=N   {writes: [{seq, received, answered, method, bucket,
                                        key, requester, writer, user_agent, status}]}

``requester`` is the access key id of the request's SigV4 signature; ``writer`` is the
``x-atomic-gang-writer`` header the controller's S3 fence adds (empty when absent) — a label,
not an identity. Times are the emulator's wall clock (`time.time()`), taken when the request
arrived and when its answer began.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from devenv.emulator.accounting import access_key, signing_service
from devenv.emulator.write_log import WriteLog, WSGIApp

WRITE_METHODS: Final = frozenset({"PUT", "POST", "DELETE"})


@dataclass
class S3Write:
    seq: int
    received: float
    answered: float | None
    method: str
    bucket: str
    key: str
    requester: str
    writer: str
    user_agent: str
    status: int | None


class S3WriteLog(WriteLog[S3Write]):
    """Records S3 write requests passing to ``app``; thread-safe."""

    def wrap(self, app: WSGIApp, environ: dict[str, Any], start: Callable[..., Any]) -> Any:
        method = str(environ.get("REQUEST_METHOD", ""))
        authorization = str(environ.get("HTTP_AUTHORIZATION", ""))
        if method not in WRITE_METHODS or signing_service(authorization) != "s3":
            return app(environ, start)
        path = urllib.parse.unquote(str(environ.get("PATH_INFO", ""))).lstrip("/")
        bucket, _, key = path.partition("/")
        return self.record(
            app,
            environ,
            start,
            lambda seq: S3Write(
                seq=seq,
                received=time.time(),
                answered=None,
                method=method,
                bucket=bucket,
                key=key,
                requester=access_key(authorization) or "unsigned",
                writer=str(environ.get("HTTP_X_ATOMIC_GANG_WRITER", "")),
                user_agent=str(environ.get("HTTP_USER_AGENT", "")),
                status=None,
            ),
        )
