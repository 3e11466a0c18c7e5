"""What one node of an instance type offers pods, as DescribeInstanceTypes says: the
`api.pod_fit.InstanceTypes` port, answered from EC2 and kept per type.

The webhook (at `kubectl apply`) and the Workload reconciler (before its decision) check a
gang's pod requests against it (`api.pod_fit`). Apart from `instancetypes`, which the
stacks' providers import: this module pulls in the api's models.
"""

from __future__ import annotations

import threading
from typing import Any

from provisioner.api.pod_fit import (
    InstanceTypeFigures,
    InstanceTypeLookupError,
    InstanceTypes,
    UnknownInstanceType,
)
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import error_code
from provisioner.cloud.instancetypes import efa_cards, instance_type_info_from

__all__ = ["Ec2InstanceTypes", "instance_type_figures"]


def instance_type_figures(raw: dict[str, Any]) -> InstanceTypeFigures:
    """What a node of the type offers pods before the AMI's reservations (`api.pod_fit`).

    ENIs for max pods are those of the default network card, as the table nodeadm ships
    (`eni-max-pods.txt`) counts them: on a multi-card type only the default card's
    interfaces carry pod IPs (p4d.24xlarge: 15 * 49 + 2 = 737 pods).
    """
    info = instance_type_info_from(raw)
    net = raw.get("NetworkInfo") or {}
    default_card = int(net.get("DefaultNetworkCardIndex") or 0)
    card_enis = [
        int(card.get("MaximumNetworkInterfaces") or 0)
        for card in net.get("NetworkCards") or ()
        if int(card.get("NetworkCardIndex", 0)) == default_card
    ]
    enis = card_enis[0] if card_enis else int(net.get("MaximumNetworkInterfaces") or 0)
    gpus = sum(
        int(g.get("Count") or 0)
        for g in (raw.get("GpuInfo") or {}).get("Gpus") or ()
        if str(g.get("Manufacturer", "")).upper() == "NVIDIA"
    )
    devices = (raw.get("NeuronInfo") or {}).get("NeuronDevices") or ()
    return InstanceTypeFigures(
        instance_type=info.instance_type,
        vcpus=int((raw.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
        memory_mib=int((raw.get("MemoryInfo") or {}).get("SizeInMiB") or 0),
        nvidia_gpus=gpus,
        neuron_devices=sum(int(d.get("Count") or 0) for d in devices),
        neuron_cores=sum(
            int(d.get("Count") or 0) * int((d.get("CoreInfo") or {}).get("Count") or 0)
            for d in devices
        ),
        efa_interfaces=len(efa_cards(info)),
        max_network_interfaces=enis,
        ipv4_per_interface=int(net.get("Ipv4AddressesPerInterface") or 0),
    )


class Ec2InstanceTypes(InstanceTypes):
    """`api.pod_fit.InstanceTypes` answered by DescribeInstanceTypes. A type's figures never
    change, so each is kept for the life of the process once read; an error never is."""

    def __init__(self, ec2: Ec2Api) -> None:
        self._ec2 = ec2
        self._lock = threading.Lock()
        self._known: dict[str, InstanceTypeFigures] = {}

    def figures(self, instance_type: str) -> InstanceTypeFigures:
        with self._lock:
            kept = self._known.get(instance_type)
        if kept is not None:
            return kept
        try:
            found = self._ec2.describe_instance_types(InstanceTypes=[instance_type])
        except Exception as exc:
            if error_code(exc) in ("InvalidInstanceType", "InvalidParameterValue"):
                raise UnknownInstanceType(instance_type) from exc
            raise InstanceTypeLookupError(error_code(exc) or type(exc).__name__) from exc
        listed = [t for t in found.get("InstanceTypes") or () if t.get("InstanceType")]
        if not listed:
            raise UnknownInstanceType(instance_type)
        answer = instance_type_figures(listed[0])
        with self._lock:
            self._known[instance_type] = answer
        return answer
