"""EC2 faults on the emulator, one test each, against the in-process controller of
`tests/integration/controller_harness.py`: no capacity in any zone, throttling, a partial
instant fleet, instances that never join, and ENIs that detach slowly.

Each test ends by checking that nothing was lost and nothing bills that should not: the
pool owns exactly the live instances (none stray), no (pool, generation) launched more than
N, and no detached ENI is left. Run with the integration tests (`pytest tests/faults`).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.chaos.harness import (
    assert_clean,
    detached_enis,
    launches_per_group,
    status,
)
from tests.integration.controller_harness import GangEnv, eventually

pytestmark = pytest.mark.integration

N = 2
TYPE = "m5.large"  # the harness's gang Jobs ask for it


def zones(env: GangEnv) -> list[str]:
    found = env.ec2.describe_availability_zones()["AvailabilityZones"]
    return [z["ZoneName"] for z in found]


def ready(env: GangEnv, workload: str, pool: str, timeout: float = 150) -> dict[str, Any]:
    env.wait_check(workload, c.CheckState.READY, timeout=timeout)
    st = status(env, pool)
    assert st["phase"] == Phase.SATISFIED and len(st["instanceIds"]) == N, st
    return st


def test_no_capacity_in_any_zone_bills_nothing_then_retries_the_whole_gang(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    for zone in zones(env):
        emu.set_capacity(zone, TYPE, 0)
    workload = env.submit("short", "pool-short", count=N)

    # acquireAttemptsBeforeRetry is 3 in the harness: Kueue gets the quota back.
    check = env.wait_check(workload, c.CheckState.RETRY, timeout=120)
    assert "no capacity" in check["message"], check
    assert env.launches() == 0, "a shortfall left instances behind"
    st = status(env, "pool-short")
    # Each shortfall is terminal for its generation; the count itself resets once the
    # claim is handed back.
    assert not st.get("instanceIds") and st.get("acquireGeneration", 0) >= 3, st

    for zone in zones(env):
        emu.set_capacity(zone, TYPE, 10)
    # Kueue re-admits only after its requeue backoff, by which time the pool has dropped
    # the claim and its shortfall count; re-admitting sooner would meet the old count.
    eventually(
        lambda: (
            not (env.pool("pool-short") or {}).get("spec", {}).get("claim")
            and status(env, "pool-short").get("consecutiveShortfalls", 0) == 0
        ),
        60,
        "the pool to drop the claim and its shortfalls",
    )
    env.kueue.reserve_quota(env.namespace, workload, N)
    ready(env, workload, "pool-short")
    assert env.launches() == N
    assert_clean(env, {"pool-short": N}, enis)


def test_throttling_is_retried_without_a_second_launch(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    # Every throttle is the controller's alone: the test's own reads and the node
    # simulator's polling sign with keys of their own (controller_harness), so none of
    # them can take a fault meant for the controller and leave its path untested.
    controller = os.environ["AWS_ACCESS_KEY_ID"]
    emu.inject_fault("RunInstances", "RequestLimitExceeded", count=3, client=controller)
    emu.inject_fault("DescribeInstances", "RequestLimitExceeded", count=3, client=controller)
    # The test's own baseline read, after arming: scoped, the throttles wait for the
    # controller (an unscoped one would be spent here, or on the node simulator's polling).
    assert env.launches() == 0 and not env.live_instances("pool-throttled")
    workload = env.submit("throttled", "pool-throttled", count=N)
    ready(env, workload, "pool-throttled")
    assert env.launches() == N, "throttling led to a second launch"
    assert_clean(env, {"pool-throttled": N}, enis)

    # The acquire path never calls CreateTags: the launch tags ride on the launch call's
    # TagSpecifications, and CreateTags only mirrors keep-warm once a claim drops. So no
    # CreateTags throttle is armed here: it would never be met (nor prove anything).
    throttles = [x for x in emu.consumed() if x.get("switch") == "fault"]
    assert Counter(x["action"] for x in throttles) == {
        "RunInstances": 3,
        "DescribeInstances": 3,
    }, f"an armed throttle was not met: {throttles}"
    assert {x.get("by") for x in throttles} == {controller}, throttles


def test_a_partial_instant_fleet_is_terminated_and_the_gang_relaunched(
    gang_env_factory: Any,
) -> None:
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    emu.set_short_answer("CreateFleet", missing=1, count=1)
    workload = env.submit("partial", "pool-partial", count=N, **{c.ANN_MODE: c.MODE_FLEET})
    st = ready(env, workload, "pool-partial")

    per_group = launches_per_group(env)
    groups = {g for (p, g) in per_group if p == "pool-partial"}
    assert len(groups) >= 2, f"the partial fleet was not seen: {per_group}"
    assert per_group[("pool-partial", st["activeGroup"])] == N
    # The short fleet's instances are gone; only the active group runs.
    assert {i["InstanceId"] for i in env.live_instances("pool-partial")} == set(st["instanceIds"])
    assert_clean(env, {"pool-partial": N}, enis)


def test_instances_that_never_join_are_released_and_replaced(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory(join_delay=3600.0)
    enis = detached_enis(env)
    workload = env.submit("nojoin", "pool-nojoin", count=N)
    joining = env.wait_phase("pool-nojoin", Phase.JOINING, timeout=120)
    first_set = set(joining["status"]["instanceIds"])
    assert len(first_set) == N
    env.nodes.refuse_join(*first_set)
    env.nodes.join_delay = 0.5  # the next set joins

    # joinDeadlineSeconds is 20 in the harness.
    st = ready(env, workload, "pool-nojoin", timeout=180)
    assert not first_set & set(st["instanceIds"])
    live = {i["InstanceId"] for i in env.live_instances()}
    assert not first_set & live, "the set that never joined still bills"
    assert_clean(env, {"pool-nojoin": N}, enis)


def test_slow_eni_detach_is_waited_for_and_the_eni_deleted(gang_env_factory: Any) -> None:
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    workload = env.submit("eni", "pool-eni", count=N, **{c.ANN_KEEP_WARM_TTL: "1s"})
    st = ready(env, workload, "pool-eni")

    # The node simulator attached a secondary ENI to each node, as the VPC CNI does: it
    # survives termination, and now detaches slowly.
    found = env.ec2.describe_network_interfaces(
        Filters=[{"Name": "description", "Values": [f"aws-K8S-{i}" for i in st["instanceIds"]]}]
    )["NetworkInterfaces"]
    assert len(found) == N and not any(e["Attachment"]["DeleteOnTermination"] for e in found)
    cni_enis = [e["NetworkInterfaceId"] for e in found]
    emu.set_eni_detach_delay(6.0)

    started = time.monotonic()
    env.kueue.finish(env.namespace, workload)
    env.wait_phase("pool-eni", Phase.IDLE, timeout=150)
    assert env.live_instances("pool-eni") == []
    left = env.ec2.describe_network_interfaces(
        Filters=[{"Name": "network-interface-id", "Values": cni_enis}]
    )["NetworkInterfaces"]
    assert left == [], f"ENIs {left} outlived the release ({time.monotonic() - started:.0f}s)"
    assert detached_enis(env) - enis == set()


def test_a_short_runinstances_answer_is_rolled_back_by_the_product(gang_env_factory: Any) -> None:
    # EC2 with MinCount=MaxCount=N never answers fewer; the product does not trust that.
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    emu.set_short_answer("RunInstances", missing=1, count=1)
    workload = env.submit("shortrun", "pool-shortrun", count=N)
    st = ready(env, workload, "pool-shortrun")

    per_group = launches_per_group(env)
    groups = {g for (p, g) in per_group if p == "pool-shortrun"}
    assert len(groups) >= 2, f"the short answer was not seen: {per_group}"
    assert per_group[("pool-shortrun", st["activeGroup"])] == N
    assert {i["InstanceId"] for i in env.live_instances("pool-shortrun")} == set(st["instanceIds"])
    assert_clean(env, {"pool-shortrun": N}, enis)


def test_a_rollback_whose_terminates_fail_is_finished_by_a_release(gang_env_factory: Any) -> None:
    # The short set cannot be terminated at once (every retry of the client fails too): the
    # ids ride on the error and the reconciler's release terminates them once EC2 answers.
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    emu.set_short_answer("RunInstances", missing=1, count=1)
    emu.inject_fault("TerminateInstances", "InternalError", count=8)
    workload = env.submit("stuck", "pool-stuck", count=N)
    st = ready(env, workload, "pool-stuck", timeout=240)

    consumed = [x for x in emu.consumed() if x.get("action") == "TerminateInstances"]
    assert len(consumed) == 8, f"the terminate faults were not all met: {consumed}"
    assert {i["InstanceId"] for i in env.live_instances("pool-stuck")} == set(st["instanceIds"])
    assert_clean(env, {"pool-stuck": N}, enis)
