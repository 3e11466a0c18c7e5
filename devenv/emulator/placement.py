"""Placement groups, which moto lacks: the records behind Create/Describe/DeletePlacementGroup.

A group is per account and region, named uniquely, `available` from creation (EC2 reports
`pending` only for an instant). Launches into one record its name on the instance's
`Placement.GroupName`; a group with a live instance cannot be deleted, as on EC2.

"Placement groups for your Amazon EC2 instances": a cluster placement group is a logical
grouping of instances within a single Availability Zone. `zone_refusal` refuses a launch
into a cluster group in another zone than the instances it holds (every state but
`terminated`: a stopped instance stays in its group). The page names no error code; users'
reports of EC2's answer agree on InvalidPlacementGroup.InUse, "The placement group '<name>'
is in use in another availability zone: <zone>". How an instant fleet answers an override
in another zone is not written down either: by default the override fails in the fleet's
`Errors` and the fleet uses the others; `set_fleet_placement_answer("refuse-call")` makes
the whole CreateFleet call fail with the code instead.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Final

from moto.ec2.exceptions import EC2ClientError

from devenv.emulator.model import LIVE_STATES, EmulatorInputError

STRATEGIES: Final = ("cluster", "spread", "partition")
IN_ANOTHER_ZONE: Final = "InvalidPlacementGroup.InUse"
FLEET_PLACEMENT_ANSWERS: Final = ("per-override", "refuse-call")


@dataclass(frozen=True)
class PlacementGroup:
    name: str
    group_id: str
    account_id: str
    region: str
    strategy: str
    partition_count: int | None = None
    spread_level: str | None = None
    tags: tuple[tuple[str, str], ...] = field(default=())

    def view(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "GroupName": self.name,
            "GroupId": self.group_id,
            "GroupArn": (
                f"arn:aws:ec2:{self.region}:{self.account_id}:placement-group/{self.name}"
            ),
            "State": "available",
            "Strategy": self.strategy,
            "Tags": [{"Key": k, "Value": v} for k, v in self.tags],
        }
        if self.partition_count is not None:
            entry["PartitionCount"] = self.partition_count
        if self.spread_level is not None:
            entry["SpreadLevel"] = self.spread_level
        return entry


class PlacementBook:
    """Every placement group, keyed by (account, region, name)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str, str], PlacementGroup] = {}
        self.fleet_answer = "per-override"

    def set_fleet_answer(self, answer: str) -> None:
        if answer not in FLEET_PLACEMENT_ANSWERS:
            raise EmulatorInputError("answer", f"answer must be one of {FLEET_PLACEMENT_ANSWERS}")
        self.fleet_answer = answer

    def zone_refusal(self, backend: Any, group: PlacementGroup | None, az: str) -> str | None:
        """EC2's message when `group` is a cluster group holding instances outside `az`."""
        if group is None or group.strategy != "cluster":
            return None
        other = sorted(
            {
                str(i.placement.zone)
                for i in backend.all_instances()
                if i.state != "terminated"
                and getattr(i.placement, "group_name", None) == group.name
                and str(i.placement.zone) != az
            }
        )
        if not other:
            return None
        return (
            f"The placement group '{group.name}' is in use in another availability zone: {other[0]}"
        )

    def fleet_slot(self, backend: Any, az: str, options: Any, source: Any) -> Any:
        """An instant fleet's slot in `az` (a SlotSource), as `zone_refusal` leaves it:
        unchanged, or with no capacity and EC2's refusal (the whole call refused instead,
        under `refuse-call`)."""
        refusal = self.zone_refusal(backend, options.placement_group(backend, self), az)
        if refusal is None:
            return source
        if self.fleet_answer == "refuse-call":
            raise EC2ClientError(IN_ANOTHER_ZONE, refusal)
        return replace(source, ids=(), error=(IN_ANOTHER_ZONE, refusal))

    def check_zone(self, backend: Any, group: PlacementGroup | None, az: str) -> None:
        refusal = self.zone_refusal(backend, group, az)
        if refusal is not None:
            raise EC2ClientError(IN_ANOTHER_ZONE, refusal)

    def create(
        self,
        backend: Any,
        name: str,
        strategy: str,
        partition_count: int | None = None,
        spread_level: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> PlacementGroup:
        if not name:
            raise EC2ClientError(
                "MissingParameter", "The request must contain the parameter GroupName"
            )
        if strategy not in STRATEGIES:
            raise EC2ClientError(
                "InvalidParameterValue",
                f"Value ({strategy}) for parameter strategy is invalid. "
                f"Valid values are {', '.join(STRATEGIES)}.",
            )
        if partition_count is not None and strategy != "partition":
            raise EC2ClientError(
                "InvalidParameterCombination",
                "PartitionCount is only valid for placement groups with the partition strategy.",
            )
        key = (*_where(backend), name)
        if key in self._groups:
            raise EC2ClientError(
                "InvalidPlacementGroup.Duplicate", f"The placement group '{name}' already exists."
            )
        group = PlacementGroup(
            name=name,
            group_id="pg-" + uuid.uuid4().hex[:17],
            account_id=key[0],
            region=key[1],
            strategy=strategy,
            partition_count=partition_count,
            spread_level=spread_level,
            tags=tuple(sorted((tags or {}).items())),
        )
        self._groups[key] = group
        return group

    def find(
        self, backend: Any, name: str | None = None, group_id: str | None = None
    ) -> PlacementGroup:
        for group in self.in_region(backend):
            if (name and group.name == name) or (group_id and group.group_id == group_id):
                return group
        raise EC2ClientError(
            "InvalidPlacementGroup.Unknown",
            f"The Placement Group '{name or group_id}' is unknown.",
        )

    def in_region(self, backend: Any) -> list[PlacementGroup]:
        where = _where(backend)
        return [g for (a, r, _), g in sorted(self._groups.items()) if (a, r) == where]

    def delete(self, backend: Any, name: str) -> None:
        group = self.find(backend, name=name)
        if any(
            i.state in LIVE_STATES and i.placement.group_name == group.name
            for i in backend.all_instances()
        ):
            raise EC2ClientError(
                "InvalidPlacementGroup.InUse",
                f"The placement group '{name}' is in use and may not be deleted.",
            )
        del self._groups[(group.account_id, group.region, group.name)]


def _where(backend: Any) -> tuple[str, str]:
    return (str(backend.account_id), str(backend.region_name))
