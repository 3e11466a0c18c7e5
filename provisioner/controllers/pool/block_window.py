"""How long a Capacity Block can still take a gang: pure helpers shared by the pool's plan
(`pool_plan`, which launches no gang it would have to release before its nodes joined) and
the Workload decision (`workload_decision`, which rejects a Workload its block can no
longer serve, so Kueue frees its quota instead of holding it for a block that is over).

EC2 starts terminating a block's instances 30 minutes before its end, so a set on a block is
released `capacityBlockReleaseSeconds` before it (`release_at`: a planned release). A new
gang needs up to `joinDeadlineSeconds` from its launch to Ready — the same bound the join
watchdog holds every set to — so none is launched after `release_at - joinDeadlineSeconds`
(`last_start`): it could be released before its nodes were given that time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from provisioner.api import constants as c
from provisioner.api.durations import format_duration
from provisioner.api.gangnodepool import CapacityBlock


@dataclass(frozen=True)
class BlockWindow:
    block: CapacityBlock
    release_margin: timedelta  # capacityBlockReleaseSeconds
    start_time: timedelta  # joinDeadlineSeconds: launch to Ready, at the longest

    @property
    def release_at(self) -> datetime:
        """When a set on the block is released, as planned."""
        return self.block.ends_at - self.release_margin

    @property
    def last_start(self) -> datetime:
        """The latest moment a new gang may be launched on the block."""
        return self.release_at - self.start_time

    def over(self, now: datetime) -> bool:
        """No set may run on the block any more: its planned release time has come."""
        return now >= self.release_at

    def too_late_to_start(self, now: datetime) -> bool:
        return now >= self.last_start

    def refusal(self, now: datetime, count: int) -> str:
        """Why no gang of `count` nodes can start on the block at `now`, and the fix."""
        block = self.block
        if self.over(now):
            why = (
                f"its gangs are released at {_at(self.release_at)}, "
                f"{format_duration(self.release_margin)} before its end (EC2 reclaims the "
                "instances then), so no gang can start on it any more."
            )
        else:
            why = (
                f"a gang started now would be released at {_at(self.release_at)} "
                f"({format_duration(self.release_margin)} before its end), less than the "
                f"{format_duration(self.start_time)} its {count} nodes may take to join "
                "(joinDeadlineSeconds) after the launch."
            )
        return (
            f"Capacity Block {block.reservation_id} ends at {_at(block.ends_at)}; {why} "
            f"Nothing was launched on it. {_fix()}"
        )

    def planned_release(self, pool: str) -> str:
        """What the Workload whose gang was released before the block's end is told."""
        block = self.block
        return (
            f"Pool {pool} released the gang as planned: Capacity Block "
            f"{block.reservation_id} ends at {_at(block.ends_at)}, and gangs on a block are "
            f"released {format_duration(self.release_margin)} before its end (EC2 reclaims "
            "the instances then). No gang can start on this block any more, so the Workload "
            f"is rejected and its quota freed. {_fix()}"
        )


def _at(moment: datetime) -> str:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}"


def _fix() -> str:
    return (
        f"To run again, point {c.ANN_CAPACITY_RESERVATION_ID} at a later Capacity Block "
        "(or extend this one) and resubmit the Job."
    )
