"""What a create interrupted by a crash left in AWS, by resource type.

Called by the stack driver's recovery (``provisioner.pulumi_driver.pending``) for each
pending create it finds in a stack's state after a crash. Pulumi cannot know whether such
a create reached AWS; forgetting it could leak the resource, and running it again could
duplicate it. Each pool resource can be found from its inputs alone (names derived from
cluster and pool, instance ids recorded in the inputs), so the driver asks here and either
adopts the resource into the state or drops the pending create knowing nothing exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from stacks.access_entry import AccessEntry
from stacks.base import Adopter, PoolResource, type_token
from stacks.instance_profile import InstanceProfile
from stacks.instance_set import InstanceSet
from stacks.launch_template import LaunchTemplate
from stacks.placement_group import PlacementGroup

__all__ = ["ADOPTERS", "POOL_RESOURCES", "find_created"]

# Every resource a pool's stack may hold; each says how it is found again (`adopter`).
POOL_RESOURCES: Final[tuple[type[PoolResource], ...]] = (
    LaunchTemplate,
    InstanceProfile,
    AccessEntry,
    PlacementGroup,
    InstanceSet,
)
ADOPTERS: Final[dict[str, Adopter]] = {
    type_token(resource.__name__): resource.adopter for resource in POOL_RESOURCES
}


def find_created(type_: str, inputs: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(id, outputs) of what an interrupted create of ``type_`` made, or None if nothing.

    Raises KeyError for a type that is not a pool resource: the driver must not guess.
    """
    return ADOPTERS[type_](inputs)
