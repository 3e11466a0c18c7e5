"""A set whose claim disappears while its nodes are still joining, on real parts: nobody
waits for those nodes any more, so the set is kept warm (keep-warm configured) or released
(none) at once, not after its nodes are Ready or its join deadline passes."""

from __future__ import annotations

import time
from typing import Any

from provisioner.api import constants as c
from provisioner.api.constants import Phase
from tests.integration.controller_harness import GangEnv, eventually

# Far beyond the test: a set that waited for its nodes, or its deadline, would still bill.
JOIN_DEADLINE_SECONDS = 600
WITHIN_SECONDS = 45.0


def test_a_joining_set_whose_claim_drops_is_kept_warm_or_released_at_once(
    gang_env_factory: Any,
) -> None:
    # Nodes that never join: the sets stay Joining until something else moves them.
    env: GangEnv = gang_env_factory(join_delay=3600.0, joinDeadlineSeconds=JOIN_DEADLINE_SECONDS)
    warm = env.submit("warm", "pool-warm", count=2)
    bare = env.submit("bare", "pool-bare", count=2, **{c.ANN_KEEP_WARM_TTL: "0s"})
    joining = {
        name: env.wait_phase(name, Phase.JOINING, timeout=120)
        for name in ("pool-warm", "pool-bare")
    }
    warm_ids = set(joining["pool-warm"]["status"]["instanceIds"])
    assert len(warm_ids) == 2 and len(env.live_instances("pool-bare")) == 2

    # One claim drops because its Workload is evicted, the other because it is deleted.
    env.kueue.evict(env.namespace, warm)
    env.custom.delete_namespaced_custom_object(
        c.KUEUE_GROUP, c.KUEUE_VERSION, env.namespace, "workloads", bare
    )
    dropped = time.monotonic()

    kept = env.wait_phase("pool-warm", Phase.KEEP_WARM, timeout=WITHIN_SECONDS)
    assert kept["status"].get("keepWarmUntil"), kept["status"]
    assert kept["status"]["readyNodes"] == 0, "kept warm before any node was Ready"
    # The same set, still running: warm for the next claim, not released.
    assert {i["InstanceId"] for i in env.live_instances("pool-warm")} == warm_ids
    eventually(
        lambda: not env.live_instances("pool-bare"),
        WITHIN_SECONDS,
        lambda: f"pool-bare released (now {env.pool('pool-bare')})",
    )
    took = time.monotonic() - dropped
    assert took < JOIN_DEADLINE_SECONDS / 4, f"{took:.0f}s: waited on the join, not the claim"
