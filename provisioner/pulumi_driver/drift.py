"""Drift repair: a pool resource deleted outside its stack is found and made again.

Used by the stack driver (``driver``) around every `up` (prepare, record, remove). A stack's
state says what it made; when someone deletes one of those resources by hand (the launch
template, the cluster placement group, the instance profile, the access entry), the state still
names it, so an update that touches it fails with AWS's not-found answer, and an update that
does not touch it leaves the launch pointing at nothing. Pulumi's `refresh` asks each
provider to read its resource; a provider whose resource is gone answers with an empty
read, and the engine drops it from the state. The next `up` then creates it again.

The decision, `up_repairing`, is kept apart from the CLI so it can be pinned with a fake:

- An operation whose `up` fails with a reason that means "a resource of the stack is gone"
  (`DRIFT_REASONS`) refreshes the stack once and runs the `up` once more.
- An operation asked to refresh first (the launch met the missing template; see
  ``controllers.pool.outcomes``) refreshes once, then runs its `up` once.
- Either way, one refresh per operation: a second failure is raised, with a message that
  says the refresh was tried, never another refresh (no loop).

What the refresh dropped is described in one sentence per resource ("launch template
lt-1 was deleted outside the stack; recreated as lt-2"), which the pool's Event carries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from provisioner.pulumi_driver.errors import StackError
from provisioner.pulumi_driver.reports import StackResult
from stacks.outputs import PoolOutputs
from stacks.pool_program import RESOURCE_NAMES

__all__ = [
    "DRIFT_REASONS",
    "DroppedResource",
    "describe_repairs",
    "is_drift",
    "up_repairing",
]

# The provider reasons (``stacks.failures``, named by ``provisioner.cloud.errors`` and
# ``provisioner.cloud.preflight``) that an AWS not-found answer for one of the stack's own
# resources becomes: one per resource of ``RESOURCE_NAMES`` that can be missing (the
# instance set's read drops terminated instances itself).
DRIFT_REASONS: Final = frozenset(
    {
        "LaunchTemplateNotFound",
        "InvalidPlacementGroup",
        "InstanceProfileNotFound",
        "AccessEntryMissing",
    }
)
_KINDS: Final = {
    RESOURCE_NAMES["launch_template"]: "launch template",
    RESOURCE_NAMES["placement_group"]: "placement group",
    RESOURCE_NAMES["instance_profile"]: "instance profile",
    RESOURCE_NAMES["access_entry"]: "access entry",
    RESOURCE_NAMES["instance_set"]: "instance set",
}


@dataclass(frozen=True)
class DroppedResource:
    """A resource a refresh found gone from AWS and dropped from the stack's state."""

    name: str  # the resource's name in the program (``RESOURCE_NAMES``)
    resource_id: str  # its id in the state before the refresh


def is_drift(err: StackError) -> bool:
    """Whether ``err`` says a resource the stack made is gone from AWS."""
    return err.reason in DRIFT_REASONS


def describe_repairs(
    dropped: Sequence[DroppedResource], after: PoolOutputs | None
) -> tuple[str, ...]:
    """One sentence per resource the refresh dropped and the `up` made again."""
    said = []
    for gone in dropped:
        kind = _KINDS.get(gone.name, gone.name)
        if gone.name == RESOURCE_NAMES["launch_template"] and after is not None:
            now = after.launch_template_id
        elif gone.name == RESOURCE_NAMES["placement_group"] and after is not None:
            now = after.placement_group_name or ""
        else:
            now = ""
        again = f"recreated as {now}" if now and now != gone.resource_id else "recreated"
        said.append(f"{kind} {gone.resource_id} was deleted outside the stack; {again}")
    return tuple(said)


def up_repairing(
    up: Callable[[], StackResult],
    refresh: Callable[[], Sequence[DroppedResource]],
    *,
    refresh_first: bool,
    held_anything: bool,
) -> StackResult:
    """Run ``up``, refreshing the stack once when it is known or found to have drifted.

    ``held_anything``: the stack held a prepared pool before this operation (a stack that
    holds nothing has nothing to drift; its not-found failures are configuration).
    """
    if refresh_first and held_anything:
        dropped = refresh()
        return _with_repairs(_second_up(up, dropped), dropped)
    try:
        return up()
    except StackError as err:
        if not (held_anything and is_drift(err)):
            raise
    dropped = refresh()
    return _with_repairs(_second_up(up, dropped), dropped)


def _second_up(up: Callable[[], StackResult], dropped: Sequence[DroppedResource]) -> StackResult:
    try:
        return up()
    except StackError as err:
        if not is_drift(err):
            raise
        found = ", ".join(f"{d.name} {d.resource_id}" for d in dropped)
        what = f"dropping {found}" if found else "finding nothing gone"
        raise StackError(
            err.reason,
            f"{err.message} The stack was refreshed once ({what}) and the {err.operation} "
            "run again; AWS still answers that the resource is missing, so it is deleted as "
            "soon as it is made or cannot be made: fix that before the next try.",
            kind=err.kind,
            pool=err.pool,
            operation=err.operation,
        ) from err


def _with_repairs(result: StackResult, dropped: Sequence[DroppedResource]) -> StackResult:
    return replace(result, repairs=describe_repairs(dropped, result.outputs))
