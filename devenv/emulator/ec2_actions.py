"""EC2 actions moto lacks: DescribeCapacityReservations and the placement-group calls;
and CreateLaunchTemplate's permission and DryRun answer (`authorization`).

They are added to moto's `EC2Response` by `install()` and answer from the records in
`EMULATOR.reservations` and `EMULATOR.placement_groups`.
"""

from __future__ import annotations

from typing import Any, Final

from moto.core.responses import ActionResult, EmptyResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response

from devenv.emulator.authorization import (
    StatusAnswer,
    as_answer,
    authorize,
    dry_run_answer,
    permission_answer,
)
from devenv.emulator.launch_templates import remembered_create
from devenv.emulator.patching import original
from devenv.emulator.state import EMULATOR

_RESERVATION_FILTERS: Final = {
    "instance-type": "InstanceType",
    "availability-zone": "AvailabilityZone",
    "state": "State",
    "instance-match-criteria": "InstanceMatchCriteria",
    "reservation-type": "ReservationType",
    "owner-id": "OwnerId",
}
_PLACEMENT_FILTERS: Final = {
    "group-name": "GroupName",
    "group-id": "GroupId",
    "strategy": "Strategy",
    "state": "State",
}


def create_launch_template(self: Any) -> Any:
    """The caller's permission first; a dry run then answers after EC2's refusal of a name
    already taken ("Error codes for the Amazon EC2 API":
    InvalidLaunchTemplateName.AlreadyExistsException), without creating anything."""
    try:
        authorize(self, "ec2:CreateLaunchTemplate")
        permission_answer(self)
        if str(self._get_param("DryRun", False)).lower() == "true":
            name = str(self._get_param("LaunchTemplateName") or "")
            if name in self.ec2_backend.launch_template_name_to_ids:
                raise EC2ClientError(
                    "InvalidLaunchTemplateName.AlreadyExistsException",
                    f"Launch template name already in use: {name}.",
                )
            dry_run_answer(self)
    except StatusAnswer as answer:
        return as_answer(answer)
    # A ClientToken seen before answers as it did then (``launch_templates``).
    return remembered_create(self, lambda: original(EC2Response, "create_launch_template")(self))


def describe_capacity_reservations(self: Any) -> ActionResult:
    """By ids (each must exist, else InvalidCapacityReservationId.NotFound), else all but
    the blocks the reservation listing lag still hides from the caller (`consistency`)."""
    backend = self.ec2_backend
    book = EMULATOR.reservations
    ids = self._get_param("CapacityReservationIds", []) or []
    if ids:
        found = [book.find(backend, rid) for rid in ids]
    else:
        hidden = EMULATOR.unlisted_reservations()
        found = [r for r in book.in_region(backend) if r.reservation_id not in hidden]
    views = _filtered([book.view(backend, r) for r in found], self, _RESERVATION_FILTERS)
    return ActionResult({"CapacityReservations": views})


def create_placement_group(self: Any) -> ActionResult:
    self.error_on_dryrun()
    partitions = self._get_param("PartitionCount")
    tags = self._parse_tag_specification().get("placement-group", {})
    group = EMULATOR.placement_groups.create(
        self.ec2_backend,
        str(self._get_param("GroupName") or ""),
        str(self._get_param("Strategy") or ""),
        partition_count=int(partitions) if partitions else None,
        spread_level=self._get_param("SpreadLevel"),
        tags=dict(tags),
    )
    return ActionResult({"PlacementGroup": group.view()})


def describe_placement_groups(self: Any) -> ActionResult:
    """By names or ids (each must exist, else InvalidPlacementGroup.Unknown), else all."""
    backend = self.ec2_backend
    book = EMULATOR.placement_groups
    names = self._get_param("GroupNames", []) or []
    ids = self._get_param("GroupIds", []) or []
    if names or ids:
        groups = [book.find(backend, name=n) for n in names]
        groups += [book.find(backend, group_id=i) for i in ids]
    else:
        groups = book.in_region(backend)
    views = _filtered([g.view() for g in groups], self, _PLACEMENT_FILTERS)
    return ActionResult({"PlacementGroups": views})


def delete_placement_group(self: Any) -> EmptyResult:
    self.error_on_dryrun()
    EMULATOR.placement_groups.delete(self.ec2_backend, str(self._get_param("GroupName") or ""))
    return EmptyResult()


def _filtered(
    views: list[dict[str, Any]], response: Any, fields: dict[str, str]
) -> list[dict[str, Any]]:
    for flt in response._get_param("Filters", []) or []:
        name = str(flt.get("Name"))
        wanted = {str(v) for v in flt.get("Values") or []}
        if name.startswith("tag:"):
            views = [v for v in views if _tags(v).get(name[4:]) in wanted]
        elif name == "tag-key":
            views = [v for v in views if wanted & set(_tags(v))]
        elif name in fields:
            views = [v for v in views if str(v.get(fields[name])) in wanted]
    return views


def _tags(view: dict[str, Any]) -> dict[str, str]:
    return {str(t["Key"]): str(t["Value"]) for t in view.get("Tags") or []}
