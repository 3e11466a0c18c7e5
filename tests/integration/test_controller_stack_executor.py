"""Pulumi operations run apart from the reconcilers: while one pool's `up` is held inside
EC2, another pool's Node events are reconciled and its status moves, on real parts.

The controller gets one reconcile worker and one stack worker, so if the held `up` ran on
the reconcile worker nothing else could move until it let go. The hold is the emulator's
delay switch on CreateLaunchTemplate, which the new pool's prepare calls from inside its
`up` (the dynamic provider's create).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.integration.controller_harness import GangEnv, eventually

# Below the stack program's EC2 read timeout (30s), so the held call is answered, not retried.
HOLD = 20.0


def ready_condition(status: str) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "type": "Ready",
        "status": status,
        "reason": "KubeletReady" if status == "True" else "KubeletNotReady",
        "message": "set by the test",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def held_create_started(env: GangEnv) -> bool:
    return any(
        x["switch"] == "delay" and x["action"] == "CreateLaunchTemplate"
        for x in env.emulator.client.consumed()
    )


def test_a_pools_node_events_are_reconciled_while_another_pools_up_is_held(
    gang_env_factory: Any, kube_api: Any
) -> None:
    env: GangEnv = gang_env_factory(maxConcurrentPoolReconciles=1, stackOperations={"workers": 1})
    core = k8s.CoreV1Api(kube_api)
    steady = env.submit("steady", "pool-steady", count=2)
    env.wait_check(steady, c.CheckState.READY, timeout=180)
    eventually(
        lambda: (env.pool("pool-steady") or {}).get("status", {}).get("recordedGroup") is not None,
        90,
        "the steady pool's set recorded in its stack",
    )
    nodes = core.list_node(label_selector=f"{c.POOL_LABEL}=pool-steady").items
    assert len(nodes) == 2

    env.emulator.client.delay_calls("CreateLaunchTemplate", HOLD)
    env.submit("held", "pool-held", count=2)
    eventually(lambda: held_create_started(env), 90, "the held pool's up reaching EC2")
    held_since = time.monotonic()
    in_flight = env.manager.metrics.registry.get_sample_value(
        "atomic_gang_stack_operations_in_flight"
    )
    assert in_flight == 1

    # A Node event of the other pool while the up is held: it goes NotReady, then Ready.
    name = nodes[0].metadata.name
    core.patch_node_status(name, {"status": {"conditions": [ready_condition("False")]}})
    # Joining with one node Ready; or, when the Workload reconciler saw the broken gang first
    # and handed the claim back, KeepWarm at once (a set whose claim drops while Joining is
    # kept warm without waiting for its nodes). Either is this pool reconciled during the hold.
    broken = eventually(
        lambda: (
            (p := env.pool("pool-steady") or {}).get("status", {}).get("phase")
            in (Phase.JOINING, Phase.KEEP_WARM)
            and p
        ),
        HOLD,
        lambda: f"the steady pool past Satisfied, a node NotReady (now {env.phase('pool-steady')})",
    )
    core.patch_node_status(name, {"status": {"conditions": [ready_condition("True")]}})
    if broken["status"]["phase"] == Phase.JOINING:
        assert broken["status"]["readyNodes"] == 1
        # Back to Satisfied with both nodes; or, when the Workload reconciler handed the claim
        # back meanwhile, KeepWarm. Either is this pool reconciled during the hold.
        eventually(
            lambda: (
                (p := env.pool("pool-steady") or {}).get("status", {}).get("phase")
                in (Phase.SATISFIED, Phase.KEEP_WARM)
                and p
            ),
            HOLD,
            "the steady pool past Joining",
        )
    seconds = time.monotonic() - held_since

    # All of that happened inside the hold: the held pool's prepare had not come back.
    held = env.pool("pool-held") or {}
    assert held.get("status", {}).get("lastStackOperation") is None, held.get("status")
    assert env.live_instances("pool-held") == []
    assert seconds < HOLD, f"the other pool moved only after {seconds:.1f}s"

    # Once the hold ends, the held pool goes on to a Ready gang of its own.
    pool = env.wait_phase("pool-held", Phase.SATISFIED, timeout=180)
    assert pool["status"]["lastStackOperation"] in ("prepare", "record")
    assert len(env.live_instances("pool-held")) == 2
