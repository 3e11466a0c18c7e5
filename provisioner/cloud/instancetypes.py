"""What EC2 says about an instance type: architecture (for the AMI), EFA (for networking),
and what one node of it offers pods (`instance_type_figures`, `Ec2InstanceTypes`: the
webhook and the Workload reconciler check a gang's pod requests against it, `api.pod_fit`).

Called by ``ami.resolve_ami``, by the runinstances launcher when a gang asks for EFA, and
(through the engine) by the pool reconciler, whose launch template carries the same EFA
interfaces: ``efa_interfaces`` is the one builder of them, used by both.

The layout follows "Maximize network bandwidth on Amazon EC2 instances with multiple
network cards" and the EFA-only interface type, decided by ``uses_efa_only``: on a type
with several EFA cards, each of which lists ``efa-only`` in DescribeInstanceTypes'
``NetworkCards[].InterfaceTypes``, the primary interface (card 0, device 0) is a plain ENA
interface, card 0 also gets an EFA-only interface at device 1, and every other card an
EFA-only interface at device 0. EFA-only interfaces take no IP address, so a p5.48xlarge
node uses one private IP instead of 32 (one per ``efa`` interface). A type with one EFA
card, or whose cards do not list ``efa-only``, keeps one ``efa`` (EFA with ENA) interface
per card, the first as the primary: EC2 never takes an EFA-only primary.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from provisioner.api.pod_fit import (
    InstanceTypeFigures,
    InstanceTypeLookupError,
    InstanceTypes,
    UnknownInstanceType,
)
from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import Ec2Api, build_clients, default_session
from provisioner.cloud.errors import CloudError, ErrorKind, error_code, to_cloud_error
from provisioner.cloud.types import InstanceTypeInfo


def describe_instance_type(ec2: Ec2Api, instance_type: str) -> InstanceTypeInfo:
    try:
        found = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    except Exception as exc:
        err = to_cloud_error(exc, f"DescribeInstanceTypes {instance_type}")
        if err.code in ("InvalidInstanceType", "InvalidParameterValue"):
            raise CloudError(
                ErrorKind.CONFIG,
                err.code,
                "UnknownInstanceType",
                f"EC2 does not know instance type {instance_type!r} in this region; fix "
                "atomic-gang.k8s.aws/instance-type.",
            ) from exc
        raise err from exc
    if not found:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "UnknownInstanceType",
            f"EC2 does not know instance type {instance_type!r} in this region; fix "
            "atomic-gang.k8s.aws/instance-type.",
        )
    return instance_type_info_from(found[0])


def instance_type_info_from(raw: dict[str, Any]) -> InstanceTypeInfo:
    net = raw.get("NetworkInfo") or {}
    efa = bool(net.get("EfaSupported"))
    listed = net.get("NetworkCards") or ()
    cards = sorted(int(card.get("NetworkCardIndex", 0)) for card in listed)
    efa_only = sorted(
        int(card.get("NetworkCardIndex", 0))
        for card in listed
        if "efa-only" in (card.get("InterfaceTypes") or ())
    )
    return InstanceTypeInfo(
        instance_type=str(raw["InstanceType"]),
        architectures=tuple((raw.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()),
        efa_supported=efa,
        max_efa_interfaces=int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0))
        if efa
        else 0,
        network_card_indexes=tuple(cards) or (0,),
        efa_only_cards=tuple(efa_only) if efa else (),
    )


def efa_cards(info: InstanceTypeInfo) -> tuple[int, ...]:
    """The network cards that get an EFA interface: every card, up to the type's EFA
    maximum; none for a type without EFA."""
    if not info.efa_supported:
        return ()
    return info.network_card_indexes[: max(info.max_efa_interfaces, 1)]


def uses_efa_only(info: InstanceTypeInfo) -> bool:
    """Whether the gang's EFA cards get EFA-only interfaces behind an ENA primary (the rule
    in the module docstring)."""
    cards = efa_cards(info)
    return len(cards) > 1 and set(cards) <= set(info.efa_only_cards)


def efa_interfaces(
    cards: Sequence[int],
    security_group_ids: Sequence[str],
    subnet_id: str | None = None,
    *,
    efa_only: bool = False,
) -> list[dict[str, Any]]:
    """The interfaces of an EFA gang's instance, one EFA device per card in ``cards``.

    With ``efa_only``: an ENA primary on card 0, an EFA-only interface at device 1 of card
    0 and at device 0 of each other card. Without: one ``efa`` interface per card, the
    first the primary (device 0), the others at device 1 of their own card. Without
    ``subnet_id`` the subnet is left to each launch (the launch template's case)."""
    layout: list[tuple[int, int, str]]
    if efa_only and cards:
        layout = [(0, 0, "interface")] + [
            (int(card), 1 if int(card) == 0 else 0, "efa-only") for card in cards
        ]
    else:
        layout = [(int(card), 0 if n == 0 else 1, "efa") for n, card in enumerate(cards)]
    interfaces = []
    for card, device, kind in layout:
        ni: dict[str, Any] = {
            "DeviceIndex": device,
            "NetworkCardIndex": card,
            "InterfaceType": kind,
            "DeleteOnTermination": True,
        }
        if subnet_id:
            ni["SubnetId"] = subnet_id
        if security_group_ids:
            ni["Groups"] = list(security_group_ids)
        interfaces.append(ni)
    return interfaces


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


def instance_types_for(settings: Settings, session: Any | None = None) -> Ec2InstanceTypes:
    """An `Ec2InstanceTypes` on the controller's own credentials for the cluster's region,
    with the webhook's short timeouts (`images.image_owners_for` says why)."""
    clients = build_clients(
        session or default_session(),
        settings.defaults.region,
        settings.aws.endpoint_url,
        max_attempts=2,
        connect_timeout=2.0,
        read_timeout=4.0,
    )
    return Ec2InstanceTypes(clients.ec2)
