"""The EC2 write log: every mutating EC2 call the emulator received, in order, with who
signed it and when.

What AWS itself offers for the same question is CloudTrail ("CloudTrail record contents",
AWS CloudTrail User Guide): one event per API call with its ``eventTime``, ``eventName``,
``userIdentity.accessKeyId``, ``readOnly`` and ``errorCode``. This log keeps those fields
for the events CloudTrail marks ``readOnly: false``, readable at once (CloudTrail delivers
within minutes), so a test can say which replica called EC2 to change something, and when:

    GET /_emulator/ec2-writes?after=N   {writes: [{seq, received, answered, action,
                                         requester, status}]}

An action is read-only when its name says it reads (Describe*, Get*, List*), as CloudTrail
classifies EC2's. ``requester`` is the access key id of the request's SigV4 signature. Times
are the emulator's wall clock (`time.time()`), taken when the request arrived and when its
answer began; a call the emulator holds (`/_emulator/delays`) was received before it is run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from devenv.emulator.accounting import access_key, call_name
from devenv.emulator.write_log import WriteLog, WSGIApp

READ_ONLY_PREFIXES: Final = ("Describe", "Get", "List")


@dataclass
class Ec2Write:
    seq: int
    received: float
    answered: float | None
    action: str
    requester: str
    status: int | None


class Ec2WriteLog(WriteLog[Ec2Write]):
    """Records mutating EC2 calls passing to ``app``; thread-safe."""

    def wrap(self, app: WSGIApp, environ: dict[str, Any], start: Callable[..., Any]) -> Any:
        service, _, action = call_name(environ).partition(":")
        if service != "ec2" or action.startswith(READ_ONLY_PREFIXES) or " " in action:
            return app(environ, start)
        authorization = str(environ.get("HTTP_AUTHORIZATION", ""))
        return self.record(
            app,
            environ,
            start,
            lambda seq: Ec2Write(
                seq=seq,
                received=time.time(),
                answered=None,
                action=action,
                requester=access_key(authorization) or "unsigned",
                status=None,
            ),
        )
