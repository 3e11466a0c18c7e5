"""Whether an object's controller reference is proven: the owner it names exists.

A child object (a Job made by a JobSet, a JobSet made by a TrainJob, a Pod made by a
DaemonSet) is let through on its parent's verdict. An `ownerReferences` entry is only what
its writer claims, though: anyone may name a JobSet there. So a reference counts only when
it is the controller reference, of a kind the caller accepts, and the apiserver holds an
object of that kind, in the child's namespace (owner references never cross namespaces),
with that name and uid. Read live through `OwnerLookup`, on the webhook's own credentials
(the chart's ClusterRole grants `get` on each kind read). Called by `review` and `pods`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from provisioner.api.owners import OwnerKind

__all__ = ["OwnerLookup", "no_owners", "proven_controller"]

OwnerLookup = Callable[[OwnerKind, str, str], str | None]
"""The uid of the object of that kind, namespace and name as the apiserver holds it now,
None when there is none; raises `api.tenancy.ClusterReadError` when it cannot be read."""


def no_owners(kind: OwnerKind, namespace: str, name: str) -> str | None:
    """A lookup that proves nothing: every child is judged on its own (fail closed)."""
    return None


def proven_controller(
    meta: Mapping[str, Any], namespace: str, kinds: tuple[OwnerKind, ...], owners: OwnerLookup
) -> OwnerKind | None:
    """The kind of the object's controller when it is one of `kinds` and exists in
    `namespace` with the uid the reference names; None otherwise."""
    for ref in meta.get("ownerReferences") or []:
        if not ref.get("controller"):
            continue
        api_version, kind_name = str(ref.get("apiVersion", "")), str(ref.get("kind", ""))
        kind = next((k for k in kinds if k.matches(api_version, kind_name)), None)
        uid, name = str(ref.get("uid") or ""), str(ref.get("name") or "")
        if kind is None or not uid or not name or not namespace:
            return None  # an object has at most one controller reference
        return kind if owners(kind, namespace, name) == uid else None
    return None
