"""With the real Kueue manager: a gang whose Capacity Block ends (issue 29).

A 2 x p5.48xlarge gang runs on a block whose last 30 minutes (EC2 reclaims a block's
instances then) begin a minute and a half into the test. Its set is released as planned
`capacityBlockReleaseSeconds` (30 minutes and 5 s) before the block's end; its Workload
is then Rejected at our check, with the block's id and end named and the release called
planned (not "lost its gang"), so Kueue deactivates it and frees its quota instead of
holding it, Pending, for a block that is over. A second Job on the same block, queued
after the release, is Rejected the same way, with nothing asked of EC2. What is checked
comes from Kueue (the check, the Workloads' conditions, the ClusterQueue's usage) and from
the emulator's log of launch requests as EC2 received them.

The controller's clock is real, so the block is made to end in real time, the release
margin is the least the settings allow and the join deadline is short; once the set is
released, the emulator's clock is moved past the block's end, so EC2 too reports the block
over.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kubernetes import client as k8s

from devenv import kueue_objects as ko
from provisioner.api import constants as c
from tests.e2e.conftest import (
    KUEUE,
    check_state,
    conditions,
    eventually,
    launched,
    submit,
    workload_of,
)
from tests.support.ec2_listing import described_instances

P5 = "p5.48xlarge"
ZONE = "us-east-1b"
# capacityBlockReleaseSeconds: the least the settings take (EC2 reclaims 30 minutes before
# the end), and 5 s for the planned release to come before EC2's.
RELEASE_SECONDS = 1805
JOIN_DEADLINE_SECONDS = 20  # joinDeadlineSeconds: no gang starts later than 25 s before that
# 100 s before EC2's reclaim: long enough for the pool's stack (10-25 s on a loaded machine)
# and the launch before the last start, 75 s in.
BLOCK_SECONDS = 1800.0 + 100.0


def our_check(env: Any, namespace: str, job: str) -> dict[str, Any] | None:
    wl = workload_of(env, namespace, job) or {}
    for entry in (wl.get("status") or {}).get("admissionChecks", []):
        if entry["name"] == ko.CHECK_NAME:
            return dict(entry)
    return None


def rejection(env: Any, namespace: str, job: str) -> str | None:
    """Our check's Rejected message for `job`'s Workload. Kueue deactivates a Workload whose
    check is Rejected and resets the check to Pending ("Reset to Pending after eviction.
    Previously: Rejected"), which a poll can miss on a loaded machine; the Warning Event the
    controller wrote with the rejection stays, so it answers too."""
    check = our_check(env, namespace, job)
    if check and check["state"] == c.CheckState.REJECTED:
        return str(check["message"])
    wl = workload_of(env, namespace, job)
    if not wl:
        return None
    core = k8s.CoreV1Api(env.control_plane.api_client())
    events = core.list_namespaced_event(
        namespace,
        field_selector=(
            f"involvedObject.name={wl['metadata']['name']},"
            f"reason={c.EventReason.CAPACITY_BLOCK_ENDED}"
        ),
    ).items
    return str(events[-1].message) if events else None


def live_on(ec2: Any, pool_name: str) -> list[dict[str, Any]]:
    return described_instances(
        ec2,
        [
            {"Name": f"tag:{c.TAG_POOL}", "Values": [pool_name]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ],
    )


def cluster_queue_usage(env: Any) -> dict[str, int]:
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())
    cq = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", ko.CLUSTER_QUEUE_NAME)
    status = cq.get("status") or {}
    return {
        "reserving": int(status.get("reservingWorkloads") or 0),
        "admitted": int(status.get("admittedWorkloads") or 0),
    }


def test_a_gang_requeued_after_its_blocks_set_was_released_is_rejected_naming_the_end(
    gang_local: Any, namespace: str
) -> None:
    env = gang_local(
        join_delay=0.5,
        # The Job runs past the block's end: only the block's end stops it.
        job_run_seconds=3600.0,
        join_deadline_seconds=JOIN_DEADLINE_SECONDS,
        capacity_block_release_seconds=RELEASE_SECONDS,
    )
    emu = env.emulator_client
    ec2 = env.ec2_client()
    tag = uuid.uuid4().hex[:5]
    pool_name = f"p5e-{tag}"
    now = emu.now()
    ends_at = now + BLOCK_SECONDS
    block = emu.add_capacity_reservation(
        P5,
        ZONE,
        2,
        "capacity-block",
        start=now - 60,
        end=ends_at,
        tags={c.TAG_CLUSTER: env.cluster_name},
    )
    ends_iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(ends_at)))
    annotations = {
        "count": "2",
        c.ANN_INSTANCE_TYPE: P5,
        c.ANN_MODE: "fleet",
        c.ANN_CAPACITY_RESERVATION_ID: block,
    }

    first = f"block-first-{tag}"
    submit(env, namespace, first, pool_name, **annotations)
    eventually(
        lambda: (
            check_state(workload_of(env, namespace, first)) == c.CheckState.READY
            and conditions(workload_of(env, namespace, first)).get(c.WL_ADMITTED) == "True"
        ),
        BLOCK_SECONDS - RELEASE_SECONDS - 5,
        lambda: (
            f"{first} admitted on the block before its release (check "
            f"{our_check(env, namespace, first)})"
        ),
    )
    assert len(live_on(ec2, pool_name)) == 2
    assert launched(env, pool_name) == 2

    # The planned release, then the Workload is refused: the block has no time for a gang.
    message = eventually(
        lambda: rejection(env, namespace, first),
        BLOCK_SECONDS - RELEASE_SECONDS + 60,
        lambda: (
            f"{first} Rejected after its block's release (check {our_check(env, namespace, first)})"
        ),
    )
    assert block in message and ends_iso in message, message
    assert "as planned" in message and "lost its gang" not in message, message
    eventually(lambda: not live_on(ec2, pool_name), 60, "the block's set released")
    requests_after_release = len(emu.launch_requests())
    # EC2 reports the block over too.
    emu.advance_clock(max(ends_at - emu.now(), 0.0) + 1.0)

    # Kueue deactivates the rejected Workload and frees its quota.
    eventually(
        lambda: conditions(workload_of(env, namespace, first)).get(c.WL_QUOTA_RESERVED) != "True",
        60,
        lambda: f"{first}'s quota freed ({conditions(workload_of(env, namespace, first))})",
    )
    assert (workload_of(env, namespace, first) or {})["spec"].get("active") is False
    eventually(
        lambda: cluster_queue_usage(env) == {"reserving": 0, "admitted": 0},
        60,
        lambda: f"the ClusterQueue's usage freed ({cluster_queue_usage(env)})",
    )

    # A Job queued for the same block after its release gets quota and is Rejected too.
    second = f"block-second-{tag}"
    submit(env, namespace, second, pool_name, **annotations)
    refused = eventually(
        lambda: rejection(env, namespace, second),
        60,
        lambda: f"{second} Rejected (check {our_check(env, namespace, second)})",
    )
    assert block in refused and ends_iso in refused, refused
    assert "Nothing was launched" in refused
    eventually(
        lambda: cluster_queue_usage(env) == {"reserving": 0, "admitted": 0},
        60,
        lambda: f"the ClusterQueue's usage freed ({cluster_queue_usage(env)})",
    )

    # No launch into the ended block: EC2 received no request after the release.
    time.sleep(3.0)
    assert len(emu.launch_requests()) == requests_after_release
    assert launched(env, pool_name) == 2
    assert live_on(ec2, pool_name) == []
