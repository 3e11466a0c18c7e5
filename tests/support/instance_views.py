"""The engine's view of one managed instance, for unit tests' fake engines."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from provisioner.cloud import naming
from provisioner.cloud.naming import OwnershipKey
from provisioner.cloud.types import InstanceView, ManagedTags


def managed_instance(
    iid: str, *, cluster: str, pool: str | None, group: str = "gen-1", state: str = "running"
) -> InstanceView:
    """An m5.large in us-east-1a tagged as ours, for `cluster`, `pool` and `group`."""
    return InstanceView(
        instance_id=iid,
        state=state,
        instance_type="m5.large",
        availability_zone="us-east-1a",
        subnet_id="subnet-1",
        launch_time=None,
        private_dns_name=None,
        private_ip=None,
        client_token=None,
        tags={},
        managed=ManagedTags(True, cluster, pool, group, None, None),
    )


def launched_set(
    ids: Sequence[str], *, key: OwnershipKey, pool_uid: str = "pool-uid"
) -> list[InstanceView]:
    """Pool `pool-a`'s set `gen-1` of cluster `demo`, as EC2 lists it after the pool's first
    launch by RunInstances in subnet-1: with that launch's ClientToken, which proves them
    ours under `key`."""
    token = naming.client_token(pool_uid, 1, "subnet-1", key=key, cluster="demo", pool="pool-a")
    return [
        replace(managed_instance(i, cluster="demo", pool="pool-a"), client_token=token) for i in ids
    ]
