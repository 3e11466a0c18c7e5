"""The controller's rules on real parts: one claimant, shape conflicts, $0 while short of
capacity, the join watchdog, the reaper and the finalizer."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.cloud import naming
from provisioner.cloud.ownership import NO_LAUNCH_TOKEN, TOKEN_NOT_OURS
from tests.integration.controller_harness import CLUSTER, REGION, GangEnv, eventually


def test_second_claimant_gets_retry_and_a_different_shape_is_rejected(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory()
    first = env.submit("first", "pool-one", count=2)
    env.wait_check(first, c.CheckState.READY, timeout=120)

    second = env.submit("second", "pool-one", count=2)
    retry = env.wait_check(second, c.CheckState.RETRY)
    assert first in retry["message"]

    other = env.submit("other-shape", "pool-one", count=2, **{c.ANN_INSTANCE_TYPE: "m5.xlarge"})
    rejected = env.wait_check(other, c.CheckState.REJECTED)
    assert "instance-type" in rejected["message"]
    assert "m5.large" in rejected["message"] and "m5.xlarge" in rejected["message"]
    # Neither refused claimant disturbed the set.
    assert len(env.live_instances("pool-one")) == 2


def test_no_capacity_anywhere_costs_nothing_and_ends_in_retry(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory()
    for subnet in env.ec2.describe_subnets()["Subnets"]:
        env.emulator.client.set_capacity(subnet["AvailabilityZone"], "m5.large", 1)
    workload = env.submit("short", "pool-short", count=2)
    seen_instances: list[int] = []
    states: set[str] = set()

    def retried() -> bool:
        seen_instances.append(len(env.live_instances("pool-short")))
        check = env.check(workload)
        if check:
            states.add(check["state"])
        return bool(check and check["state"] == c.CheckState.RETRY)

    eventually(
        retried,
        120,
        lambda: f"Retry after the configured shortfalls (pool: {env.pool('pool-short')})",
        every=0.1,
    )
    assert max(seen_instances) == 0, "an instance ran while the gang could not be placed"
    assert c.CheckState.PENDING in states
    # The pool returns to Idle once the claim drops, so the count at the moment of Retry is
    # read from the check's own message.
    message = env.check(workload)["message"]  # type: ignore[index]
    attempts = int(re.search(r"in (\d+) consecutive attempts", message)[1])  # type: ignore[index]
    assert attempts >= env.settings.acquire_attempts_before_retry
    assert "nothing was left running" in message
    assert env.launches() == 0


def test_instances_that_never_join_are_released_and_a_new_set_acquired(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory(join_delay=3600.0, joinDeadlineSeconds=4)
    workload = env.submit("stuck", "pool-stuck", count=2)
    first = env.wait_phase("pool-stuck", Phase.JOINING, timeout=120)
    first_ids = set(first["status"]["instanceIds"])

    def next_generation() -> dict[str, Any] | None:
        pool = env.pool("pool-stuck") or {}
        ids = set(pool.get("status", {}).get("instanceIds", []))
        return pool if ids and ids.isdisjoint(first_ids) else None

    second = eventually(next_generation, 120, "a new generation after the join deadline")
    assert second["status"]["activeGroup"] != first["status"]["activeGroup"]
    live = {i["InstanceId"] for i in env.live_instances("pool-stuck")}
    assert live.isdisjoint(first_ids), "the stuck set was not released"
    assert len(live) == 2

    env.nodes.join_delay = 0.2
    env.wait_check(workload, c.CheckState.READY, timeout=120)


def test_reaper_terminates_only_what_ec2_proves_ours_and_reports_the_rest(
    gang_env_factory: Any,
) -> None:
    """Instances launched outside the controller (the test's own EC2 key) and tagged as
    gangs of this cluster are left alone and reported, past max-lifetime or orphaned as
    their tags claim; instances whose launch token the controller's key signed are reaped
    for the same reasons."""
    env: GangEnv = gang_env_factory()
    workload = env.submit("long", "pool-reap", count=2)
    env.wait_check(workload, c.CheckState.READY, timeout=120)
    image = env.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    subnet = env.ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    pool_uid = (env.pool("pool-reap") or {})["metadata"]["uid"]
    key = naming.read_ownership_key(env.settings.ownership.key_file)

    def launch(pool: str, max_lifetime: str, token: str | None = None) -> str:
        tags = {
            c.TAG_MANAGED: "true",
            c.TAG_CLUSTER: CLUSTER,
            c.TAG_POOL: pool,
            c.TAG_GROUP: "gen-7",
            c.TAG_MAX_LIFETIME: max_lifetime,
            c.cluster_ownership_tag(CLUSTER): "owned",
        }
        out = env.ec2.run_instances(
            ImageId=image,
            InstanceType="m5.large",
            MinCount=1,
            MaxCount=1,
            SubnetId=subnet,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ],
            **({"ClientToken": token} if token else {}),
        )
        return str(out["Instances"][0]["InstanceId"])

    def signed(pool: str, uid: str) -> str:
        return naming.client_token(uid, 7, subnet, key=key, cluster=CLUSTER, pool=pool)

    by_hand_orphan = launch("no-such-pool", "4h0m0s")
    by_hand_expired = launch("pool-reap", "1s", token="a-token-of-someone-else")
    orphan = launch("no-such-pool", "4h0m0s", signed("no-such-pool", "uid-long-gone"))
    expired = launch("pool-reap", "1s", signed("pool-reap", pool_uid))
    time.sleep(1.5)  # the tag's lifetime must pass in EC2's own clock

    def reaped() -> bool:
        live = {i["InstanceId"] for i in env.live_instances()}
        return orphan not in live and expired not in live

    eventually(reaped, 60, "the reaper to terminate the proven orphan and expired instance")
    registry = env.manager.metrics.registry

    def reported() -> bool:
        unproven = sum(
            registry.get_sample_value("atomic_gang_instances_unproven", {"reason": r}) or 0
            for r in (NO_LAUNCH_TOKEN, TOKEN_NOT_OURS)
        )
        return unproven == 2

    eventually(reported, 90, "the two hand-tagged instances reported as unproven")
    live = {i["InstanceId"] for i in env.live_instances()}
    assert {by_hand_orphan, by_hand_expired} <= live, "an unproven instance was terminated"
    # The pool's own set is neither orphaned nor expired.
    assert len(env.live_instances("pool-reap")) == 3  # its set and the hand-tagged one


def test_deleting_a_pool_releases_its_instances_through_the_finalizer(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory()
    workload = env.submit("doomed", "pool-doomed", count=2)
    env.wait_check(workload, c.CheckState.READY, timeout=120)
    assert env.pool("pool-doomed")["metadata"]["finalizers"] == [c.FINALIZER]  # type: ignore[index]
    env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, "pool-doomed")
    eventually(lambda: env.pool("pool-doomed") is None, 120, "the pool to be released and removed")
    assert env.live_instances("pool-doomed") == []
    assert env.driver.outputs("pool-doomed") is None


def _now() -> datetime:
    return datetime.now(UTC) - timedelta(seconds=0)


__all__ = ["REGION", "boto3"]


# Each failed update abandons the SDK's in-process language server's event loop (see the
# `failed_updates` fixture); here the controller retries in the background until teardown,
# so the loops are collected after the test, as unraisable ResourceWarnings of the SDK's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_missing_instance_profile_is_reported_as_a_config_failure(
    failed_updates: None, gang_env_factory: Any, emulator: Any
) -> None:
    """Real stack driver, real Pulumi CLI: the provider's CloudError crosses the provider
    host and the CLI and reaches the pool's status as a configuration failure."""
    iam = boto3.client("iam", region_name=REGION, endpoint_url=emulator.endpoint_url)
    role = iam.create_role(RoleName="no-profile-role", AssumeRolePolicyDocument="{}")["Role"]
    probe: GangEnv = gang_env_factory(start_controller=False)
    env: GangEnv = gang_env_factory(
        allowedNodeRoleArns=[probe.settings.defaults.node_role_arn, role["Arn"]]
    )
    env.submit("no-profile", "pool-no-profile", count=2, **{c.ANN_NODE_ROLE_ARN: role["Arn"]})

    def config_error() -> dict[str, Any] | None:
        pool = env.pool("pool-no-profile")
        error = ((pool or {}).get("status") or {}).get("lastError") or {}
        return error if "InstanceProfile" in str(error.get("reason")) else None

    error = eventually(config_error, 120, "a lastError naming the instance profile")
    assert "(config failure)" in error["message"], error
    assert env.live_instances("pool-no-profile") == []
