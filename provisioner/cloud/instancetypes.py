"""What EC2 says about an instance type: architecture (for the AMI) and EFA (for networking).

Called by ``ami.resolve_ami``, by the runinstances launcher when a gang asks for EFA, and
(through the engine) by the pool reconciler, whose launch template carries the same EFA
interfaces: ``efa_interfaces`` is the one builder of them, used by both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
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
    cards = sorted(int(card.get("NetworkCardIndex", 0)) for card in net.get("NetworkCards") or ())
    return InstanceTypeInfo(
        instance_type=str(raw["InstanceType"]),
        architectures=tuple((raw.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()),
        efa_supported=efa,
        max_efa_interfaces=int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0))
        if efa
        else 0,
        network_card_indexes=tuple(cards) or (0,),
    )


def efa_cards(info: InstanceTypeInfo) -> tuple[int, ...]:
    """The network cards that get an EFA interface: every card, up to the type's EFA
    maximum; none for a type without EFA."""
    if not info.efa_supported:
        return ()
    return info.network_card_indexes[: max(info.max_efa_interfaces, 1)]


def efa_interfaces(
    cards: Sequence[int], security_group_ids: Sequence[str], subnet_id: str | None = None
) -> list[dict[str, Any]]:
    """One EFA interface per network card. The first is the primary (device index 0); the
    others take device index 1 on their own card, as EC2 expects on multi-card types.
    Without ``subnet_id`` the subnet is left to each launch (the launch template's case)."""
    interfaces = []
    for n, card in enumerate(cards):
        ni: dict[str, Any] = {
            "DeviceIndex": 0 if n == 0 else 1,
            "NetworkCardIndex": int(card),
            "InterfaceType": "efa",
            "DeleteOnTermination": True,
        }
        if subnet_id:
            ni["SubnetId"] = subnet_id
        if security_group_ids:
            ni["Groups"] = list(security_group_ids)
        interfaces.append(ni)
    return interfaces
