"""Places and runs gang Pods, standing in for kube-scheduler and the kubelet.

Started by `LocalEnvironment` beside the Job simulator. No scheduler or kubelet runs here
(`controlplane.py`), so a Pod made by a real controller (the training operator's for a
PyTorchJob) or by the Job simulator (for a Job, a JobSet's child Jobs, a TrainJob's JobSet)
would stay Pending forever. This simulator does, for Pods whose nodeSelector names a pool
(the `atomic-gang.k8s.aws/pool` key), what those two would:

- the scheduler's part: bind the Pod (the `pods/binding` subresource, as the scheduler
  binds) to a Node that is Ready and schedulable, whose labels match the Pod's nodeSelector
  and required node affinity, whose NoSchedule/NoExecute taints the Pod tolerates, whose
  allocatable holds the Pod's requests, and that runs no other gang Pod: one gang Pod per
  Node. A Pod with scheduling gates waits until they are removed. Nothing is bound when no
  Node fits: the Pod stays Pending, unbound, as it would under the scheduler.
- the kubelet's part: a Pod bound to a pool Node goes Running (its containers started and
  Ready), then Succeeded `run_seconds` later (every container exited 0); a Pod being deleted
  with a node name is removed (the kubelet's confirmation, a zero-grace delete).

What it never does: choose which Pods run or where beyond those rules (among fitting Nodes
it takes them in name order, which no rule of the product relies on), fail a Pod, or collect
Pods whose Node is gone (no pod garbage collector runs here: such a Pod stays as it was).
Pods without a pool nodeSelector are left alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from devenv.node_match import selector_matches, untolerated
from devenv.simulator_loop import SimulatorLoop
from provisioner.api import constants as c
from provisioner.kube.client import KubeClient
from provisioner.kube.informer import Informer
from provisioner.kube.resources import NODES, ResourceRef

log = logging.getLogger("atomic-gang.podsim")

PODS = ResourceRef("", "v1", "pods", True, "Pod")
_TERMINAL = ("Succeeded", "Failed")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_gang_pod(pod: Mapping[str, Any]) -> bool:
    """A Pod whose nodeSelector names a pool: the Pods this simulator places and runs."""
    return c.POOL_LABEL in ((pod.get("spec") or {}).get("nodeSelector") or {})


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions)


def pod_requests(spec: Mapping[str, Any]) -> dict[str, float]:
    """The Pod's effective requests: the sum over its containers, or the largest init
    container's request where that is larger (the scheduler's rule)."""
    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, 0.0) + float(parse_quantity(value))
    for container in spec.get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, 0.0), float(parse_quantity(value)))
    return total


def fits(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether the scheduler could bind `pod` to `node`, one gang Pod per Node aside."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    node_spec = node.get("spec") or {}
    if not _ready(node) or node_spec.get("unschedulable"):
        return False
    if not selector_matches(spec, labels):
        return False
    if untolerated(spec.get("tolerations") or [], node_spec.get("taints") or []):
        return False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    for name, wanted in pod_requests(spec).items():
        if wanted > 0 and float(parse_quantity(allocatable.get(name, "0"))) < wanted:
            return False
    return True


def choose_node(
    pod: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]], occupied: set[str]
) -> str | None:
    """The Node a gang Pod is bound to: the first (by name) that fits and has no gang Pod;
    None when none does (the Pod stays Pending)."""
    for node in sorted(nodes, key=lambda n: str(n["metadata"]["name"])):
        name = str(node["metadata"]["name"])
        if name not in occupied and fits(pod, node):
            return name
    return None


@dataclass
class PodSimulator(SimulatorLoop):
    """Binds, starts and finishes gang Pods; reads Pods and pool Nodes from informers."""

    thread_name = "podsim"
    what = "pod simulator"
    logger = log

    _pods: Informer | None = None
    _nodes: Informer | None = None
    # Written here and not yet seen in the cache: a Pod bound (uid -> node), started (uid ->
    # when), finished or removed. Without them a lagging cache would bind a Pod twice or
    # put a second gang Pod on a Node.
    _bound: dict[str, str] = field(default_factory=dict)
    _running_since: dict[str, float] = field(default_factory=dict)
    _done: set[str] = field(default_factory=set)

    def _open_informers(self, kube: KubeClient) -> list[Informer]:
        self._pods = Informer(kube.list_watch(PODS), name="podsim-pods")
        self._nodes = Informer(
            kube.list_watch(NODES, label_selector=c.POOL_LABEL), name="podsim-nodes"
        )
        return [self._pods, self._nodes]

    def run_once(self) -> None:
        assert self._pods is not None and self._nodes is not None
        core = k8s.CoreV1Api(self.api)
        nodes = {n["metadata"]["name"]: n for n in self._nodes.list()}
        pods = [p for p in self._pods.list() if is_gang_pod(p)]
        live = {p["metadata"]["uid"] for p in pods}
        for gone in set(self._bound) - live:
            del self._bound[gone]
        for gone in set(self._running_since) - live:
            del self._running_since[gone]
        self._done &= live
        occupied: set[str] = set()
        unbound: list[dict[str, Any]] = []
        for pod in pods:
            uid, spec = pod["metadata"]["uid"], pod.get("spec") or {}
            node = spec.get("nodeName") or self._bound.get(uid)
            terminal = (pod.get("status") or {}).get("phase") in _TERMINAL
            if node and not terminal and uid not in self._done:
                occupied.add(node)
            elif not node and not pod["metadata"].get("deletionTimestamp"):
                unbound.append(pod)
        with ThreadPoolExecutor(self.write_threads, thread_name_prefix="podsim-write") as writes:
            for pod in sorted(unbound, key=_creation_order):
                if (pod.get("spec") or {}).get("schedulingGates"):
                    continue  # the scheduler leaves a gated Pod alone
                target = choose_node(pod, nodes.values(), occupied)
                if target is None:
                    continue
                occupied.add(target)
                self._bound[pod["metadata"]["uid"]] = target
                writes.submit(self._write, "bind", self._bind, core, pod, target)
            for pod in pods:
                self._kubelet(writes, core, pod, nodes)

    def _kubelet(
        self,
        writes: ThreadPoolExecutor,
        core: k8s.CoreV1Api,
        pod: dict[str, Any],
        nodes: Mapping[str, Any],
    ) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid, node = meta["uid"], spec.get("nodeName")
        if not node or uid in self._done:
            return
        if meta.get("deletionTimestamp"):
            self._done.add(uid)
            writes.submit(self._write, "remove", self._remove, core, pod)
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in _TERMINAL or node not in nodes:
            return  # no kubelet runs a Pod whose Node is gone
        if uid not in self._running_since:
            self._running_since[uid] = time.monotonic()
            if phase != "Running":
                writes.submit(self._write, "start", self._run, core, pod, nodes[node])
        elif time.monotonic() - self._running_since[uid] >= self.run_seconds:
            self._done.add(uid)
            writes.submit(self._write, "finish", self._succeed, core, pod)

    def _write(self, what: str, step: Any, *args: Any) -> None:
        try:
            step(*args)
        except ApiException as err:
            pod = args[1]["metadata"]
            if err.status != 404:  # a Pod deleted meanwhile needs nothing more
                log.warning("pod simulator could not %s %s: %s", what, pod["name"], err.reason)
            uid = pod["uid"]
            self._bound.pop(uid, None)
            self._running_since.pop(uid, None)
            self._done.discard(uid)

    @staticmethod
    def _bind(core: k8s.CoreV1Api, pod: dict[str, Any], node: str) -> None:
        meta = pod["metadata"]
        core.create_namespaced_pod_binding(
            meta["name"],
            meta["namespace"],
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": meta["name"], "uid": meta["uid"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
            _preload_content=False,  # the client cannot decode a Binding's answer
        )

    @staticmethod
    def _run(core: k8s.CoreV1Api, pod: dict[str, Any], node: dict[str, Any]) -> None:
        started = now()
        spec = pod.get("spec") or {}
        addresses = (node.get("status") or {}).get("addresses") or []
        host_ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), None)
        status: dict[str, Any] = {
            "phase": "Running",
            "startTime": started,
            "conditions": [
                _condition(kind, "True", started)
                for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                _container_status(ct, {"running": {"startedAt": started}}, ready=True)
                for ct in spec.get("containers") or []
            ],
        }
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                _container_status(ct, _exited(started, started), ready=False)
                for ct in spec["initContainers"]
            ]
        if host_ip:
            status["hostIP"] = host_ip
            status["hostIPs"] = [{"ip": host_ip}]
        meta = pod["metadata"]
        core.patch_namespaced_pod_status(
            meta["name"], meta["namespace"], {"status": status}, _preload_content=False
        )

    @staticmethod
    def _succeed(core: k8s.CoreV1Api, pod: dict[str, Any]) -> None:
        finished = now()
        status = pod.get("status") or {}
        started = status.get("startTime") or finished
        meta, spec = pod["metadata"], pod.get("spec") or {}
        body = {
            "status": {
                "phase": "Succeeded",
                "conditions": [
                    _condition("PodReadyToStartContainers", "False", finished),
                    _condition("Initialized", "True", started),
                    _condition("ContainersReady", "False", finished, "PodCompleted"),
                    _condition("Ready", "False", finished, "PodCompleted"),
                ],
                "containerStatuses": [
                    _container_status(ct, _exited(started, finished), ready=False)
                    for ct in spec.get("containers") or []
                ],
            }
        }
        core.patch_namespaced_pod_status(
            meta["name"], meta["namespace"], body, _preload_content=False
        )

    @staticmethod
    def _remove(core: k8s.CoreV1Api, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        core.delete_namespaced_pod(
            meta["name"],
            meta["namespace"],
            grace_period_seconds=0,
            body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=meta["uid"])),
            _preload_content=False,
        )


def _creation_order(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod["metadata"]
    return (str(meta.get("creationTimestamp") or ""), str(meta["name"]))


def _condition(kind: str, status: str, when: str, reason: str | None = None) -> dict[str, Any]:
    condition: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": when}
    if reason:
        condition["reason"] = reason
    return condition


def _exited(started: str, finished: str) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": 0,
            "reason": "Completed",
            "startedAt": started,
            "finishedAt": finished,
        }
    }


def _container_status(
    container: Mapping[str, Any], state: dict[str, Any], *, ready: bool
) -> dict[str, Any]:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }
