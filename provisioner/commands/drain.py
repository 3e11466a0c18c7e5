"""`atomic-gang drain`: release every pool and wait until nothing bills, before `helm uninstall`.

Called by `provisioner.commands.cli`. The controller must still be running: the release is
its own (each GangNodePool's finalizer destroys the pool's stack, which terminates the
instances and cleans their ENIs); this command only asks for it and watches it end.

1. **Stop new gangs the Kueue way.** Every ClusterQueue that lists one of our
   AdmissionChecks gets `spec.stopPolicy: HoldAndDrain`, what `kueuectl stop clusterqueue`
   writes: Kueue admits nothing more from it and evicts the Workloads it admitted, so their
   Jobs are suspended and their Pods leave before the nodes under them go. The queues stay
   (their LocalQueues keep pending Jobs pending); `--resume` sets the policy back to None.
   Stopping the queues, rather than deleting our AdmissionCheck, is what a platform team
   that runs Kueue expects: it is reversible, it is Kueue's own switch, and a Workload never
   sees its check vanish half-way.
2. **Release every pool.** Once no gang is admitted on those queues any more (an evicted
   gang's claim drops, so the Workload reconciler recreates no pool), every GangNodePool is
   deleted; a pool that appears again meanwhile is deleted again.
3. **Wait with progress lines** until no GangNodePool is left (so no finalizer either), EC2
   lists no live instance tagged with this cluster, and the state backend holds no stack,
   or until `--timeout`: then it names what is left and exits 1.

The decision of each pass is `plan_pass`, a pure function of the facts `DrainWorld`
observed; `ClusterDrain` is the real world (Kubernetes, EC2, the stack backend).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from provisioner.api import constants as c
from provisioner.commands.kubectl_flags import (
    EXIT_CODES,
    EXIT_ERROR,
    add_cluster_flags,
    formatter,
)
from provisioner.commands.kueue_reads import checks_of_controller, condition_true, lists_check

__all__ = [
    "ClusterDrain",
    "DrainWorld",
    "Facts",
    "PoolLeft",
    "Step",
    "drain",
    "main",
    "plan_pass",
    "resume",
]

HOLD_AND_DRAIN: Final = "HoldAndDrain"
NO_STOP: Final = "None"
EXIT_DRAINED: Final = 0
EXIT_LEFT: Final = 1


@dataclass(frozen=True)
class PoolLeft:
    name: str
    phase: str
    deleting: bool
    finalizers: tuple[str, ...]


@dataclass(frozen=True)
class Facts:
    """What one pass saw: gang Workloads still admitted on our queues, pools, live
    instances of this cluster in EC2, and the stacks in the state backend."""

    admitted: tuple[str, ...] = ()
    pools: tuple[PoolLeft, ...] = ()
    instances: tuple[str, ...] = ()
    stacks: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        return not (self.admitted or self.pools or self.instances or self.stacks)

    def progress(self) -> str:
        pools = ", ".join(f"{p.name} ({p.phase})" for p in self.pools) or "none"
        return (
            f"waiting: {len(self.admitted)} gang(s) still admitted, {len(self.pools)} pool(s) "
            f"[{pools}], {len(self.instances)} instance(s) in EC2, {len(self.stacks)} stack(s)"
        )

    def left(self) -> list[str]:
        """One line per kind of thing still there, each naming it and what to look at."""
        lines = []
        if self.admitted:
            lines.append(
                f"gang Workloads still admitted: {', '.join(self.admitted)} (Kueue has not "
                "evicted them: is the Kueue manager running?)"
            )
        for p in self.pools:
            held = ", ".join(p.finalizers) or "no finalizer"
            lines.append(
                f"GangNodePool {p.name}: phase {p.phase}, {held} (is the controller running "
                f"and leading? `kubectl describe gnp {p.name}` shows its last error)"
            )
        if self.instances:
            lines.append(
                f"instances in EC2 tagged with this cluster: {', '.join(self.instances)} "
                "(the reaper terminates those whose pool is gone; or terminate them by hand)"
            )
        if self.stacks:
            lines.append(
                f"stacks in the state backend: {', '.join(self.stacks)} (`atomic-gang pools` "
                "lists them; a stack without a GangNodePool is destroyed with "
                "`pulumi destroy --remove -s <pool>`)"
            )
        return lines


@dataclass(frozen=True)
class Step:
    """What a pass does: the pools to delete now, and whether the drain is over."""

    delete: tuple[str, ...] = ()
    done: bool = False
    why: str = ""


def plan_pass(facts: Facts) -> Step:
    """Pure: delete pools only once no gang is admitted (an admitted gang's Workload would
    have its pool created again), and each pool only once (a pool being deleted is left to
    its finalizer)."""
    if facts.drained:
        return Step(done=True, why="drained")
    if facts.admitted:
        return Step(why="waiting for Kueue to evict the admitted gangs")
    return Step(delete=tuple(p.name for p in facts.pools if not p.deleting), why="releasing")


class DrainWorld(Protocol):
    """The calls the drain makes; `ClusterDrain` is the real one, tests hand a fake."""

    def hold_queues(self, policy: str) -> list[str]: ...

    def observe(self) -> Facts: ...

    def delete_pool(self, name: str) -> None: ...


@dataclass
class Clock:
    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def drain(
    world: DrainWorld,
    *,
    timeout: float,
    poll: float,
    say: Callable[[str], None],
    clock: Clock | None = None,
) -> int:
    """Hold the queues, release every pool, wait until nothing is left or `timeout`."""
    clock = clock or Clock()
    held = world.hold_queues(HOLD_AND_DRAIN)
    say(
        f"stopped ClusterQueue(s) {', '.join(held)} (stopPolicy {HOLD_AND_DRAIN}): Kueue "
        "admits no new gang and evicts the admitted ones"
        if held
        else "no ClusterQueue lists our AdmissionCheck; no queue to stop"
    )
    deadline = clock.now() + timeout
    last = ""
    while True:
        facts = world.observe()
        step = plan_pass(facts)
        if step.done:
            say("drained: 0 instances in EC2, no stack, no GangNodePool left")
            return EXIT_DRAINED
        for name in step.delete:
            world.delete_pool(name)
            say(f"deleted GangNodePool {name}: the controller releases it through its finalizer")
        line = facts.progress()
        if line != last:
            say(line)
            last = line
        if clock.now() >= deadline:
            say(f"timed out after {timeout:.0f}s; left:")
            for entry in facts.left():
                say(f"  - {entry}")
            return EXIT_LEFT
        clock.sleep(poll)


def resume(world: DrainWorld, say: Callable[[str], None]) -> int:
    held = world.hold_queues(NO_STOP)
    say(f"resumed ClusterQueue(s): {', '.join(held) or 'none listed our check'}")
    return EXIT_DRAINED


# -- the real world ----------------------------------------------------------------------------
class StackLister(Protocol):
    def list_stacks(self) -> Sequence[Any]: ...


@dataclass
class ClusterDrain:
    """Kubernetes (our AdmissionChecks, their ClusterQueues, Workloads, GangNodePools),
    EC2 (live instances tagged with the cluster) and the pools' stack backend."""

    kube: Any
    ec2: Any
    stacks: StackLister
    cluster: str
    # settings.controllerName: the AdmissionChecks naming it are ours.
    controller_name: str = c.CONTROLLER_NAME
    _checks: set[str] | None = field(default=None, init=False)

    def _our_checks(self) -> set[str]:
        from provisioner.kube.resources import ADMISSION_CHECKS

        if self._checks is None:
            self._checks = checks_of_controller(
                self.kube.list(ADMISSION_CHECKS).items, self.controller_name
            )
        return self._checks

    def hold_queues(self, policy: str) -> list[str]:
        from provisioner.commands.doctor_kube import CLUSTER_QUEUES

        checks = self._our_checks()
        held = []
        for cq in self.kube.list(CLUSTER_QUEUES).items:
            if not lists_check(cq, checks):
                continue
            name = str(cq["metadata"]["name"])
            self.kube.patch(
                CLUSTER_QUEUES,
                name,
                {"spec": {"stopPolicy": policy}},
                resource_version=cq["metadata"]["resourceVersion"],
            )
            held.append(name)
        return sorted(held)

    def observe(self) -> Facts:
        from provisioner.cloud.views import find_managed
        from provisioner.kube.resources import GANG_NODE_POOLS, WORKLOADS

        checks = self._our_checks()
        admitted = []
        for wl in self.kube.list(WORKLOADS).items:
            status = wl.get("status") or {}
            ours = any(a.get("name") in checks for a in status.get("admissionChecks") or ())
            # A Finished Workload keeps its QuotaReserved condition but holds no gang.
            reserved = condition_true(wl, c.WL_QUOTA_RESERVED)
            if ours and reserved and not condition_true(wl, c.WL_FINISHED):
                meta = wl["metadata"]
                admitted.append(f"{meta['namespace']}/{meta['name']}")
        pools = tuple(
            PoolLeft(
                name=str(p["metadata"]["name"]),
                phase=str((p.get("status") or {}).get("phase") or "Idle"),
                deleting=bool(p["metadata"].get("deletionTimestamp")),
                finalizers=tuple(p["metadata"].get("finalizers") or ()),
            )
            for p in self.kube.list(GANG_NODE_POOLS).items
        )
        instances = tuple(v.instance_id for v in find_managed(self.ec2, self.cluster))
        stacks = tuple(sorted(s.name for s in self.stacks.list_stacks()))
        return Facts(tuple(sorted(admitted)), pools, instances, stacks)

    def delete_pool(self, name: str) -> None:
        from provisioner.kube.errors import KubeNotFound
        from provisioner.kube.resources import GANG_NODE_POOLS

        # Gone already: released since the pass observed it.
        with contextlib.suppress(KubeNotFound):
            self.kube.delete(GANG_NODE_POOLS, name, resource_version=None)


