"""Repairing a stack's state after a crash: what to do with each pending operation.

Called by `StackDriver.recover()` with the stack's exported deployment. Pulumi writes a
pending operation before each resource step and removes it after; a crash in between
leaves it behind, and the next `up` would warn and run a pending create again, which is how
a crash turns into a duplicate. This module decides instead, per pending operation:

- ``creating``: ask ``find`` (``stacks.adoption.find_created``) what the create made. Found:
  the resource is adopted into the state with its real id and outputs. Not found: the
  pending create is dropped, knowing nothing exists.
- ``updating``, ``deleting`` and the rest: the resource is still in the state with its old
  outputs; the operation is dropped and the stack is refreshed, which reads each resource
  back from AWS (a half-deleted gang shows up as the instances still live, or not at all).

`resolve` is pure given ``find``; the driver does the export, import and refresh.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Finder", "Resolution", "resolve"]

Finder = Callable[[str, Mapping[str, Any]], "tuple[str, dict[str, Any]] | None"]
Action = Literal["adopted", "dropped", "refresh"]
_PROVIDER_KEY = "__provider"


@dataclass(frozen=True)
class Resolution:
    urn: str
    pending: str
    action: Action
    resource_id: str | None = None

    def describe(self) -> str:
        name = self.urn.rsplit("::", 1)[-1]
        if self.action == "adopted":
            return (
                f"{name}: interrupted {self.pending}, found in AWS as {self.resource_id}, adopted"
            )
        if self.action == "dropped":
            return f"{name}: interrupted {self.pending}, nothing in AWS, dropped"
        return f"{name}: interrupted {self.pending}, refreshed from AWS"


def resolve(deployment: Mapping[str, Any], find: Finder) -> tuple[dict[str, Any], list[Resolution]]:
    """The deployment without pending operations, and what was done with each."""
    edited = copy.deepcopy(dict(deployment))
    pending = edited.pop("pending_operations", None) or []
    resources: list[dict[str, Any]] = list(edited.get("resources") or [])
    done: list[Resolution] = []
    for op in pending:
        resource = dict(op.get("resource") or {})
        kind = str(op.get("type", ""))
        urn = str(resource.get("urn", ""))
        if kind != "creating":
            done.append(Resolution(urn, kind, "refresh"))
            continue
        inputs = dict(resource.get("inputs") or {})
        found = find(str(resource.get("type", "")), inputs)
        if found is None:
            done.append(Resolution(urn, kind, "dropped"))
            continue
        resource_id, outputs = found
        outs = dict(outputs)
        if _PROVIDER_KEY in inputs:
            outs[_PROVIDER_KEY] = inputs[_PROVIDER_KEY]
        resource["id"] = resource_id
        resource["outputs"] = outs
        # The adopted resource's dependencies were created before it, so appending keeps the
        # list in dependency order; nothing can depend on a resource still being created. An
        # entry of the same URN marked for deletion is a replaced one and stays.
        resources = [r for r in resources if r.get("urn") != urn or r.get("delete")]
        resources.append(resource)
        done.append(Resolution(urn, kind, "adopted", resource_id))
    edited["resources"] = resources
    return edited, done
