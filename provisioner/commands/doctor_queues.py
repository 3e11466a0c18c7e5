"""Which LocalQueues `atomic-gang doctor` checks when no `--queue` is given.

Called by `doctor.Doctor`. A gang can wait on any LocalQueue, not only the chart's default
one, so doctor looks where gangs are actually waiting: every LocalQueue with a pending gang
Workload (not finished, not admitted) — one that carries our AdmissionCheck, or that sits on
a LocalQueue whose ClusterQueue lists it (Kueue has not copied the check onto it yet). On a
quiet cluster, with no gang waiting anywhere, it checks every LocalQueue whose ClusterQueue
lists our check instead, so the installation's queues are still looked at. `gang_queues` is
pure; `find_queues` reads its inputs through `provisioner.kube`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.api import constants as c
from provisioner.commands.doctor_kube import CLUSTER_QUEUES, LOCAL_QUEUES, Reader
from provisioner.commands.kueue_reads import checks_of_controller, condition_true, lists_check
from provisioner.kube.resources import ADMISSION_CHECKS, WORKLOADS

__all__ = ["QueueChoice", "find_queues", "gang_queues"]


@dataclass(frozen=True)
class QueueChoice:
    """The queues to check ("NAMESPACE/NAME", sorted) and why they were chosen."""

    queues: tuple[str, ...]
    # True: gangs wait on them; False: none waits anywhere, these lead to our check.
    pending: bool


def _name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def gang_queues(
    workloads: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    cluster_queues: Iterable[Mapping[str, Any]],
    ours: set[str],
) -> QueueChoice:
    """The queues gangs wait on; when none does, those leading to one of ``ours`` (the
    names of AdmissionChecks naming our controller)."""
    leads_to_ours = {_name(cq)[1] for cq in cluster_queues if lists_check(cq, ours)}
    on_our_check = {
        f"{ns}/{name}"
        for lq in local_queues
        for ns, name in [_name(lq)]
        if (lq.get("spec") or {}).get("clusterQueue") in leads_to_ours
    }
    waiting = set()
    for wl in workloads:
        if condition_true(wl, c.WL_FINISHED) or condition_true(wl, c.WL_ADMITTED):
            continue
        queue = f"{_name(wl)[0]}/{(wl.get('spec') or {}).get('queueName') or ''}"
        carries = any(
            x.get("name") in ours for x in (wl.get("status") or {}).get("admissionChecks") or []
        )
        if carries or queue in on_our_check:
            waiting.add(queue)
    if waiting:
        return QueueChoice(tuple(sorted(waiting)), pending=True)
    return QueueChoice(tuple(sorted(on_our_check)), pending=False)


def find_queues(kube: Reader, controller_name: str, check: str) -> QueueChoice:
    """`gang_queues` over the cluster's Workloads, LocalQueues and ClusterQueues (three
    lists, every namespace)."""
    ours = {check} | checks_of_controller(kube.list(ADMISSION_CHECKS).items, controller_name)
    return gang_queues(
        kube.list(WORKLOADS).items,
        kube.list(LOCAL_QUEUES).items,
        kube.list(CLUSTER_QUEUES).items,
        ours,
    )
