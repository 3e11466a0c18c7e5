"""`atomic-gang doctor`'s Kubernetes links, in the order a Job's path depends on them.

Called by `doctor.Doctor`, first. The LocalQueue exists; its ClusterQueue lists our
AdmissionCheck for every flavor (no `onFlavors`); it covers every resource a pending
Workload in the queue requests (a GPU Job is never admitted by a queue without
`nvidia.com/gpu`); the AdmissionCheck exists, names our controller and is Active; the
leader Lease was renewed within twice its duration. Each check says pass, or fails with
the fix. `requested_resources` is explain's too. A pending Workload is named with the
object it was made for (its controller owner: the Job, JobSet, PyTorchJob or TrainJob the
user submitted), since that is the name the user knows. It only reads, through
`provisioner.kube`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from provisioner.api import constants as c
from provisioner.api import kueue_objects as ko
from provisioner.api.settings import Settings
from provisioner.commands.checks import Check, Failed
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import ADMISSION_CHECKS, LEASES, WORKLOADS, ResourceRef

__all__ = [
    "CLUSTER_QUEUES",
    "LOCAL_QUEUES",
    "KubeLinks",
    "Reader",
    "requested_resources",
    "workload_and_owner",
]

LOCAL_QUEUES = ResourceRef(c.KUEUE_GROUP, c.KUEUE_VERSION, "localqueues", True, "LocalQueue")
CLUSTER_QUEUES = ResourceRef(c.KUEUE_GROUP, c.KUEUE_VERSION, "clusterqueues", False, "ClusterQueue")


class Reader(Protocol):
    """The reads doctor makes; `KubeClient` is one."""

    def get(
        self, ref: ResourceRef, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    def list(self, ref: ResourceRef, *, namespace: str | None = None) -> Any: ...


def requested_resources(workload: Mapping[str, Any]) -> dict[str, set[str]]:
    """Resource names a Workload's pod sets request (requests or limits: an extended
    resource such as a GPU is often given as a limit only), with the pod sets asking."""
    found: dict[str, set[str]] = {}
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        pod = ((pod_set.get("template") or {}).get("spec")) or {}
        for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
            resources = container.get("resources") or {}
            for section in ("requests", "limits"):
                for name in resources.get(section) or {}:
                    found.setdefault(str(name), set()).add(str(pod_set.get("name", "main")))
    return found


def workload_and_owner(workload: Mapping[str, Any]) -> str:
    """ "job-train-1a2b3 (Job train)": a Workload's name and the object Kueue made it for."""
    meta = workload.get("metadata") or {}
    owner = next(
        (o for o in meta.get("ownerReferences") or [] if o.get("controller")),
        None,
    )
    name = str(meta.get("name", ""))
    return f"{name} ({owner.get('kind')} {owner.get('name')})" if owner else name


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {x["type"]: x for x in (obj.get("status") or {}).get("conditions") or []}


