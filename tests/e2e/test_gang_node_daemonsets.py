"""With the real Kueue manager: a GPU gang's nodes are usable only through the device-plugin
DaemonSets, and Kueue's waitForPodsReady is the backstop when they never become usable.

The embedded default registers `nvidia.com/gpu` and `vpc.amazonaws.com/efa` on a Node only
through the DaemonSets it installs in kube-system (`devenv.device_plugins`), a configured
delay after the Node turns Ready, and only where they tolerate the gang taint:
- installed as upstream ships it (no gang toleration), the NVIDIA device plugin never runs
  on gang nodes: doctor names it and the patch before any Job is submitted, the nodes never
  advertise GPUs, the gang's pods stay Pending; applying doctor's patch mends it;
- with the toleration, GPUs appear only the delay after Ready, and no gang pod runs before;
- with waitForPodsReady on, Kueue evicts the gang whose pods cannot start and its set goes
  warm; with it off, only the controller's own join deadline bounds the bill (a test that
  needs the controller to count only usable nodes, issue 40 item 1).
"""

from __future__ import annotations

import json
import re
import shlex
import time
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.device_plugins import EFA_PLUGIN, NVIDIA_PLUGIN
from devenv.environment import LocalEnvironment
from devenv.kueue_manager import DEFAULT_WAIT_FOR_PODS_READY
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.commands.doctor import DAEMONSETS_CHECK
from tests.e2e.conftest import check_state, conditions, eventually, phase, pool, workload_of
from tests.e2e.test_doctor import _doctor
from tests.support.ec2_listing import described_instances

P4D = "p4d.24xlarge"
ZONE = "us-east-1b"
GPUS, EFAS = "8", "4"  # a p4d.24xlarge's GPUs and EFA interfaces (one per network card)


def _gpu_job(
    env: LocalEnvironment,
    namespace: str,
    name: str,
    pool_name: str,
    node_selector: dict[str, str] | None = None,
) -> None:
    """A 2 x p4d.24xlarge gang on an ODCR, each pod asking for every GPU and EFA device of
    its node (as limits: the apiserver copies them to requests); `node_selector` adds to
    the pods' own."""
    emu = env.emulator_client
    reservation = emu.add_capacity_reservation(P4D, ZONE, 2, tags={c.TAG_CLUSTER: env.cluster_name})
    annotations = {
        c.ANN_INSTANCE_TYPE: P4D,
        c.ANN_MODE: "runinstances",
        c.ANN_CAPACITY_RESERVATION_ID: reservation,
        c.ANN_EFA: "true",
        c.ANN_PLACEMENT_GROUP: c.PLACEMENT_CLUSTER,
    }
    job = ko.gang_job(namespace, name, ko.QUEUE_NAME, pool_name, 2, annotations)
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"] = {c.RESOURCE_GPU: GPUS, c.RESOURCE_EFA: EFAS}
    if node_selector:
        pod_spec = job["spec"]["template"]["spec"]
        pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **node_selector}
    k8s.BatchV1Api(env.control_plane.api_client()).create_namespaced_job(namespace, job)  # type: ignore[union-attr]


def _nodes(env: LocalEnvironment, pool_name: str) -> list[Any]:
    core = k8s.CoreV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    return list(core.list_node(label_selector=f"{c.POOL_LABEL}={pool_name}").items)


def _ready(node: Any) -> bool:
    return any(x.type == "Ready" and x.status == "True" for x in node.status.conditions or [])


def _pods(env: LocalEnvironment, namespace: str, job: str) -> list[Any]:
    core = k8s.CoreV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    return list(core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items)


def _live(env: LocalEnvironment, pool_name: str) -> list[dict[str, Any]]:
    return described_instances(
        env.ec2_client(),
        [
            {"Name": f"tag:{c.TAG_POOL}", "Values": [pool_name]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ],
    )


def _apply(env: LocalEnvironment, patch: str) -> None:
    """Apply doctor's `kubectl -n NS patch daemonset NAME --type=json -p OPS` as kubectl
    would (the JSON patch, through the API)."""
    words = shlex.split(patch)
    namespace, name = words[words.index("-n") + 1], words[words.index("daemonset") + 1]
    ops = json.loads(words[words.index("-p") + 1])
    apps = k8s.AppsV1Api(env.control_plane.api_client())  # type: ignore[union-attr]
    apps.patch_namespaced_daemon_set(name, namespace, ops)


def test_without_the_gang_toleration_gpus_never_appear_and_doctor_said_so_first(
    gang_local: Any, namespace: str
) -> None:
    env: LocalEnvironment = gang_local(
        join_delay=0.5,
        device_plugin_delay=1.0,
        device_plugins_without_gang_toleration=(NVIDIA_PLUGIN.name,),
    )
    # Before any Job: doctor names the DaemonSet, and the patch that fixes it.
    results = {r.name: r for r in _doctor(env, namespace).run()}
    line = results[DAEMONSETS_CHECK]
    assert not line.ok, line.render()
    assert f"kube-system/{NVIDIA_PLUGIN.name}" in line.detail
    assert EFA_PLUGIN.name not in line.detail, "the EFA plugin has its toleration"
    (patch,) = re.findall(r"kubectl [^']*'[^']*'", line.fix)
    assert patch.startswith(f"kubectl -n kube-system patch daemonset {NVIDIA_PLUGIN.name} ")
    assert c.GANG_TAINT_KEY in patch

    tag = uuid.uuid4().hex[:5]
    job, pool_name = f"gpu-{tag}", f"gpu-{tag}"
    _gpu_job(env, namespace, job, pool_name)
    # The EFA plugin runs on gang nodes: its registration is the proof the delay has passed
    # on each node, and the NVIDIA plugin, which does not, registered nothing meanwhile.
    nodes = eventually(
        lambda: (
            (found := _nodes(env, pool_name))
            and len(found) == 2
            and all(_ready(n) and (n.status.allocatable or {}).get(c.RESOURCE_EFA) for n in found)
            and found
        ),
        180,
        "both nodes Ready with their EFA interfaces registered",
    )
    for node in nodes:
        assert node.status.allocatable[c.RESOURCE_EFA] == EFAS
        assert c.RESOURCE_GPU not in node.status.allocatable, node.metadata.name
    # Ready without their GPUs, the nodes are not usable: the check stays Pending, so the
    # Job stays suspended and no gang pod waits Pending for a device; the pool says why.
    status = eventually(
        lambda: ((pool(env, pool_name) or {}).get("status") or {}).get("unusableNodes"),
        60,
        "the pool naming its unusable nodes",
    )
    assert len(status) == 2 and all(c.RESOURCE_GPU in json.dumps(u) for u in status)
    assert check_state(workload_of(env, namespace, job)) == c.CheckState.PENDING
    assert _pods(env, namespace, job) == []

    # doctor's patch, applied: the plugin's pods start, the GPUs appear, the gang runs.
    _apply(env, patch)
    eventually(
        lambda: all(
            (n.status.allocatable or {}).get(c.RESOURCE_GPU) == GPUS for n in _nodes(env, pool_name)
        ),
        60,
        "GPUs registered once the DaemonSet tolerates the gang taint",
    )
    eventually(
        lambda: conditions(workload_of(env, namespace, job)).get(c.WL_FINISHED) == "True",
        120,
        "the gang finished",
    )
    # And doctor's line passes now.
    assert {r.name: r for r in _doctor(env, namespace).run()}[DAEMONSETS_CHECK].ok


def test_with_the_toleration_gpus_appear_only_the_delay_after_ready(
    gang_local: Any, namespace: str
) -> None:
    delay = 4.0
    env: LocalEnvironment = gang_local(join_delay=0.5, device_plugin_delay=delay)
    assert env.nodes is not None and env.nodes.devices is not None
    assert {r.name: r for r in _doctor(env, namespace).run()}[DAEMONSETS_CHECK].ok
    tag = uuid.uuid4().hex[:5]
    job, pool_name = f"gpu-{tag}", f"gpu-{tag}"
    _gpu_job(env, namespace, job, pool_name)
    ready_without_gpus: set[str] = set()
    placed_before_gpus: list[str] = []
    deadline = time.monotonic() + 240
    while conditions(workload_of(env, namespace, job)).get(c.WL_FINISHED) != "True":
        assert time.monotonic() < deadline, "the gang did not finish"
        nodes = {n.metadata.name: n for n in _nodes(env, pool_name)}
        for name, node in nodes.items():
            if _ready(node) and c.RESOURCE_GPU not in (node.status.allocatable or {}):
                ready_without_gpus.add(name)
        for p in _pods(env, namespace, job):
            node = nodes.get(p.spec.node_name or "")
            if node is not None and c.RESOURCE_GPU not in (node.status.allocatable or {}):
                placed_before_gpus.append(f"{p.metadata.name} on {node.metadata.name}")
        time.sleep(0.2)
    assert placed_before_gpus == []
    # Seen Ready and not yet usable, at some poll, on each node...
    assert len(ready_without_gpus) == 2, ready_without_gpus
    # ...and registered no sooner than the delay after Ready, by the simulator's own record.
    records = env.nodes.devices.records()
    for name in ready_without_gpus:
        record = records[name]
        assert record.hardware == {c.RESOURCE_GPU: GPUS, c.RESOURCE_EFA: EFAS}
        assert set(record.registered) == set(record.hardware)
        assert min(record.registered.values()) - record.ready >= delay


def test_the_check_goes_ready_only_once_every_node_advertises_its_gpus_and_efa(
    gang_local: Any, namespace: str
) -> None:
    """The device plugins register 20 s after each node turns Ready: for those 20 s the
    nodes are Ready and not usable, and the check stays Pending. At every poll where the
    check is Ready, every node of the set advertises the GPUs and EFA interfaces a gang pod
    asks for, so no gang pod waits Pending for a device (none is ever bound to a node
    without its GPUs); and the check turned Ready no sooner than the last registration."""
    delay = 20.0
    env: LocalEnvironment = gang_local(join_delay=0.5, device_plugin_delay=delay)
    assert env.nodes is not None and env.nodes.devices is not None
    tag = uuid.uuid4().hex[:5]
    job, pool_name = f"gpu-{tag}", f"gpu-{tag}"
    _gpu_job(env, namespace, job, pool_name)
    ready_polls = 0
    pending_polls_with_ready_nodes = 0
    first_ready_check: float | None = None
    unusable_seen = False
    deadline = time.monotonic() + 240
    while conditions(workload_of(env, namespace, job)).get(c.WL_FINISHED) != "True":
        assert time.monotonic() < deadline, "the gang did not finish"
        state = check_state(workload_of(env, namespace, job))
        nodes = _nodes(env, pool_name)
        status = (pool(env, pool_name) or {}).get("status") or {}
        unusable_seen = unusable_seen or bool(status.get("unusableNodes"))
        if state == c.CheckState.READY:
            ready_polls += 1
            if first_ready_check is None:
                first_ready_check = time.monotonic()  # the registrar's clock
            assert len(nodes) == 2
            for node in nodes:
                allocatable = node.status.allocatable or {}
                assert allocatable.get(c.RESOURCE_GPU) == str(GPUS), node.metadata.name
                assert allocatable.get(c.RESOURCE_EFA) == str(EFAS), node.metadata.name
        elif len(nodes) == 2 and all(_ready(n) for n in nodes):
            pending_polls_with_ready_nodes += 1
        for p in _pods(env, namespace, job):
            node = next((n for n in nodes if n.metadata.name == p.spec.node_name), None)
            if node is not None:
                assert c.RESOURCE_GPU in (node.status.allocatable or {}), p.metadata.name
        time.sleep(0.5)
    assert ready_polls > 0, "the check was never seen Ready"
    # The nodes were seen Ready with the check still Pending, and the pool said why.
    assert pending_polls_with_ready_nodes > 0 and unusable_seen
    records = env.nodes.devices.records()
    assert first_ready_check is not None
    last_registration = max(max(r.registered.values()) for r in records.values())
    assert first_ready_check >= last_registration


# Why Kueue evicts for pods not Ready in time: the timeout itself, or, once the requeuing
# limit is reached (at the first with backoffLimitCount 0), the deactivation it causes.
PODS_READY_EVICTIONS = ("PodsReadyTimeout", "DeactivatedDueToRequeuingLimitExceeded")
# Short enough for a test to see the eviction; backoffLimitCount 0: deactivated at the first.
SHORT_WAIT_FOR_PODS_READY = {
    "timeout": "20s",
    "blockAdmission": False,
    "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": 0},
}


