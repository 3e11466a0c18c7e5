"""Network interfaces on network cards other than the first, and their interface type (EFA).

moto keeps an instance's interfaces in a dict keyed by device index, ignores a launch
template's NetworkInterfaces, and answers every interface as `interface` on network card 0.
A p5.48xlarge with one EFA interface per card has 32 interfaces, 31 of them on device
index 1 of their own card: moto would keep one and orphan the rest. So the emulator lets
moto create only the first card's interfaces, then creates the others itself, keyed apart
from the device index, and records `InterfaceType` and `NetworkCardIndex` on each one.

P8 `Attachment.__init__`: moto builds an attachment's view with NetworkCardIndex 0; the
patch reads the interface's own card.
P8b `EC2Backend.attach_network_interface`: moto attaches an interface to an instance in any
state, terminated included, where it then stays in use forever. EC2 attaches only to a
running or stopped instance and refuses the rest with IncorrectInstanceState; a release
relies on that to know no new ENI can reach a gang once it is shutting down. moto also
silently replaces an interface already at the device index asked for (the first card's);
EC2 refuses the attach (InvalidParameterValue, "already has an interface attached at
device index"), so an EFA-only interface at device 1 is never lost to a later attach.

`check_layout` refuses, before anything launches, the interface layouts EC2 refuses. Both
RunInstances (request and launch template) and instant fleets (each launch template) call
it. Pages: the RunInstances API reference (SubnetId, SecurityGroupIds: "If you specify a
network interface, you must specify any subnets/security groups as part of the network
interface"; AssociatePublicIpAddress: "You cannot specify more than one network interface
in the request"), "Network cards" (an interface's card index must be one of the type's
cards; the primary interface is on card 0), and "Maximize network bandwidth on Amazon EC2
instances with multiple network cards" ("You can't use an EFA-only network interface as
the primary network interface"). Each card accepts only the interface types
DescribeInstanceTypes lists for it (NetworkCards[].InterfaceTypes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import EC2Backend
from moto.ec2.models.elastic_network_interfaces import Attachment
from moto.ec2.models.instance_types import INSTANCE_TYPES

from devenv.emulator.patching import original

# Interfaces on card c > 0 sit in the instance's dict under c * _CARD_STRIDE + device index,
# so they never collide with the first card's device indexes.
_CARD_STRIDE: Final = 1000
_ATTACHABLE_STATES: Final = frozenset({"running", "stopped"})


def check_layout(instance_type: str, *layers: Mapping[str, Any]) -> None:
    """Refuse the interface layout of a launch as EC2 does. Each layer (a request, a launch
    template's data) is checked on its own: a top-level subnet or security group beside that
    layer's interfaces; then the interfaces that win (the first layer that has any)."""
    for layer in layers:
        if layer.get("NetworkInterfaces"):
            beside = [k for k in ("SubnetId", "SecurityGroupIds", "SecurityGroups") if layer.get(k)]
            if beside:
                raise EC2ClientError(
                    "InvalidParameterCombination",
                    f"Network interfaces and an instance-level {beside[0]} may not be specified "
                    "on the same request: set them on the network interface instead.",
                )
    specs = next((list(x["NetworkInterfaces"]) for x in layers if x.get("NetworkInterfaces")), [])
    if not specs:
        return
    if len(specs) > 1 and any(_true(s.get("AssociatePublicIpAddress")) for s in specs):
        raise EC2ClientError(
            "InvalidParameterCombination",
            "The associatePublicIPAddress parameter cannot be specified when launching with "
            "multiple network interfaces.",
        )
    cards = _cards(instance_type)
    for spec in specs:
        card, device = card_of(spec), int(spec.get("DeviceIndex") or 0)
        kind = str(spec.get("InterfaceType") or "interface")
        if cards and card not in cards:
            raise EC2ClientError(
                "InvalidParameterValue",
                f"Network card index {card} is not valid for {instance_type}, which has "
                f"network cards {min(cards)} to {max(cards)}.",
            )
        if kind == "efa-only" and (card, device) == (0, 0):
            raise EC2ClientError(
                "InvalidParameterCombination",
                "An EFA-only network interface cannot be the primary network interface "
                "(network card index 0, device index 0).",
            )
        allowed = cards.get(card)
        if allowed and kind not in allowed:
            raise EC2ClientError(
                "InvalidParameterValue",
                f"Interface type {kind} is not supported on network card {card} of "
                f"{instance_type} (it supports {', '.join(allowed)}).",
            )


def check_fleet_layouts(backend: Any, fleet: Any) -> None:
    """`check_layout` for each launch template of an instant fleet; a refused fleet leaves
    no fleet record. An override's SubnetId is where the fleet puts the template's
    interfaces, so only the template is checked."""
    from devenv.emulator.instances import template_data  # instances imports the emulator state

    try:
        for spec in fleet.launch_specs:
            check_layout(str(spec.instance_type), template_data(backend, spec.launch_template_spec))
    except EC2ClientError:
        backend.fleets.pop(fleet.id, None)
        raise


def _cards(instance_type: str) -> dict[int, tuple[str, ...]]:
    """The type's network cards and the interface types each takes (empty: unknown type)."""
    network = (INSTANCE_TYPES.get(instance_type) or {}).get("NetworkInfo") or {}
    return {
        int(card.get("NetworkCardIndex", 0)): tuple(card.get("InterfaceTypes") or ())
        for card in network.get("NetworkCards") or ()
    }


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def card_of(spec: Mapping[str, Any]) -> int:
    return int(spec.get("NetworkCardIndex") or 0)


def first_card_only(specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The interface specs moto can create itself: the first card's."""
    return [dict(spec) for spec in specs if card_of(spec) == 0]


def apply_interfaces(backend: Any, instance: Any, specs: Sequence[Mapping[str, Any]]) -> None:
    """Give `instance` the interfaces of `specs` beyond what moto made, typed as asked."""
    for spec in specs:
        device_index = int(spec.get("DeviceIndex") or 0)
        card = card_of(spec)
        if card == 0 and device_index in instance.nics:
            eni = instance.nics[device_index]
        else:
            eni = _create(backend, instance, spec, device_index)
            instance.attach_eni(eni, card * _CARD_STRIDE + device_index)
            # attach_eni records the dict key as the device index; EC2 shows the real one.
            eni.device_index = device_index
        eni.interface_type = str(spec.get("InterfaceType") or "interface")
        eni.network_card_index = card


def detach_interface(instance: Any, eni: Any) -> None:
    """moto's `detach_eni`, finding the interface by identity rather than device index."""
    for key, attached in list(instance.nics.items()):
        if attached is eni:
            del instance.nics[key]
    eni.instance = None
    eni.attachment_id = None
    eni.attach_time = None
    eni.status = "available"


def _create(backend: Any, instance: Any, spec: Mapping[str, Any], device_index: int) -> Any:
    subnet_id = spec.get("SubnetId") or instance.subnet_id
    groups = list(spec.get("Groups") or [g.id for g in instance.security_groups])
    return backend.create_network_interface(
        backend.get_subnet(subnet_id),
        None,
        group_ids=groups,
        description=spec.get("Description"),
        # Interfaces EC2 creates at launch are deleted with the instance unless told not to.
        delete_on_termination=spec.get("DeleteOnTermination", True) is not False,
        device_index=device_index,
    )


# --- P8: the attachment's network card ---------------------------------------------------
def attachment_init(self: Any, eni: Any) -> None:
    original(Attachment, "__init__")(self, eni)
    self.network_card_index = int(getattr(eni, "network_card_index", 0) or 0)


# --- P8b: attach only to a running or stopped instance -----------------------------------
def backend_attach_network_interface(
    self: Any, eni_id: str, instance_id: str, device_index: int
) -> Any:
    instance = self.get_instance(instance_id)
    if instance.state not in _ATTACHABLE_STATES:
        raise EC2ClientError(
            "IncorrectInstanceState",
            f"The instance '{instance_id}' is not in a valid state for this operation.",
        )
    if int(device_index) in instance.nics:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"Instance '{instance_id}' already has an interface attached at device index "
            f"'{device_index}'.",
        )
    return original(EC2Backend, "attach_network_interface")(self, eni_id, instance_id, device_index)
