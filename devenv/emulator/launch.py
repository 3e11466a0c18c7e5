"""What a launch asks of EC2 beyond moto's reach, and what it leaves on the instances.

Both launch paths use it: RunInstances (request parameters over its launch template's) and
instant fleets (each override over its launch template's). moto reads none of the
reservation, market-type, placement-group or multi-card interface fields, so the
emulator resolves them here and writes the outcome on moto's instance objects, where
DescribeInstances serializes it: `CapacityReservationId`,
`CapacityReservationSpecification`, `InstanceLifecycle` (capacity-block), and
`Placement.GroupName`. `recorded_launch` wraps both handlers: the IAM check, and the
launch log entry every answer leaves.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from moto.ec2.exceptions import EC2ClientError

from devenv.emulator.authorization import (
    StatusAnswer,
    as_answer,
    authorize,
    permission_answer,
)
from devenv.emulator.interfaces import apply_interfaces
from devenv.emulator.placement import PlacementBook, PlacementGroup
from devenv.emulator.reservations import CAPACITY_BLOCK_MARKET
from devenv.emulator.root_volume import settle_root_volume
from devenv.emulator.state import EMULATOR


def recorded_launch(response: Any, action: str, launch: Callable[[], tuple[Any, list[str]]]) -> Any:
    """Authorize `action` (RunInstances, CreateFleet) and run `launch` (its answer and the
    ids of the instances it launched), recording the request as received in the launch log
    whatever the answer: the instances, the error code, or the status answer's code
    (UnauthorizedOperation, or a dry run's DryRunOperation)."""
    received = copy.deepcopy(response.params)
    try:
        authorize(response, f"ec2:{action}")
        permission_answer(response)
        answer, instance_ids = launch()
    except EC2ClientError as error:
        EMULATOR.record_launch(action, received, [], str(error.code))
        raise
    except StatusAnswer as status:
        EMULATOR.record_launch(action, received, [], status.code)
        return as_answer(status)
    EMULATOR.record_launch(action, received, instance_ids, None)
    return answer


@dataclass(frozen=True)
class LaunchOptions:
    preference: str | None
    reservation_id: str | None
    market_type: str | None
    group_name: str | None
    group_id: str | None
    interfaces: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, *layers: Mapping[str, Any]) -> LaunchOptions:
        """Read from `layers`, the first that sets a field winning (request, then template)."""
        spec = _first(layers, "CapacityReservationSpecification")
        target = spec.get("CapacityReservationTarget") or {}
        market = _first(layers, "InstanceMarketOptions")
        interfaces = next(
            (list(x["NetworkInterfaces"]) for x in layers if x.get("NetworkInterfaces")), []
        )
        placement = {
            k: v for layer in reversed(layers) for k, v in (layer.get("Placement") or {}).items()
        }
        return cls(
            preference=_opt(spec.get("CapacityReservationPreference")),
            reservation_id=_opt(target.get("CapacityReservationId")),
            market_type=_opt(market.get("MarketType")),
            group_name=_opt(placement.get("GroupName")),
            group_id=_opt(placement.get("GroupId")),
            interfaces=tuple(dict(i) for i in interfaces),
        )

    def check(self) -> None:
        """Refusals EC2 makes from the request alone."""
        if self.market_type == CAPACITY_BLOCK_MARKET and not self.reservation_id:
            raise EC2ClientError(
                "InvalidParameterCombination",
                "MarketType capacity-block requires CapacityReservationSpecification."
                "CapacityReservationTarget.CapacityReservationId naming a Capacity Block.",
            )
        if self.reservation_id and self.preference not in (None, "capacity-reservations-only"):
            raise EC2ClientError(
                "InvalidParameterCombination",
                "CapacityReservationTarget can only be given with CapacityReservationPreference "
                f"capacity-reservations-only, not {self.preference}.",
            )

    def placement_group(self, backend: Any, book: PlacementBook) -> PlacementGroup | None:
        if not (self.group_name or self.group_id):
            return None
        return book.find(backend, name=self.group_name, group_id=self.group_id)


def decorate(
    backend: Any,
    instances: Sequence[Any],
    options: LaunchOptions,
    reservation_ids: Sequence[str | None],
    group: PlacementGroup | None,
) -> None:
    """Write what EC2 would show on each launched instance (reservation_ids in order)."""
    for instance, reservation_id in zip(instances, reservation_ids, strict=False):
        instance.capacity_reservation_id = reservation_id
        instance.capacity_reservation_specification = _specification(options)
        if reservation_id and options.market_type == CAPACITY_BLOCK_MARKET:
            instance.instance_lifecycle = CAPACITY_BLOCK_MARKET
            instance.lifecycle = CAPACITY_BLOCK_MARKET
        if group is not None:
            instance.placement.group_name = group.name
            vars(instance.placement)["group_id"] = group.group_id
        if options.interfaces:
            apply_interfaces(backend, instance, options.interfaces)
        settle_root_volume(backend, instance)


def _specification(options: LaunchOptions) -> dict[str, Any]:
    if options.reservation_id:
        return {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationId": options.reservation_id},
        }
    return {"CapacityReservationPreference": options.preference or "open"}


def _first(layers: Sequence[Mapping[str, Any]], key: str) -> dict[str, Any]:
    return next((dict(layer[key]) for layer in layers if layer.get(key)), {})


def _opt(value: Any) -> str | None:
    return str(value) if value else None


def check_networks(backend: Any, params: Mapping[str, Any], template: Mapping[str, Any]) -> None:
    """EC2's refusals of a launch's subnets and security groups, request over template.

    "Error codes for the Amazon EC2 API": InvalidSubnetID.NotFound, and InvalidParameter for
    a parameter that cannot be used, which is EC2's answer to a security group of another
    VPC than the subnet the instance launches into (a security group belongs to one VPC:
    "Security groups for your VPC", Amazon VPC User Guide). moto checks neither before
    launching, and a dry run never reaches moto's launch.
    """
    interfaces = params.get("NetworkInterfaces") or template.get("NetworkInterfaces") or []
    pairs: list[tuple[str | None, list[str]]] = [
        (spec.get("SubnetId"), [str(g) for g in spec.get("Groups") or []]) for spec in interfaces
    ]
    if not interfaces:
        groups = params.get("SecurityGroupIds") or template.get("SecurityGroupIds") or []
        pairs = [(params.get("SubnetId") or template.get("SubnetId"), [str(g) for g in groups])]
    for subnet_id, group_ids in pairs:
        subnet = backend.get_subnet(str(subnet_id)) if subnet_id else None
        for group_id in group_ids:
            group = backend.get_security_group_from_id(group_id)
            # An unknown group is left to moto (which launches with it): EC2 would refuse it
            # with InvalidGroup.NotFound, but the emulator's own callers pass made-up ids.
            if group is not None and subnet is not None and group.vpc_id != subnet.vpc_id:
                raise EC2ClientError(
                    "InvalidParameter",
                    f"Security group {group_id} and subnet {subnet.id} belong to different "
                    "networks.",
                )
