"""P2: EC2 RunInstances, with ClientToken, MaxCount, capacity and reserved capacity.

moto launches MinCount, ignores MaxCount, ignores ClientToken and has no capacity. The
patch replays a seen ClientToken's reservation, and otherwise decides where the instances
run before moto creates them:
- targeting a Capacity Reservation by id: only there, after EC2's checks (market type,
  type, AZ, state); fewer free slots than MinCount is ReservationCapacityExceeded;
- otherwise active `open` ODCRs matching the type and AZ first (unless the preference is
  `none`), then the pool's ordinary capacity (not at all with
  `capacity-reservations-only`); short of MinCount is InsufficientInstanceCapacity.
An instance profile EC2 does not know (the request's or its template's) is refused as EC2
refuses it (``instance_profiles``). It launches min(MaxCount, what fits), applies the
launch template's subnet or AZ (which moto ignores) so the instance lands where capacity
was charged, and records the request as received in the launch log, whatever the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

from devenv.emulator.authorization import dry_run_answer
from devenv.emulator.instance_profiles import refuse_unknown_profile
from devenv.emulator.instances import request_az, spec_subnet, template_data
from devenv.emulator.interfaces import check_layout, first_card_only
from devenv.emulator.launch import LaunchOptions, check_networks, decorate, recorded_launch
from devenv.emulator.model import request_fingerprint
from devenv.emulator.patching import original
from devenv.emulator.state import EMULATOR

ACTION = "RunInstances"


def run_instances_handler(self: Any) -> Any:
    def launch() -> tuple[ActionResult, list[str]]:
        result = _run(self, self.ec2_backend, self.params)
        return result, [instance.id for instance in _launched(result)]

    return recorded_launch(self, ACTION, launch)


def _run(response: Any, backend: Any, params: dict[str, Any]) -> ActionResult:
    token = params.get("ClientToken")
    fingerprint = request_fingerprint(params)
    dry_run = str(params.get("DryRun", "")).lower() == "true"
    if token and not dry_run:
        earlier = EMULATOR.recall(backend, ACTION, token, fingerprint)
        if earlier is not None:
            return ActionResult(earlier)
    min_count, max_count = _launch_counts(params)
    template = template_data(backend, params.get("LaunchTemplate"))
    options = LaunchOptions.of(params, template)
    options.check()
    group = options.placement_group(backend, EMULATOR.placement_groups)
    instance_type = str(params.get("InstanceType") or template.get("InstanceType") or "m1.small")
    check_layout(instance_type, params, template)
    az = _apply_run_target(backend, params, template)
    check_networks(backend, params, template)
    if options.reservation_id:
        reservation = EMULATOR.reservations.find(backend, options.reservation_id)
        EMULATOR.reservations.check_target(
            reservation, instance_type=instance_type, az=az, market_type=options.market_type
        )
    # Which of EC2's refusals comes first is not documented; the profile's comes last.
    refuse_unknown_profile(backend, params, template)
    # Every refusal EC2 makes from the request itself is above; capacity is not checked.
    dry_run_answer(response)
    if options.reservation_id:
        if az is None:
            # EC2 launches a targeted request without an AZ in the reservation's.
            params["Placement"] = {
                **(params.get("Placement") or {}),
                "AvailabilityZone": reservation.availability_zone,
            }
        EMULATOR.placement_groups.check_zone(backend, group, reservation.availability_zone)
        free = EMULATOR.reservations.available(backend, reservation)
        if free < min_count:
            raise EMULATOR.reservations.full_error(backend, reservation, min_count)
        count = min(max_count, free)
        reservation_ids: list[str | None] = [reservation.reservation_id] * count
    else:
        az = az or f"{backend.region_name}a"
        EMULATOR.placement_groups.check_zone(backend, group, az)
        reservation_ids = _untargeted_slots(backend, options, az, instance_type, max_count)
        if len(reservation_ids) < min_count:
            raise EMULATOR.capacity_error(backend, instance_type, az, min_count)
    # The short-answer switch: success with fewer than MinCount, which the product must
    # roll back itself; at least one launches (an empty answer would be a refusal).
    withheld = EMULATOR.take_short_answer(ACTION)
    if withheld:
        reservation_ids = reservation_ids[: max(1, len(reservation_ids) - withheld)]
    # moto launches MinCount instances; this is where MaxCount and capacity meet.
    params["MinCount"] = len(reservation_ids)
    if params.get("NetworkInterfaces"):
        params["NetworkInterfaces"] = first_card_only(params["NetworkInterfaces"])
    result: ActionResult = original(EC2Response, "run_instances")(response)
    decorate(backend, _launched(result), options, reservation_ids, group)
    if token:
        EMULATOR.remember(backend, ACTION, token, fingerprint, result.result)
    return result


def _launched(result: ActionResult) -> list[Any]:
    """The instances of the moto Reservation a RunInstances result wraps."""
    return list(getattr(result.result, "instances", []))


def _untargeted_slots(
    backend: Any, options: LaunchOptions, az: str, instance_type: str, wanted: int
) -> list[str | None]:
    """One entry per instance that fits, up to `wanted`: an open ODCR's id or None."""
    slots: list[str | None] = []
    if options.preference != "none":
        for reservation in EMULATOR.reservations.open_matching(backend, az, instance_type):
            slots += [reservation.reservation_id] * EMULATOR.reservations.available(
                backend, reservation
            )
    if options.preference != "capacity-reservations-only":
        slots += [None] * EMULATOR.free_slots(backend, az, instance_type)
    return slots[:wanted]


def _launch_counts(params: Mapping[str, Any]) -> tuple[int, int]:
    min_count = int(params.get("MinCount") or 1)
    max_count = int(params.get("MaxCount") or min_count)
    if min_count < 1 or max_count < min_count:
        raise EC2ClientError(
            "InvalidParameterValue",
            f"MinCount ({min_count}) must be at least 1 and at most MaxCount ({max_count}).",
        )
    return min_count, max_count


def _apply_run_target(
    backend: Any, params: dict[str, Any], template: Mapping[str, Any]
) -> str | None:
    """The AZ the call names, if any; a template's subnet/AZ is made explicit for moto."""
    az = request_az(backend, params)
    if az is not None:
        return az
    template_subnet = spec_subnet(template)
    if template_subnet and not params.get("NetworkInterfaces"):
        params["SubnetId"] = template_subnet
    template_az = request_az(backend, template)
    if template_az and not template_subnet:
        params["Placement"] = {**(params.get("Placement") or {}), "AvailabilityZone": template_az}
    return template_az
