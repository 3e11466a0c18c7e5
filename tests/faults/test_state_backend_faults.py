"""Faults in the S3 state backend, met by the real Pulumi CLI writing a pool's checkpoint:
the controller of `tests/integration/controller_harness.py` (or a controller process) on the
emulator's S3 and KMS.

A checkpoint write that fails leaves a stack operation half-recorded: EC2 may hold what the
state does not. The product must still give the gang exactly N, and leave one launch
template per pool, the stack equal to EC2, nothing stray.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv.controller_process import EMULATOR_KEYS
from provisioner.api import constants as c
from provisioner.api.constants import Phase
from provisioner.pulumi_driver.errors import BACKEND_UNAVAILABLE
from tests.chaos.harness import (
    ControllerProcess,
    assert_clean,
    detached_enis,
    live_ids,
    settings_file,
    status,
)
from tests.integration.controller_harness import GangEnv, eventually

pytestmark = pytest.mark.integration

N = 2
# The keys S3 calls are signed with: the in-process controller's (its Pulumi CLI inherits the
# test process's credentials) and a controller process's.
TEST_KEY = "testing"
CONTROLLER_KEY = EMULATOR_KEYS["AWS_ACCESS_KEY_ID"]


def pool_launch_templates(env: GangEnv, pool: str) -> list[str]:
    found = env.ec2.describe_launch_templates()["LaunchTemplates"]
    return [t["LaunchTemplateName"] for t in found if pool in t["LaunchTemplateName"]]


@pytest.mark.parametrize("after", [False, True], ids=["refused", "stored-answer-lost"])
def test_failing_checkpoint_writes_leave_one_template_and_n_instances(
    gang_env_factory: Any, after: bool
) -> None:
    env: GangEnv = gang_env_factory()
    emu = env.emulator.client
    enis = detached_enis(env)
    pool = f"pool-s3-{'lost' if after else 'refused'}"
    # Enough for the CLI's own retries to give up at least once, during prepare.
    emu.inject_fault("PutObject", "InternalError", count=12, after=after)
    workload = env.submit("s3", pool, count=N)

    env.wait_check(workload, c.CheckState.READY, timeout=240)
    consumed = [x for x in emu.consumed() if x.get("action") == "PutObject"]
    assert len(consumed) == 12, f"the checkpoint faults were not all met: {consumed}"
    st = status(env, pool)
    assert st["phase"] == Phase.SATISFIED and len(st["instanceIds"]) == N, st
    assert len(pool_launch_templates(env, pool)) == 1, pool_launch_templates(env, pool)
    assert_clean(env, {pool: N}, enis)


# --- S3 failing during a release, during recovery, and under a Joining set -----------------
# Every S3 object call the controller's Pulumi CLI makes fails (refused with a 500) until the
# test lifts the fault: the backend is down, not flaky. The faults are scoped to the key the
# controller signs with, so the test's own reads of EC2 and of the bucket go on.
BACKEND_DOWN = ("GetObject", "PutObject")
FOREVER = 100_000


def s3_down(env: GangEnv, client: str) -> None:
    for action in BACKEND_DOWN:
        env.emulator.client.inject_fault(action, "InternalError", count=FOREVER, client=client)


def s3_calls_refused(env: GangEnv) -> int:
    return sum(1 for x in env.emulator.client.consumed() if x.get("action") in BACKEND_DOWN)


def s3_down_before_the_record(env: GangEnv, name: str, pool: str, **annotations: str) -> str:
    """Submit a gang of N on `pool` and take S3 down after its stack is prepared and before
    its set is recorded: its launch is held in EC2 while the test waits for the launch
    marker, then every S3 call of the controller fails. Returns the Workload's name."""
    env.emulator.client.delay_calls("RunInstances", 2.0, client=TEST_KEY)
    workload = env.submit(name, pool, count=N, **annotations)
    eventually(
        lambda: status(env, pool).get("launchInProgress") is not None, 180, "the launch in flight"
    )
    s3_down(env, TEST_KEY)
    return workload


