"""The one exception a pool resource's provider raises, and how it crosses the CLI.

Raised by every provider in ``stacks`` when AWS refuses or a check fails. The provider host
reports an exception to the Pulumi CLI as its formatted traceback, whose last line is
``stacks.failures.PoolResourceError: <Reason>: <message>``; the stack driver
(``provisioner.pulumi_driver.errors``) finds that line in the engine's diagnostics with
`REASON_PATTERN` and turns it back into a named reason, so a user sees "AccessEntryMissing:
Node role ... has no access entry ...; create one ..." instead of a Python traceback.
"""

from __future__ import annotations

import re
from typing import Final

from provisioner.cloud.errors import CloudError, to_cloud_error

__all__ = ["REASON_PATTERN", "RETRYABLE_REASONS", "PoolResourceError", "as_pool_error"]

REASON_PATTERN: Final = re.compile(
    r"PoolResourceError: (?P<reason>[A-Z][A-Za-z0-9]+): (?P<message>.+?)\s*$", re.MULTILINE
)
# Reasons that the same operation, repeated later, can get past without anyone fixing
# anything: AWS throttling or outages (the engine's RETRYABLE and UNKNOWN kinds), a release
# still waiting on EC2, a name briefly in use. Every other reason needs a change first.
RETRYABLE_REASONS: Final = frozenset(
    {
        "AwsUnavailable",
        "UnknownAwsError",
        "TerminationPending",
        "EnisPending",
        "LaunchTemplateConflict",
    }
)


class PoolResourceError(Exception):
    """A pool resource could not be created, changed, read or deleted.

    ``reason`` is a CamelCase word (a condition or event reason); ``message`` says what is
    wrong and how to fix it, in one line.
    """

    def __init__(self, reason: str, message: str) -> None:
        # One line: the driver reads the reason back from the last traceback line.
        self.reason = reason
        self.message = " ".join(message.split())
        super().__init__(f"{reason}: {self.message}")


def as_pool_error(exc: BaseException, action: str) -> PoolResourceError:
    """Any failure of an AWS call made while doing ``action``, as a PoolResourceError."""
    if isinstance(exc, PoolResourceError):
        return exc
    err = exc if isinstance(exc, CloudError) else to_cloud_error(exc, action)
    return PoolResourceError(err.reason, err.message)
