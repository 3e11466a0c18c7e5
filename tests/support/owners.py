"""Top-level objects of each kind a gang can be submitted as (`owners.OWNER_KINDS`), for
the reconciler and decision tests: only the metadata the controller reads, and an empty
spec (Kueue, not this controller, counts a JobSet's or PyTorchJob's pods)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provisioner.api.owners import OwnerKind


def owner(
    kind: OwnerKind,
    name: str = "train",
    *,
    namespace: str = "ml",
    uid: str = "owner-uid",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    resource_version: str = "3",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": resource_version,
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
    }
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta, "spec": {}}


def foreign_owner(api_version: str, kind: str, name: str = "other") -> dict[str, Any]:
    """An object of a kind no gang is read from (a ReplicaSet, a LeaderWorkerSet...)."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid"},
    }
