"""P3: EC2 CreateFleet Type=instant, placed over the overrides by the capacity model.

moto launches the whole target on one override, never fails and lists one entry per
instance. The patch places instances over the overrides as capacity (and reservations, see
`fleet_reserved`) allows, honours MinTargetCapacity with SingleAvailabilityZone and
SingleInstanceType (short of the minimum it launches nothing and answers `Errors`), groups
InstanceIds per override, tags instances with `aws:ec2:fleet-id`, replays a seen
ClientToken, keeps the fleet's ClientToken for DescribeFleets (moto drops it; "FleetData"
in the EC2 API Reference lists `ClientToken`, and "CreateFleet" says a request without one
gets a randomly generated token), can be told to return fewer instances than asked (the
short-answer switch), and records the request in the launch log. Other fleet types stay
moto's.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

from devenv.emulator.authorization import dry_run_answer
from devenv.emulator.fleet_plan import FleetRequest, FleetSlot, plan_fleet
from devenv.emulator.fleet_reserved import (
    RESERVED_LIFECYCLE,
    SlotSource,
    check_block_fleet,
    is_block_fleet,
    reservations_first,
    reserved_slot_source,
    reserved_target,
    slot_source,
)
from devenv.emulator.instance_profiles import profile_refusal
from devenv.emulator.instances import request_az, template_data
from devenv.emulator.interfaces import check_fleet_layouts
from devenv.emulator.launch import LaunchOptions, decorate, recorded_launch
from devenv.emulator.model import FLEET_ID_TAG, insufficient_capacity_message, request_fingerprint
from devenv.emulator.patching import original
from devenv.emulator.state import EMULATOR

ACTION = "CreateFleet"


def create_fleet_handler(self: Any) -> Any:
    params: dict[str, Any] = self.params
    if params.get("Type") != "instant":
        result: ActionResult = original(EC2Response, "create_fleet")(self)
        return result

    def launch() -> tuple[ActionResult, list[str]]:
        answer = _instant(self, self.ec2_backend, params)
        ids = [i for group in answer["Instances"] for i in group["InstanceIds"]]
        return ActionResult(answer), ids

    return recorded_launch(self, ACTION, launch)


def _instant(response: Any, backend: Any, params: dict[str, Any]) -> dict[str, Any]:
    token = params.get("ClientToken")
    fingerprint = request_fingerprint(params)
    dry_run = str(params.get("DryRun", "")).lower() == "true"
    if token and not dry_run:
        earlier = EMULATOR.recall(backend, ACTION, token, fingerprint)
        if earlier is not None:
            return dict(copy.deepcopy(earlier))
    request = FleetRequest.from_params(params)
    fleet = _empty_fleet(backend, params, request)
    fleet.client_token = token or f"{uuid.uuid4()}"
    _refuse_duplicate_pools(backend, fleet)
    check_fleet_layouts(backend, fleet)
    if dry_run:
        # Refusals from the request itself, then EC2's DryRun answer; no fleet is kept.
        backend.fleets.pop(fleet.id, None)
        if is_block_fleet(params):
            check_block_fleet(params, [_options(backend, spec) for spec in fleet.launch_specs])
        dry_run_answer(response)
    answer = _unknown_profile(fleet, backend, request) or _fill_fleet(
        backend, fleet, request, params
    )
    if token:
        EMULATOR.remember(backend, ACTION, token, fingerprint, copy.deepcopy(answer))
    return answer


def _unknown_profile(fleet: Any, backend: Any, request: FleetRequest) -> dict[str, Any] | None:
    """A fleet whose launch template names an instance profile EC2 does not know launches
    nothing and lists EC2's answer per override (``instance_profiles``)."""
    errors = []
    for spec in fleet.launch_specs:
        # moto keeps the template's IamInstanceProfile as it came ({"Arn": ...} or
        # {"Name": ...}) and its property wraps that once more in {"Arn": ...}.
        raw = getattr(spec, "_iam_instance_profile_arn", None)
        refusal = profile_refusal(backend, raw if isinstance(raw, dict) else {"Arn": raw})
        if refusal is not None:
            errors.append(
                {
                    "LaunchTemplateAndOverrides": _template_and_overrides(spec),
                    "Lifecycle": request.lifecycle,
                    "ErrorCode": refusal[0],
                    "ErrorMessage": refusal[1],
                }
            )
    return {"FleetId": fleet.id, "Instances": [], "Errors": errors} if errors else None


def _refuse_duplicate_pools(backend: Any, fleet: Any) -> None:
    """EC2 refuses a fleet whose overrides name one instance pool (instance type and zone)
    twice, whatever else differs, and creates no fleet. AWS's error-code list does not
    name the code; users' reports of CreateFleet answers agree on it and its message."""
    pools = [(str(spec.instance_type), _where(backend, spec)) for spec in fleet.launch_specs]
    if len(set(pools)) < len(pools):
        backend.fleets.pop(fleet.id, None)
        raise EC2ClientError(
            "InvalidFleetConfig", "The fleet configuration contains duplicate instance pools."
        )


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


def _fill_fleet(
    backend: Any, fleet: Any, request: FleetRequest, params: Mapping[str, Any]
) -> dict[str, Any]:
    block = is_block_fleet(params)
    reserved = reserved_target(backend, params)
    options = [_options(backend, spec) for spec in fleet.launch_specs]
    if block:
        check_block_fleet(params, options)
    if reserved is not None:
        request = replace(request, lifecycle=RESERVED_LIFECYCLE)
    first = reservations_first(params)
    slots, sources = [], {}
    for index, spec in enumerate(fleet.launch_specs):
        az, instance_type = _where(backend, spec), str(spec.instance_type)
        if reserved is not None:
            source = reserved_slot_source(backend, az, instance_type, reserved)
        else:
            source = slot_source(backend, az, instance_type, options[index])
        source = EMULATOR.placement_groups.fleet_slot(backend, az, options[index], source)
        slot = FleetSlot(
            index=index,
            az=az,
            instance_type=instance_type,
            priority=_priority(spec),
            source=source.key,
            reserved_first=first and source.reserved,
        )
        slots.append(slot)
        sources[slot.pool] = source
    free = {pool: len(source.ids) for pool, source in sources.items()}
    allocation = plan_fleet(
        slots,
        request.total,
        single_az=request.single_az,
        single_type=request.single_type,
        free=free,
    )
    placed = sum(allocation.values())
    # A block fleet keeps what it could place ("Tutorial: Configure your EC2 Fleet to
    # launch instances into Capacity Blocks"); a reserved-capacity one as
    # `fleet_answers.reserved_shortfall` says; an On-Demand one honours MinTargetCapacity.
    needed = request.min_target
    if block:
        needed = 0
    elif reserved is not None:
        partial = EMULATOR.fleet_answers.reserved_shortfall == "partial"
        needed = 0 if partial else request.total
    if placed == 0 or placed < needed:
        errors = [
            _fleet_error(fleet, slot, request, placed, needed, sources, block) for slot in slots
        ]
        return {"FleetId": fleet.id, "Instances": [], "Errors": errors}
    errors = [
        _fleet_error(fleet, slot, request, placed, needed, sources, block)
        for slot in slots
        if placed < request.total and free[slot.pool] <= _used(allocation, slots, slot.pool)
    ]
    _withhold(allocation, EMULATOR.take_short_answer("CreateFleet"))
    queues = {pool: list(source.ids) for pool, source in sources.items()}
    instances = []
    for index, count in sorted(allocation.items()):
        if count > 0:
            slot = slots[index]
            ids, queues[slot.pool] = queues[slot.pool][:count], queues[slot.pool][count:]
            instances.append(
                _launch_slot(
                    backend, fleet, slot, ids, request.lifecycle, _shown(options[index], ids)
                )
            )
    return {"FleetId": fleet.id, "Instances": instances, "Errors": errors}


def _options(backend: Any, spec: Any) -> LaunchOptions:
    return LaunchOptions.of(spec.overrides or {}, template_data(backend, spec.launch_template_spec))


