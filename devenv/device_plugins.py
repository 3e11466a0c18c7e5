"""The device-plugin DaemonSets of the embedded default, and what they register on Nodes.

On EKS a Node is Ready before a training pod can use it: `nvidia.com/gpu`,
`vpc.amazonaws.com/efa` and `aws.amazon.com/neuron[core]` reach its allocatable only once
the device plugin's DaemonSet pod runs on it and registers with the kubelet, and that pod
runs only where the DaemonSet's tolerations tolerate the Node's taints (every gang node
carries `atomic-gang.k8s.aws/gang=<pool>:NoSchedule`) and its nodeSelector and affinity
match. This module models that, for the node simulator (`nodesim`):

- `daemonset` builds the DaemonSet each upstream install makes, with its upstream
  tolerations, and the gang toleration when asked (as docs/GANG-NODES.md tells users to
  add); `install` creates or replaces them in the apiserver (the environment calls it, so
  `kubectl get ds -n kube-system` and `atomic-gang doctor` see real objects);
- `runs_on` says whether a DaemonSet's pod would run on a Node, by the DaemonSet
  controller's rules (`node_match`, plus the tolerations it adds to every daemon pod);
- `DeviceRegistrar` is what the plugins' pods do: `delay` seconds after a Node turned Ready
  (or after its DaemonSet first could run there, if later), each plugin whose DaemonSet
  exists and runs on the Node adds its resources to the Node's capacity and allocatable.
  Without the DaemonSet, or where it does not tolerate the Node's taints, they stay absent.

What is modelled from whom (each read from the upstream manifests):
- NVIDIA: `nvidia-device-plugin-daemonset` in kube-system (NVIDIA/k8s-device-plugin,
  deployments/static/nvidia-device-plugin.yml), with the tolerations its Helm chart has by
  default (deployments/helm/nvidia-device-plugin/values.yaml: `CriticalAddonsOnly` Exists,
  `nvidia.com/gpu` Exists NoSchedule). The chart's default affinity needs labels Node Feature
  Discovery sets (`feature.node.kubernetes.io/pci-10de.present`), which nothing sets here,
  so the static manifest's no-affinity form is modelled.
- EFA: `aws-efa-k8s-device-plugin-daemonset` in kube-system (aws/eks-charts,
  stable/aws-efa-k8s-device-plugin: `CriticalAddonsOnly` Exists and `tolerations: []`, and
  a required affinity on `node.kubernetes.io/instance-type` in its EFA instance list).
- Neuron: `neuron-device-plugin-daemonset` in kube-system (aws-neuron-sdk,
  src/k8/k8s-neuron-device-plugin.yml: `CriticalAddonsOnly` Exists, `aws.amazon.com/neuron`
  Exists NoSchedule; its affinity on inf/trn instance types).
How many of each a Node has comes from EC2 (`node_shape.accelerators`). A registered
resource stays when the DaemonSet later changes (a NoSchedule taint evicts nothing).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv.node_match import selector_matches, untolerated
from devenv.node_shape import EFA, GPU, NEURON, NEURON_CORE
from provisioner.api import constants as c

log = logging.getLogger(__name__)

__all__ = [
    "DAEMON_TOLERATIONS",
    "EFA_PLUGIN",
    "GANG_TOLERATION",
    "MODELLED",
    "NEURON_PLUGIN",
    "NVIDIA_PLUGIN",
    "DevicePlugin",
    "DeviceRecord",
    "DeviceRegistrar",
    "daemonset",
    "install",
    "runs_on",
]

INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
# What the docs tell users to add to each device plugin that must run on gang nodes: any
# pool's gang taint, NoSchedule.
GANG_TOLERATION: Final = {"key": c.GANG_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
CRITICAL_ADDONS: Final = {"key": "CriticalAddonsOnly", "operator": "Exists"}
# The tolerations the DaemonSet controller adds to every daemon pod (Kubernetes docs,
# concepts/workloads/controllers/daemonset, "Taints and tolerations"); network-unavailable
# only for host-network pods.
DAEMON_TOLERATIONS: Final = tuple(
    {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": effect}
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
    )
)
HOST_NETWORK_TOLERATION: Final = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}

# aws/eks-charts stable/aws-efa-k8s-device-plugin values.yaml, supportedInstanceLabels
# (the EC2 types; its `ml.` SageMaker names are left out).
_EFA_TYPES_TEXT: Final = """
    m5dn.24xlarge m5dn.metal m5n.24xlarge m5n.metal m5zn.12xlarge m5zn.metal
    m6a.48xlarge m6a.metal m6i.32xlarge m6i.metal m6id.32xlarge m6id.metal
    m6idn.32xlarge m6idn.metal m6in.32xlarge m6in.metal m7a.48xlarge m7a.metal-48xl
    m7g.16xlarge m7g.metal m7gd.16xlarge m7i.48xlarge m7i.metal-48xl c5n.9xlarge
    c5n.18xlarge c5n.metal c6a.48xlarge c6a.metal c6gn.16xlarge c6i.32xlarge c6i.metal
    c6id.32xlarge c6id.metal c6in.32xlarge c6in.metal c7a.48xlarge c7a.metal-48xl
    c7g.16xlarge c7g.metal c7gd.16xlarge c7gn.16xlarge c7i.48xlarge c7i.metal-48xl
    r5dn.24xlarge r5dn.metal r5n.24xlarge r5n.metal r6a.48xlarge r6a.metal r6i.32xlarge
    r6i.metal r6idn.32xlarge r6idn.metal r6in.32xlarge r6in.metal r6id.32xlarge
    r6id.metal r7a.48xlarge r7a.metal-48xl r7g.16xlarge r7g.metal r7gd.16xlarge
    r7i.48xlarge r7i.metal-48xl r7iz.32xlarge r7iz.metal-32xl x2idn.32xlarge x2idn.metal
    x2iedn.32xlarge x2iedn.metal x2iezn.12xlarge x2iezn.metal i3en.12xlarge
    i3en.24xlarge i3en.metal i4g.16xlarge i4i.32xlarge i4i.metal im4gn.16xlarge
    dl1.24xlarge dl2q.24xlarge g4dn.8xlarge g4dn.12xlarge g4dn.16xlarge g4dn.metal
    g5.8xlarge g5.12xlarge g5.16xlarge g5.24xlarge g5.48xlarge g6.8xlarge g6.12xlarge
    g6.16xlarge g6.24xlarge g6.48xlarge g6e.8xlarge g6e.12xlarge g6e.16xlarge
    g6e.24xlarge g6e.48xlarge gr6.8xlarge inf1.24xlarge p3dn.24xlarge p4d.24xlarge
    p4de.24xlarge p5.48xlarge p5e.48xlarge p5en.48xlarge trn1.32xlarge trn1n.32xlarge
    trn2.48xlarge vt1.24xlarge hpc6a.48xlarge hpc6id.32xlarge hpc7a.12xlarge
    hpc7a.24xlarge hpc7a.48xlarge hpc7a.96xlarge hpc7g.4xlarge hpc7g.8xlarge
    hpc7g.16xlarge
