"""The node simulator: stands in for nodeadm + kubelet on every managed instance.

Used by the integration fixtures, the demo and `atomic-gang dev up`. For each running
instance tagged as owned by the cluster, after a join delay, it reads the instance's user
data, parses the nodeadm NodeConfig with the same parser the product's tests pin, and
registers a Ready Node whose providerID, labels and taints come from that NodeConfig — so a
launch whose user data is wrong never produces a node, exactly as on EKS. The Node
advertises the GPUs, Neuron devices and EFA interfaces EC2 reports for the instance, with
the labels EKS puts on reserved-capacity nodes (see `devenv.node_shape`). When the instance
terminates the Node is deleted. Instances can be told never to join (to drive the join
watchdog).
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv.node_shape import node_resources, reserved_capacity_labels
from provisioner.api import constants as c
from provisioner.cloud.nodeadm import parse_user_data

log = logging.getLogger(__name__)

SIMULATED_LABEL = "atomic-gang.k8s.aws/simulated"
_LIVE = ("pending", "running")


class Ec2ForNodes(Protocol):
    """What a simulated node asks of EC2: its instance, and (as the VPC CNI) a second ENI."""

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def create_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...

    def attach_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...

    def describe_instance_attribute(self, **kwargs: Any) -> dict[str, Any]: ...

    def describe_instance_types(self, **kwargs: Any) -> dict[str, Any]: ...


@dataclass
class _Seen:
    first_running: float
    joined: bool = False
    refused: str | None = None


@dataclass(frozen=True)
class JoinRecord:
    """When the simulator first saw an instance running and when its Node went Ready
    (its clock's seconds): the boot a real node would spend, which benchmarks subtract."""

    first_running: float
    ready: float


@dataclass
class NodeSimulator:
    """Registers and removes Nodes that mirror the cluster's managed instances."""

    core: k8s.CoreV1Api
    ec2: Ec2ForNodes
    cluster_name: str
    join_delay: float = 1.0
    # As the VPC CNI does on every node: a secondary ENI named aws-K8S-<instance-id>,
    # attached with DeleteOnTermination=false, so it outlives its instance and a release
    # that does not delete it leaks it (the invariant "no leaked ENI" has something to find).
    cni_enis: bool = True
    poll_interval: float = 0.25
    clock: Any = time.monotonic
    never_join: set[str] = field(default_factory=set)
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _joins: dict[str, JoinRecord] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _type_info: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    # The Node each instance registered here got: its Node goes by name when the instance
    # does. Every `sweep_every` passes (the first included) every simulated Node is listed
    # instead, for Nodes registered before a restart: at hundreds of Nodes, listing them all
    # on every poll was a load on the apiserver and this process that no kubelet imposes.
    sweep_every: int = 10
    _node_names: dict[str, str] = field(default_factory=dict)
    _passes: int = 0

    # -- control -------------------------------------------------------------------------
    def refuse_join(self, *instance_ids: str) -> None:
        with self._lock:
            self.never_join.update(instance_ids)

    def refused(self) -> dict[str, str]:
        """Instances that will never join, with the reason (bad user data, told to)."""
        with self._lock:
            return {iid: s.refused for iid, s in self._seen.items() if s.refused}

    def joins(self) -> dict[str, JoinRecord]:
        """Every instance that has joined, kept after its Node is gone."""
        with self._lock:
            return dict(self._joins)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="node-simulator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def reset(self) -> None:
        with self._lock:
            self._seen.clear()
            self.never_join.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # the simulator must outlive a flaky emulator call
                log.exception("node simulator pass failed")
            self._stop.wait(self.poll_interval)

    # -- one pass ------------------------------------------------------------------------
    def run_once(self) -> None:
        instances = self._managed_instances()
        live = {i["InstanceId"]: i for i in instances if i["State"]["Name"] in _LIVE}
        now = self.clock()
        for iid, inst in live.items():
            if inst["State"]["Name"] != "running":
                continue
            with self._lock:
                seen = self._seen.setdefault(iid, _Seen(first_running=now))
                if iid in self.never_join and not seen.refused:
                    seen.refused = "told never to join"
            if seen.joined or seen.refused or now - seen.first_running < self.join_delay:
                continue
            self._join(inst, seen)
        self._remove_gone(set(live))

    def _managed_instances(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "Filters": [
                {"Name": f"tag:{c.cluster_ownership_tag(self.cluster_name)}", "Values": ["owned"]},
                # Only what may join or keep a Node: an instance in any other state is
                # gone, and terminated ones pile up in EC2's listings as gangs come and go.
                {"Name": "instance-state-name", "Values": list(_LIVE)},
            ]
        }
        while True:
            page = self.ec2.describe_instances(**kwargs)
            for reservation in page.get("Reservations", []):
                found += reservation.get("Instances", [])
            token = page.get("NextToken")
            if not token:
                return found
            kwargs["NextToken"] = token

    def _join(self, inst: dict[str, Any], seen: _Seen) -> None:
        iid = inst["InstanceId"]
        attr = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        raw = attr.get("UserData", {}).get("Value", "")
        try:
            config = parse_user_data(base64.b64decode(raw).decode() if raw else "")
        except Exception as err:  # any parse failure means nodeadm would fail too
            seen.refused = f"user data is not a valid nodeadm NodeConfig: {err}"
            log.warning("instance %s will not join: %s", iid, seen.refused)
            return
        if config.cluster_name != self.cluster_name:
            seen.refused = f"NodeConfig names cluster {config.cluster_name!r}"
            log.warning("instance %s will not join: %s", iid, seen.refused)
            return
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in config.taints]
        if self.cni_enis:
            self._attach_cni_eni(inst)
        self._register(inst, dict(config.labels), taints)
        seen.joined = True
        with self._lock:
            self._joins[iid] = JoinRecord(seen.first_running, self.clock())

    def _attach_cni_eni(self, inst: dict[str, Any]) -> None:
        iid = inst["InstanceId"]
        description = f"aws-K8S-{iid}"
        if any(n.get("Description") == description for n in inst.get("NetworkInterfaces") or ()):
            return  # attached by a pass that failed later
        eni = self.ec2.create_network_interface(SubnetId=inst["SubnetId"], Description=description)[
            "NetworkInterface"
        ]["NetworkInterfaceId"]
        # Attached without DeleteOnTermination, which EC2 then takes as false.
        self.ec2.attach_network_interface(NetworkInterfaceId=eni, InstanceId=iid, DeviceIndex=1)

    def _register(
        self, inst: dict[str, Any], labels: dict[str, str], taints: list[dict[str, str]]
    ) -> None:
        iid = inst["InstanceId"]
        az = inst["Placement"]["AvailabilityZone"]
        name = inst.get("PrivateDnsName") or iid
        all_labels = {
            **labels,
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": inst["InstanceType"],
            "topology.kubernetes.io/zone": az,
            "topology.kubernetes.io/region": az[:-1],
            **reserved_capacity_labels(inst),
            SIMULATED_LABEL: "true",
        }
        body = {
            "metadata": {"name": name, "labels": all_labels},
            "spec": {"providerID": f"aws:///{az}/{iid}", "taints": taints},
        }
        try:
            self.core.create_node(body)
        except ApiException as err:
            if err.status != 409:
                raise
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        capacity, allocatable = node_resources(inst, self._instance_type(inst["InstanceType"]))
        status = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "simulated kubelet is posting ready status",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "capacity": capacity,
                "allocatable": allocatable,
                "addresses": [
                    {"type": "InternalIP", "address": inst.get("PrivateIpAddress", "10.0.0.1")}
                ],
            }
        }
        with self._lock:
            self._node_names[iid] = name
        self.core.patch_node_status(name, status)
        # The apiserver taints new nodes not-ready; the node lifecycle controller, which
        # does not run here, would lift that taint once the node reports Ready.
        self.core.patch_node(name, {"spec": {"taints": taints or None}})
        log.info("instance %s joined as node %s", iid, name)

    def _instance_type(self, name: str) -> dict[str, Any] | None:
        """EC2's DescribeInstanceTypes entry for `name`, asked once per type."""
        if name not in self._type_info:
            found = self.ec2.describe_instance_types(InstanceTypes=[name]).get("InstanceTypes")
            self._type_info[name] = dict(found[0]) if found else None
        return self._type_info[name]

    def _remove_gone(self, live_ids: set[str]) -> None:
        self._passes += 1
        with self._lock:
            nodes = dict(self._node_names)
        if self._passes % self.sweep_every == 1 or self.sweep_every <= 1:
            for node in self.core.list_node(label_selector=f"{SIMULATED_LABEL}=true").items:
                iid = (node.spec.provider_id or "").rsplit("/", 1)[-1]
                if iid:
                    nodes[iid] = node.metadata.name
        for iid, name in nodes.items():
            if iid in live_ids:
                continue
            try:
                self.core.delete_node(name)
                log.info("instance %s is gone; node %s deleted", iid, name)
            except ApiException as err:
                if err.status != 404:
                    raise
            with self._lock:
                self._seen.pop(iid, None)
                self._node_names.pop(iid, None)
