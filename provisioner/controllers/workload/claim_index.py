"""The pool informer's index by claimant: the pools one Workload claims, read without
walking every pool.

A Workload that is gone, or not routed through our check, gives up any claim it holds
(`WorkloadReconciler._release_claims_of`). That is asked on every pass of every such
Workload, Kueue's own included, so it reads one entry of this index, kept by the informer
with its cache, instead of every pool in the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["claim_index", "claimant"]


def claimant(namespace: str, name: str) -> str:
    """The index value of the Workload `namespace/name`."""
    return f"{namespace}/{name}"


def claim_index(body: Mapping[str, Any]) -> str | None:
    """The claimant of a GangNodePool as the informer holds it (None: nobody holds it)."""
    claim = (body.get("spec") or {}).get("claim")
    if not isinstance(claim, Mapping):
        return None
    namespace, name = claim.get("namespace"), claim.get("name")
    return claimant(str(namespace), str(name)) if namespace and name else None
