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

import os
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from devenv.processes import Supervised, free_port
from provisioner.api import constants as c
from tests.integration.controller_harness import CLUSTER, REGION, GangEnv


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
    path.write_text(yaml.safe_dump(settings))
    return path


class ControllerProcess:
    """`atomic-gang controller` in its own process group; each start logs to its own file."""

    def __init__(
        self, kubeconfig: Path, pulumi_root: Path, config: Path, log_dir: Path, **env: str
    ) -> None:
        self._args = (kubeconfig, pulumi_root, config)
        self._log_dir = log_dir
        # The controller refuses ATOMIC_GANG_* variables it does not know, and the suite's
        # own knobs share that prefix; its settings come from the file instead.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("ATOMIC_GANG_")}
        self._env = {
            **inherited,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "PULUMI_CONFIG_PASSPHRASE": "integration",
            **env,
        }
        self.child: Supervised | None = None
        self.starts = 0
        self.kills = 0

    def start(self) -> None:
        kubeconfig, pulumi_root, config = self._args
        self.starts += 1
        name = f"controller-{self.starts}"
        self.child = Supervised(
            name,
            [
                sys.executable,
                "-m",
                "provisioner",
                "controller",
                f"--kubeconfig={kubeconfig}",
                f"--pulumi-root={pulumi_root}",
                f"--config={config}",
                "--log-level=INFO",
                f"--identity=chaos-{self.starts}",
                f"--health-port={free_port()}",
                f"--metrics-port={free_port()}",
            ],
            self._log_dir / f"{name}.log",
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
        """Pulumi CLI subcommands (up, destroy, cancel, ...) running in the controller's
        process group right now."""
        if self.child is None or not self.alive():
            return set()
        found: set[str] = set()
        pgid = self.child.pid
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            # Field 5 of stat is the process group; the command name may hold spaces.
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) < 3 or int(fields[2]) != pgid:
                continue
            words = [a.decode(errors="replace") for a in argv if a]
            if words and Path(words[0]).name == "pulumi":
                found.update(w for w in words[1:3] if w in ("up", "destroy", "refresh", "cancel"))
        return found


# --- what EC2 and the pool say -------------------------------------------------------------


def all_instances(env: GangEnv, pool: str | None = None) -> list[dict[str, Any]]:
    """Every instance of the cluster (optionally of one pool), in any state."""
    filters = [{"Name": f"tag:{c.TAG_CLUSTER}", "Values": [CLUSTER]}]
    if pool:
        filters.append({"Name": f"tag:{c.TAG_POOL}", "Values": [pool]})
    pages = env.ec2.describe_instances(Filters=filters)["Reservations"]
    return [i for r in pages for i in r["Instances"]]


def tag(instance: dict[str, Any], key: str) -> str | None:
    return next((t["Value"] for t in instance.get("Tags", []) if t["Key"] == key), None)


def launches_per_group(env: GangEnv) -> Counter[tuple[str | None, str | None]]:
    """Instances ever created, per (pool, group): a generation launching twice shows here."""
    return Counter((tag(i, c.TAG_POOL), tag(i, c.TAG_GROUP)) for i in all_instances(env))


def live_ids(env: GangEnv, pool: str | None = None) -> set[str]:
    return {i["InstanceId"] for i in env.live_instances(pool)}


def status(env: GangEnv, pool: str) -> dict[str, Any]:
    return (env.pool(pool) or {}).get("status") or {}


def detached_enis(env: GangEnv) -> set[str]:
    """ENIs left `available` (detached, not deleted): what a release must clean up."""
    found = env.ec2.describe_network_interfaces(
        Filters=[{"Name": "status", "Values": ["available"]}]
    )["NetworkInterfaces"]
    return {e["NetworkInterfaceId"] for e in found}


def stack_instance_ids(env: GangEnv, pool: str) -> set[str] | None:
    outputs = env.driver.read_outputs(pool)  # the child controller writes the stack
    return None if outputs is None else set(outputs.instance_ids)


def converged_problems(env: GangEnv, pools: dict[str, int], enis_before: set[str]) -> list[str]:
    """Every broken invariant after convergence, as sentences; empty when all hold.

    `pools` maps each pool that should be Satisfied to its N.
    """
    problems: list[str] = []
    owned: set[str] = set()
    for pool, n in pools.items():
        st = status(env, pool)
        ids = set(st.get("instanceIds") or ())
        owned |= ids
        if st.get("phase") != c.PHASE_SATISFIED or len(ids) != n:
            problems.append(f"pool {pool} is {st.get('phase')} with {len(ids)}/{n} instances")
        live = live_ids(env, pool)
        if live != ids:
            problems.append(f"pool {pool}: EC2 runs {sorted(live)}, status owns {sorted(ids)}")
        recorded = stack_instance_ids(env, pool)
        if recorded != live:
            problems.append(f"pool {pool}: stack records {recorded}, EC2 runs {sorted(live)}")
    stray = live_ids(env) - owned
    if stray:
        problems.append(f"live managed instances no pool owns: {sorted(stray)}")
    for (pool, group), launched in launches_per_group(env).items():
        n = pools.get(pool or "")
        if n is not None and launched > n:
            problems.append(f"pool {pool} group {group} launched {launched} > N={n} instances")
    leaked = detached_enis(env) - enis_before
    if leaked:
        problems.append(f"detached ENIs left behind: {sorted(leaked)}")
    return problems


def first(probe: Callable[[], Any]) -> Any:
    """`probe()`, or None when it raised (the apiserver or emulator mid-restart)."""
    try:
        return probe()
    except Exception:
        return None
