"""Every failure of a stack operation, with a named reason and a sentence for users.

Called by the stack driver, which wraps each Automation API call and raises `StackError`,
and by the stack port (``port``), which lets nothing else out. The GangNodePool reconciler
writes ``reason`` and ``message`` into the pool's status and events, and hands ``kind`` (a
`FailureKind`) to the state machine, which picks the wait from it.

Hierarchy (kind in brackets)::

    Exception
     └── StackError(reason, message, kind, pool, operation)
           reason=StackLocked           [retryable] another update holds the stack's lock
                                        (a live one; stale locks are cleared by the driver)
           reason=PendingOperations     [retryable] operations a crash interrupted
           reason=StackNotFound         [not-prepared] no stack for the pool
           reason=PoolNotPrepared       [not-prepared] record/remove before any prepare
           reason=SecretsUnavailable    [config] passphrase missing or wrong, KMS unusable
           reason=FenceClosed           [retryable] this replica no longer surely leads:
                                        nothing written (``fence``)
           reason=BackendUnavailable    [retryable] the backend could not be read or written
                                        (S3 answering 5xx or throttling, among others)
           reason=BackendRefused        [config] S3 refused the call (403, 404): the
                                        bucket or the controller's grants need fixing
           reason=PulumiCliUnavailable  [config] the CLI is missing or will not start
           reason=ProgramFailed         [config] the inline program raised
           reason=<provider reason>     [the provider's kind] a pool resource failed, e.g.
                                        AccessEntryMissing (config), EnisPending (retryable);
                                        read from the provider's marker (stacks.failures)
           reason=StackOperationFailed  [retryable] anything else; the last error line is kept
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from pulumi.automation import errors as auto_errors

from provisioner.api.constants import FailureKind
from stacks.failures import read_failures

__all__ = [
    "BACKEND_REFUSED",
    "BACKEND_UNAVAILABLE",
    "CLI_UNAVAILABLE",
    "FENCE_CLOSED",
    "PENDING_OPERATIONS",
    "POOL_NOT_PREPARED",
    "PROGRAM_FAILED",
    "PROVIDER_HOST_UNAVAILABLE",
    "SECRETS_UNAVAILABLE",
    "STACK_LOCKED",
    "STACK_NOT_FOUND",
    "STACK_OPERATION_FAILED",
    "FailureKind",
    "StackError",
    "classify",
    "is_locked",
    "state_backend_failure",
]

STACK_LOCKED: Final = "StackLocked"
PENDING_OPERATIONS: Final = "PendingOperations"
STACK_NOT_FOUND: Final = "StackNotFound"
POOL_NOT_PREPARED: Final = "PoolNotPrepared"
SECRETS_UNAVAILABLE: Final = "SecretsUnavailable"
BACKEND_UNAVAILABLE: Final = "BackendUnavailable"
BACKEND_REFUSED: Final = "BackendRefused"
CLI_UNAVAILABLE: Final = "PulumiCliUnavailable"
PROVIDER_HOST_UNAVAILABLE: Final = "ProviderHostUnavailable"
PROGRAM_FAILED: Final = "ProgramFailed"
STACK_OPERATION_FAILED: Final = "StackOperationFailed"
# This replica no longer surely holds the leader Lease (``fence``): nothing was written.
FENCE_CLOSED: Final = "FenceClosed"

_LOCKED_TEXT: Final = (
    "[409] Conflict",
    "Another update is currently in progress",
    "the stack is currently locked by",
)
_PENDING_TEXT: Final = ("pending operations", "interrupted while")
_SECRETS_TEXT: Final = (
    "incorrect passphrase",
    "passphrase must be set",
    "PULUMI_CONFIG_PASSPHRASE",
    "failed to decrypt",
    "secrets manager",
)
_BACKEND_TEXT: Final = (
    "could not load checkpoint",
    "failed to load checkpoint",
    "could not read",
    "could not write",
    "unable to open bucket",
    "NoCredentialProviders",
    "failed to get bucket",
    "permission denied",
    "no such file or directory",
)
# How the CLI's blob store (gocloud on the AWS SDK for Go v2) reports a failed S3 call, e.g.
#   read ".pulumi/meta.yaml": blob (key ".pulumi/meta.yaml") (code=Unknown): operation error
#   S3: GetObject, exceeded maximum number of attempts, 3, https response error StatusCode:
#   500, RequestID: …, HostID: , api error InternalError: An internal error has occurred.
# (a failed checkpoint write prints the same from "operation error" on, under "2 errors
# occurred:"). None of it names the backend in words, so it is read by its shape.
_S3_CALL: Final = re.compile(
    r"operation error S3: (?P<call>\w+),.*?StatusCode: (?P<status>\d{3})"
    r"(?:.*?HostID: [^,]*, (?:api error )?(?P<api>[^\n]+))?"
)
_S3_KEY: Final = re.compile(r'blob \(key "(?P<key>[^"]+)"\)')
_ERROR_LINE: Final = re.compile(r"^\s*error: (?P<text>.+)$", re.MULTILINE)


class StackError(Exception):
    """A stack operation that did not succeed; ``message`` says what to do about it."""

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        kind: FailureKind,
        pool: str | None = None,
        operation: str | None = None,
    ) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.kind = kind
        self.pool = pool
        self.operation = operation

    @property
    def retryable(self) -> bool:
        """Whether the same operation, repeated later, can succeed with nothing fixed."""
        return self.kind is FailureKind.RETRYABLE


def state_backend_failure(
    err: BaseException, message: str, *, pool: str | None = None, operation: str | None = None
) -> StackError:
    """A failed call of the driver's own to the state backend (a lock file, a prepare
    intent), read as `classify` reads the CLI's: a refusal (``err.failure`` CONFIG: a
    grant, a missing bucket) waits for the fix; anything else (a 5xx, a timeout, a full
    disk) is retried."""
    if getattr(err, "failure", None) is FailureKind.CONFIG:
        return StackError(
            BACKEND_REFUSED, message, kind=FailureKind.CONFIG, pool=pool, operation=operation
        )
    return StackError(
        BACKEND_UNAVAILABLE, message, kind=FailureKind.RETRYABLE, pool=pool, operation=operation
    )


def _text_of(exc: BaseException) -> str:
    return str(exc)


def is_locked(exc: BaseException) -> bool:
    if isinstance(exc, auto_errors.ConcurrentUpdateError):
        return True
    text = _text_of(exc)
    return any(marker in text for marker in _LOCKED_TEXT)


def _last_error_line(text: str) -> str:
    lines = [m["text"].strip() for m in _ERROR_LINE.finditer(text)]
    return lines[-1] if lines else (text.strip().splitlines() or ["no output"])[-1]


def _s3_failure(text: str) -> tuple[int, str] | None:
    """The HTTP status of a failed S3 call in the CLI's output, and a short account of it."""
    call = _S3_CALL.search(text)
    if call is None:
        return None
    key = _S3_KEY.search(text)
    api = (call["api"] or "").strip()
    said = f"S3 {call['call']} answered {call['status']}" + (f" ({api})" if api else "")
    return int(call["status"]), said + (f" for {key['key']}" if key else "")