"""
_EFA_TYPES: Final = tuple(_EFA_TYPES_TEXT.split())
# aws-neuron-sdk k8s-neuron-device-plugin.yml: the Inferentia and Trainium types.
_NEURON_TYPES_TEXT: Final = """
    inf1.xlarge inf1.2xlarge inf1.6xlarge inf1.24xlarge inf2.xlarge inf2.8xlarge
    inf2.24xlarge inf2.48xlarge trn1.2xlarge trn1.32xlarge trn1n.32xlarge trn2.48xlarge
    trn2u.48xlarge
"""
_NEURON_TYPES: Final = tuple(_NEURON_TYPES_TEXT.split())


def _on_types(types: Iterable[str]) -> dict[str, Any]:
    term = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(types)}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [term]}]
            }
        }
    }


@dataclass(frozen=True)
class DevicePlugin:
    """One upstream device plugin: its DaemonSet's name, pod labels, tolerations and
    affinity as installed by default, and the resources it registers."""

    name: str
    namespace: str
    pod_label: str  # the `name` label its selector matches
    image: str
    resources: tuple[str, ...]
    tolerations: tuple[Mapping[str, Any], ...]
    affinity: Mapping[str, Any] | None = None
    host_network: bool = False


NVIDIA_PLUGIN: Final = DevicePlugin(
    name="nvidia-device-plugin-daemonset",
    namespace="kube-system",
    pod_label="nvidia-device-plugin-ds",
    image="nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
    resources=(GPU,),
    tolerations=(
        CRITICAL_ADDONS,
        {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
    ),
)
EFA_PLUGIN: Final = DevicePlugin(
    name="aws-efa-k8s-device-plugin-daemonset",
    namespace="kube-system",
    pod_label="aws-efa-k8s-device-plugin",
    image="602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.8",
    resources=(EFA,),
    tolerations=(CRITICAL_ADDONS,),
    affinity=_on_types(_EFA_TYPES),
    host_network=True,
)
NEURON_PLUGIN: Final = DevicePlugin(
    name="neuron-device-plugin-daemonset",
    namespace="kube-system",
    pod_label="neuron-device-plugin-ds",
    image="public.ecr.aws/neuron/neuron-device-plugin:2.22.4.0",
    resources=(NEURON, NEURON_CORE),
    tolerations=(
        CRITICAL_ADDONS,
        {"key": NEURON, "operator": "Exists", "effect": "NoSchedule"},
    ),
    affinity=_on_types(_NEURON_TYPES),
)
MODELLED: Final = (NVIDIA_PLUGIN, EFA_PLUGIN, NEURON_PLUGIN)


def daemonset(plugin: DevicePlugin, *, gang_toleration: bool) -> dict[str, Any]:
    """The plugin's DaemonSet as its upstream install makes it; with `gang_toleration`,
    patched as docs/GANG-NODES.md says, so it runs on gang nodes too."""
    tolerations = [dict(t) for t in plugin.tolerations]
    if gang_toleration:
        tolerations.append(dict(GANG_TOLERATION))
    spec: dict[str, Any] = {
        "tolerations": tolerations,
        "priorityClassName": "system-node-critical",
        "containers": [{"name": plugin.pod_label, "image": plugin.image}],
    }
    if plugin.affinity is not None:
        spec["affinity"] = dict(plugin.affinity)
    if plugin.host_network:
        spec["hostNetwork"] = True
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": plugin.name, "namespace": plugin.namespace},
        "spec": {
            "selector": {"matchLabels": {"name": plugin.pod_label}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {"name": plugin.pod_label}}, "spec": spec},
        },
    }


def install(
    apps: k8s.AppsV1Api,
    *,
    without_gang_toleration: Iterable[str] = (),
    plugins: Iterable[DevicePlugin] = MODELLED,
) -> None:
    """Create or replace each plugin's DaemonSet; those named in `without_gang_toleration`
    as upstream ships them (so they never run on gang nodes)."""
    bare = set(without_gang_toleration)
    for plugin in plugins:
        body = daemonset(plugin, gang_toleration=plugin.name not in bare)
        try:
            apps.create_namespaced_daemon_set(plugin.namespace, body)
        except ApiException as err:
            if err.status != 409:
                raise
            apps.replace_namespaced_daemon_set(plugin.name, plugin.namespace, body)


def runs_on(ds: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether the DaemonSet controller runs `ds`'s pod on `node`: its template's
    tolerations (with the ones the controller adds) tolerate every NoSchedule/NoExecute
    taint, and its nodeSelector and required node affinity match the Node's labels."""
    pod = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    tolerations = [*(pod.get("tolerations") or []), *DAEMON_TOLERATIONS]
    if pod.get("hostNetwork"):
        tolerations.append(HOST_NETWORK_TOLERATION)
    labels = (node.get("metadata") or {}).get("labels") or {}
    if untolerated(tolerations, (node.get("spec") or {}).get("taints") or []):
        return False
    return selector_matches(pod, labels)


