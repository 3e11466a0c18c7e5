"""The outputs a pool's stack exports, and `PoolOutputs`, their typed reading.

``stacks.pool_program`` exports the keys below; the stack driver parses whatever it reads back
(from an `up`, from the state file, from `pulumi stack output`) with
`PoolOutputs.from_outputs` and hands the GangNodePool reconciler the typed value. Operators
see the same keys in `pulumi stack output --stack <pool>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from stacks.spec import InstanceSetRecord, PoolSpec

_ROOT_TYPE: Final = "pulumi:pulumi:Stack"
# Written out rather than imported from `stacks.base`, so reading outputs needs no Pulumi SDK.
_INSTANCE_SET_TYPE: Final = "pulumi-python:dynamic/atomicgang:InstanceSet"
_PLACEMENT_GROUP_TYPE: Final = "pulumi-python:dynamic/atomicgang:PlacementGroup"

__all__ = ["OUTPUT_KEYS", "OutputsError", "PoolOutputs"]

POOL: Final = "pool"
CLUSTER: Final = "cluster"
POOL_SPEC: Final = "poolSpec"
LAUNCH_TEMPLATE_ID: Final = "launchTemplateId"
LAUNCH_TEMPLATE_NAME: Final = "launchTemplateName"
LAUNCH_TEMPLATE_VERSION: Final = "launchTemplateVersion"
INSTANCE_PROFILE_ARN: Final = "instanceProfileArn"
PLACEMENT_GROUP_NAME: Final = "placementGroupName"
# EC2's GroupId of the pool's placement group: with the launch template's id, what proves a
# tagged leftover the stack's own (names can be taken again; ids cannot).
PLACEMENT_GROUP_ID: Final = "placementGroupId"
GROUP: Final = "group"
INSTANCE_IDS: Final = "instanceIds"
OUTPUT_KEYS: Final = (
    POOL,
    CLUSTER,
    POOL_SPEC,
    LAUNCH_TEMPLATE_ID,
    LAUNCH_TEMPLATE_NAME,
    LAUNCH_TEMPLATE_VERSION,
    INSTANCE_PROFILE_ARN,
    PLACEMENT_GROUP_NAME,
    PLACEMENT_GROUP_ID,
    GROUP,
    INSTANCE_IDS,
)


class OutputsError(ValueError):
    """Stack outputs that are not a pool's (another program's stack, or a damaged one)."""


@dataclass(frozen=True)
class PoolOutputs:
    """What a prepared pool's stack holds. ``record`` is None while no gang is recorded."""

    pool: str
    cluster: str
    spec: PoolSpec
    launch_template_id: str
    launch_template_name: str
    launch_template_version: str
    instance_profile_arn: str
    placement_group_name: str | None
    record: InstanceSetRecord | None
    placement_group_id: str | None = None

    @property
    def instance_ids(self) -> tuple[str, ...]:
        return self.record.instance_ids if self.record else ()

    @property
    def group(self) -> str | None:
        return self.record.group if self.record else None

    @classmethod
    def from_state(cls, latest: Mapping[str, Any]) -> PoolOutputs:
        """Parse a stack's deployment (``checkpoint.latest`` of a state file, or an export).

        The gang comes from the instance set resource itself, not from the root outputs: a
        crash recovery can adopt or drop that resource without running the program, and
        the root outputs only catch up at the next update.
        """
        resources = [r for r in latest.get("resources") or () if not r.get("delete")]
        root = next((r for r in resources if r.get("type") == _ROOT_TYPE), None)
        if root is None:
            raise OutputsError("the state holds no stack resource; is the stack empty?")
        raw = dict(root.get("outputs") or {})
        gang = next((r for r in resources if r.get("type") == _INSTANCE_SET_TYPE), None)
        outs = (gang or {}).get("outputs") or {}
        raw[INSTANCE_IDS] = list(outs.get("instance_ids") or ())
        raw[GROUP] = str(outs.get("group") or "")
        if not raw.get(PLACEMENT_GROUP_ID):
            # A stack last updated before the output existed: the group resource holds it.
            group_ids = [
                str((r.get("outputs") or {}).get("group_id") or "")
                for r in resources
                if r.get("type") == _PLACEMENT_GROUP_TYPE
            ]
            raw[PLACEMENT_GROUP_ID] = next(iter(group_ids), "")
        return cls.from_outputs(raw)

    @classmethod
    def from_outputs(cls, raw: Mapping[str, Any]) -> PoolOutputs:
        """Parse stack outputs (plain values, or Automation API ``OutputValue``s)."""
        values = {k: getattr(v, "value", v) for k, v in raw.items()}
        missing = [k for k in (POOL, CLUSTER, POOL_SPEC, LAUNCH_TEMPLATE_ID) if not values.get(k)]
        if missing:
            raise OutputsError(f"stack outputs lack {missing}; is this a pool's stack?")
        spec_raw = values[POOL_SPEC]
        if not isinstance(spec_raw, Mapping):
            raise OutputsError(f"{POOL_SPEC} is {type(spec_raw).__name__}, not a mapping")
        try:
            spec = PoolSpec.from_dict(spec_raw)
            ids = tuple(str(i) for i in values.get(INSTANCE_IDS) or ())
            group = str(values.get(GROUP) or "")
            record = InstanceSetRecord(group, ids) if ids else None
        except (TypeError, ValueError) as exc:
            raise OutputsError(f"stack outputs do not describe a pool: {exc}") from exc
        return cls(
            pool=str(values[POOL]),
            cluster=str(values[CLUSTER]),
            spec=spec,
            launch_template_id=str(values[LAUNCH_TEMPLATE_ID]),
            launch_template_name=str(values.get(LAUNCH_TEMPLATE_NAME) or ""),
            launch_template_version=str(values.get(LAUNCH_TEMPLATE_VERSION) or ""),
            instance_profile_arn=str(values.get(INSTANCE_PROFILE_ARN) or ""),
            placement_group_name=str(values.get(PLACEMENT_GROUP_NAME) or "") or None,
            record=record,
            placement_group_id=str(values.get(PLACEMENT_GROUP_ID) or "") or None,
        )

    @property
    def resource_ids(self) -> frozenset[str]:
        """EC2's ids of the launch template and placement group this stack made: the proof
        that a leftover carrying the pool's tags is the stack's (`cloud.leftovers`)."""
        return frozenset(i for i in (self.launch_template_id, self.placement_group_id) if i)
