"""Where a gang may launch: the ordered subnets of a launch spec.

Called by the GangNodePool reconciler (through ``Ec2Engine.plan_subnets``) when it builds a
launch spec. Precedence follows the Job annotations: explicit subnets win and keep the
user's zone order (the zone of the first subnet named goes first); else the EKS cluster's
own subnets, filtered and ordered by the requested availability zones, or by zone name when
none were requested.

The rule, per zone (the same in both modes): a subnet with fewer free addresses
(DescribeSubnets ``AvailableIpAddressCount``) than the gang needs (``addresses_needed``: one
per network interface of every node) ranks last; then private subnets (nodes need no public
address); then the most free addresses; then the subnet id, so equal subnets keep one order.
The answer lists every candidate subnet of each zone in that order:

* ``runinstances`` sweeps it: a capacity shortfall moves to the next zone (a second subnet
  of a zone that just said "no capacity" would only repeat the answer), a subnet-only
  failure (``InsufficientFreeAddressesInSubnet``) to the zone's next subnet.
* ``fleet`` sends the zone's first subnet as its override (EC2 refuses two overrides of one
  instance type in one zone, see ``fleet.request_params``). Its fallbacks are used on a later
  attempt: the plan is made again for each launch, and a subnet that ran out of addresses
  now shows it and ranks behind the zone's other subnets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from provisioner.api import constants as c
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.types import Mode, SubnetRef


def _config(reason: str, message: str) -> CloudError:
    return CloudError(ErrorKind.CONFIG, None, reason, message)


def _describe(ec2: Ec2Api, subnet_ids: Sequence[str]) -> list[dict[str, Any]]:
    try:
        found: list[dict[str, Any]] = ec2.describe_subnets(SubnetIds=list(subnet_ids))["Subnets"]
    except Exception as exc:
        raise to_cloud_error(exc, f"DescribeSubnets {', '.join(subnet_ids)}") from exc
    return found


def _rank(subnet: dict[str, Any], addresses_needed: int) -> tuple[bool, bool, int, str]:
    free = int(subnet.get("AvailableIpAddressCount", 0))
    return (
        free < addresses_needed,
        bool(subnet.get("MapPublicIpOnLaunch")),
        -free,
        str(subnet["SubnetId"]),
    )


def plan_subnets(
    ec2: Ec2Api,
    *,
    mode: Mode,
    cluster_subnet_ids: Sequence[str],
    explicit_subnet_ids: Sequence[str] = (),
    availability_zones: Sequence[str] = (),
    vpc_id: str | None = None,
    addresses_needed: int = 0,
) -> tuple[SubnetRef, ...]:
    if explicit_subnet_ids and availability_zones:
        raise _config(
            "SubnetsAndZones",
            f"{c.ANN_SUBNETS} and {c.ANN_AVAILABILITY_ZONES} are mutually exclusive; set one.",
        )
    if explicit_subnet_ids:
        return _explicit(ec2, explicit_subnet_ids, vpc_id, addresses_needed)
    if not cluster_subnet_ids:
        raise _config(
            "NoClusterSubnets",
            f"The EKS cluster lists no subnets; set {c.ANN_SUBNETS} on the Job.",
        )
    found = _describe(ec2, cluster_subnet_ids)
    zones = list(dict.fromkeys(availability_zones)) or sorted(
        {str(s["AvailabilityZone"]) for s in found}
    )
    missing = [z for z in zones if not any(s["AvailabilityZone"] == z for s in found)]
    if missing:
        raise _config(
            "NoSubnetInZone",
            f"The cluster has no subnet in {', '.join(missing)}; fix "
            f"{c.ANN_AVAILABILITY_ZONES} or add a cluster subnet there.",
        )
    return _ranked(found, zones, addresses_needed)


def _ranked(
    subnets: Sequence[dict[str, Any]], zones: Sequence[str], addresses_needed: int
) -> tuple[SubnetRef, ...]:
    """Every subnet of each zone, zone by zone, each zone's in rank order (`_rank`)."""
    plan: list[SubnetRef] = []
    for zone in zones:
        ranked = sorted(
            (s for s in subnets if s["AvailabilityZone"] == zone),
            key=lambda s: _rank(s, addresses_needed),
        )
        plan.extend(SubnetRef(str(s["SubnetId"]), zone) for s in ranked)
    return tuple(plan)


def _explicit(
    ec2: Ec2Api, subnet_ids: Sequence[str], vpc_id: str | None, addresses_needed: int
) -> tuple[SubnetRef, ...]:
    ordered = list(dict.fromkeys(subnet_ids))
    by_id = {str(s["SubnetId"]): s for s in _describe(ec2, ordered)}
    unknown = [s for s in ordered if s not in by_id]
    if unknown:
        raise _config(
            "InvalidSubnet",
            f"Subnets {', '.join(unknown)} do not exist in this region; fix {c.ANN_SUBNETS}.",
        )
    if vpc_id:
        foreign = [s for s in ordered if by_id[s].get("VpcId") != vpc_id]
        if foreign:
            raise _config(
                "SubnetOutsideClusterVpc",
                f"Subnets {', '.join(foreign)} are not in the cluster's VPC {vpc_id}; nodes "
                f"there cannot join. Fix {c.ANN_SUBNETS}.",
            )
    # The user's order says which zone to try first; inside a zone, the named subnets rank
    # as discovered ones do, so a nearly full subnet named first does not hold the gang
    # (fleet sends one per zone, and the others are its fallbacks on the next attempt).
    zones = list(dict.fromkeys(str(by_id[s]["AvailabilityZone"]) for s in ordered))
    return _ranked([by_id[s] for s in ordered], zones, addresses_needed)