@dataclass
class KubeLinks:
    """The queue's links to our check, and the leader Lease, read from ``kube``."""

    kube: Reader
    settings: Settings
    queue: str = f"default/{ko.QUEUE_NAME}"
    check: str = ko.CHECK_NAME
    now: Callable[[], datetime] = lambda: datetime.now(UTC)

    def checks(self) -> list[Check]:
        return self.queue_checks() + self.controller_checks()

    def queue_checks(self) -> list[Check]:
        """The links of `queue` (doctor runs them once per LocalQueue it checks)."""
        return [
            ("LocalQueue", self.local_queue),
            ("ClusterQueue lists our check", self.cluster_queue),
            ("ClusterQueue covers pending requests", self.covered_resources),
        ]

    def controller_checks(self) -> list[Check]:
        """The links every queue shares: our AdmissionCheck and the leader Lease."""
        return [
            ("AdmissionCheck", self.admission_check),
            ("leader Lease", self.lease),
        ]

    def _queue_ref(self) -> tuple[str, str]:
        namespace, _, name = self.queue.rpartition("/")
        return namespace or "default", name

    def _local_queue(self) -> dict[str, Any]:
        namespace, name = self._queue_ref()
        try:
            return self.kube.get(LOCAL_QUEUES, name, namespace=namespace)
        except KubeNotFound as err:
            raise Failed(
                f"LocalQueue {namespace}/{name} does not exist",
                f"create it (the chart's kueue.create.localQueues with {namespace} in "
                f"kueue.localQueueNamespaces), or pass --queue NAMESPACE/NAME of the queue "
                "your Jobs name in kueue.x-k8s.io/queue-name",
            ) from err

    def local_queue(self) -> str:
        lq = self._local_queue()
        return f"{self.queue} -> ClusterQueue {lq['spec'].get('clusterQueue')}"

    def _our_checks(self, cq: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The queue's entries for our check (by name, or by our controllerName)."""
        spec = cq.get("spec") or {}
        listed = [
            dict(x)
            for x in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        ]
        ours = []
        for entry in listed:
            if entry["name"] == self.check:
                ours.append(entry)
                continue
            try:
                ac = self.kube.get(ADMISSION_CHECKS, entry["name"])
            except KubeNotFound:
                continue
            if (ac.get("spec") or {}).get("controllerName") == self.settings.controller_name:
                ours.append(entry)
        return ours

    def cluster_queue(self) -> str:
        lq = self._local_queue()
        name = lq["spec"].get("clusterQueue", "")
        try:
            cq = self.kube.get(CLUSTER_QUEUES, name)
        except KubeNotFound as err:
            raise Failed(
                f"ClusterQueue {name} (named by {self.queue}) does not exist",
                f"create ClusterQueue {name} or point the LocalQueue at one that exists",
            ) from err
        ours = self._our_checks(cq)
        if not ours:
            raise Failed(
                f"ClusterQueue {name} lists no AdmissionCheck of {self.settings.controller_name}",
                f"add spec.admissionChecksStrategy.admissionChecks: [{{name: "
                f"{self.check}}}] to ClusterQueue {name}",
            )
        scoped = [x for x in ours if x.get("onFlavors")]
        if scoped:
            raise Failed(
                f"ClusterQueue {name} limits {scoped[0]['name']} to flavors "
                f"{scoped[0]['onFlavors']}; Kueue then skips the check for other flavors",
                f"remove onFlavors from {scoped[0]['name']} in ClusterQueue {name}",
            )
        return f"{name} lists {ours[0]['name']} for every flavor"

    def covered_resources(self) -> str:
        """Every resource a pending Workload of the queue requests is covered by its
        ClusterQueue: Kueue never reserves quota for an uncovered one, so the gang never
        even reaches our check."""
        namespace, queue = self._queue_ref()
        name = self._local_queue()["spec"].get("clusterQueue", "")
        cq = self.kube.get(CLUSTER_QUEUES, name)
        covered = {
            str(r)
            for group in (cq.get("spec") or {}).get("resourceGroups") or []
            for r in group.get("coveredResources") or []
        }
        pending = [
            wl
            for wl in self.kube.list(WORKLOADS, namespace=namespace).items
            if (wl.get("spec") or {}).get("queueName") == queue
            and _conditions(wl).get(c.WL_QUOTA_RESERVED, {}).get("status") != "True"
            and _conditions(wl).get(c.WL_FINISHED, {}).get("status") != "True"
        ]
        missing: dict[str, list[str]] = {}
        for wl in pending:
            for resource in requested_resources(wl):
                if resource not in covered:
                    missing.setdefault(resource, []).append(workload_and_owner(wl))
        if missing:
            names = sorted(missing)
            who = "; ".join(f"{r} by {', '.join(sorted(missing[r]))}" for r in names)
            raise Failed(
                f"ClusterQueue {name} (of LocalQueue {namespace}/{queue}) does not cover "
                f"{', '.join(names)}, requested by pending Workloads in {namespace} ({who}); "
                "Kueue will never admit them",
                f"add {', '.join(names)} to a resourceGroup's coveredResources of ClusterQueue "
                f"{name} with a nominalQuota (the chart's kueue.clusterQueue.acceleratorQuota "
                "and the bootstrap's gpuQuota/efaQuota cover nvidia.com/gpu and "
                "vpc.amazonaws.com/efa by default)",
            )
        return (
            f"{name} covers every resource requested by {len(pending)} pending Workload(s) "
            f"of {self.queue}"
        )

    def admission_check(self) -> str:
        name = self.check
        try:
            ac = self.kube.get(ADMISSION_CHECKS, name)
        except KubeNotFound as err:
            raise Failed(
                f"AdmissionCheck {name} does not exist",
                f"create AdmissionCheck {name} with spec.controllerName "
                f"{self.settings.controller_name} (the chart's kueue.create.admissionCheck)",
            ) from err
        controller = (ac.get("spec") or {}).get("controllerName")
        if controller != self.settings.controller_name:
            raise Failed(
                f"AdmissionCheck {name} names controller {controller}",
                f"set its spec.controllerName to {self.settings.controller_name} (delete and "
                "recreate it: the field is immutable)",
            )
        active = next(
            (
                x
                for x in (ac.get("status") or {}).get("conditions") or []
                if x.get("type") == "Active"
            ),
            None,
        )
        if not active or active.get("status") != "True":
            why = active.get("message") if active else "no Active condition"
            raise Failed(
                f"AdmissionCheck {name} is not Active ({why})",
                "start the controller (kubectl -n <namespace> get pods, logs of "
                "atomic-gang-provisioner); it marks the check Active when it runs",
            )
        return f"{name}: controller {controller}, Active"

    def lease(self) -> str:
        election = self.settings.leader_election
        where = f"{election.lease_namespace}/{election.lease_name}"
        if not election.enabled:
            return f"leader election disabled; no Lease to check ({where})"
        try:
            lease = self.kube.get(LEASES, election.lease_name, namespace=election.lease_namespace)
        except KubeNotFound as err:
            raise Failed(
                f"Lease {where} does not exist: no replica has ever led",
                "start the controller, and check its RBAC on coordination.k8s.io leases in "
                f"{election.lease_namespace}",
            ) from err
        spec = lease.get("spec") or {}
        duration = float(spec.get("leaseDurationSeconds") or 0)
        renewed = _parse_time(spec.get("renewTime"))
        if renewed is None:
            raise Failed(f"Lease {where} was never renewed", "start the controller")
        age = (self.now() - renewed).total_seconds()
        if age > 2 * duration:
            raise Failed(
                f"Lease {where} (holder {spec.get('holderIdentity')}) was last renewed "
                f"{age:.0f}s ago, more than twice its {duration:.0f}s duration",
                "no replica is leading: check the controller pods are running and can "
                "reach the apiserver (their logs name the failure)",
            )
        return f"{where} held by {spec.get('holderIdentity')}, renewed {age:.0f}s ago"


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
