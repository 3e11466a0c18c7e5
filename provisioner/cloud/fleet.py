"""``fleet`` mode: one instant CreateFleet with MinTargetCapacity = N over many subnets,
one per zone.

Called by ``Ec2Engine.acquire``. EC2 picks the zone (all N in one zone and of one type,
which MinTargetCapacity requires and a tightly coupled gang wants) from the subnets given as
prioritized overrides. The launch template is mandatory: CreateFleet takes user data, ENIs
and the capacity-reservation target only from one. Whatever comes back, a count other than
N is terminated before anything else.

With a reservation (already looked up by ``Ec2Engine.acquire``, subnets narrowed to its
zone, so one override):

* an ODCR is named by id in ``ReservedCapacityOptions.CapacityReservationTarget`` with
  ``DefaultTargetCapacityType=reserved-capacity`` (CreateFleet's API reference,
  ReservedCapacityOptionsRequest), no fallback market and no On-Demand target or options.
  ``UsageStrategy=use-capacity-reservations-first`` is for open reservations and
  reservation groups ("Use Capacity Reservations in EC2 Fleet"), and the pool's template
  does not target the ODCR.
* a Capacity Block needs ``DefaultTargetCapacityType=capacity-block`` with the block and
  its ``MarketType`` in the template ("Tutorial: Configure your EC2 Fleet to launch
  instances into Capacity Blocks"), no ``OnDemandTargetCapacity`` and no ``OnDemandOptions``.

MinTargetCapacity lives in ``OnDemandOptions`` only, so neither reserved request can ask
EC2 for all-or-nothing: EC2 fills what the reservation holds and returns the partial set,
and the rollback below keeps N-or-0.

An instant fleet's answer is final for its ClientToken: replaying the token returns the same
answer. So every outcome without N instances ends the generation (CAPACITY, MALFORMED or
CONFIG), and only an error raised by the call itself (throttling, 5xx, a lost connection)
is RETRYABLE with the same token.
"""

from __future__ import annotations

from typing import Any

from provisioner.cloud import naming
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import (
    CloudError,
    ErrorKind,
    classify_code,
    describe_code,
    is_unoffered,
    to_cloud_error,
)
from provisioner.cloud.rollback import roll_back
from provisioner.cloud.tags import (
    FLEET_RESOURCE_TYPES,
    launch_tags,
    organization_denial,
    tag_specifications,
)
from provisioner.cloud.types import LaunchAttempt, LaunchResult, LaunchSpec, SubnetRef


def request_params(spec: LaunchSpec, token: str) -> dict[str, Any]:
    lt = spec.launch_template
    if lt is None:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "FleetNeedsLaunchTemplate",
            "fleet mode needs the pool's launch template (CreateFleet takes user data and "
            "network interfaces only from one); let the pool's stack create it first, or use "
            "mode runinstances.",
        )
    overrides: list[dict[str, Any]] = []
    zones: set[str] = set()
    for subnet in spec.subnets:
        # EC2 refuses two overrides of one instance type in one zone ("duplicate instance
        # pools", InvalidFleetConfig), and EKS clusters commonly have a public and a private
        # subnet per zone: the zone's first subnet in the plan's order stands for it.
        if subnet.availability_zone in zones:
            continue
        zones.add(subnet.availability_zone)
        override: dict[str, Any] = {
            "InstanceType": spec.instance_type,
            "SubnetId": subnet.subnet_id,
            "Priority": float(len(overrides)),
        }
        if spec.ami_id:
            override["ImageId"] = spec.ami_id
        if spec.placement_group_name:
            override["Placement"] = {"GroupName": spec.placement_group_name}
        overrides.append(override)
    target: dict[str, Any] = {"TotalTargetCapacity": spec.count}
    params: dict[str, Any] = {}
    cr = spec.capacity_reservation
    if cr is not None and cr.kind == "capacity-block":
        # The block and its market type come from the launch template; a capacity-block
        # fleet takes no On-Demand target or options.
        target["DefaultTargetCapacityType"] = "capacity-block"
    elif cr is not None:
        # An ODCR by id: reserved capacity, named here (UsageStrategy is for open
        # reservations and groups, and a fleet does not use a template's id target).
        # No fallback market: the gang runs in the reservation or not at all.
        target["DefaultTargetCapacityType"] = "reserved-capacity"
        params["ReservedCapacityOptions"] = {
            "ReservationTypes": ["on-demand-capacity-reservation"],
            "CapacityReservationTarget": {"CapacityReservationIds": [cr.reservation_id]},
        }
    else:
        target["DefaultTargetCapacityType"] = "on-demand"
        target["OnDemandTargetCapacity"] = spec.count
        params["OnDemandOptions"] = {
            "MinTargetCapacity": spec.count,
            "SingleInstanceType": True,
            "SingleAvailabilityZone": True,
            "AllocationStrategy": "prioritized",
        }
    return {
        "Type": "instant",
        "ClientToken": token,
        "TargetCapacitySpecification": target,
        **params,
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": lt.specification(),
                "Overrides": overrides,
            }
        ],
        "TagSpecifications": tag_specifications(launch_tags(spec), FLEET_RESOURCE_TYPES),
    }