@pytest.fixture
def kueue_short_wait(kueue: Any) -> Any:
    """The session's Kueue manager with a 20 s waitForPodsReady; the default again after."""
    kueue.restart(SHORT_WAIT_FOR_PODS_READY)
    yield kueue
    kueue.restart(dict(DEFAULT_WAIT_FOR_PODS_READY))


@pytest.fixture
def kueue_without_wait(kueue: Any) -> Any:
    """The session's Kueue manager with waitForPodsReady off; the default again after."""
    kueue.restart(None)
    yield kueue
    kueue.restart(dict(DEFAULT_WAIT_FOR_PODS_READY))


def test_with_wait_for_pods_ready_kueue_evicts_a_gang_whose_pods_cannot_start(
    kueue_short_wait: Any, gang_local: Any, namespace: str
) -> None:
    """A gang whose pods cannot start for a reason the controller cannot see from the
    nodes (here a node selector no gang node satisfies; in a cluster, an image that cannot
    be pulled or a volume that cannot mount): its nodes are usable, the check goes Ready,
    the pods stay Pending, and Kueue's waitForPodsReady evicts it. (A device that never
    registers is the controller's to see: the check never goes Ready, and the join
    deadline bounds the bill, as the next test shows.)"""
    env: LocalEnvironment = gang_local(join_delay=0.5, device_plugin_delay=1.0)
    tag = uuid.uuid4().hex[:5]
    job, pool_name = f"gpu-{tag}", f"gpu-{tag}"
    _gpu_job(env, namespace, job, pool_name, node_selector={"example.com/rack": "none"})
    evicted = eventually(
        lambda: (
            (wl := workload_of(env, namespace, job))
            and any(
                x["type"] == c.WL_EVICTED and x.get("reason") in PODS_READY_EVICTIONS
                for x in (wl.get("status") or {}).get("conditions") or []
            )
            and wl
        ),
        240,
        lambda: (
            "Kueue evicting the gang for PodsReadyTimeout: "
            + json.dumps((workload_of(env, namespace, job) or {}).get("status"))
        ),
    )
    assert conditions(evicted).get(c.WL_PODS_READY) != "True"

    # Its set goes warm (kept for the next gang of the namespace) or is released.
    def warm_or_released() -> bool:
        now = phase(env, pool_name)
        return now is None or Phase(now) is Phase.KEEP_WARM or not _live(env, pool_name)

    eventually(
        warm_or_released,
        120,
        lambda: f"the set warm or released: {(pool(env, pool_name) or {}).get('status')}",
    )
    assert all(p.spec.node_name is None for p in _pods(env, namespace, job))


