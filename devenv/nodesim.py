"""The node simulator: stands in for nodeadm + kubelet on every managed instance.

Used by the integration fixtures, the demo and `atomic-gang dev up`. For each running
instance tagged as owned by the cluster, after a join delay, it reads the instance's user
data, parses the nodeadm NodeConfig with the same parser the product's tests pin, and
registers a Ready Node whose providerID, labels and taints come from that NodeConfig — so a
launch whose user data is wrong never produces a node, exactly as on EKS. The Node carries
the labels EKS puts on reserved-capacity nodes (see `devenv.node_shape`) and registers with
cpu, memory and pods only: the GPUs, Neuron devices and EFA interfaces EC2 reports for the
instance reach its allocatable later, through the device-plugin DaemonSets `devices`
models (`devenv.device_plugins`), and never without one. When the instance terminates the
Node is deleted. Instances can be told never to join (to drive the join
watchdog).

A real node learns that it booted by booting; the simulator, standing in for hundreds, reads
launches and terminations from the emulator's instance event feed when it is given one, and
asks EC2 only about the instances still booting. Listing every live instance on each poll
instead made it the emulator's largest client at a few hundred warm instances.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv.device_plugins import DeviceRegistrar
from devenv.node_shape import (
    BASE_ALLOCATABLE,
    BASE_CAPACITY,
    accelerators,
    reserved_capacity_labels,
)
from provisioner.api import constants as c
from provisioner.cloud.iam_policy import VPC_CNI_CLUSTER_TAG
from provisioner.cloud.nodeadm import parse_user_data

log = logging.getLogger(__name__)

SIMULATED_LABEL = "atomic-gang.k8s.aws/simulated"
_LIVE = ("pending", "running")
# Asks the feed where it stands: no event is numbered this high.
_FEED_END = 2**62


class Ec2ForNodes(Protocol):
    """What a simulated node asks of EC2: its instance, and (as the VPC CNI) a second ENI."""

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]: ...

    def create_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...

    def attach_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...

    def delete_network_interface(self, **kwargs: Any) -> dict[str, Any]: ...

    def describe_instance_attribute(self, **kwargs: Any) -> dict[str, Any]: ...

    def describe_instance_types(self, **kwargs: Any) -> dict[str, Any]: ...


class InstanceEventSource(Protocol):
    """Which instances were launched and terminated, in order (the emulator's feed)."""

    def instance_events(self, after: int, wait: float = 0.0) -> dict[str, Any]: ...


@dataclass
class _Seen:
    first_running: float
    joined: bool = False
    refused: str | None = None
    # What EC2 said of the instance once it was running: all a join needs. Until it joins,
    # the feed says if it goes, so it is not asked about again on every poll.
    running: dict[str, Any] | None = None


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
    # With an event source, a pass reads launches and terminations from it and asks EC2
    # only about the instances still booting; EC2 is listed (and every Node swept) on the
    # first pass, after events were missed, and every `full_sweep_seconds`. Without one,
    # every pass lists EC2, as the in-process tests on plain moto need.
    events: InstanceEventSource | None = None
    idle_wait: float = 1.0
    # Only a safety net (the feed misses nothing while it runs), and each sweep lists every
    # warm instance: moto serializing whole-fleet answers is most of the emulator's
    # DescribeInstances cost (83 ms a call on average in a 120-pool bench_scale).
    full_sweep_seconds: float = 300.0
    _node_names: dict[str, str] = field(default_factory=dict)
    _passes: int = 0
    _cursor: int | None = None
    _last_listing: float = 0.0
    _booting: set[str] = field(default_factory=set)
    _ending: set[str] = field(default_factory=set)
    # The device plugins' part: what registers GPUs, EFA and Neuron devices after Ready.
    # None: no device plugin runs, so no Node ever advertises one.
    devices: DeviceRegistrar | None = None

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
            self._cursor = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.events is None:
                    self.run_once()
                else:
                    # Booting instances and Nodes awaiting their device plugins are looked
                    # at every poll; otherwise the feed is asked to wait for the next
                    # launch or termination.
                    busy = self._booting or (self.devices is not None and self.devices.pending())
                    self._feed_pass(self.poll_interval if busy else self.idle_wait)
                    self._devices_pass()
                    continue
            except Exception:  # the simulator must outlive a flaky emulator call
                log.exception("node simulator pass failed")
            self._stop.wait(self.poll_interval)

    # -- one pass ------------------------------------------------------------------------
    def run_once(self) -> None:
        """One pass: join what booted long enough, delete the Nodes of what is gone."""
        if self.events is None:
            self._passes += 1
            self._listing_pass(
                sweep_nodes=self.sweep_every <= 1 or self._passes % self.sweep_every == 1
            )
        else:
            self._feed_pass(0.0)
        self._devices_pass()

    def _devices_pass(self) -> None:
        if self.devices is not None and self.devices.pending():
            self.devices.run_once()

    def _listing_pass(self, sweep_nodes: bool) -> None:
        live = {i["InstanceId"]: i for i in self._managed_instances()}
        self._advance(list(live.values()))
        self._remove_gone(set(live), sweep_nodes)

    def _feed_pass(self, wait: float) -> None:
        assert self.events is not None
        now = time.monotonic()
        if self._cursor is None or now - self._last_listing >= self.full_sweep_seconds:
            # Where the feed stands before the listing: what happens after it is read
            # again next pass, and reading an event twice does no harm.
            cursor = int(self.events.instance_events(after=_FEED_END)["last"])
            self._listing_pass(sweep_nodes=True)
            self._cursor, self._last_listing = cursor, now
            return
        page = self.events.instance_events(after=self._cursor, wait=wait)
        if int(page["first"]) > self._cursor + 1:
            self._cursor = None  # events were dropped (an emulator reset): list next pass
            return
        with self._lock:
            for event in page["events"]:
                if event["event"] == "launched":
                    self._booting.add(event["instance_id"])
                else:
                    # Kept until its Node is deleted: the events are read only once.
                    self._ending.add(event["instance_id"])
                    self._booting.discard(event["instance_id"])
            booting, ending = sorted(self._booting), set(self._ending)
        self._cursor = int(page["last"])
        self._delete_nodes(ending)
        if booting:
            with self._lock:
                running = [
                    seen.running
                    for iid in booting
                    if (seen := self._seen.get(iid)) is not None and seen.running is not None
                ]
            known = {inst["InstanceId"] for inst in running}
            # EC2 is asked only about the instances not yet seen running. Asking about
            # every booting one on every poll (four a second) described each several
            # times over its join delay, for nodes that never call DescribeInstances.
            asked = [iid for iid in booting if iid not in known]
            self._advance((self._cluster_instances(asked) if asked else []) + running)

    def _advance(self, instances: list[dict[str, Any]]) -> None:
        """Join each running instance once it has run for the join delay."""
        now = self.clock()
        waiting = set()
        for inst in instances:
            iid = inst["InstanceId"]
            if inst["State"]["Name"] not in _LIVE:
                continue
            with self._lock:
                seen = self._seen.setdefault(iid, _Seen(first_running=now))
                if iid in self.never_join and not seen.refused:
                    seen.refused = "told never to join"
            if inst["State"]["Name"] != "running":
                seen.first_running = now  # the join delay counts from running
                waiting.add(iid)
                continue
            seen.running = inst
            if seen.joined or seen.refused:
                continue
            if now - seen.first_running < self.join_delay:
                waiting.add(iid)
                continue
            self._join(inst, seen)
        with self._lock:
            self._booting = waiting

    def _cluster_instances(self, instance_ids: list[str]) -> list[dict[str, Any]]:
        """These instances, if they are the cluster's; an id EC2 no longer knows is dropped."""
        try:
            page = self.ec2.describe_instances(
                InstanceIds=instance_ids, Filters=[self._cluster_filter()]
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "InvalidInstanceID.NotFound":
                raise
            self._cursor = None  # the emulator forgot them (a reset): list next pass
            return []
        return [i for r in page.get("Reservations", []) for i in r.get("Instances", [])]

    def _cluster_filter(self) -> dict[str, Any]:
        return {"Name": f"tag:{c.cluster_ownership_tag(self.cluster_name)}", "Values": ["owned"]}

    def _managed_instances(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "Filters": [
                self._cluster_filter(),
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
        # Tagged as the VPC CNI tags the ENIs it creates (its CLUSTER_NAME, which the EKS
        # add-on sets, and the instance): what the controller's policy deletes by.
        cni_tags = [
            {"Key": VPC_CNI_CLUSTER_TAG, "Value": self.cluster_name},
            {"Key": "node.k8s.amazonaws.com/instance_id", "Value": iid},
        ]
        eni = self.ec2.create_network_interface(
            SubnetId=inst["SubnetId"],
            Description=description,
            TagSpecifications=[{"ResourceType": "network-interface", "Tags": cni_tags}],
        )["NetworkInterface"]["NetworkInterfaceId"]
        # The CNI attaches at the first free device index of card 0 (an EFA-only interface
        # may hold index 1); without DeleteOnTermination, which EC2 then takes as false.
        taken = {
            int((n.get("Attachment") or {}).get("DeviceIndex") or 0)
            for n in inst.get("NetworkInterfaces") or ()
            if int((n.get("Attachment") or {}).get("NetworkCardIndex") or 0) == 0
        }
        device = next(i for i in range(1, len(taken) + 2) if i not in taken)
        try:
            self.ec2.attach_network_interface(
                NetworkInterfaceId=eni, InstanceId=iid, DeviceIndex=device
            )
        except ClientError:
            # As the CNI does when EC2 refuses the attach (the instance is shutting down):
            # it deletes the ENI it just made, so only a crash between the two leaks one.
            self.ec2.delete_network_interface(NetworkInterfaceId=eni)
            # The pass's listing may predate this simulator's own attach in an earlier pass
            # (which then failed later): EC2 refuses its device index every pass after. Asked
            # fresh, that ENI is there, and the node is attached.
            fresh = self.ec2.describe_instances(InstanceIds=[iid])["Reservations"]
            now = fresh[0]["Instances"][0] if fresh and fresh[0]["Instances"] else {}
            if any(n.get("Description") == description for n in now.get("NetworkInterfaces") or ()):
                return
            raise

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
                "capacity": dict(BASE_CAPACITY),
                "allocatable": dict(BASE_ALLOCATABLE),
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
        if self.devices is not None:
            hardware = accelerators(inst, self._instance_type(inst["InstanceType"]))
            self.devices.node_ready(name, hardware, self.clock())
        log.info("instance %s joined as node %s", iid, name)

    def _instance_type(self, name: str) -> dict[str, Any] | None:
        """EC2's DescribeInstanceTypes entry for `name`, asked once per type."""
        if name not in self._type_info:
            found = self.ec2.describe_instance_types(InstanceTypes=[name]).get("InstanceTypes")
            self._type_info[name] = dict(found[0]) if found else None
        return self._type_info[name]

    def _remove_gone(self, live_ids: set[str], sweep_nodes: bool) -> None:
        with self._lock:
            nodes = dict(self._node_names)
        if sweep_nodes:
            for node in self.core.list_node(label_selector=f"{SIMULATED_LABEL}=true").items:
                iid = (node.spec.provider_id or "").rsplit("/", 1)[-1]
                if iid:
                    nodes[iid] = node.metadata.name
        self._delete_nodes({iid for iid in nodes if iid not in live_ids}, nodes)

    def _delete_nodes(self, gone: set[str], names: dict[str, str] | None = None) -> None:
        for iid in gone:
            with self._lock:
                name = (self._node_names if names is None else names).get(iid)
            if name is not None:
                try:
                    self.core.delete_node(name)
                    log.info("instance %s is gone; node %s deleted", iid, name)
                except ApiException as err:
                    if err.status != 404:
                        raise
            with self._lock:
                self._seen.pop(iid, None)
                self._node_names.pop(iid, None)
                self._ending.discard(iid)
            if name is not None and self.devices is not None:
                self.devices.node_gone(name)
