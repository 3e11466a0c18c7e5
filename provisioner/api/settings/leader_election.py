"""`leaderElection`: how the replicas keep one of them active through a Lease."""

from __future__ import annotations

from datetime import timedelta
from typing import Self

from pydantic import Field, model_validator

from provisioner.api.fields import GoDuration
from provisioner.api.settings.section import Section

__all__ = ["LeaderElection"]


class LeaderElection(Section):
    enabled: bool = Field(default=True, description="Keep one active replica through a Lease.")
    lease_name: str = Field(default="atomic-gang-provisioner", min_length=1)
    lease_namespace: str = Field(default="atomic-gang-system", min_length=1)
    lease_duration: GoDuration = timedelta(seconds=15)
    renew_deadline: GoDuration = timedelta(seconds=10)
    retry_period: GoDuration = timedelta(seconds=2)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        # The leader must give up before a follower may take over, or two replicas act.
        if not timedelta(0) < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retryPeriod < renewDeadline < leaseDuration"
            )
        return self
