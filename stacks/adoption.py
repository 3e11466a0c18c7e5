"""What a create interrupted by a crash left in AWS, by resource type.

Called by the stack driver's recovery (``provisioner.pulumi_driver.pending``) for each
pending create it finds in a stack's state after a crash. Pulumi cannot know whether such
a create reached AWS; forgetting it could leak the resource, and running it again could
duplicate it. Each pool resource can be found from its inputs alone (names derived from
cluster and pool, instance ids recorded in the inputs), so the driver asks here and either
adopts the resource into the state or drops the pending create knowing nothing exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from stacks import access_entry, instance_profile, instance_set, launch_template, placement_group
from stacks.base import type_token

__all__ = ["ADOPTERS", "find_created"]

Adopter = Callable[[Mapping[str, Any]], "tuple[str, dict[str, Any]] | None"]

ADOPTERS: Final[dict[str, Adopter]] = {
    type_token("LaunchTemplate"): launch_template.adopt,
    type_token("InstanceProfile"): instance_profile.adopt,
    type_token("AccessEntry"): access_entry.adopt,
    type_token("PlacementGroup"): placement_group.adopt,
    type_token("InstanceSet"): instance_set.adopt,
}


def find_created(type_: str, inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(id, outputs) of what an interrupted create of ``type_`` made, or None if nothing.

    Raises KeyError for a type that is not a pool resource: the driver must not guess.
    """
    return ADOPTERS[type_](inputs)
