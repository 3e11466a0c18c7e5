"""What a simulated node has and advertises, from EC2's own answers about its instance.

The node simulator (`devenv.nodesim`) calls these when it registers a Node. They read only
DescribeInstances and DescribeInstanceTypes data, so a node is what EC2 says it is. The
Node registers with the base resources only; the extended resources below are the devices
the instance has, which its device plugins add to the Node's allocatable later, and only
where their DaemonSets run (`devenv.device_plugins`):
- `nvidia.com/gpu`: the NVIDIA GPUs of `GpuInfo` (the NVIDIA device plugin's resource);
- `aws.amazon.com/neuron` and `aws.amazon.com/neuroncore`: the devices and cores of
  `NeuronInfo` (the Neuron device plugin's resources, on trn and inf types);
- `vpc.amazonaws.com/efa`: the EFA interfaces attached to the instance (the EFA device
  plugin counts devices present, so a p5 launched without EFA interfaces advertises none),
  never more than `NetworkInfo.EfaInfo.MaximumEfaInterfaces`;
- labels EKS puts on nodes from reserved capacity: `eks.amazonaws.com/capacityType`
  (CAPACITY_BLOCK for a Capacity Block, as on managed node groups, else ON_DEMAND) and, for
  an instance in a reservation, the `karpenter.sh/capacity-type: reserved`,
  `karpenter.k8s.aws/capacity-reservation-id` and `-type` labels EKS Auto Mode applies.
CPU and memory stay the simulator's fixed, generous figures: the gangs' tests size their
requests to those, whatever the type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

GPU: Final = "nvidia.com/gpu"
NEURON: Final = "aws.amazon.com/neuron"
NEURON_CORE: Final = "aws.amazon.com/neuroncore"
EFA: Final = "vpc.amazonaws.com/efa"
EKS_CAPACITY_TYPE: Final = "eks.amazonaws.com/capacityType"
CAPACITY_TYPE: Final = "karpenter.sh/capacity-type"
RESERVATION_ID: Final = "karpenter.k8s.aws/capacity-reservation-id"
RESERVATION_TYPE: Final = "karpenter.k8s.aws/capacity-reservation-type"

BASE_CAPACITY: Final = {"cpu": "96", "memory": "1152Gi", "pods": "110"}
BASE_ALLOCATABLE: Final = {"cpu": "95", "memory": "1100Gi", "pods": "110"}


def accelerators(
    instance: Mapping[str, Any], type_info: Mapping[str, Any] | None
) -> dict[str, str]:
    """The extended resources the node's device plugins would advertise, once they run."""
    info = type_info or {}
    found: dict[str, int] = {}
    gpus = sum(
        int(g.get("Count") or 0)
        for g in (info.get("GpuInfo") or {}).get("Gpus") or []
        if str(g.get("Manufacturer", "")).upper() == "NVIDIA"
    )
    if gpus:
        found[GPU] = gpus
    devices = (info.get("NeuronInfo") or {}).get("NeuronDevices") or []
    neuron = sum(int(d.get("Count") or 0) for d in devices)
    if neuron:
        found[NEURON] = neuron
        found[NEURON_CORE] = sum(
            int(d.get("Count") or 0) * int((d.get("CoreInfo") or {}).get("Count") or 0)
            for d in devices
        )
    efa_max = int(
        ((info.get("NetworkInfo") or {}).get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 0
    )
    # Each `efa` (EFA with ENA) and `efa-only` interface is one EFA device to the device
    # plugin; a plain ENA primary is not.
    attached = sum(
        1
        for n in instance.get("NetworkInterfaces") or []
        if n.get("InterfaceType") in ("efa", "efa-only")
    )
    if min(attached, efa_max):
        found[EFA] = min(attached, efa_max)
    return {name: str(count) for name, count in found.items()}


def reserved_capacity_labels(instance: Mapping[str, Any]) -> dict[str, str]:
    block = instance.get("InstanceLifecycle") == "capacity-block"
    labels = {EKS_CAPACITY_TYPE: "CAPACITY_BLOCK" if block else "ON_DEMAND"}
    reservation_id = instance.get("CapacityReservationId")
    if reservation_id:
        labels[CAPACITY_TYPE] = "reserved"
        labels[RESERVATION_ID] = str(reservation_id)
        labels[RESERVATION_TYPE] = "capacity-block" if block else "default"
    return labels