def test_without_wait_for_pods_ready_the_join_deadline_bounds_the_bill(
    kueue_without_wait: Any, gang_local: Any, namespace: str
) -> None:
    deadline = 20
    env: LocalEnvironment = gang_local(
        join_delay=0.5,
        device_plugin_delay=1.0,
        join_deadline_seconds=deadline,
        device_plugins_without_gang_toleration=(NVIDIA_PLUGIN.name,),
    )
    tag = uuid.uuid4().hex[:5]
    job, pool_name = f"gpu-{tag}", f"gpu-{tag}"
    _gpu_job(env, namespace, job, pool_name)
    first = eventually(lambda: _live(env, pool_name), 180, "the gang's instances launched")
    first_ids = {i["InstanceId"] for i in first}

    # The set is released at the deadline, and (the job still waiting) the next one launched
    # at once: watch the first set's instances go, not for a moment with none live.
    def first_set_released() -> dict[str, Any] | None:
        if first_ids & {i["InstanceId"] for i in _live(env, pool_name)}:
            return None
        error = ((pool(env, pool_name) or {}).get("status") or {}).get("lastError") or {}
        return error if error.get("reason") == c.EventReason.JOIN_DEADLINE_EXCEEDED else None

    error = eventually(first_set_released, deadline + 90, "the set released at the join deadline")
    assert c.RESOURCE_GPU in error["message"] and NVIDIA_PLUGIN.name in error["message"]
