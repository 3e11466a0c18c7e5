"""Every failure the EC2 engine reports, and how an AWS error code is sorted into one.

Called by every module in ``provisioner.cloud`` that talks to AWS (to turn a botocore error
into a :class:`CloudError`) and by the GangNodePool reconciler and the reaper (to decide what
to do next from ``CloudError.kind`` alone, without knowing a single AWS error code).

Hierarchy::

    Exception
     ├── CloudError(kind, code, reason, message)   anything the engine could not do
     │     kind=CAPACITY   EC2 has no room (or no quota) for N now; nothing is left running.
     │                     Terminal for the acquire generation: move it, back off, retry whole.
     │     kind=MALFORMED  EC2 answered with a count other than N; every returned instance was
     │                     terminated first. Terminal for the generation, like CAPACITY.
     │     kind=RETRYABLE  throttling, 5xx, a dropped connection: same generation, same tokens.
     │     kind=CONFIG     the request can never succeed as written; ``message`` names the fix.
     │                     Except a resource of the pool's stack gone from EC2 (its launch
     │                     template, its placement group: ``STACK_RESOURCE_GONE_CODES``),
     │                     whose ``failure`` is NOT_PREPARED: the pool re-prepares its stack.
     │                     So is EC2 not knowing the pool's instance profile (a code shared
     │                     with request errors, told apart by ``stack_gone``); ``gone``
     │                     names which resource it is.
     │     kind=NOT_FOUND  the thing asked about does not exist (release treats it as done).
     │     kind=NOT_ACTIVE a reservation that has not started: nothing was asked of EC2;
     │                     hold at $0 until ``starts_at`` (ReservationNotActive carries it).
     │     kind=UNKNOWN    a code this module has never seen; surfaced verbatim, backed off,
     │                     and after `unknownErrorAttemptsBeforeRetry` tries the check Retries.
     │     └── ReservationNotActive(starts_at)   kind=NOT_ACTIVE
     └── ValueError
           └── InvalidUserDataError   user data that is not a nodeadm NodeConfig

The codes and the kind each is sorted into are catalogued in ``error_codes``; the reason and
fix sentence each code gets, in ``error_reasons``. Both are re-exported here: callers import
``provisioner.cloud.errors`` alone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from botocore.exceptions import (  # type: ignore[import-untyped,unused-ignore]
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
)

from provisioner.api import constants as c
from provisioner.cloud.error_codes import (
    CAPACITY_CODES,
    CONFIG_CODES,
    CONFIG_PREFIXES,
    NOT_FOUND_CODES,
    PLACEMENT_ZONE_CODES,
    QUOTA_CODES,
    RETRYABLE_CODES,
    STACK_RESOURCE_GONE_CODES,
    UNOFFERED_CODES,
    ErrorKind,
    classify_code,
    is_quota,
    is_throttle,
    is_unoffered,
)
from provisioner.cloud.error_reasons import describe_code
from provisioner.cloud.stack_gone import (
    INSTANCE_PROFILE_FIX,
    INSTANCE_PROFILE_REASON,
    StackResource,
    gone_resource,
)

__all__ = [
    "CAPACITY_CODES",
    "CONFIG_CODES",
    "CONFIG_PREFIXES",
    "NOT_FOUND_CODES",
    "PLACEMENT_ZONE_CODES",
    "QUOTA_CODES",
    "RETRYABLE_CODES",
    "STACK_RESOURCE_GONE_CODES",
    "UNOFFERED_CODES",
    "CloudError",
    "ErrorKind",
    "InvalidUserDataError",
    "ReservationNotActive",
    "classify",
    "classify_code",
    "describe_code",
    "error_code",
    "is_capacity",
    "is_config",
    "is_not_found",
    "is_quota",
    "is_retryable",
    "is_throttle",
    "is_unoffered",
    "to_cloud_error",
]


def error_code(exc: BaseException) -> str | None:
    """The AWS error code carried by ``exc``, if it carries one."""
    if isinstance(exc, CloudError):
        return exc.code
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code")
        return str(code) if code else None
    return None


def _http_status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def classify(exc: BaseException) -> ErrorKind:
    """The kind of any exception raised while talking to AWS."""
    if isinstance(exc, CloudError):
        return exc.kind
    if isinstance(exc, ClientError):
        return classify_code(error_code(exc) or "", _http_status(exc))
    # Connection refused/reset, read and connect timeouts: nothing reached EC2 or the answer
    # was lost; an idempotent replay with the same token is the right move.
    if isinstance(exc, ConnectionError | HTTPClientError):
        return ErrorKind.RETRYABLE
    if isinstance(exc, BotoCoreError):
        # Missing credentials, unknown region, parameter validation in the SDK itself.
        return ErrorKind.CONFIG
    return ErrorKind.UNKNOWN


def is_capacity(exc: BaseException) -> bool:
    return classify(exc) is ErrorKind.CAPACITY


def is_retryable(exc: BaseException) -> bool:
    return classify(exc) is ErrorKind.RETRYABLE


def is_config(exc: BaseException) -> bool:
    return classify(exc) is ErrorKind.CONFIG


def is_not_found(exc: BaseException) -> bool:
    return classify(exc) is ErrorKind.NOT_FOUND


# What each kind means for the pool's next launch (``constants.FailureKind``). Anything not
# known to be final is retryable: replaying the same ClientToken can never double-launch.
_FAILURE_OF_KIND: Final = {
    ErrorKind.CAPACITY: c.FailureKind.CAPACITY,
    ErrorKind.MALFORMED: c.FailureKind.MALFORMED,
    ErrorKind.CONFIG: c.FailureKind.CONFIG,
    ErrorKind.NOT_ACTIVE: c.FailureKind.NOT_ACTIVE,
    # Retried like RETRYABLE (the same token), but counted: see `unknownErrorAttemptsBeforeRetry`.
    ErrorKind.UNKNOWN: c.FailureKind.UNKNOWN,
}


class CloudError(Exception):
    """A failure of the EC2 engine, sorted into a kind, with a reason and a sentence for users.

    ``reason`` is a CamelCase word fit for a condition reason or an event reason; ``message``
    says what happened and what a person can do about it. ``instance_ids`` lists instances
    that may still exist because of this failure (a rollback that itself failed), so the
    caller can persist them and release them later. ``rolled_back`` lists the instances a
    rollback did terminate (EC2 shows them going): the release still owes them its ENI
    cleanup, since a node that joined before the rollback (a set adopted after a crash, a
    launch answered again) carries a VPC CNI ENI that outlives its instance.
    """

    def __init__(
        self,
        kind: ErrorKind,
        code: str | None,
        reason: str,
        message: str,
        *,
        instance_ids: tuple[str, ...] = (),
        rolled_back: tuple[str, ...] = (),
        gone: StackResource | None = None,
    ) -> None:
        super().__init__(f"{reason}: {message}")
        self.kind = kind
        self.code = code
        self.reason = reason
        self.message = message
        self.instance_ids = instance_ids
        self.rolled_back = rolled_back
        # The resource of the pool's stack EC2 says is missing (``stack_gone``): from the
        # code alone unless the caller read EC2's message at the edge.
        self.gone = gone if gone is not None else gone_resource(code)
        # The launch calls sent before the failure, where the launch counted them (the
        # account's launch budget charges them); None: not counted.
        self.calls: int | None = None

    @property
    def throttled(self) -> bool:
        """EC2 throttled the call (RequestLimitExceeded and its kin): the account's launch
        budget shrinks (``controllers.launch_budget``)."""
        return is_throttle(self.code)

    @property
    def failure(self) -> c.FailureKind:
        """This failure as the pool's state machine acts on it."""
        if self.gone is not None:
            return c.FailureKind.NOT_PREPARED
        return _FAILURE_OF_KIND.get(self.kind, c.FailureKind.RETRYABLE)

    @property
    def ends_generation(self) -> bool:
        """True when the acquire generation must move before the next launch attempt."""
        return self.kind in (ErrorKind.CAPACITY, ErrorKind.MALFORMED)

    def __repr__(self) -> str:
        return (
            f"CloudError(kind={self.kind.value!r}, code={self.code!r}, "
            f"reason={self.reason!r}, message={self.message!r})"
        )