def waits_between_failed_and_next_record(
    records: list[logging.LogRecord], pool: str
) -> list[float]:
    """Seconds from each failed record (as the reconciler logs it) to the next record's start."""
    waits: list[float] = []
    failed_at: float | None = None
    for record in records:
        message = record.getMessage()
        if message.startswith(f"pool {pool}: record failed"):
            failed_at = record.created
        elif message == f"pool {pool}: stack record started" and failed_at is not None:
            waits.append(record.created - failed_at)
            failed_at = None
    return waits


def pool_events(env: GangEnv, pool: str) -> list[dict[str, Any]]:
    core = k8s.CoreV1Api(env.custom.api_client)
    found = core.list_event_for_all_namespaces(field_selector=f"involvedObject.name={pool}")
    return [env.custom.api_client.sanitize_for_serialization(e) for e in found.items]


def warnings(env: GangEnv, pool: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in pool_events(env, pool) if e["type"] == "Warning" and e["reason"] == reason]


def test_s3_down_during_a_release_is_retried_reported_and_finished_once_it_is_back(
    gang_env_factory: Any, failed_updates: None
) -> None:
    env: GangEnv = gang_env_factory()
    pool = "pool-s3-release"
    workload = env.submit("s3-release", pool, count=N)
    env.wait_check(workload, c.CheckState.READY, timeout=240)
    group = status(env, pool)["activeGroup"]
    eventually(
        lambda: status(env, pool).get("recordedGroup") == group,
        120,
        "the set recorded in the stack",
    )
    launched = set(status(env, pool)["instanceIds"])

    s3_down(env, TEST_KEY)
    env.kueue.finish(env.namespace, workload)
    env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, pool)

    # Retried, and said: the status names the backend as what the release waits for.
    def failing_again() -> dict[str, Any] | None:
        st = status(env, pool)
        return st if st.get("consecutiveFailures", 0) >= 2 else None

    st = eventually(failing_again, 180, lambda: f"the destroy retried (now {status(env, pool)})")
    assert st["phase"] == Phase.RELEASING and st.get("releaseInProgress"), st
    assert st["lastError"]["reason"] == BACKEND_UNAVAILABLE, st["lastError"]
    assert "state backend" in st["lastError"]["message"], st["lastError"]
    assert st["lastStackResult"] == f"failed: {BACKEND_UNAVAILABLE}", st
    # Truthful: no release is reported that did not happen.
    assert st["lastStackOperation"] != "destroy", st
    # The instances went first, whatever the backend: only the stack waits for S3.
    assert set(st["instanceIds"]) == launched and live_ids(env, pool) == set()
    assert warnings(env, pool, BACKEND_UNAVAILABLE), pool_events(env, pool)
    assert s3_calls_refused(env) >= 2

    env.emulator.client.clear_faults()  # S3 is back
    eventually(lambda: env.pool(pool) is None, 180, "the pool released and removed")
    assert live_ids(env, pool) == set()
    assert env.driver.list_stacks() == []
    assert pool_launch_templates(env, pool) == []


