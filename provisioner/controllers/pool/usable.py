"""Whether a Ready gang node can run one of its gang's pods, and what to say when it cannot.

A node counts toward its gang only when it is usable, as Karpenter counts a node only once
it is Initialized: Ready, no startup taint left (`Settings.startup_taints`), and its
allocatable holding what one gang pod requests (`GangNodePoolSpec.pod_requests`, the
largest request of any pod of the gang). GPUs, Neuron devices and EFA interfaces reach a
Node's allocatable only once their device plugin (a DaemonSet) runs on it and registers,
after the kubelet reports Ready; a DaemonSet that does not tolerate the gang taint never
runs there, and the node never becomes usable.

Pure: the GangNodePool reconciler calls `missing` for each Ready node of the active set
(`_ready_nodes`), and the pool plan words the join deadline's release with
`deadline_message`. Table-driven tests: tests/unit/test_pool_usable.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from provisioner.api import constants as c
from provisioner.api.gangnodepool import GangNodePoolSpec, UnusableNode
from provisioner.api.nodes import Node, Taint
from provisioner.api.pod_fit import EFA, NEURON, NEURON_CORE, NVIDIA_GPU
from provisioner.api.pod_requests import QuantityError, format_amount, scheduler_units
from provisioner.api.settings import StartupTaint

__all__ = ["deadline_message", "missing", "pod_requests_of", "registered_by"]

# What registers an extended resource on a node, for the message that names the fix.
_REGISTERED_BY: Final = {
    NVIDIA_GPU: "the NVIDIA device plugin DaemonSet (nvidia-device-plugin-daemonset, or the "
    "GPU operator's)",
    EFA: "the EFA device plugin DaemonSet (aws-efa-k8s-device-plugin)",
    NEURON: "the Neuron device plugin DaemonSet (neuron-device-plugin)",
    NEURON_CORE: "the Neuron device plugin DaemonSet (neuron-device-plugin)",
}
_STARTUP_TAINT: Final = "taint "


def registered_by(resource: str) -> str | None:
    """The DaemonSet that registers `resource` on a node, for the ones we know."""
    if resource in _REGISTERED_BY:
        return _REGISTERED_BY[resource]
    if resource.startswith("aws.amazon.com/neuron"):
        return _REGISTERED_BY[NEURON]
    return None


def pod_requests_of(spec: GangNodePoolSpec) -> dict[str, int]:
    """The spec's pod requests in scheduler units; a quantity that does not parse (the
    Workload reconciler writes only ones that do) asks nothing."""
    out: dict[str, int] = {}
    for resource, raw in (spec.pod_requests or {}).items():
        try:
            out[resource] = scheduler_units(resource, raw)
        except QuantityError:
            continue
    return out


def _matches(taint: Taint, startup: StartupTaint) -> bool:
    return (
        taint.key == startup.key
        and taint.effect == startup.effect
        and (startup.value is None or taint.value == startup.value)
    )


def _allocatable(node: Node, resource: str) -> int:
    raw = (node.status.allocatable or {}).get(resource)
    if raw is None:
        return 0
    try:
        return scheduler_units(resource, raw)
    except QuantityError:
        return 0  # a kubelet never reports one; count it as absent rather than fail the pass


def missing(
    node: Node, requests: Mapping[str, int], startup_taints: Sequence[StartupTaint]
) -> tuple[str, ...]:
    """What keeps a Ready node from running one gang pod, one phrase each; empty when it is
    usable. `requests` is in scheduler units (`api.pod_requests`)."""
    out = [
        f"{_STARTUP_TAINT}{t.key}{'=' + t.value if t.value else ''}:{t.effect}"
        for t in node.spec.taints or ()
        if any(_matches(t, s) for s in startup_taints)
    ]
    for resource, wanted in sorted(requests.items()):
        has = _allocatable(node, resource)
        if has < wanted:
            out.append(
                f"{resource}: {format_amount(resource, has)} of "
                f"{format_amount(resource, wanted)} allocatable"
            )
    return tuple(out)


def _fix(pool: str, what: str) -> str:
    taint = f"{c.GANG_TAINT_KEY}={pool}:NoSchedule"
    if what.startswith(_STARTUP_TAINT):
        return (
            f"{what} was never removed: whatever removes it (the agent that set it up) must "
            f"run on gang nodes, so it must tolerate the gang taint {taint}"
        )
    resource = what.split(":", 1)[0]
    plugin = registered_by(resource)
    if plugin is None:
        return (
            f"{what}: whatever registers {resource} on a node (its device plugin) must run on "
            f"gang nodes and tolerate the gang taint {taint}"
        )
    return f"{what}: {plugin} registers it, and must tolerate the gang taint {taint}"


def deadline_message(
    pool: str, ready: int, n: int, deadline: str, unusable: Sequence[UnusableNode]
) -> str:
    """The join deadline's release message: how many nodes were usable and, when Ready
    nodes were not, what each lacked and which DaemonSet provides it."""
    head = (
        f"Only {ready}/{n} nodes joined, turned Ready and became usable within {deadline}; "
        "releasing the set and acquiring a new one."
    )
    if not unusable:
        return head
    lacking = list(dict.fromkeys(what for node in unusable for what in node.missing))
    nodes = ", ".join(node.node for node in unusable)
    fixes = "; ".join(_fix(pool, what) for what in lacking)
    return f"{head} Ready but not usable: {nodes}. Missing {fixes}."
