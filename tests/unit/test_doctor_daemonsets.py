"""doctor's DaemonSet check (`doctor_daemonsets`): every DaemonSet a gang node needs
tolerates the gang taint of every pool, or is named with the `kubectl patch` that fixes it.

The worlds are an EKS cluster's kube-system as its add-ons and the upstream device-plugin
installs make it; each case breaks it one way, and applying the named patch mends it."""

from __future__ import annotations

import copy
import json
import shlex
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.commands.checks import Failed
from provisioner.commands.doctor_daemonsets import (
    GANG_TOLERATION,
    DaemonSetCheck,
    Role,
    findings,
    role_of,
    tolerates_every_pool,
)
from tests.support.fake_kube import FakeKube

EVERYTHING = [{"operator": "Exists"}]
# The NVIDIA chart's default tolerations (NVIDIA/k8s-device-plugin values.yaml).
NVIDIA_CHART = [
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]
# The EFA chart's (aws/eks-charts: CriticalAddonsOnly, then `tolerations: []`).
EFA_CHART = [{"key": "CriticalAddonsOnly", "operator": "Exists"}]


def daemonset(
    name: str,
    tolerations: list[dict[str, Any]] | None,
    namespace: str = "kube-system",
    **meta: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": name, "image": "x"}]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {
        "kind": "DaemonSet",
        "apiVersion": "apps/v1",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": {"template": {"spec": spec}},
    }


def eks() -> list[dict[str, Any]]:
    """A GPU cluster whose every needed DaemonSet tolerates gang nodes, plus one that is
    not needed there."""
    patched = [*NVIDIA_CHART, GANG_TOLERATION]
    return [
        daemonset("aws-node", EVERYTHING),
        daemonset("kube-proxy", EVERYTHING),
        daemonset("eks-pod-identity-agent", EVERYTHING),
        daemonset("ebs-csi-node", EVERYTHING),
        daemonset("nvidia-device-plugin", patched, "nvidia-device-plugin"),
        daemonset("aws-efa-k8s-device-plugin-daemonset", [*EFA_CHART, GANG_TOLERATION]),
        daemonset("fluent-bit", None, "logging"),
        daemonset("aws-node-termination-handler", None),
    ]


def _apply(command: str, objects: list[dict[str, Any]]) -> None:
    """Apply a `kubectl patch ... --type=json -p '...'` of `add` operations, as kubectl
    would, to the object it names."""
    words = shlex.split(command)
    ops = json.loads(words[words.index("-p") + 1])
    name = words[words.index("daemonset") + 1]
    target = next(o for o in objects if o["metadata"]["name"] == name)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = op["path"].strip("/").split("/")
        node = target
        for part in parents:
            node = node[part]
        if last == "-":
            node.append(op["value"])
        else:
            node[last] = op["value"]


def _check(objects: list[dict[str, Any]]) -> str:
    return DaemonSetCheck(FakeKube(*objects)).check()


def test_a_cluster_whose_needed_daemonsets_tolerate_the_gang_taint_passes() -> None:
    line = _check(eks())
    assert "nvidia-device-plugin/nvidia-device-plugin" in line and "aws-node" in line
    assert "fluent-bit" not in line and "termination-handler" not in line


@pytest.mark.parametrize(
    ("case", "broken", "role"),
    [
        (
            "NVIDIA chart defaults",
            daemonset("nvidia-device-plugin-daemonset", NVIDIA_CHART),
            Role.NVIDIA,
        ),
        ("EFA chart defaults", daemonset("aws-efa-k8s-device-plugin", EFA_CHART), Role.EFA),
        (
            "Neuron, named only by its label",
            daemonset("dp", None, labels={"app.kubernetes.io/name": "neuron-device-plugin"}),
            Role.NEURON,
        ),
        # One pool's value only: the next pool's nodes get no plugin.
        (
            "aws-node tolerating one pool",
            daemonset(
                "aws-node",
                [{"key": c.GANG_TAINT_KEY, "operator": "Equal", "value": "pool-a"}],
            ),
            Role.CNI,
        ),
        (
            "kube-proxy tolerating only NoExecute",
            daemonset("kube-proxy", [{"operator": "Exists", "effect": "NoExecute"}]),
            Role.KUBE_PROXY,
        ),
        ("an EFS CSI node plugin", daemonset("efs-csi-node", []), Role.CSI),
    ],
)
def test_a_needed_daemonset_without_the_toleration_is_named_with_the_patch_that_fixes_it(
    case: str, broken: dict[str, Any], role: Role
) -> None:
    world = [o for o in eks() if o["metadata"]["name"] != broken["metadata"]["name"]]
    world.append(broken)
    with pytest.raises(Failed) as failed:
        _check(world)
    where = f"kube-system/{broken['metadata']['name']}"
    assert where in failed.value.detail and role.value in failed.value.detail
    (finding,) = findings(world)
    assert finding.role is role
    assert finding.patch in failed.value.fix
    name = broken["metadata"]["name"]
    assert finding.patch.startswith(f"kubectl -n kube-system patch daemonset {name} ")
    mended = copy.deepcopy(world)
    _apply(finding.patch, mended)
    assert findings(mended) == []
    assert "tolerates the gang taint" in _check(mended)


def test_the_gpu_operators_daemonsets_are_fixed_in_its_cluster_policy() -> None:
    owner = {"kind": "ClusterPolicy", "name": "cluster-policy", "apiVersion": "nvidia.com/v1"}
    driver = daemonset(
        "nvidia-driver-daemonset", NVIDIA_CHART, "gpu-operator", ownerReferences=[owner]
    )
    (finding,) = findings([*eks(), driver])
    assert finding.role is Role.GPU_OPERATOR
    assert finding.patch.startswith("kubectl patch clusterpolicies.nvidia.com cluster-policy ")
    assert "/spec/daemonsets/tolerations/-" in finding.patch


def test_without_any_nvidia_device_plugin_the_line_says_gpu_gangs_need_one() -> None:
    world = [o for o in eks() if "nvidia" not in o["metadata"]["name"]]
    assert "no NVIDIA device plugin or GPU operator found" in _check(world)
    assert "no NVIDIA device plugin" not in _check(eks())


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        ([], False),
        (EVERYTHING, True),
        ([GANG_TOLERATION], True),
        ([{"key": c.GANG_TAINT_KEY, "operator": "Exists"}], True),
        ([{"key": c.GANG_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"key": c.GANG_TAINT_KEY, "value": "pool-a", "effect": "NoSchedule"}], False),
        (NVIDIA_CHART, False),
    ],
)
def test_tolerating_every_pool_needs_exists_on_the_gang_key_or_on_everything(
    tolerations: list[dict[str, Any]], expected: bool
) -> None:
    assert tolerates_every_pool(tolerations) is expected


def test_what_is_not_needed_on_gang_nodes_is_left_alone() -> None:
    assert role_of(daemonset("fluent-bit", None, "logging")) is None
    assert role_of(daemonset("aws-node-termination-handler", None)) is None