def build_parser(prog: str = "atomic-gang drain") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Before `helm uninstall`: stop the ClusterQueues that list our "
        "AdmissionCheck (Kueue evicts the admitted gangs), delete every GangNodePool (the "
        "running controller releases each through its finalizer) and wait until EC2 lists "
        "no instance of this cluster, no stack is left and no GangNodePool remains. The "
        "stacks are read from the state backend directly: no Pulumi CLI needed.",
        epilog=f"exit codes: 0 drained (or resumed); 1 something is left at --timeout, or an "
        f"error; 2 a usage error\n\n{EXIT_CODES}",
        formatter_class=formatter,
    )
    add_cluster_flags(parser, namespace=None)
    parser.add_argument(
        "--pulumi-root",
        type=Path,
        help="directory holding bin/pulumi: only for a backend neither file:// nor s3://",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds to wait (default 1800)"
    )
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between passes")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="undo the stop: set the queues' stopPolicy back to None and release nothing",
    )
    return parser


def _settings(args: argparse.Namespace, rest: Sequence[str]) -> tuple[Any, str]:
    """The controller's settings: from its flags (`--config FILE`, ...) when given, else
    from the chart's settings ConfigMap as `pools` finds it."""
    from provisioner.api.settings_sources import settings_from_argv
    from provisioner.commands.pools import installed_settings

    if not rest:
        return installed_settings(args)
    return settings_from_argv(list(rest)), "the settings flags"