def to_cloud_error(exc: BaseException, action: str) -> CloudError:
    """Wrap any exception from an AWS call made while doing ``action`` (a short phrase)."""
    if isinstance(exc, CloudError):
        return exc
    kind = classify(exc)
    code = error_code(exc)
    if code is None and isinstance(exc, ConnectionError | HTTPClientError):
        code = type(exc).__name__
    aws_says = (
        exc.response.get("Error", {}).get("Message", "")
        if isinstance(exc, ClientError)
        else str(exc)
    )
    gone = gone_resource(code, str(aws_says))
    if gone is StackResource.INSTANCE_PROFILE:
        reason, fix = INSTANCE_PROFILE_REASON, INSTANCE_PROFILE_FIX
    else:
        reason, fix = describe_code(code, kind)
    detail = f" ({code}: {aws_says})" if code else f" ({aws_says})"
    return CloudError(kind, code, reason, f"{action} failed{detail}. {fix}", gone=gone)


class ReservationNotActive(CloudError):
    """A capacity reservation that cannot be launched into yet; ``starts_at`` is when it
    can (None when EC2 gives no start, e.g. a reservation still being assessed)."""

    def __init__(self, reason: str, message: str, starts_at: datetime | None) -> None:
        super().__init__(ErrorKind.NOT_ACTIVE, None, reason, message)
        self.starts_at = starts_at


class InvalidUserDataError(ValueError):
    """User data that is not a MIME multipart document holding a valid nodeadm NodeConfig."""
