"""`launchBudget`: how much of the account's EC2 launch throttling this controller may use.

EC2 throttles each account per region with token buckets ("Request throttling for the
Amazon EC2 API", EC2 Developer Guide): a request bucket per API (RunInstances and
CreateFleet are mutating actions: 50 tokens, refilled at 5 a second, by default) and, for
RunInstances, a resource bucket of 1,000 instances refilled at 2 a second. Every tool in
the account draws on the same buckets, so the controller takes `share` of them (half, by
default) and leaves the rest to the others. An account whose limits AWS raised says so in
the bucket fields; the controller still takes only `share` of them.

CreateTags, which writes the keep-warm window onto a warm set's instances, is a mutating
action too, with a request bucket of its own of the same default size: the controller
takes the same `share` of it, from the request fields here.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from provisioner.api.settings.section import Section

__all__ = [
    "EC2_INSTANCE_BUCKET",
    "EC2_INSTANCE_REFILL_PER_SECOND",
    "EC2_REQUEST_BUCKET",
    "EC2_REQUEST_REFILL_PER_SECOND",
    "LaunchBudgetSettings",
]

# EC2's documented defaults ("Request throttling for the Amazon EC2 API": request token
# bucket of a mutating action, resource token bucket of RunInstances).
EC2_REQUEST_BUCKET: Final = 50
EC2_REQUEST_REFILL_PER_SECOND: Final = 5.0
EC2_INSTANCE_BUCKET: Final = 1000
EC2_INSTANCE_REFILL_PER_SECOND: Final = 2.0


class LaunchBudgetSettings(Section):
    """The account's launch buckets in this region, and the share of them the controller
    spends on RunInstances/CreateFleet (every pool's launches, retries included)."""

    share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Fraction of the account's buckets the controller uses (0 < share <= 1); "
        "the rest is left to the other tools in the account.",
    )
    request_bucket: int = Field(
        default=EC2_REQUEST_BUCKET,
        ge=1,
        description="The account's request bucket for RunInstances/CreateFleet (EC2: 50).",
    )
    request_refill_per_second: float = Field(
        default=EC2_REQUEST_REFILL_PER_SECOND,
        gt=0,
        description="Its refill rate, requests a second (EC2: 5).",
    )
    instance_bucket: int = Field(
        default=EC2_INSTANCE_BUCKET,
        ge=1,
        description="The account's RunInstances resource bucket, instances (EC2: 1000).",
    )
    instance_refill_per_second: float = Field(
        default=EC2_INSTANCE_REFILL_PER_SECOND,
        gt=0,
        description="Its refill rate, instances a second (EC2: 2).",
    )