def main(argv: Sequence[str] | None = None, *, prog: str = "atomic-gang drain") -> int:
    parser = build_parser(prog)
    args, rest = parser.parse_known_args(argv)
    if args.namespace is not None:
        parser.error(
            "drain works on every namespace; -n/--namespace is a Job's namespace, as in "
            "kubectl. The controller's namespace is --controller-namespace"
        )
    from provisioner.api.settings_sources import SettingsError
    from provisioner.cloud.access import operator_access
    from provisioner.cloud.errors import CloudError
    from provisioner.commands.installation import DiscoveryError
    from provisioner.commands.pools import _kube, stack_reader

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        settings, source = _settings(args, rest)
    except SettingsError as exc:
        parser.error(str(exc))
    except DiscoveryError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    say(f"settings: {source}; cluster {settings.cluster_name}")
    stacks = stack_reader(
        settings, local_state=bool(rest), pulumi_root=args.pulumi_root, prefix="atomic-gang-drain-"
    )
    if isinstance(stacks, str):
        # The drain's end is "no stack left": without reading the stacks it cannot tell.
        parser.error(f"the stacks cannot be read: {stacks}")
    try:
        access = operator_access(settings.defaults.region, settings.aws.endpoint_url)
    except CloudError as exc:
        print(f"{prog}: error: AWS not reachable with your credentials: {exc}", file=sys.stderr)
        return EXIT_ERROR
    world = ClusterDrain(
        kube=_kube(args),
        ec2=access.clients().ec2,
        stacks=stacks,
        cluster=settings.cluster_name,
        controller_name=settings.controller_name,
    )
    try:
        if args.resume:
            return resume(world, say)
        return drain(world, timeout=args.timeout, poll=args.poll, say=say)
    finally:
        world.kube.close()
