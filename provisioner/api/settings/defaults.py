"""What a Job gets when it says nothing (`defaults`), what it may ask at most (`limits`), and
how long a pool waits between acquisition attempts (`retryBackoff`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal, Self

from pydantic import Field, model_validator

from provisioner.api import constants as c
from provisioner.api.fields import (
    GoDuration,
    Mode,
    NonNegativeDuration,
    PositiveDuration,
    Region,
    RoleArn,
)
from provisioner.api.settings.section import Section

__all__ = ["Defaults", "Limits", "RetryBackoff"]


class Defaults(Section):
    region: Region = Field(description="EKS cluster region; the only launch region.")
    mode: Mode = Field(default=c.MODE_RUNINSTANCES, description="Default acquisition mode.")
    keep_warm_ttl: NonNegativeDuration = Field(
        default=timedelta(minutes=10), description="Default idle-node retention window."
    )
    max_lifetime: PositiveDuration = Field(
        default=timedelta(hours=4), description="Default instance age cap."
    )
    node_role_arn: RoleArn | Literal[""] = Field(
        default="", description="Default node IAM role ARN; empty when every Job names its own."
    )


class Limits(Section):
    max_gang_size: int = Field(default=64, ge=1, description="Largest count any Job may request.")
    max_keep_warm_ttl: NonNegativeDuration = Field(
        default=timedelta(hours=24), description="Longest keep-warm TTL any Job may request."
    )
    # The reaper terminates a gang instance older than its max-lifetime: the backstop for a
    # set nobody releases. Unbounded, a Job could opt out of it ("876000h"). A week covers a
    # multi-day training segment between checkpoints, and bounds what a forgotten gang can
    # cost; a Job asking more is refused at apply, naming this limit, so the installer
    # raises it knowingly for long runs.
    max_lifetime: PositiveDuration = Field(
        default=timedelta(hours=168),
        description="Longest max-lifetime any Job may request (the reaper's backstop).",
    )


class RetryBackoff(Section):
    """How long a pool waits before its next try after a failed step that is neither a
    capacity shortfall nor a throttle (those retry at the account's launch budget's pace,
    `launchBudget`): a transient AWS or Pulumi failure, and `max / 5` after a configuration
    failure. The wait doubles per consecutive failure, from `initial` up to `max`.

    Capacity shortfalls still count toward `acquireAttemptsBeforeRetry` on this schedule
    (one counted per wait), so a Workload keeps its quota as long as it did when each retry
    waited that long.
    """

    initial: GoDuration = Field(
        default=timedelta(seconds=5), description="Wait after the first failure."
    )
    max: GoDuration = Field(default=timedelta(minutes=5), description="Longest wait.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if not timedelta(0) < self.initial <= self.max:
            raise ValueError(
                "retryBackoff needs 0 < initial <= max, e.g. {initial: 5s, max: 5m}; got "
                f"initial={self.initial.total_seconds():g}s max={self.max.total_seconds():g}s"
            )
        return self
