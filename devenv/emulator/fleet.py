"""P3: CreateFleet Type=instant, placed over the overrides by the capacity model."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

from devenv.emulator.fleet_plan import FleetRequest, FleetSlot, plan_fleet
from devenv.emulator.instances import request_az, template_data
from devenv.emulator.model import FLEET_ID_TAG, insufficient_capacity_message, request_fingerprint
from devenv.emulator.patching import original
from devenv.emulator.state import EMULATOR


# --- P3: CreateFleet, instant ------------------------------------------------------------
def create_fleet_handler(self: Any) -> ActionResult:
    params: dict[str, Any] = self.params
    if params.get("Type") != "instant":
        result: ActionResult = original(EC2Response, "create_fleet")(self)
        return result
    self.error_on_dryrun()
    backend = self.ec2_backend
    token = params.get("ClientToken")
    fingerprint = request_fingerprint(params)
    if token:
        earlier = EMULATOR.recall(backend, "CreateFleet", token, fingerprint)
        if earlier is not None:
            return ActionResult(copy.deepcopy(earlier))
    request = FleetRequest.from_params(params)
    fleet = _empty_fleet(backend, params, request)
    answer = _fill_fleet(backend, fleet, request)
    if token:
        EMULATOR.remember(backend, "CreateFleet", token, fingerprint, copy.deepcopy(answer))
    return ActionResult(answer)


def _empty_fleet(backend: Any, params: Mapping[str, Any], request: FleetRequest) -> Any:
    """A moto Fleet record (for DescribeFleets, DeleteFleets, termination) that launched nothing."""
    target = dict(params.get("TargetCapacitySpecification") or {})
    zero = {
        **target,
        "TotalTargetCapacity": 0,
        "OnDemandTargetCapacity": 0,
        "SpotTargetCapacity": 0,
    }
    try:
        fleet = backend.create_fleet(
            on_demand_options=params.get("OnDemandOptions") or {},
            spot_options=params.get("SpotOptions") or {},
            target_capacity_specification=zero,
            launch_template_configs=params.get("LaunchTemplateConfigs") or [],
            excess_capacity_termination_policy=params.get("ExcessCapacityTerminationPolicy"),
            replace_unhealthy_instances=params.get("ReplaceUnhealthyInstances"),
            terminate_instances_with_expiration=params.get(
                "TerminateInstancesWithExpiration", True
            ),
            fleet_type="instant",
            valid_from=params.get("ValidFrom"),
            valid_until=params.get("ValidUntil"),
            tag_specifications=params.get("TagSpecifications") or [],
        )
    except KeyError as missing:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"A launch template config has no {missing.args[0]} in its template or overrides.",
        ) from None
    if not fleet.launch_specs:
        raise EC2ClientError(
            "InvalidParameterValue", "LaunchTemplateConfigs names no launch template."
        )
    fleet.target_capacity_specification = target
    fleet.target_capacity = request.total
    return fleet


def _fill_fleet(backend: Any, fleet: Any, request: FleetRequest) -> dict[str, Any]:
    slots = [_fleet_slot(backend, i, spec) for i, spec in enumerate(fleet.launch_specs)]
    free = {slot.pool: EMULATOR.free_slots(backend, *slot.pool) for slot in slots}
    allocation = plan_fleet(
        slots,
        request.total,
        single_az=request.single_az,
        single_type=request.single_type,
        free=free,
    )
    placed = sum(allocation.values())
    if placed == 0 or placed < request.min_target:
        errors = [_fleet_error(fleet, slot, request, placed) for slot in slots]
        return {"FleetId": fleet.id, "Instances": [], "Errors": errors}
    errors = [
        _fleet_error(fleet, slot, request, placed)
        for slot in slots
        if placed < request.total and free[slot.pool] <= _used(allocation, slots, slot.pool)
    ]
    _withhold(allocation, EMULATOR.take_partial_fleet())
    instances = [
        _launch_slot(backend, fleet, slots[index], count, request.lifecycle)
        for index, count in sorted(allocation.items())
        if count > 0
    ]
    return {"FleetId": fleet.id, "Instances": instances, "Errors": errors}


def _fleet_slot(backend: Any, index: int, spec: Any) -> FleetSlot:
    overrides = spec.overrides or {}
    if spec.subnet_id:
        az = str(backend.get_subnet(spec.subnet_id).availability_zone)
    else:
        template = template_data(backend, spec.launch_template_spec)
        az = str(
            overrides.get("AvailabilityZone")
            or request_az(backend, template)
            or f"{backend.region_name}a"
        )
    priority = overrides.get("Priority")
    return FleetSlot(
        index=index,
        az=az,
        instance_type=str(spec.instance_type),
        priority=float(priority) if priority is not None else float("inf"),
    )


def _used(allocation: Mapping[int, int], slots: Sequence[FleetSlot], pool: tuple[str, str]) -> int:
    return sum(allocation.get(slot.index, 0) for slot in slots if slot.pool == pool)


def _withhold(allocation: dict[int, int], missing: int) -> None:
    """Take `missing` instances off the plan, last slots first (the partial-fleet switch)."""
    for index in sorted(allocation, reverse=True):
        taken = min(missing, allocation[index])
        allocation[index] -= taken
        missing -= taken


def _launch_slot(
    backend: Any, fleet: Any, slot: FleetSlot, count: int, lifecycle: str
) -> dict[str, Any]:
    spec = fleet.launch_specs[slot.index]
    tags = copy.deepcopy(spec.tag_specifications)
    tags.setdefault("instance", {})[FLEET_ID_TAG] = fleet.id
    reservation = backend.run_instances(
        spec.image_id,
        count,
        spec.user_data,
        list(spec.group_set or []),
        instance_type=spec.instance_type,
        is_instance_type_default=False,
        region_name=backend.region_name,
        subnet_id=spec.subnet_id,
        placement=None if spec.subnet_id else slot.az,
        key_name=spec.key_name,
        fleet_id=fleet.id,
        tags=tags,
        launch_template=spec.launch_template_spec,
        instance_market_options="spot" if lifecycle == "spot" else {},
    )
    for instance in reservation.instances:
        fleet.on_demand_instances.append(
            {"id": reservation.id, "instance": instance, "launch_spec": spec}
        )
    fleet.fulfilled_capacity += count
    return {
        "LaunchTemplateAndOverrides": _template_and_overrides(spec),
        "Lifecycle": lifecycle,
        "InstanceIds": [instance.id for instance in reservation.instances],
        "InstanceType": spec.instance_type,
    }


def _fleet_error(fleet: Any, slot: FleetSlot, request: FleetRequest, placed: int) -> dict[str, Any]:
    spec = fleet.launch_specs[slot.index]
    message = insufficient_capacity_message(slot.instance_type, slot.az, [])
    if placed < request.min_target:
        message += (
            f" The fleet could place {placed} of the {request.min_target} instances "
            "MinTargetCapacity requires, so it launched none."
        )
    return {
        "LaunchTemplateAndOverrides": _template_and_overrides(spec),
        "Lifecycle": request.lifecycle,
        "ErrorCode": "InsufficientInstanceCapacity",
        "ErrorMessage": message,
    }


def _template_and_overrides(spec: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {"LaunchTemplateSpecification": dict(spec.launch_template_spec or {})}
    if spec.overrides:
        answer["Overrides"] = dict(spec.overrides)
    return answer