def test_s3_down_while_a_restarted_controller_recovers_is_retried_with_no_second_launch(
    gang_env_factory: Any, control_plane: Any, pulumi_tool: Any, tmp_path: Path
) -> None:
    env: GangEnv = gang_env_factory(join_delay=3600.0, start_controller=False)
    emu = env.emulator.client
    pool = "pool-s3-recover"
    config = settings_file(tmp_path / "controller.yaml", env)
    ctl = ControllerProcess(
        control_plane.info.kubeconfig, pulumi_tool.binary.parent.parent, config, tmp_path
    )
    ctl.start()
    try:
        # The first controller dies with its launch call in flight (marker saved, no IDs).
        emu.delay_calls("RunInstances", 3.0, client=CONTROLLER_KEY)
        workload = env.submit("s3-recover", pool, count=N)
        # The marker is saved just before the call leaves; the kill waits until the
        # emulator holds the call (on a loaded machine it can still be on its way).
        eventually(
            lambda: status(env, pool).get("launchInProgress") is not None and bool(emu.consumed()),
            180,
            "the launch in flight",
        )
        ctl.kill()
        frozen = status(env, pool)
        assert frozen.get("launchInProgress") and not frozen.get("instanceIds"), frozen

        # The next one starts and recovers while S3 refuses every object call.
        s3_down(env, CONTROLLER_KEY)
        ctl.start()
        eventually(lambda: s3_calls_refused(env) >= 6, 120, "the recovering controller to retry")
        st = status(env, pool)
        assert not st.get("instanceIds") and st.get("launchInProgress"), st
        requests = emu.launch_requests("RunInstances")
        assert len(requests) == 1, f"a launch was sent again while S3 was down: {requests}"
        assert ctl.alive(), ctl.log_tail()

        emu.clear_faults()  # S3 is back
        joining = env.wait_phase(pool, Phase.JOINING, timeout=180)
        launched = set(joining["status"]["instanceIds"])
        assert len(launched) == N and env.launches() == N, "a second set was launched"
        requests = emu.launch_requests("RunInstances")
        assert len({r["params"].get("ClientToken") for r in requests}) == 1, requests
        assert {i for r in requests for i in r["instance_ids"] or ()} == launched

        env.kueue.finish(env.namespace, workload)
        env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, pool)
        eventually(lambda: env.pool(pool) is None, 180, "the pool released and removed")
        assert live_ids(env, pool) == set()
        assert env.driver.list_stacks() == []
    finally:
        ctl.stop()


def test_a_record_that_keeps_failing_while_joining_backs_off_and_ends_at_the_join_deadline(
    gang_env_factory: Any, failed_updates: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="provisioner.controllers")
    deadline = 40
    env: GangEnv = gang_env_factory(
        join_delay=3600.0,
        joinDeadlineSeconds=deadline,
        retryBackoff={"initial": "1s", "max": "8s"},
    )
    emu = env.emulator.client
    pool = "pool-s3-record"
    s3_down_before_the_record(env, "s3-record", pool)
    try:
        joining = env.wait_phase(pool, Phase.JOINING, timeout=120)
        first = set(joining["status"]["instanceIds"])
        group = joining["status"]["activeGroup"]

        def released_for_the_deadline() -> dict[str, Any] | None:
            now = status(env, pool)
            releasing = now.get("releaseInProgress") or {}
            deadline_hit = releasing.get("reason") == c.EventReason.JOIN_DEADLINE_EXCEEDED
            return now if deadline_hit else None

        st = eventually(
            released_for_the_deadline, deadline + 60, "the join deadline's release", every=0.1
        )
        # Released at the deadline the launch set (by the status's own clock), not later.
        due = datetime.fromisoformat(joining["status"]["joinDeadline"])
        began = datetime.fromisoformat(st["releaseInProgress"]["startedAt"])
        assert due <= began <= due + timedelta(seconds=20), (due, began)
        assert st["activeGroup"] == group and st.get("recordedGroup") != group
        assert st["lastError"]["reason"] == BACKEND_UNAVAILABLE, st["lastError"]
        assert st["consecutiveFailures"] >= 3, st
        # Backed off, and further each time: the wait from a failed record to the next one's
        # start doubles from 1s towards 8s. Only lower bounds: a loaded machine waits longer,
        # never shorter, and a constant short wait fails the third.
        waits = waits_between_failed_and_next_record(caplog.records, pool)
        assert len(waits) >= 3, waits
        for attempt, waited in enumerate(waits):
            assert waited >= 0.95 * min(8.0, 2.0**attempt), f"no growing backoff: waits {waits}"
        assert warnings(env, pool, BACKEND_UNAVAILABLE), pool_events(env, pool)
        assert warnings(env, pool, c.EventReason.JOIN_DEADLINE_EXCEEDED), pool_events(env, pool)
    finally:
        emu.clear_faults()  # S3 is back: the stack can release the set now

    def next_generation() -> dict[str, Any] | None:
        now = status(env, pool)
        ids = set(now.get("instanceIds") or ())
        return now if ids and ids.isdisjoint(first) else None

    second = eventually(next_generation, 180, "a new generation after the join deadline")
    assert second["activeGroup"] != group
    assert live_ids(env, pool).isdisjoint(first), "the stuck set was not released"