@dataclass(frozen=True)
class DeviceRecord:
    """When a Node went Ready and when each extended resource was registered on it (the
    registrar's clock): the Ready-to-usable wait the demo prints."""

    ready: float
    hardware: Mapping[str, str]
    registered: Mapping[str, float]


@dataclass
class _Pending:
    ready: float
    hardware: dict[str, str]
    registered: dict[str, float] = field(default_factory=dict)
    # Since when each plugin's DaemonSet could run on the Node (its pod starting).
    eligible: dict[str, float] = field(default_factory=dict)
    checked: float | None = None


@dataclass
class DeviceRegistrar:
    """Registers each Node's extended resources as its device plugins would.

    The node simulator calls `node_ready` when it registers a Node, `node_gone` when it
    deletes one, and `run_once` on every pass (`pending` says whether a pass has anything
    to do). A Node is looked at (its taints and labels, and the DaemonSets) when it is
    first seen and every `recheck_seconds` after, until every resource is registered.
    """

    core: k8s.CoreV1Api
    apps: k8s.AppsV1Api
    delay: float = 3.0
    clock: Any = time.monotonic
    plugins: tuple[DevicePlugin, ...] = MODELLED
    recheck_seconds: float = 1.0
    _nodes: dict[str, _Pending] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def node_ready(self, name: str, hardware: Mapping[str, str], at: float) -> None:
        with self._lock:
            self._nodes[name] = _Pending(ready=at, hardware=dict(hardware))

    def node_gone(self, name: str) -> None:
        with self._lock:
            self._nodes.pop(name, None)

    def records(self) -> dict[str, DeviceRecord]:
        with self._lock:
            return {
                name: DeviceRecord(p.ready, dict(p.hardware), dict(p.registered))
                for name, p in self._nodes.items()
            }

    def pending(self) -> bool:
        with self._lock:
            return any(set(p.hardware) - set(p.registered) for p in self._nodes.values())

    def run_once(self) -> None:
        now = self.clock()
        with self._lock:
            waiting = {
                name: p for name, p in self._nodes.items() if set(p.hardware) - set(p.registered)
            }
        daemonsets: dict[str, dict[str, Any] | None] | None = None
        for name, node in waiting.items():
            if node.checked is None or now - node.checked >= self.recheck_seconds:
                if daemonsets is None:
                    daemonsets = self._daemonsets()
                if not self._check(name, node, daemonsets, now):
                    continue
            self._register_due(name, node, now)

    def _plugins_for(self, node: _Pending) -> list[DevicePlugin]:
        return [
            p
            for p in self.plugins
            if any(r in node.hardware and r not in node.registered for r in p.resources)
        ]

    def _check(
        self, name: str, node: _Pending, daemonsets: Mapping[str, dict[str, Any] | None], now: float
    ) -> bool:
        """Which plugins could run on the Node now; False when the Node is gone."""
        try:
            raw = self.core.read_node(name, _preload_content=False)
        except ApiException as err:
            if err.status == 404:
                self.node_gone(name)
                return False
            raise
        seen = json.loads(raw.data)
        # The first look follows Ready within a pass: a DaemonSet's pod is placed on a Node
        # the moment it registers, so its wait counts from Ready; a DaemonSet that could
        # only run there later (patched meanwhile) counts from when it was seen able to.
        start = node.ready if node.checked is None else now
        node.checked = now
        for plugin in self._plugins_for(node):
            ds = daemonsets.get(plugin.name)
            if ds is not None and runs_on(ds, seen):
                node.eligible.setdefault(plugin.name, start)
            else:
                node.eligible.pop(plugin.name, None)
        return True

    def _register_due(self, name: str, node: _Pending, now: float) -> None:
        found: dict[str, str] = {}
        for plugin in self._plugins_for(node):
            since = node.eligible.get(plugin.name)
            if since is not None and now - since >= self.delay:
                found.update({r: node.hardware[r] for r in plugin.resources if r in node.hardware})
        if not found:
            return
        try:
            self.core.patch_node_status(name, {"status": {"capacity": found, "allocatable": found}})
        except ApiException as err:
            if err.status != 404:
                raise
            self.node_gone(name)
            return
        with self._lock:
            for resource in found:
                node.registered[resource] = now
        log.info("node %s: device plugins registered %s", name, found)

    def _daemonsets(self) -> dict[str, dict[str, Any] | None]:
        found: dict[str, dict[str, Any] | None] = {}
        for plugin in self.plugins:
            try:
                raw = self.apps.read_namespaced_daemon_set(
                    plugin.name, plugin.namespace, _preload_content=False
                )
            except ApiException as err:
                if err.status != 404:
                    raise
                found[plugin.name] = None
                continue
            found[plugin.name] = json.loads(raw.data)
        return found
