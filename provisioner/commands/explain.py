"""`atomic-gang explain NAMESPACE/JOB`: why this Job is not running yet.

Called by the CLI. Walks the Job's path and stops describing at the first link that holds
it, while still listing what it knows further on: the Job, its Kueue Workload (none yet
means Kueue has not seen it: label or LocalQueue), quota (Kueue's own message when none is
reserved), our check's state and message, the GangNodePool's phase, counts and last error,
and the capacity shortfalls so far (the pool's count and its CapacityShortfall events).
It only reads, through `provisioner.kube`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from provisioner.api import constants as c
from provisioner.api import kueue_objects as ko
from provisioner.commands.doctor_kube import requested_resources
from provisioner.commands.target import Where, connect
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import (
    ADMISSION_CHECKS,
    CORE_EVENTS,
    GANG_NODE_POOLS,
    JOBS,
    WORKLOADS,
    ResourceRef,
)

CHECK_NAME = ko.CHECK_NAME


class Reader(Protocol):
    """The reads explain makes; `KubeClient` is one."""

    def get(
        self, ref: ResourceRef, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    def list(
        self,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Any: ...


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {x["type"]: x for x in (obj.get("status") or {}).get("conditions") or []}


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    return _conditions(obj).get(kind, {}).get("status") == "True"


def explain(kube: Reader, namespace: str, name: str, check: str = CHECK_NAME) -> list[str]:
    """Lines, most decisive first; the first says the verdict."""
    try:
        job = kube.get(JOBS, name, namespace=namespace)
    except KubeNotFound:
        return [f"Job {namespace}/{name} does not exist."]
    if _true(job, "Complete") or _true(job, "Failed"):
        state = "completed" if _true(job, "Complete") else "failed"
        return [f"Job {namespace}/{name} has {state}; it is not waiting on anything."]
    labels = (job.get("metadata") or {}).get("labels") or {}
    queue, pool_name = labels.get(c.QUEUE_NAME_LABEL), labels.get(c.POOL_LABEL)
    lines: list[str] = []
    if not queue:
        return [
            f"Job {namespace}/{name} has no {c.QUEUE_NAME_LABEL} label: Kueue does not manage "
            "it and this controller never sees it; add the label with your LocalQueue's name."
        ]
    if not pool_name:
        lines.append(
            f"Job has no {c.POOL_LABEL} label: our check will reject its Workload; add it."
        )
    running = not (job.get("spec") or {}).get("suspend")
    workload = _workload_of(kube, namespace, job)
    if workload is None:
        verdict = (
            "it runs without Kueue (no Workload)"
            if running
            else f"no Workload yet: Kueue has not picked it up. Check that LocalQueue "
            f"{namespace}/{queue} exists (`atomic-gang doctor --queue {namespace}/{queue}`) "
            "and that the Kueue manager is running."
        )
        return [f"Job {namespace}/{name}: {verdict}", *lines]
    wl_name = workload["metadata"]["name"]
    quota = _conditions(workload).get("QuotaReserved")
    admitted = _true(workload, "Admitted")
    ours = next(
        (
            x
            for x in (workload.get("status") or {}).get("admissionChecks") or []
            if x.get("name") == check
        ),
        None,
    )
    if running and admitted:
        lines.insert(0, f"Job {namespace}/{name} is admitted and running (Workload {wl_name}).")
    elif not quota or quota.get("status") != "True":
        # Kueue's own words (QuotaReserved=False): they name an uncovered or exhausted
        # resource such as nvidia.com/gpu.
        why = (quota or {}).get("message") or "Kueue has not evaluated it yet"
        reason = (quota or {}).get("reason")
        lines.insert(
            0,
            f"Job {namespace}/{name} waits for quota in its ClusterQueue "
            f"(Workload {wl_name}): Kueue says{f' ({reason})' if reason else ''}: {why}",
        )
        extended = sorted(r for r in requested_resources(workload) if "/" in r)
        if extended:
            lines.insert(
                1,
                f"Workload {wl_name} requests {', '.join(extended)}: its ClusterQueue must "
                "cover each with a nominalQuota (`atomic-gang doctor` checks this).",
            )
    elif ours is None:
        lines.insert(
            0,
            f"Job {namespace}/{name} has quota but Workload {wl_name} carries no {check} "
            "check: its ClusterQueue does not list it (run `atomic-gang doctor`).",
        )
    else:
        lines.insert(
            0,
            f"Job {namespace}/{name} has quota and waits on our check: {ours.get('state')}"
            f" — {ours.get('message') or 'no message yet'}",
        )
    reserved = "reserved" if quota and quota.get("status") == "True" else "not reserved"
    lines.append(
        f"Workload {wl_name}: quota {reserved}, {'admitted' if admitted else 'not admitted'}."
    )
    if ours is not None:
        lines.append(f"Check {check}: {ours.get('state')}: {ours.get('message') or '-'}")
    if pool_name:
        lines += _pool_lines(kube, pool_name)
    return lines


def _workload_of(kube: Reader, namespace: str, job: Mapping[str, Any]) -> dict[str, Any] | None:
    uid = job["metadata"].get("uid")
    for wl in kube.list(WORKLOADS, namespace=namespace).items:
        owners = (wl.get("metadata") or {}).get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("uid") == uid for o in owners):
            return dict(wl)
    return None


def _pool_lines(kube: Reader, name: str) -> list[str]:
    try:
        pool = kube.get(GANG_NODE_POOLS, name)
    except KubeNotFound:
        return [
            f"Pool {name}: no GangNodePool yet (created when our check first sees the Workload)."
        ]
    spec, status = pool.get("spec") or {}, pool.get("status") or {}
    lines = [
        f"Pool {name}: phase {status.get('phase', 'Idle')}, "
        f"{len(status.get('instanceIds') or [])} of {spec.get('count', '?')} instances, "
        f"{status.get('readyNodes', 0)} Ready nodes, type {spec.get('instanceType', '?')}."
    ]
    error = status.get("lastError")
    if error:
        lines.append(f"Pool {name} last error: {error.get('reason')}: {error.get('message')}")
    shortfalls = int(status.get("consecutiveShortfalls") or 0)
    events = [
        e
        for e in kube.list(
            CORE_EVENTS, field_selector=f"involvedObject.name={name},reason=CapacityShortfall"
        ).items
        if (e.get("involvedObject") or {}).get("kind") == c.GNP_KIND
    ]
    if shortfalls or events:
        total = sum(int(e.get("count") or 1) for e in events)
        last = events[-1].get("message") if events else ""
        lines.append(
            f"Capacity shortfalls so far: {shortfalls} in a row"
            + (f", {total} recorded as events; last: {last}" if events else "")
            + ". Nothing is running while short ($0); the whole gang is retried."
        )
    else:
        lines.append("Capacity shortfalls so far: none.")
    return lines


def our_check(kube: Reader, controller_name: str) -> str:
    """The AdmissionCheck that names our controller (the installation's controllerName);
    the chart's default name when none does yet."""
    for ac in kube.list(ADMISSION_CHECKS).items:
        if (ac.get("spec") or {}).get("controllerName") == controller_name:
            return str(ac["metadata"]["name"])
    return CHECK_NAME


def main(job: str, where: Where, check: str | None) -> int:
    namespace, _, name = job.rpartition("/")
    target = connect(where, aws=False)
    try:
        check = check or our_check(target.kube, target.settings.controller_name)
        print(f"{target.header()}; check {check}")
        for line in explain(target.kube, namespace or "default", name, check):
            print(line)
    finally:
        target.kube.close()
    return 0
