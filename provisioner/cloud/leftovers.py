"""Launch templates and placement groups of a pool: found by our tags, deleted only on proof.

A pool's stack owns its launch template and placement group, and destroying the stack
removes them. When the stack's release did not (its state lost, a backend that was emptied,
a pool deleted without its finalizer) they would be left behind: the pool reconciler's
release and the reaper find them by the tags every resource of a pool carries (managed,
cluster, pool).

Tags only find candidates; they prove nothing: anyone who may tag could put this cluster's
tags on another team's template, and the controller's IAM policy allows deleting any
template or group that carries them. So a leftover is deleted only when the pool's stack
proves it ours: its EC2 id (the template's `lt-` id, the group's `pg-` GroupId) is one the
stack recorded (`stacks.outputs.PoolOutputs.resource_ids`, read before a destroy, or from
a stack the pool left behind). `split_proven` is that rule; a tagged resource the stack
does not know is reported (logged, counted) and left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from provisioner.api import constants as c
from provisioner.cloud.ec2api import Ec2Api
from provisioner.cloud.errors import to_cloud_error
from provisioner.cloud.tags import tags_to_dict

__all__ = ["Leftover", "delete_leftovers", "find_leftovers", "split_proven"]

_GONE_CODES = frozenset(
    {
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidPlacementGroup.Unknown",
    }
)


@dataclass(frozen=True)
class Leftover:
    kind: Literal["launch-template", "placement-group"]
    resource_id: str
    name: str
    pool: str


def _filters(cluster: str, pool: str | None) -> list[dict[str, Any]]:
    filters = [
        {"Name": f"tag:{c.TAG_MANAGED}", "Values": ["true"]},
        {"Name": f"tag:{c.TAG_CLUSTER}", "Values": [cluster]},
    ]
    if pool is not None:
        filters.append({"Name": f"tag:{c.TAG_POOL}", "Values": [pool]})
    return filters


def find_leftovers(ec2: Ec2Api, cluster: str, pool: str | None = None) -> list[Leftover]:
    """Our launch templates and placement groups of `cluster` (of one `pool`, if given)."""
    found: list[Leftover] = []
    try:
        token: str | None = None
        while True:
            page = ec2.describe_launch_templates(
                Filters=_filters(cluster, pool), **({"NextToken": token} if token else {})
            )
            for lt in page.get("LaunchTemplates") or ():
                tags = tags_to_dict(lt.get("Tags"))
                found.append(
                    Leftover(
                        "launch-template",
                        str(lt["LaunchTemplateId"]),
                        str(lt.get("LaunchTemplateName") or ""),
                        tags.get(c.TAG_POOL, ""),
                    )
                )
            token = page.get("NextToken")
            if not token:
                break
        groups = ec2.describe_placement_groups(Filters=_filters(cluster, pool))
    except Exception as exc:
        what = f"list the launch templates and placement groups of {cluster}"
        raise to_cloud_error(exc, what) from exc
    for group in groups.get("PlacementGroups") or ():
        tags = tags_to_dict(group.get("Tags"))
        found.append(
            Leftover(
                "placement-group",
                str(group.get("GroupId") or group["GroupName"]),
                str(group["GroupName"]),
                tags.get(c.TAG_POOL, ""),
            )
        )
    return found


def split_proven(
    found: list[Leftover], recorded: frozenset[str]
) -> tuple[list[Leftover], list[Leftover]]:
    """(`found` whose EC2 id the pool's stack recorded, the rest): only the first may be
    deleted. Ids, not names: a name is taken again once its resource is gone, an id never."""
    proven = [item for item in found if item.resource_id in recorded]
    return proven, [item for item in found if item.resource_id not in recorded]


def delete_leftovers(ec2: Ec2Api, leftovers: list[Leftover]) -> list[Leftover]:
    """Delete each; one already gone counts as deleted. Returns what was deleted."""
    deleted: list[Leftover] = []
    for item in leftovers:
        try:
            if item.kind == "launch-template":
                ec2.delete_launch_template(LaunchTemplateId=item.resource_id)
            else:
                ec2.delete_placement_group(GroupName=item.name)
        except Exception as exc:
            err = to_cloud_error(exc, f"delete {item.kind} {item.name}")
            if err.code not in _GONE_CODES:
                raise err from exc
        deleted.append(item)
    return deleted