def _where(backend: Any, spec: Any) -> str:
    if spec.subnet_id:
        return str(backend.get_subnet(spec.subnet_id).availability_zone)
    overrides = spec.overrides or {}
    template = template_data(backend, spec.launch_template_spec)
    return str(
        overrides.get("AvailabilityZone")
        or request_az(backend, template)
        or f"{backend.region_name}a"
    )


def _priority(spec: Any) -> float:
    priority = (spec.overrides or {}).get("Priority")
    return float(priority) if priority is not None else float("inf")


def _used(allocation: Mapping[int, int], slots: Sequence[FleetSlot], pool: tuple[str, ...]) -> int:
    return sum(allocation.get(slot.index, 0) for slot in slots if slot.pool == pool)


def _withhold(allocation: dict[int, int], missing: int) -> None:
    """Take `missing` instances off the plan, last slots first (the short-answer switch)."""
    for index in sorted(allocation, reverse=True):
        taken = min(missing, allocation[index])
        allocation[index] -= taken
        missing -= taken


def _shown(options: LaunchOptions, reservation_ids: Sequence[str | None]) -> LaunchOptions:
    """What an instance shows of its reservation: one a reserved-capacity fleet named is
    as targeted as a template's would be."""
    named = {rid for rid in reservation_ids if rid}
    if options.reservation_id or len(named) != 1 or None in reservation_ids:
        return options
    return replace(options, reservation_id=named.pop(), preference="capacity-reservations-only")


def _launch_slot(
    backend: Any,
    fleet: Any,
    slot: FleetSlot,
    reservation_ids: list[str | None],
    lifecycle: str,
    options: LaunchOptions,
) -> dict[str, Any]:
    spec = fleet.launch_specs[slot.index]
    tags = copy.deepcopy(spec.tag_specifications)
    tags.setdefault("instance", {})[FLEET_ID_TAG] = fleet.id
    group = options.placement_group(backend, EMULATOR.placement_groups)
    reservation = backend.run_instances(
        spec.image_id,
        len(reservation_ids),
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
    decorate(backend, reservation.instances, options, reservation_ids, group)
    for instance in reservation.instances:
        fleet.on_demand_instances.append(
            {"id": reservation.id, "instance": instance, "launch_spec": spec}
        )
    fleet.fulfilled_capacity += len(reservation_ids)
    return {
        "LaunchTemplateAndOverrides": _template_and_overrides(spec),
        "Lifecycle": lifecycle,
        "InstanceIds": [instance.id for instance in reservation.instances],
        "InstanceType": spec.instance_type,
    }


def _fleet_error(
    fleet: Any,
    slot: FleetSlot,
    request: FleetRequest,
    placed: int,
    needed: int,
    sources: Mapping[tuple[str, ...], SlotSource],
    block: bool,
) -> dict[str, Any]:
    spec = fleet.launch_specs[slot.index]
    source = sources[slot.pool]
    if source.error is not None:
        code, message = source.error
    elif slot.source and not block:
        code = "ReservationCapacityExceeded"
        message = (
            f"The targeted Capacity Reservations ({slot.source}) do not have enough available "
            f"instance capacity: {len(source.ids)} available for a target of {request.total}."
        )
    else:
        # Also a block's answer for the part of the target beyond it (the walkthrough).
        code = "InsufficientInstanceCapacity"
        message = insufficient_capacity_message(slot.instance_type, slot.az, [])
    if placed < needed:
        message += (
            f" The fleet could place {placed} of the {needed} instances it needs, so it "
            "launched none."
        )
    return {
        "LaunchTemplateAndOverrides": _template_and_overrides(spec),
        "Lifecycle": request.lifecycle,
        "ErrorCode": code,
        "ErrorMessage": message,
    }


def _template_and_overrides(spec: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {"LaunchTemplateSpecification": dict(spec.launch_template_spec or {})}
    if spec.overrides:
        answer["Overrides"] = dict(spec.overrides)
    return answer