def request(spec: LaunchSpec) -> dict[str, Any]:
    """The CreateFleet request with its token: what `launch_fleet` sends and
    `atomic-gang doctor` dry-runs."""
    return request_params(spec, spec.client_token(naming.FLEET_DISCRIMINATOR))


def launch_fleet(ec2: Ec2Api, spec: LaunchSpec) -> LaunchResult:
    params = request(spec)
    token = str(params["ClientToken"])
    try:
        response = ec2.create_fleet(**params)
    except Exception as exc:
        what = f"CreateFleet of {spec.count} x {spec.instance_type}"
        raise organization_denial(exc, what, spec) or to_cloud_error(exc, what) from exc
    by_id = {s.subnet_id: s for s in spec.subnets}
    ids: list[str] = []
    used: list[SubnetRef] = []
    for group in response.get("Instances") or ():
        subnet_id = ((group.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}).get(
            "SubnetId"
        )
        for iid in group.get("InstanceIds") or ():
            ids.append(str(iid))
            if subnet_id in by_id and by_id[subnet_id] not in used:
                used.append(by_id[subnet_id])
    ids = list(dict.fromkeys(ids))
    codes = [str(e.get("ErrorCode", "")) for e in response.get("Errors") or ()]
    fleet_id = response.get("FleetId")
    if len(ids) == spec.count:
        return LaunchResult(
            instance_ids=tuple(ids),
            mode="fleet",
            group=spec.group,
            client_token=token,
            subnets=tuple(used),
            fleet_id=fleet_id,
            attempts=(LaunchAttempt(token, None, None),),
        )
    raise _failed(ec2, spec, ids, codes, response)


def _failed(
    ec2: Ec2Api, spec: LaunchSpec, ids: list[str], codes: list[str], response: dict[str, Any]
) -> CloudError:
    messages = (
        "; ".join(
            f"{e.get('ErrorCode')}: {e.get('ErrorMessage', '')}"
            for e in response.get("Errors") or ()
        )
        or "no errors reported"
    )
    said = (
        f"Instant fleet {response.get('FleetId')} returned {len(ids)} of {spec.count} "
        f"x {spec.instance_type} ({messages})."
    )
    kinds = [classify_code(code) for code in codes]
    if ids:
        return roll_back(
            ec2,
            ids,
            kind=ErrorKind.MALFORMED,
            code=codes[0] if codes else None,
            reason="PartialFleet",
            message=said,
        )
    if codes and all(is_unoffered(code) for code in codes):
        reason, fix = describe_code(codes[0], ErrorKind.CONFIG)
        return CloudError(ErrorKind.CONFIG, codes[0], reason, f"{said} {fix}")
    config = [code for code, kind in zip(codes, kinds, strict=True) if kind is ErrorKind.CONFIG]
    if config:
        reason, fix = describe_code(config[0], ErrorKind.CONFIG)
        return CloudError(ErrorKind.CONFIG, config[0], reason, f"{said} {fix}")
    capacity = [
        code
        for code, kind in zip(codes, kinds, strict=True)
        if kind is ErrorKind.CAPACITY and not is_unoffered(code)
    ]
    if capacity:
        reason, fix = describe_code(capacity[0], ErrorKind.CAPACITY)
        return CloudError(ErrorKind.CAPACITY, capacity[0], reason, f"{said} {fix}")
    return CloudError(
        ErrorKind.MALFORMED,
        codes[0] if codes else None,
        "EmptyFleet",
        f"{said} The answer is final for this token; the next generation tries again.",
    )
