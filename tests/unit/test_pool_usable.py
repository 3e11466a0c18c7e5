"""Usable, not only Ready: which Ready gang nodes can run one gang pod (a table of Nodes),
how the plan counts them (a table of passes), and what the join deadline's release says.

A node is usable when no configured startup taint remains and its allocatable holds what
one gang pod requests. GPUs and EFA interfaces reach the allocatable only once their device
plugins (DaemonSets) register, after the kubelet reports Ready.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.api.gangnodepool import UnusableNode
from provisioner.api.nodes import Node
from provisioner.api.settings import StartupTaint
from provisioner.controllers.pool.plan import plan
from provisioner.controllers.pool.steps import Action, PoolView
from provisioner.controllers.pool.usable import deadline_message, missing
from tests.support.pool_views import IDS, LIVE, NOW, active, view

pytestmark = pytest.mark.unit

GIB = 2**30
# One pod of a p4d gang: 8 GPUs, 4 EFA interfaces, 90 cpu, 1000 GiB.
REQUESTS = {"cpu": 90_000, "memory": 1000 * GIB, "nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 4}
BASE = {"cpu": "95690m", "memory": "1143Gi", "pods": "737"}
DEVICES = {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "4"}
CILIUM = StartupTaint(key="node.cilium.io/agent-not-ready", effect="NoExecute")
GANG_TAINT = {"key": c.GANG_TAINT_KEY, "value": "pool-a", "effect": "NoSchedule"}


def node(
    allocatable: dict[str, str], taints: tuple[dict[str, Any], ...] = (), name: str = "n-0"
) -> Node:
    return Node.model_validate(
        {
            "metadata": {"name": name},
            "spec": {"providerID": f"aws:///us-east-1a/{IDS[0]}", "taints": [*taints]},
            "status": {
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


@pytest.mark.parametrize(
    ("given", "startup", "lacks"),
    [
        pytest.param(node({**BASE, **DEVICES}, (GANG_TAINT,)), (CILIUM,), (),
                     id="devices-registered-and-only-the-gang-taint: usable"),
        pytest.param(node(BASE), (), ("nvidia.com/gpu: 0 of 8 allocatable",
                                      "vpc.amazonaws.com/efa: 0 of 4 allocatable"),
                     id="ready-before-the-device-plugins-register"),
        pytest.param(node({**BASE, "nvidia.com/gpu": "8"}), (),
                     ("vpc.amazonaws.com/efa: 0 of 4 allocatable",),
                     id="gpus-registered-efa-not-yet"),
        pytest.param(node({**BASE, **DEVICES, "nvidia.com/gpu": "7"}), (),
                     ("nvidia.com/gpu: 7 of 8 allocatable",), id="a-gpu-short"),
        pytest.param(node({**BASE, **DEVICES, "memory": "900Gi"}), (),
                     ("memory: 900Gi of 1000Gi allocatable",), id="memory-short"),
        pytest.param(node({**BASE, **DEVICES}, ({**CILIUM.model_dump(), "value": "x"},)),
                     (CILIUM,), ("taint node.cilium.io/agent-not-ready=x:NoExecute",),
                     id="a-startup-taint-remains"),
        pytest.param(node({**BASE, **DEVICES}, ({**CILIUM.model_dump(), "effect": "NoSchedule"},)),
                     (CILIUM,), (), id="same-key-other-effect-is-not-the-startup-taint"),
        pytest.param(node({**BASE, **DEVICES},
                          ({"key": "example.com/setup", "value": "done", "effect": "NoSchedule"},)),
                     (StartupTaint(key="example.com/setup", value="pending"),), (),
                     id="a-startup-taint-with-a-value-matches-only-that-value"),
        pytest.param(node({**BASE, **DEVICES, "nvidia.com/gpu": "eight"}), (),
                     ("nvidia.com/gpu: 0 of 8 allocatable",), id="garbage-counts-as-absent"),
    ],
)  # fmt: skip
def test_what_a_ready_node_lacks(
    given: Node, startup: tuple[StartupTaint, ...], lacks: tuple[str, ...]
) -> None:
    assert missing(given, REQUESTS, startup) == lacks


def test_a_pool_without_pod_requests_asks_only_for_no_startup_taint() -> None:
    assert missing(node({}), {}, ()) == ()


LACKING_GPUS = UnusableNode(
    node="n-3", instance_id=IDS[3], missing=("nvidia.com/gpu: 0 of 8 allocatable",)
)


def joining(**kw: Any) -> PoolView:
    """Four nodes Ready, the fourth without its GPUs; the join deadline `kw` sets."""
    given = view(phase=Phase.JOINING, status=active(**kw), live=LIVE, ready=frozenset(IDS))
    return replace(given, unusable=(LACKING_GPUS,))


def test_a_ready_node_that_is_not_usable_is_not_counted() -> None:
    step = plan(joining(joinDeadline=(NOW + timedelta(minutes=5)).isoformat()))
    assert step.action is Action.NONE
    assert step.status.phase == Phase.JOINING
    assert step.status.ready_nodes == 3
    assert step.status.unusable_nodes == (LACKING_GPUS,)


def test_the_set_is_satisfied_once_every_node_is_usable() -> None:
    given = replace(joining(joinDeadline=(NOW + timedelta(minutes=5)).isoformat()), unusable=())
    step = plan(given)
    assert step.status.phase == Phase.SATISFIED
    assert step.status.ready_nodes == 4
    assert step.status.unusable_nodes is None


def test_a_satisfied_sets_nodes_stay_counted_while_a_device_plugin_restarts() -> None:
    given = replace(
        view(phase=Phase.SATISFIED, status=active(), live=LIVE, ready=frozenset(IDS)),
        unusable=(LACKING_GPUS,),
    )
    step = plan(given)
    assert step.status.phase == Phase.SATISFIED
    assert step.status.ready_nodes == 4
    assert step.status.unusable_nodes is None


def test_a_warm_set_is_usable_for_its_new_claimant_before_it_is_satisfied() -> None:
    warm = view(
        phase=Phase.KEEP_WARM,
        status=active(keepWarmUntil=(NOW + timedelta(minutes=5)).isoformat(), readyNodes=4),
        live=LIVE,
        ready=frozenset(IDS),
    )
    step = plan(replace(warm, unusable=(LACKING_GPUS,)))
    assert step.status.phase == Phase.JOINING
    assert step.status.ready_nodes == 3
    assert step.status.unusable_nodes == (LACKING_GPUS,)


def test_the_join_deadline_covers_the_wait_for_usable_and_names_the_daemonset() -> None:
    step = plan(joining(joinDeadline=(NOW - timedelta(seconds=1)).isoformat()))
    assert step.action is Action.RELEASE_SET
    (event,) = step.events
    assert event.reason == c.EventReason.JOIN_DEADLINE_EXCEEDED
    for phrase in (
        "Only 3/4 nodes",
        "n-3",
        "nvidia.com/gpu: 0 of 8 allocatable",
        "NVIDIA device plugin DaemonSet",
        f"tolerate the gang taint {c.GANG_TAINT_KEY}=pool-a:NoSchedule",
    ):
        assert phrase in event.message
    assert step.status.last_error is not None
    assert step.status.last_error.message == event.message


def test_a_deadline_without_unusable_nodes_keeps_no_error() -> None:
    given = view(
        phase=Phase.JOINING,
        status=active(joinDeadline=(NOW - timedelta(seconds=1)).isoformat()),
        live=LIVE,
        ready=frozenset(IDS[:2]),
    )
    step = plan(given)
    assert step.action is Action.RELEASE_SET
    assert "Only 2/4 nodes" in step.events[0].message
    assert step.status.last_error is None


@pytest.mark.parametrize(
    ("lacks", "names"),
    [
        ("nvidia.com/gpu: 0 of 8 allocatable", "NVIDIA device plugin DaemonSet"),
        ("vpc.amazonaws.com/efa: 0 of 4 allocatable", "aws-efa-k8s-device-plugin"),
        ("aws.amazon.com/neuroncore: 0 of 32 allocatable", "Neuron device plugin DaemonSet"),
        ("example.com/fpga: 0 of 1 allocatable", "whatever registers example.com/fpga"),
        ("taint node.cilium.io/agent-not-ready:NoExecute", "whatever removes it"),
    ],
)
def test_the_deadline_message_names_what_provides_the_missing(lacks: str, names: str) -> None:
    unusable = (UnusableNode(node="n-1", instance_id=IDS[1], missing=(lacks,)),)
    message = deadline_message("pool-a", 3, 4, "10m0s", unusable)
    assert lacks in message and names in message
    assert f"{c.GANG_TAINT_KEY}=pool-a:NoSchedule" in message
