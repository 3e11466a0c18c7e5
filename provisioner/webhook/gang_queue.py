"""A gang job's queue, as the Job webhook judges it: the label it must carry, and the
GangClass behind it.

`review` calls `queue_problem` (a gang job without a Kueue queue would run ungated on any
nodes) and reads the queue's class through a `QueueClasses` port (`kube.admission_reads.
queue_class_lookup` in production; `no_classes`, the reference's Job-only reading, in tests
that leave it out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from provisioner.api import constants as c
from provisioner.api.gang_class import GangClass
from provisioner.api.problems import Problem

__all__ = ["QueueClasses", "no_classes", "queue_problem"]

# The GangClass behind LocalQueue (namespace, name), None when there is none.
QueueClasses = Callable[[str, str], GangClass | None]


def no_classes(_namespace: str, _queue: str) -> GangClass | None:
    return None


def queue_problem(labels: Mapping[str, str]) -> Problem | None:
    """The refusal of a gang job without a queue; None when it names one."""
    if str(labels.get(c.QUEUE_NAME_LABEL, "")).strip():
        return None
    return Problem(
        key=c.QUEUE_NAME_LABEL,
        value=None,
        reason=c.REASON_MISSING_LABEL,
        detail="a gang Job is gated by Kueue, and without a queue it would run on whatever "
        "nodes exist",
        accepted="a LocalQueue whose ClusterQueue lists the atomic-gang admission check",
        is_label=True,
    )
