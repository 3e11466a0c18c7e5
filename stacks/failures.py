"""The one exception a pool resource's provider raises, and how its kind crosses the CLI.

Raised by every provider in ``stacks`` when AWS refuses or a check fails. Providers run in
Pulumi's provider host, another process: the exception reaches the stack driver only as
text, inside the engine's diagnostics. So the error carries its kind structurally: its
message starts with a marker this module writes and alone reads back,

    [atomic-gang-failure kind=config reason=InstanceProfileNotFound] The node instance ...

and `read_failures` (called by ``provisioner.pulumi_driver.errors.classify``, and by
nothing else) returns each marked failure with its `FailureKind`. Nothing is inferred from
the rest of the traceback: a failure's kind is what the provider said it was.

The kind comes from the `CloudError` behind the failure (`as_pool_error`), or is given by
the provider that raises directly (a release still waiting on EC2 is transient).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from provisioner.api.constants import FailureKind
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error

__all__ = [
    "MARKER",
    "PoolResourceError",
    "ProviderFailure",
    "as_pool_error",
    "read_failures",
]

MARKER: Final = "atomic-gang-failure"
_MARKED: Final = re.compile(
    rf"\[{MARKER} kind=(?P<kind>[a-z-]+) reason=(?P<reason>[A-Za-z0-9]+)\] "
    r"(?P<message>[^\n]*?)\s*$",
    re.MULTILINE,
)
# A provider asks AWS for one resource; a retry of the same update gets past throttling,
# an outage or an unknown answer, and nothing else. A capacity or not-found answer means
# the pool's configuration (its zone, its role, its profile) has to change first.
_KIND_OF_CLOUD: Final = {
    ErrorKind.RETRYABLE: FailureKind.RETRYABLE,
    ErrorKind.UNKNOWN: FailureKind.RETRYABLE,
}


@dataclass(frozen=True)
class ProviderFailure:
    kind: FailureKind
    reason: str
    message: str


class PoolResourceError(Exception):
    """A pool resource could not be created, changed, read or deleted.

    ``reason`` is a CamelCase word (a condition or event reason); ``message`` says what is
    wrong and how to fix it, in one line; ``kind`` says whether waiting can help.
    """

    def __init__(
        self, reason: str, message: str, *, kind: FailureKind = FailureKind.CONFIG
    ) -> None:
        # One line: the driver reads the marked line back from the engine's diagnostics.
        self.reason = reason
        self.message = " ".join(message.split())
        self.kind = kind
        super().__init__(f"[{MARKER} kind={kind.value} reason={reason}] {self.message}")

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self.reason, self.message, self.kind.value))


def _rebuild(reason: str, message: str, kind: str) -> PoolResourceError:
    return PoolResourceError(reason, message, kind=FailureKind(kind))


def as_pool_error(exc: BaseException, action: str) -> PoolResourceError:
    """Any failure of an AWS call made while doing ``action``, as a PoolResourceError."""
    if isinstance(exc, PoolResourceError):
        return exc
    err = exc if isinstance(exc, CloudError) else to_cloud_error(exc, action)
    return PoolResourceError(
        err.reason, err.message, kind=_KIND_OF_CLOUD.get(err.kind, FailureKind.CONFIG)
    )


def read_failures(text: str) -> list[ProviderFailure]:
    """Every marked failure in ``text`` (engine diagnostics), in order, without repeats.

    A marker naming a kind this version does not know (a newer provider) reads as
    transient: the operation is tried again rather than parked.
    """
    found: dict[tuple[str, str], ProviderFailure] = {}
    for m in _MARKED.finditer(text):
        try:
            kind = FailureKind(m["kind"])
        except ValueError:
            kind = FailureKind.RETRYABLE
        found.setdefault(
            (m["reason"], m["message"]), ProviderFailure(kind, m["reason"], m["message"])
        )
    return list(found.values())