def classify(
    exc: BaseException,
    diagnostics: Sequence[str],
    *,
    pool: str,
    operation: str,
) -> StackError:
    """The named failure behind ``exc`` (an Automation API error or anything else raised
    while running the CLI), using the error diagnostics the engine streamed meanwhile."""
    if isinstance(exc, StackError):
        return exc
    text = "\n".join([*diagnostics, _text_of(exc)])
    where = f"{operation} of pool {pool}"

    def error(reason: str, message: str, kind: FailureKind) -> StackError:
        return StackError(reason, message, kind=kind, pool=pool, operation=operation)

    failures = read_failures(text)
    if failures:
        # Several pool resources can fail in one update (a missing profile and a missing
        # access entry); the first in program order names the reason, all are reported.
        # One failure that needs a fix makes the whole operation need it.
        first, *more = failures
        also = " ".join(f"Also {f.reason}: {f.message}" for f in more)
        kinds = {f.kind for f in failures}
        kind = FailureKind.CONFIG if FailureKind.CONFIG in kinds else first.kind
        return error(first.reason, f"{first.message} {also}".strip(), kind)
    if is_locked(exc):
        return error(
            STACK_LOCKED,
            f"The stack is locked by another Pulumi operation, so the {where} waits. A lock "
            "whose holder is gone is cleared by the controller; by hand, "
            f"`pulumi cancel --stack {pool}`.",
            FailureKind.RETRYABLE,
        )
    if isinstance(exc, auto_errors.StackNotFoundError):
        return error(
            STACK_NOT_FOUND, f"There is no stack for pool {pool}.", FailureKind.NOT_PREPARED
        )
    if isinstance(exc, FileNotFoundError | PermissionError) and "pulumi" in text:
        return error(
            CLI_UNAVAILABLE,
            f"The Pulumi CLI could not be started for the {where} ({exc}); check the "
            "image's CLI path.",
            FailureKind.CONFIG,
        )
    s3 = _s3_failure(text)
    if s3 is not None:
        status, said = s3
        if status >= 500 or status == 429:
            return error(
                BACKEND_UNAVAILABLE,
                f"The Pulumi state backend failed during the {where}: {said}. Retried with "
                "backoff until S3 answers again.",
                FailureKind.RETRYABLE,
            )
        return error(
            BACKEND_REFUSED,
            f"The Pulumi state backend refused the {where}: {said}. Check pulumi.backendUrl "
            "names an existing bucket and that the controller's role has the S3 grants the "
            "bootstrap's policy gives it.",
            FailureKind.CONFIG,
        )
    lowered = text.lower()
    if any(marker.lower() in lowered for marker in _SECRETS_TEXT):
        return error(
            SECRETS_UNAVAILABLE,
            f"The stack's secrets could not be opened for the {where}: "
            f"{_last_error_line(text)}. Set PULUMI_CONFIG_PASSPHRASE (or _FILE) to the "
            "passphrase the stacks were made with, or fix pulumi.secretsProvider.",
            FailureKind.CONFIG,
        )
    if isinstance(exc, auto_errors.InlineSourceRuntimeError):
        return error(
            PROGRAM_FAILED,
            f"The pool program raised during the {where}: {_last_error_line(text)}",
            FailureKind.CONFIG,
        )
    if any(marker in text for marker in _PENDING_TEXT) and "Attempting to deploy" not in text:
        return error(
            PENDING_OPERATIONS,
            f"The stack records operations a crash interrupted; the controller recovers them "
            f"before the next {operation}.",
            FailureKind.RETRYABLE,
        )
    if any(marker.lower() in lowered for marker in _BACKEND_TEXT):
        return error(
            BACKEND_UNAVAILABLE,
            f"The Pulumi state backend failed during the {where}: {_last_error_line(text)}",
            FailureKind.RETRYABLE,
        )
    return error(
        STACK_OPERATION_FAILED,
        f"The {where} failed: {_last_error_line(text)}",
        FailureKind.RETRYABLE,
    )
