"""``runinstances`` mode: RunInstances with MinCount == MaxCount == N, one subnet per try.

Called by ``Ec2Engine.acquire``, which has already narrowed the subnets to a reservation's
zone and filled in its kind. EC2 admits or refuses the whole request, so each try
launches N or nothing. The sweep walks the spec's ordered subnets (every candidate of each
zone, in the order ``subnets`` states): a capacity shortfall moves to the next zone; a
subnet out of addresses to the zone's next subnet; a quota, configuration, throttling or
unknown error stops it at once (the next subnet would answer the same, or the reconciler's
backoff should decide). Each try carries its own ClientToken (see ``naming``).
"""

from __future__ import annotations

from typing import Any

from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import (
    CloudError,
    ErrorKind,
    classify,
    error_code,
    is_quota,
    is_unoffered,
    to_cloud_error,
)
from provisioner.cloud.instancetypes import efa_cards, efa_interfaces, uses_efa_only
from provisioner.cloud.rollback import roll_back
from provisioner.cloud.tags import (
    RUNINSTANCES_RESOURCE_TYPES,
    launch_tags,
    organization_denial,
    tag_specifications,
)
from provisioner.cloud.types import (
    InstanceTypeInfo,
    LaunchAttempt,
    LaunchResult,
    LaunchSpec,
    SubnetRef,
)

# A subnet out of addresses says nothing about the zone's capacity; other codes do.
_SUBNET_ONLY_CODES = frozenset({"InsufficientFreeAddressesInSubnet"})


def request_params(
    spec: LaunchSpec, subnet: SubnetRef, token: str, info: InstanceTypeInfo | None
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "MinCount": spec.count,
        "MaxCount": spec.count,
        "ClientToken": token,
        "InstanceType": spec.instance_type,
        "TagSpecifications": tag_specifications(launch_tags(spec), RUNINSTANCES_RESOURCE_TYPES),
    }
    if spec.launch_template is not None:
        params["LaunchTemplate"] = spec.launch_template.specification()
    else:
        # The launch template carries IMDSv2 when there is one; without it, set it here.
        params["MetadataOptions"] = {"HttpTokens": "required", "HttpPutResponseHopLimit": 2}
    if spec.ami_id:
        params["ImageId"] = spec.ami_id
    if spec.user_data:
        params["UserData"] = spec.user_data
    if spec.instance_profile is not None:
        ref = spec.instance_profile
        params["IamInstanceProfile"] = {"Arn": ref.arn} if ref.arn else {"Name": ref.name}
    if spec.efa and info is not None:
        params["NetworkInterfaces"] = efa_interfaces(
            efa_cards(info), spec.security_group_ids, subnet.subnet_id, efa_only=uses_efa_only(info)
        )
    else:
        params["SubnetId"] = subnet.subnet_id
        if spec.security_group_ids:
            params["SecurityGroupIds"] = list(spec.security_group_ids)
    if spec.placement_group_name:
        params["Placement"] = {"GroupName": spec.placement_group_name}
    cr = spec.capacity_reservation
    if cr is not None:
        params["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": cr.reservation_id}
        }
        if cr.kind == "capacity-block":
            params["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return params


def request(spec: LaunchSpec, subnet: SubnetRef, info: InstanceTypeInfo | None) -> dict[str, Any]:
    """The RunInstances request of the sweep's try in ``subnet``, with its own token: what
    `launch_runinstances` sends and `atomic-gang doctor` dry-runs."""
    return request_params(spec, subnet, spec.client_token(subnet.subnet_id), info)


def launch_runinstances(
    ec2: Ec2Api, spec: LaunchSpec, info: InstanceTypeInfo | None
) -> LaunchResult:
    if spec.launch_template is None and not spec.ami_id:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "NoImage",
            "A launch without a launch template needs an AMI id; resolve one first.",
        )
    attempts: list[LaunchAttempt] = []
    try:
        return _sweep(ec2, spec, info, attempts)
    except CloudError as err:
        err.calls = len(attempts)  # the account's launch budget charges each one
        raise


def _sweep(
    ec2: Ec2Api, spec: LaunchSpec, info: InstanceTypeInfo | None, attempts: list[LaunchAttempt]
) -> LaunchResult:
    """Each subnet in turn (skipping zones found short) until one takes the whole gang;
    every request sent is appended to `attempts`."""
    short_zones: set[str] = set()
    for subnet in spec.subnets:
        if subnet.availability_zone in short_zones:
            continue
        params = request(spec, subnet, info)
        token = str(params["ClientToken"])
        try:
            response = ec2.run_instances(**params)
        except Exception as exc:
            code = error_code(exc) or type(exc).__name__
            attempts.append(LaunchAttempt(token, subnet, code))
            if classify(exc) is ErrorKind.CAPACITY and not is_quota(code):
                if code not in _SUBNET_ONLY_CODES:
                    short_zones.add(subnet.availability_zone)
                continue
            what = (
                f"RunInstances of {spec.count} x {spec.instance_type} in {subnet.subnet_id} "
                f"({subnet.availability_zone})"
            )
            raise organization_denial(exc, what, spec) or to_cloud_error(exc, what) from exc
        attempts.append(LaunchAttempt(token, subnet, None))
        ids = [str(i["InstanceId"]) for i in response.get("Instances") or ()]
        if len(set(ids)) != spec.count:
            raise roll_back(
                ec2,
                ids,
                kind=ErrorKind.MALFORMED,
                code=None,
                reason="MalformedLaunch",
                message=f"RunInstances with MinCount=MaxCount={spec.count} returned "
                f"{len(set(ids))} instances in {subnet.subnet_id}.",
            )
        return LaunchResult(
            instance_ids=tuple(ids),
            mode="runinstances",
            group=spec.group,
            client_token=token,
            subnets=(subnet,),
            reservation_id=response.get("ReservationId"),
            attempts=tuple(attempts),
        )
    raise _shortfall(spec, attempts)


def _shortfall(spec: LaunchSpec, attempts: list[LaunchAttempt]) -> CloudError:
    tried = "; ".join(
        f"{a.subnet.subnet_id} ({a.subnet.availability_zone}): {a.error_code}"
        for a in attempts
        if a.subnet is not None
    )
    codes = [a.error_code for a in attempts]
    if codes and all(is_unoffered(code) for code in codes):
        return CloudError(
            ErrorKind.CONFIG,
            codes[0],
            "InstanceTypeNotOffered",
            f"{spec.instance_type} is not offered in any zone of the gang ({tried}); choose "
            "zones that offer it (aws ec2 describe-instance-type-offerings).",
        )
    return CloudError(
        ErrorKind.CAPACITY,
        next((code for code in codes if not is_unoffered(code)), None),
        "InsufficientCapacity",
        f"No zone could take {spec.count} x {spec.instance_type} now ({tried}). Nothing was "
        "left running; the gang stays pending at $0 and is retried whole. For large gangs "
        "reserve capacity and set atomic-gang.k8s.aws/capacity-reservation-id.",
    )
