"""The device-plugin model (`devenv.device_plugins`): a DaemonSet's pod runs on a gang node
only if it tolerates the gang taint, and a Node's GPUs and EFA appear only through a
DaemonSet that runs there, `delay` seconds after Ready (or after it could first run)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from devenv import device_plugins as dp
from devenv.node_shape import EFA, GPU, NEURON
from provisioner.api import constants as c
from tests.support.clocks import SecondsClock

GANG_TAINT = {"key": c.GANG_TAINT_KEY, "value": "pool-a", "effect": "NoSchedule"}
P5 = {GPU: "8", EFA: "32"}


def node(instance_type: str = "p5.48xlarge", taints: list[Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": {dp.INSTANCE_TYPE_LABEL: instance_type}},
        "spec": {"taints": [GANG_TAINT] if taints is None else taints},
    }


@pytest.mark.parametrize(
    ("plugin", "gang_toleration", "instance_type", "taints", "runs"),
    [
        # As upstream ships them, no device plugin runs on a gang node...
        (dp.NVIDIA_PLUGIN, False, "p5.48xlarge", None, False),
        (dp.EFA_PLUGIN, False, "p5.48xlarge", None, False),
        (dp.NEURON_PLUGIN, False, "trn1.32xlarge", None, False),
        # ...and each does once patched with the gang toleration.
        (dp.NVIDIA_PLUGIN, True, "p5.48xlarge", None, True),
        (dp.EFA_PLUGIN, True, "p5.48xlarge", None, True),
        (dp.NEURON_PLUGIN, True, "trn1.32xlarge", None, True),
        # On an untainted node, upstream's own tolerations are enough.
        (dp.NVIDIA_PLUGIN, False, "p5.48xlarge", [], True),
        # Their own taints they tolerate (the NVIDIA chart's nvidia.com/gpu)...
        (dp.NVIDIA_PLUGIN, False, "p5.48xlarge", [{"key": GPU, "effect": "NoSchedule"}], True),
        # ...and the DaemonSet controller's own tolerations (a cordoned node).
        (
            dp.NVIDIA_PLUGIN,
            True,
            "p5.48xlarge",
            [GANG_TAINT, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
            True,
        ),
        # The EFA and Neuron plugins' affinity keeps them to their instance types.
        (dp.EFA_PLUGIN, True, "m5.large", None, False),
        (dp.NEURON_PLUGIN, True, "p5.48xlarge", None, False),
    ],
)
def test_a_device_plugin_runs_on_a_gang_node_only_with_the_gang_toleration(
    plugin: dp.DevicePlugin,
    gang_toleration: bool,
    instance_type: str,
    taints: list[Any] | None,
    runs: bool,
) -> None:
    ds = dp.daemonset(plugin, gang_toleration=gang_toleration)
    assert dp.runs_on(ds, node(instance_type, taints)) is runs


def test_upstream_tolerations_are_the_charts_defaults() -> None:
    nvidia = dp.daemonset(dp.NVIDIA_PLUGIN, gang_toleration=False)
    assert nvidia["metadata"] == {
        "name": "nvidia-device-plugin-daemonset",
        "namespace": "kube-system",
    }
    assert nvidia["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
    ]
    patched = dp.daemonset(dp.NVIDIA_PLUGIN, gang_toleration=True)
    assert patched["spec"]["template"]["spec"]["tolerations"][-1] == dp.GANG_TOLERATION


# --- the registrar, against fakes of the two API clients ---------------------------------
@dataclass
class _Raw:
    data: str


@dataclass
class FakeApi:
    """The CoreV1Api and AppsV1Api calls the registrar makes, over in-memory objects."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    daemonsets: dict[str, dict[str, Any]] = field(default_factory=dict)
    patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def read_node(self, name: str, _preload_content: bool = True) -> _Raw:
        if name not in self.nodes:
            raise ApiException(status=404)
        return _Raw(json.dumps(self.nodes[name]))

    def read_namespaced_daemon_set(
        self, name: str, namespace: str, _preload_content: bool = True
    ) -> _Raw:
        if name not in self.daemonsets:
            raise ApiException(status=404)
        return _Raw(json.dumps(self.daemonsets[name]))

    def patch_node_status(self, name: str, body: dict[str, Any]) -> None:
        self.patches.append((name, body))

    def install(self, *, without: tuple[str, ...] = ()) -> None:
        for plugin in dp.MODELLED:
            body = dp.daemonset(plugin, gang_toleration=plugin.name not in without)
            self.daemonsets[plugin.name] = body

    def advertised(self, name: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for patched, body in self.patches:
            if patched == name:
                assert body["status"]["capacity"] == body["status"]["allocatable"]
                found.update(body["status"]["allocatable"])
        return found


def registrar(api: FakeApi, clock: SecondsClock) -> dp.DeviceRegistrar:
    return dp.DeviceRegistrar(api, api, delay=3.0, clock=clock)  # type: ignore[arg-type]


def test_gpus_and_efa_appear_the_delay_after_ready_and_not_before() -> None:
    api, clock = FakeApi(nodes={"n1": node()}), SecondsClock(start=0.0)
    api.install()
    devices = registrar(api, clock)
    devices.node_ready("n1", P5, clock())
    for _ in range(3):
        devices.run_once()
        assert api.advertised("n1") == {}, f"registered {clock.now}s after Ready"
        clock.now += 0.99
    clock.now = 3.0
    devices.run_once()
    assert api.advertised("n1") == P5
    assert not devices.pending()
    assert devices.records()["n1"].registered == {GPU: 3.0, EFA: 3.0}


def test_without_the_gang_toleration_the_nvidia_plugin_leaves_gpus_absent() -> None:
    api, clock = FakeApi(nodes={"n1": node()}), SecondsClock(start=0.0)
    api.install(without=(dp.NVIDIA_PLUGIN.name,))
    devices = registrar(api, clock)
    devices.node_ready("n1", P5, clock())
    for _ in range(60):
        devices.run_once()
        clock.now += 1
    assert api.advertised("n1") == {EFA: "32"}
    assert devices.pending(), "GPUs still awaited"


def test_without_any_daemonset_nothing_is_advertised() -> None:
    api, clock = FakeApi(nodes={"n1": node("trn1.32xlarge")}), SecondsClock(start=0.0)
    devices = registrar(api, clock)
    devices.node_ready("n1", {NEURON: "16"}, clock())
    for _ in range(10):
        devices.run_once()
        clock.now += 1
    assert api.advertised("n1") == {}


def test_a_daemonset_patched_later_registers_the_delay_after_it_could_run() -> None:
    api, clock = FakeApi(nodes={"n1": node()}), SecondsClock(start=0.0)
    api.install(without=(dp.NVIDIA_PLUGIN.name,))
    devices = registrar(api, clock)
    devices.node_ready("n1", P5, clock())
    clock.now = 10.0
    devices.run_once()
    api.install()  # the patch docs/GANG-NODES.md gives
    clock.now = 11.0
    devices.run_once()
    clock.now = 13.5
    devices.run_once()
    assert GPU not in api.advertised("n1"), "registered before the plugin's pod had its delay"
    clock.now = 14.0
    devices.run_once()
    assert api.advertised("n1") == P5


def test_a_node_gone_is_dropped() -> None:
    api, clock = FakeApi(), SecondsClock(start=0.0)
    api.install()
    devices = registrar(api, clock)
    devices.node_ready("n1", P5, clock())
    devices.run_once()
    assert not devices.pending() and api.patches == []
