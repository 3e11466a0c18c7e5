"""The chaos suite's tools: the controller as a child process that can be SIGKILLed and
started again, detectors for the moments worth killing it in, and the invariant checks run
after convergence.

Used by `tests/chaos/test_chaos_kill.py` and by the fault tests that need a controller
process (`tests/faults/`). The environment around the controller (apiserver, emulator,
node simulator, Kueue stand-in, a stack driver reading the same Pulumi state) comes from
`tests/integration/controller_harness.py`'s `gang_env_factory` with its in-process
controller left unstarted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from devenv.controller_process import start_controller, write_settings
from devenv.processes import Supervised, descendants
from provisioner.api import constants as c
from tests.chaos import invariants
from tests.chaos.invariants import Expect, World
from tests.integration.controller_harness import CLUSTER, REGION, GangEnv, eventually
from tests.support.ec2_listing import described_instances


def settings_file(path: Path, env: GangEnv, **overrides: Any) -> Path:
    """The child controller's settings: the harness's cluster, state dir and emulator, one
    replica (no Lease to wait out after a kill), no webhook, a fast reaper."""
    settings: dict[str, Any] = {
        "clusterName": CLUSTER,
        "defaults": {
            "region": REGION,
            "nodeRoleArn": env.settings.defaults.node_role_arn,
            "keepWarmTTL": "1s",
        },
        "acquireAttemptsBeforeRetry": 1000,
        "joinDeadlineSeconds": 60,
        "reapIntervalSeconds": 3,
        "retryBackoff": {"initial": "1s", "max": "10s"},
        "leaderElection": {"enabled": False},
        # The harness's backend (the emulator's S3 bucket and KMS key, or its file backend).
        "pulumi": env.settings.pulumi.model_dump(mode="json"),
        "aws": {"endpointUrl": env.emulator.endpoint_url},
        "webhook": {"enabled": False},
        **overrides,
    }
    return write_settings(path, settings)


class ControllerProcess:
    """`atomic-gang controller` in its own process group; each start logs to its own file."""

    def __init__(
        self, kubeconfig: Path, pulumi_root: Path, config: Path, log_dir: Path, **env: str
    ) -> None:
        self._args = (kubeconfig, pulumi_root, config)
        self._log_dir = log_dir
        self._env = env
        self.child: Supervised | None = None
        self.starts = 0
        self.kills = 0

    def start(self) -> None:
        kubeconfig, pulumi_root, config = self._args
        self.starts += 1
        name = f"controller-{self.starts}"
        self.child = start_controller(
            name,
            self._log_dir / f"{name}.log",
            kubeconfig=kubeconfig,
            pulumi_root=pulumi_root,
            config=config,
            identity=f"chaos-{self.starts}",
            passphrase="integration",
            env=self._env,
        )

    def kill(self) -> None:
        assert self.child is not None
        self.child.kill()
        self.kills += 1

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    def log_tail(self, lines: int = 40) -> str:
        return "" if self.child is None else self.child.log_tail(lines)

    def pulumi_operations(self) -> set[str]:
        """Pulumi CLI subcommands (up, destroy, cancel, ...) the controller runs right now:
        its descendants, not its process group (the driver starts each CLI in a group of its
        own, which its fence kills whole)."""
        if self.child is None or not self.alive():
            return set()
        found: set[str] = set()
        for pid in descendants(self.child.pid):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            words = [a.decode(errors="replace") for a in argv if a]
            if words and Path(words[0]).name == "pulumi":
                found.update(w for w in words[1:3] if w in ("up", "destroy", "refresh", "cancel"))
        return found


# --- what EC2 and the pool say -------------------------------------------------------------


def all_instances(env: GangEnv, pool: str | None = None) -> list[dict[str, Any]]:
    """Every instance of the cluster (optionally of one pool), in any state, every page."""
    filters = [{"Name": f"tag:{c.TAG_CLUSTER}", "Values": [CLUSTER]}]
    if pool:
        filters.append({"Name": f"tag:{c.TAG_POOL}", "Values": [pool]})
    return described_instances(env.ec2, filters)


def live_ids(env: GangEnv, pool: str | None = None) -> set[str]:
    return {i["InstanceId"] for i in env.live_instances(pool)}


def status(env: GangEnv, pool: str) -> dict[str, Any]:
    return (env.pool(pool) or {}).get("status") or {}


def detached_enis(env: GangEnv) -> set[str]:
    """ENIs left `available` (detached, not deleted): what a release must clean up."""
    found: set[str] = set()
    pages = env.ec2.get_paginator("describe_network_interfaces").paginate(
        Filters=[{"Name": "status", "Values": ["available"]}]
    )
    for page in pages:
        found.update(e["NetworkInterfaceId"] for e in page["NetworkInterfaces"])
    return found


def stack_instance_ids(env: GangEnv, pool: str) -> set[str] | None:
    outputs = env.driver.read_outputs(pool)  # the child controller writes the stack
    return None if outputs is None else set(outputs.instance_ids)


def observe(env: GangEnv, pools: Iterable[str]) -> World:
    """One snapshot of EC2, the pools' status and their stacks."""
    names = list(pools)
    return World(
        statuses={pool: status(env, pool) for pool in names},
        instances=all_instances(env),
        stack_records={pool: stack_instance_ids(env, pool) for pool in names},
        detached_enis=detached_enis(env),
    )


def launches_per_group(env: GangEnv) -> Counter[tuple[str | None, str | None]]:
    """Instances ever created, per (pool, group): a generation launching twice shows here."""
    return invariants.launches_per_group(observe(env, ()))


def converged_problems(
    env: GangEnv, pools: dict[str, int] | dict[str, Expect], enis_before: set[str]
) -> list[str]:
    """Every broken invariant, as sentences; empty when all hold. `pools` maps each pool to
    its N (expected Satisfied) or to an `Expect`."""
    expected = {
        pool: want if isinstance(want, Expect) else Expect(want) for pool, want in pools.items()
    }
    return invariants.problems(observe(env, expected), expected, enis_before)


def first(probe: Callable[[], Any]) -> Any:
    """`probe()`, or None when it raised (the apiserver or emulator mid-restart)."""
    try:
        return probe()
    except Exception:
        return None


def assert_clean(env: GangEnv, pools: dict[str, int], enis_before: set[str]) -> None:
    """Wait (up to a minute) until `converged_problems` finds nothing; fail naming what is
    left otherwise."""
    eventually(
        lambda: converged_problems(env, pools, enis_before) == [] or None,
        60,
        lambda: "; ".join(converged_problems(env, pools, enis_before)),
        every=1.0,
    )
