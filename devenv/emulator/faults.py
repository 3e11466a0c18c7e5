"""Fault switches: armed failures, slow answers, and short answers.

A failure is answered either before moto sees the call (EC2 refused it) or, with `after`,
once moto has run it (EC2 did it, and the answer was lost: a 5xx after the side effect). A
delay holds a call for some seconds before EC2 runs it, or after it ran and before the
answer leaves: the windows a crash or a timeout can fall into. A short answer launches fewer
instances than asked and says success. (EC2's eventual consistency, a listing lag among it,
is `consistency.py`'s.) Every fault and delay can be scoped to
one client by its access key id, so a fault meant for the controller is not absorbed by the
node simulator's polling; each consumed switch is recorded with the client that took it.

`FaultSwitches` is a part of `EmulatorState` (which supplies `lock`); `fault_response` spells an
armed failure the way the called service's protocol does, so botocore parses its code.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Final
from xml.sax.saxutils import escape

from moto.core.utils import get_service_model

from devenv.emulator.accounting import access_key
from devenv.emulator.model import EmulatorInputError, check_count

_ACTION_RE: Final = re.compile(r"^[A-Z][A-Za-z0-9]+$")

_DEFAULT_FAULT_MESSAGES: Final = {
    "InsufficientInstanceCapacity": (
        "We currently do not have sufficient capacity in the Availability Zone you "
        "requested. Our system will be working on provisioning additional capacity."
    ),
    "RequestLimitExceeded": "Request limit exceeded.",
    "ThrottlingException": "Rate exceeded",
    "InternalError": "An internal error has occurred.",
    "Unsupported": (
        "The requested configuration is currently not supported. "
        "Please check the documentation for supported configurations."
    ),
}
# EC2 answers throttling with 503 and its own failures with 500; everything else is the
# caller's fault (400). botocore retries on both codes and statuses.
_DEFAULT_FAULT_STATUS: Final = {
    "InternalError": 500,
    "InternalFailure": 500,
    "ServiceUnavailable": 503,
    "Unavailable": 503,
    "RequestLimitExceeded": 503,
}


@dataclass
class Fault:
    """The next `remaining` calls of `action` (by `client`, or anyone's) fail with `code`,
    `message` and `status`; with `after`, each one runs first and then its answer is lost."""

    action: str
    code: str
    message: str
    status: int
    remaining: int
    after: bool = False
    client: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Delay:
    """The next `remaining` calls of `action` wait `seconds` before EC2 runs them, or (with
    `after`) after it ran them and before the answer leaves."""

    action: str
    seconds: float
    remaining: int
    after: bool = False
    client: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# The launch calls a short answer applies to. An instant fleet short of its target is
# documented EC2 behaviour; RunInstances with MinCount == N answering fewer than N is not,
# which is exactly why the product guards against it and the switch lets that guard run.
SHORT_ANSWER_ACTIONS: Final = ("CreateFleet", "RunInstances")


@dataclass
class ShortAnswer:
    """The next `remaining` calls of `action` launch `missing` fewer instances than planned
    (at least one is always launched: an empty answer is a refusal, not a short one)."""

    action: str
    missing: int
    remaining: int


class FaultSwitches:
    """The switches' half of `EmulatorState`; `_clear_faults_state` empties them."""

    lock: threading.RLock
    clock: Callable[[], float]

    def _clear_faults_state(self) -> None:
        self._faults: dict[str, list[Fault]] = {}
        self._delays: dict[str, list[Delay]] = {}
        self._short: dict[str, ShortAnswer] = {}
        self._consumed: list[dict[str, Any]] = []

    def inject_fault(
        self,
        action: str,
        code: str,
        message: str | None = None,
        count: int = 1,
        status: int | None = None,
        after: bool = False,
        client: str | None = None,
    ) -> Fault:
        """Make the next `count` calls of `action` (an API name, e.g. RunInstances) fail.

        Every HTTP attempt counts as a call: a client that retries throttling or 5xx
        answers consumes one fault per attempt. `after`: run the call, then lose its answer.
        `client`: only calls signed with this access key id.
        """
        if not _ACTION_RE.match(action or ""):
            raise EmulatorInputError(
                "action", f"action {action!r} is not an API name such as RunInstances"
            )
        if not _ACTION_RE.match(code or ""):
            raise EmulatorInputError(
                "code", f"code {code!r} is not an error code such as RequestLimitExceeded"
            )
        check_count("count", count, minimum=1)
        resolved_status = status if status is not None else _DEFAULT_FAULT_STATUS.get(code, 400)
        if not 400 <= resolved_status <= 599:
            raise EmulatorInputError(
                "status", f"status {resolved_status} is not an HTTP error status"
            )
        fault = Fault(
            action=action,
            code=code,
            message=message or _DEFAULT_FAULT_MESSAGES.get(code, code),
            status=resolved_status,
            remaining=count,
            after=after,
            client=client,
        )
        with self.lock:
            self._faults.setdefault(action, []).append(fault)
        return fault

    def delay_calls(
        self,
        action: str,
        seconds: float,
        count: int = 1,
        after: bool = False,
        client: str | None = None,
    ) -> Delay:
        """Hold the next `count` calls of `action` for `seconds` (see `Delay`)."""
        if not _ACTION_RE.match(action or ""):
            raise EmulatorInputError(
                "action", f"action {action!r} is not an API name such as RunInstances"
            )
        if not 0 < seconds <= 300:
            raise EmulatorInputError("seconds", f"seconds {seconds} is not in (0, 300]")
        check_count("count", count, minimum=1)
        delay = Delay(action, float(seconds), count, after, client)
        with self.lock:
            self._delays.setdefault(action, []).append(delay)
        return delay

    def clear_faults(self) -> None:
        with self.lock:
            self._faults.clear()
            self._delays.clear()
            self._short.clear()

    def take_fault(self, action: str, client: str | None = None) -> Fault | None:
        """Consume one armed failure of `action` that `client` may take, oldest first."""
        with self.lock:
            fault = _take(self._faults.get(action), client)
            if fault is not None:
                self._consumed.append({"switch": "fault", **fault.as_dict(), "by": client})
            return fault

    def take_delay(self, action: str, client: str | None = None) -> Delay | None:
        with self.lock:
            delay = _take(self._delays.get(action), client)
            if delay is not None:
                self._consumed.append({"switch": "delay", **delay.as_dict(), "by": client})
            return delay

    def consumed(self) -> list[dict[str, Any]]:
        """Every switch consumed since the last reset, in order, with the client that did."""
        with self.lock:
            return [dict(entry) for entry in self._consumed]

    def has_faults(self) -> bool:
        return bool(self._faults)

    def has_delays(self) -> bool:
        return bool(self._delays)

    def set_short_answer(self, action: str, missing: int, count: int = 1) -> None:
        """The next `count` calls of `action` (CreateFleet or RunInstances) launch `missing`
        fewer instances than they would have (0 disarms)."""
        if action not in SHORT_ANSWER_ACTIONS:
            raise EmulatorInputError(
                "action", f"action {action!r} cannot answer short; one of {SHORT_ANSWER_ACTIONS}"
            )
        check_count("missing", missing, minimum=0)
        check_count("count", count, minimum=1)
        with self.lock:
            if missing:
                self._short[action] = ShortAnswer(action, missing, count)
            else:
                self._short.pop(action, None)

    def take_short_answer(self, action: str) -> int:
        """How many instances this call of `action` withholds (0 when unarmed)."""
        with self.lock:
            short = self._short.get(action)
            if short is None:
                return 0
            short.remaining -= 1
            if short.remaining == 0:
                del self._short[action]
            self._consumed.append({"switch": "short-answer", **asdict(short)})
            return short.missing

    def short_answers(self) -> list[dict[str, Any]]:
        with self.lock:
            return [asdict(s) for s in self._short.values()]


def _take(queue: list[Any] | None, client: str | None) -> Any:
    """Consume one use of the oldest switch in `queue` that applies to `client`."""
    for switch in queue or ():
        if switch.client is None or switch.client == client:
            switch.remaining -= 1
            if switch.remaining == 0:
                queue.remove(switch)  # type: ignore[union-attr]
            return switch
    return None


def access_key_of(response: Any) -> str | None:
    """The access key id a request was signed with (SigV4's Credential=AKID/...)."""
    return access_key(str(response.headers.get("Authorization") or ""))


def s3_fault_response(fault: Fault) -> tuple[int, dict[str, str], str]:
    """The error as S3 spells it: a bare <Error> document, which every S3 client parses."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{escape(fault.code)}</Code><Message>{escape(fault.message)}</Message>"
        f"<RequestId>{uuid.uuid4()}</RequestId></Error>"
    )
    return fault.status, {"Content-Type": "application/xml"}, body


def fault_response(response: Any, fault: Fault) -> tuple[int, dict[str, str], str]:
    """The error as the service's protocol spells it, so botocore parses its code."""
    request_id = str(uuid.uuid4())
    protocol = get_service_model(response.boto3_service_name).protocol
    if protocol in ("json", "rest-json"):
        body = json.dumps({"__type": fault.code, "message": fault.message})
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": fault.code}
        return fault.status, headers, body
    error = f"<Code>{escape(fault.code)}</Code><Message>{escape(fault.message)}</Message>"
    if protocol == "ec2":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Response><Errors><Error>{error}</Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        )
    else:
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type>{error}</Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
    return fault.status, {"Content-Type": "text/xml"}, body
