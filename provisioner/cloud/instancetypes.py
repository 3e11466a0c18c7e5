"""What EC2 says about an instance type: architecture (for the AMI) and EFA (for networking).
What one node of a type offers pods is `cloud.type_figures`'.

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
