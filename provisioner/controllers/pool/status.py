"""Small pure helpers on a pool's status, shared by `pool_plan` and `pool_outcomes`."""

from __future__ import annotations

from datetime import datetime

from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import GangNodePoolStatus


def changed(status: GangNodePoolStatus, **changes: object) -> GangNodePoolStatus:
    return status.model_copy(update=changes)


def idle(status: GangNodePoolStatus) -> GangNodePoolStatus:
    """The status of a pool with no set: what it learnt (generation, counts) is kept."""
    return changed(
        status,
        phase=Phase.IDLE,
        instance_ids=(),
        active_group=None,
        ready_nodes=0,
        unusable_nodes=None,
        keep_warm_until=None,
        capacity_block_ends_at=None,
        join_deadline=None,
        release_in_progress=None,
        launch_in_progress=None,
    )


def seconds_until(now: datetime, moment: datetime | None) -> float | None:
    return None if moment is None else max((moment - now).total_seconds(), 0.0)
