"""The engine's view of one managed instance, for unit tests' fake engines."""

from __future__ import annotations

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
