"""The objects the Workload reconciler's Events are about: a pool, and a gang's owner."""

from __future__ import annotations

from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.owners import GangOwner
from provisioner.kube.events import InvolvedObject
from provisioner.kube.resources import GANG_NODE_POOLS

__all__ = ["owner_event", "pool_event"]


def pool_event(pool: GangNodePool) -> InvolvedObject:
    return InvolvedObject.of(GANG_NODE_POOLS, pool.metadata)


def owner_event(owner: GangOwner) -> InvolvedObject:
    """The owner as it was read, of whatever kind: an Event names its apiVersion, kind and
    uid, so `kubectl describe` of that object shows it."""
    meta = owner.metadata
    return InvolvedObject(
        owner.api_version, owner.kind, meta.name, meta.namespace, meta.uid, meta.resource_version
    )
