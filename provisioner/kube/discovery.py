"""What the apiserver serves, asked once at start-up: the kinds a gang can be submitted as
(each gets an informer) and optional resources such as the GangClass.

Discovery answers at once or the apiserver is not there; start-up does not wait on it.
"""

from __future__ import annotations

import logging
from typing import Final

from provisioner.api.owners import OWNER_KINDS, OwnerKind
from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeError
from provisioner.kube.resources import JOBS, ResourceRef, owner_resource

__all__ = ["DISCOVERY_SECONDS", "served_owner_kinds", "serves"]

log = logging.getLogger(__name__)

DISCOVERY_SECONDS: Final = 5.0


def serves(kube: KubeClient, ref: ResourceRef) -> bool:
    try:
        return kube.with_timeout(DISCOVERY_SECONDS).serves(ref)
    except KubeError as err:
        log.info("%s not read: discovery failed: %s", ref.kind, err)
        return False


def served_owner_kinds(kube: KubeClient) -> tuple[OwnerKind, ...]:
    """The kinds a gang can be submitted as whose resource the apiserver serves now: each
    gets an informer. A kind whose CRD is not installed (no JobSet controller, say) gets
    none, so its informer cannot keep the controller from syncing; a Workload of that
    kind, should one appear later, has its owner read by a live GET. Jobs are always
    served. Discovery that fails (the apiserver unreachable) leaves the kind to the GET."""
    served: list[OwnerKind] = []
    quick = kube.with_timeout(DISCOVERY_SECONDS)
    for kind in OWNER_KINDS:
        ref = owner_resource(kind)
        if ref == JOBS:
            served.append(kind)
            continue
        try:
            if quick.serves(ref):
                served.append(kind)
                continue
            why = "its CustomResourceDefinition is not installed"
        except KubeError as err:
            why = f"discovery failed: {err}"
        log.info(
            "%s owners are read by a live GET, without an informer (%s).", kind.display_name, why
        )
    return tuple(served)