def conditions_of(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {x["type"]: x for x in st.get("conditions") or ()}


def test_a_record_that_failed_while_s3_was_down_leaves_no_stale_error_once_it_succeeds(
    gang_env_factory: Any, failed_updates: None
) -> None:
    # The nodes never join, so nothing but the record's own success can clear its error
    # (a Satisfied transition would say nothing about the stack).
    env: GangEnv = gang_env_factory(join_delay=3600.0, retryBackoff={"initial": "1s", "max": "2s"})
    emu = env.emulator.client
    pool = "pool-s3-stale"
    s3_down_before_the_record(env, "s3-stale", pool)
    try:

        def record_failed() -> dict[str, Any] | None:
            st = status(env, pool)
            error = st.get("lastError") or {}
            return st if error.get("reason") == BACKEND_UNAVAILABLE else None

        failing = eventually(record_failed, 180, lambda: f"the record failing: {status(env, pool)}")
        assert failing["lastStackResult"] == f"failed: {BACKEND_UNAVAILABLE}", failing
    finally:
        emu.clear_faults()  # S3 is back

    group = failing["activeGroup"]
    st = eventually(
        lambda: (s := status(env, pool)).get("recordedGroup") == group and s,
        180,
        lambda: f"the set recorded once S3 is back: {status(env, pool)}",
    )
    # The write that saved the record's success says the pool is healthy again.
    assert "lastError" not in st, st["lastError"]
    assert st["lastStackResult"] == "succeeded", st
    now = conditions_of(st)
    assert (now["Degraded"]["status"], now["Degraded"]["reason"]) == ("False", "NoFailure"), now
    generation = env.pool(pool)["metadata"]["generation"]  # type: ignore[index]
    assert st["observedGeneration"] == generation
    assert {x["observedGeneration"] for x in now.values()} == {generation}, now
    # While S3 was down the status said which step failed, and how.
    assert failing["lastError"]["operation"] == "record", failing["lastError"]
    degraded = conditions_of(failing)["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "TransientFailure"), degraded


def test_a_pool_deleted_before_its_set_is_recorded_terminates_the_set_and_goes(
    gang_env_factory: Any, failed_updates: None
) -> None:
    """Deleted between its launch and the stack's record of that set (held here by S3 going
    down in between), a pool terminates the set first: the stack cannot, as it never
    recorded it, and EC2 refuses to delete the placement group the set runs in. Its destroy
    ran first once, failed on that group at every try, and kept the set running and the
    pool's finalizer on for as long as anyone let it."""
    env: GangEnv = gang_env_factory(join_delay=3600.0, retryBackoff={"initial": "1s", "max": "2s"})
    emu = env.emulator.client
    pool = "pool-s3-deleted"
    workload = s3_down_before_the_record(
        env, "s3-deleted", pool, **{c.ANN_PLACEMENT_GROUP: c.PLACEMENT_CLUSTER}
    )
    try:
        joining = env.wait_phase(pool, Phase.JOINING, timeout=120)
        launched = set(joining["status"]["instanceIds"])
        assert live_ids(env, pool) == launched and not status(env, pool).get("recordedGroup")
        env.kueue.finish(env.namespace, workload)
        env.custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, pool)

        # The set goes while the stack cannot be read; the pool waits for its destroy.
        def destroy_failed() -> dict[str, Any] | None:
            st = status(env, pool)
            return st if (st.get("lastError") or {}).get("operation") == "destroy" else None

        st = eventually(destroy_failed, 120, lambda: f"the destroy failing: {status(env, pool)}")
        assert st["phase"] == Phase.RELEASING and not live_ids(env, pool), st
        assert st["lastError"]["reason"] == BACKEND_UNAVAILABLE, st["lastError"]
    finally:
        emu.clear_faults()  # S3 is back
    eventually(lambda: env.pool(pool) is None, 180, lambda: f"the pool gone: {status(env, pool)}")
    assert env.driver.list_stacks() == []
    groups = env.ec2.describe_placement_groups()["PlacementGroups"]
    assert not [g for g in groups if pool in g["GroupName"]], groups
