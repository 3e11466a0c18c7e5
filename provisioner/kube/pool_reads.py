"""`pool_lookup`: the GangNodePool of a name, read live, for the Job webhook.

The webhook runs on every replica, leader or not, so it has no informer cache to read; it
asks the apiserver for the one pool a gang Job names (the controller's ClusterRole grants
`get` on gangnodepools). Built by `atomic-gang controller` and `python -m
provisioner.webhook` around their `KubeClient`; `webhook.review` calls it.
"""

from __future__ import annotations

from collections.abc import Callable

from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.tenancy import PoolLookupError
from provisioner.kube.errors import KubeError, KubeNotFound
from provisioner.kube.resources import GANG_NODE_POOLS
from provisioner.kube.status import ObjectStore, read_object

__all__ = ["pool_lookup"]


def pool_lookup(kube: ObjectStore) -> Callable[[str], GangNodePool | None]:
    """A reader of pools by name: None when there is none, `PoolLookupError` when the
    apiserver did not answer or refused (the Job's verdict must not be guessed then)."""

    def read(name: str) -> GangNodePool | None:
        try:
            return read_object(kube, GANG_NODE_POOLS, name, None, GangNodePool.from_dict)
        except KubeNotFound:
            return None
        except KubeError as err:
            raise PoolLookupError(
                f"could not read GangNodePool {name} to check which namespace it belongs to: {err}"
            ) from err

    return read
