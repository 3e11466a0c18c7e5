"""`atomic-gang demo`: a scripted gang scenario on the embedded default, then a bill.

Called by the CLI's `demo` subcommand (and `make demo`, and CI). It starts a
`LocalEnvironment` with short timings, then:

1. Job `train-a` on pool `shared` (cold: the pool launches its N instances);
2. Job `train-b` on the same pool once `train-a` is done (warm: admitted with no launch);
3. Job `train-scarce` asking for an instance type the emulator has no room for: it is held
   at $0 (quota reserved, our check Pending, no instance running) until the script frees
   capacity, then admitted;
4. a GPU Job on a Capacity Block that starts during the run: held at $0 until it starts;
5. the same for a JobSet (a leader and a worker replicated job, run by the real JobSet
   controller), the gang labelled on the JobSet itself;
6. a GPU Job asking for 24 h: the controller buys the earliest Capacity Block under the
   cap, holds the gang at $0 until it starts (the clocks are moved to it), runs it on the
   block (`demo_purchase`); the bill shows the block's upfront fee.

While it runs it prints each change of a Job's state, its check, its pool's phase and
counts. At the end it releases every pool, prints a table per Job (time to Ready, instances
launched) and per pool (node-seconds billed and stranded, by the one definition in
`provisioner.cloud.billing`), `kubectl get gnp` and `pulumi stack ls`, and
stops every process it started, on success, failure or Ctrl-C alike.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.demo_observer import (
    COMMON_TYPE,
    GANG,
    GNP,
    GPU_LIMITS,
    GPU_TYPE,
    JOBSETS,
    NAMESPACE,
    SCARCE_POOL,
    SCARCE_TYPE,
    SHARED_POOL,
    DemoFailed,
    JobRecord,
    Observer,
    _job,
)
from devenv.demo_purchase import PURCHASE, buy_scene
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.api.constants import Phase


def run(work_dir: Path) -> int:
    if work_dir.exists():
        # Each run starts from an empty etcd and Pulumi backend: a rerun must not bill old pools.
        shutil.rmtree(work_dir)
    (work_dir / "logs").mkdir(parents=True)
    # The controller runs in this process: its log goes to a file, the terminal shows progress.
    logging.basicConfig(
        filename=work_dir / "logs" / "controller.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Ctrl-C must reach the `finally` below even when started with SIGINT ignored (a
    # background job of a non-interactive shell, as in some CI runners).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    env = LocalEnvironment(
        work_dir=work_dir,
        join_delay=1.0,
        keep_warm_ttl="5s",
        job_run_seconds=3.0,
        block_purchase=dict(PURCHASE),
    )
    started = time.monotonic()
    try:
        print("starting the embedded default (control plane, Kueue, EC2, nodes, controller)")
        state = env.start()
        print(
            f"up in {time.monotonic() - started:.1f}s; kubeconfig: {state['kubeconfig']}",
            flush=True,
        )
        return _scenario(env, state)
    except DemoFailed as err:
        print(f"demo failed: {err}", flush=True)
        return 1
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        return 130
    finally:
        env.stop()
        print("stopped every process the demo started", flush=True)


def _scenario(env: LocalEnvironment, state: dict[str, Any]) -> int:
    assert env.control_plane is not None
    batch = k8s.BatchV1Api(env.control_plane.api_client())
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())
    obs = Observer(env, time.monotonic())
    subnets = env.ec2_client().describe_subnets()["Subnets"]
    zones = sorted({s["AvailabilityZone"] for s in subnets})
    for zone in zones:
        env.emulator_client.set_capacity(zone, SCARCE_TYPE, 0)

    def submit(name: str, pool: str, instance_type: str) -> None:
        obs.jobs[name] = JobRecord(name, pool, time.monotonic())
        batch.create_namespaced_job(NAMESPACE, _job(name, pool, instance_type))
        obs.say(f"submitted {name} (pool {pool}, {GANG} x {instance_type})")

    print("\n== 1. cold acquisition: train-a on pool 'shared'", flush=True)
    submit("train-a", SHARED_POOL, COMMON_TYPE)
    obs.wait("train-a to complete", lambda: obs.jobs["train-a"].done_at is not None)
    obs.wait(
        "pool shared to be kept warm",
        lambda: obs.pool_status(SHARED_POOL).get("phase") == Phase.KEEP_WARM,
    )

    print("\n== 2. warm reuse: train-b on the same pool", flush=True)
    submit("train-b", SHARED_POOL, COMMON_TYPE)
    obs.wait("train-b to complete", lambda: obs.jobs["train-b"].done_at is not None)

    print(
        f"\n== 3. scarce capacity: train-scarce asks for {GANG} x {SCARCE_TYPE}, none free",
        flush=True,
    )
    submit("train-scarce", SCARCE_POOL, SCARCE_TYPE)
    obs.wait(
        "train-scarce held on its shortfalls",
        lambda: int(obs.pool_status(SCARCE_POOL).get("consecutiveShortfalls") or 0) >= 2,
    )
    held = obs.live_in(SCARCE_POOL)
    obs.say(
        f"held at $0: check {obs.workload_check('train-scarce')}, {held} instances running, "
        "Job suspended"
    )
    if held:
        raise DemoFailed(f"{held} instances running while the pool is short")
    obs.say(f"the emulator frees {GANG} x {SCARCE_TYPE} in {zones[0]}")
    env.emulator_client.set_capacity(zones[0], SCARCE_TYPE, GANG)
    obs.wait("train-scarce to complete", lambda: obs.jobs["train-scarce"].done_at is not None)
    _gpu_scene(env, obs)
    _jobset_scene(env, obs)
    buy_scene(env, obs)

    gnp_before = kubectl_get_gnp(str(state["kubeconfig"]))
    stacks_before = _pulumi_stack_ls(env)
    print("\n== releasing: deleting the pools (their finalizer destroys each stack)", flush=True)
    for name in (SHARED_POOL, SCARCE_POOL):
        custom.delete_cluster_custom_object(*GNP, name)
    obs.wait(
        "every pool released",
        lambda: not obs.live_instances() and not custom.list_cluster_custom_object(*GNP)["items"],
    )
    obs.sample()

    stranded_total = _summary(obs)
    print("\n$ kubectl get gnp   (before the release)", flush=True)
    print(gnp_before, flush=True)
    print("\n$ kubectl get gnp   (after it)", flush=True)
    print(kubectl_get_gnp(str(state["kubeconfig"])) or "No resources found", flush=True)
    print("\n$ pulumi stack ls   (before the release: one stack per pool)", flush=True)
    print(stacks_before, flush=True)
    print("\n$ pulumi stack ls   (after it: each destroyed stack is removed)", flush=True)
    print(_pulumi_stack_ls(env), flush=True)
    return 0 if stranded_total == 0 else 1


def _summary(obs: Observer) -> float:
    print("\n== summary", flush=True)
    # Columns as wide as their longest entry, so a long Job or pool name keeps them apart.
    records = list(obs.jobs.values())
    job_w = max([len("JOB"), *(len(r.name) for r in records)]) + 2
    pool_w = max([len("POOL"), *(len(r.pool) for r in records)]) + 2
    print(f"{'JOB':<{job_w}}{'POOL':<{pool_w}}{'TIME TO READY':>14}{'LAUNCHED':>10}")
    for record in records:
        ready = f"{record.ready_at - record.submitted:.1f}s" if record.ready_at else "-"
        print(f"{record.name:<{job_w}}{record.pool:<{pool_w}}{ready:>14}{len(record.launched):>10}")
    bills = obs.pool_bills()
    bill_w = max([len("POOL"), *(len(pool) for pool in bills)]) + 2
    print(
        f"\n{'POOL':<{bill_w}}{'NODE-S BILLED':>15}{'NODE-S STRANDED':>17}{'UPFRONT USD':>13}   "
        "(from EC2's launch and termination times; 60 s minimum per instance; the fees of "
        "the Capacity Blocks bought)"
    )
    for pool, one in sorted(bills.items()):
        block = obs.blocks.get(pool)
        fee = f"{block.upfront_fee:.2f}" if block else "-"
        print(f"{pool:<{bill_w}}{one.billed:>15.1f}{one.stranded:>17.1f}{fee:>13}")
    for b in obs.blocks.values():
        # Its used share is not shown: the emulator's launch times do not follow its moved
        # clock, so the overlap with the block's window would read 0.
        print(
            f"block {b.reservation_id} (pool {b.pool}, {b.instances} instances, "
            f"{b.start:%m-%d %H:%M} to {b.end:%m-%d %H:%M} UTC): {b.upfront_fee:.2f} "
            f"{b.currency} upfront, paid whether used or not"
        )
    total = sum(one.stranded for one in bills.values())
    running = sorted(iid for iid, i in obs.instances.items() if not i.gone)
    if running:
        print(f"still running after every pool was released: {', '.join(running)}", flush=True)
    still = len(running)
    print(
        f"instances still running: {still}; stranded node-seconds in total: {total:.1f}", flush=True
    )
    return total + still


def kubectl_get_gnp(kubeconfig: str) -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return "(kubectl is not installed)"
    done = subprocess.run(
        [kubectl, "--kubeconfig", kubeconfig, "get", "gnp"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return (done.stdout + done.stderr).rstrip()


def _pulumi_stack_ls(env: LocalEnvironment) -> str:
    from provisioner.toolchain import installer as toolchain
    from provisioner.toolchain.versions import PULUMI

    pulumi = toolchain.resolve(PULUMI, build=False).binary
    project = f"atomic-gang-{env.cluster_name}"
    backend = env.pulumi_env
    done = subprocess.run(
        [str(pulumi), "stack", "ls", "--project", project, "--non-interactive"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **backend, "PULUMI_SKIP_UPDATE_CHECK": "true"},
        cwd=env.work_dir,
    )
    # The S3 bucket is the emulator's: the same command against AWS needs only the URL.
    shown = " ".join(
        f"{k}={backend[k]}" for k in ("AWS_ENDPOINT_URL_S3", "PULUMI_BACKEND_URL") if k in backend
    )
    return f"{shown} pulumi stack ls --project {project}\n" + (done.stdout + done.stderr).rstrip()


GPU_JOB = "gpu-p5"
GPU_POOL = "gpu-block"
GPU_JOBSET = "gpu-jobset"
GPU_JOBSET_POOL = "gpu-jobset-block"
# The pool's stack takes ~10-25 s before its first launch: the block must still be scheduled
# then, so the hold is seen.
GPU_BLOCK_LEAD_SECONDS = 40.0


def _gpu_annotations(rid: str) -> dict[str, str]:
    return {
        c.ANN_INSTANCE_TYPE: GPU_TYPE,
        c.ANN_MODE: c.MODE_FLEET,
        c.ANN_CAPACITY_RESERVATION_ID: rid,
        c.ANN_EFA: "true",
        c.ANN_PLACEMENT_GROUP: c.PLACEMENT_CLUSTER,
    }


def _gpu_job(rid: str) -> dict[str, Any]:
    job = ko.gang_job(NAMESPACE, GPU_JOB, ko.QUEUE_NAME, GPU_POOL, GANG, _gpu_annotations(rid))
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = dict(GPU_LIMITS)
    return job


def _gpu_jobset(rid: str) -> dict[str, Any]:
    """A JobSet of a leader and a worker replicated job of one pod each: the gang (count 2,
    Kueue's pod count over both) is labelled on the JobSet, not on its Jobs."""

    def replicated(name: str) -> dict[str, Any]:
        container = {
            "name": name,
            "image": "trainer",
            "resources": {"requests": {"cpu": "1"}, "limits": dict(GPU_LIMITS)},
        }
        pod = {"restartPolicy": "Never", "containers": [container]}
        job_spec = {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {"spec": pod},
        }
        return {"name": name, "replicas": 1, "template": {"spec": job_spec}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": GPU_JOBSET,
            "namespace": NAMESPACE,
            "labels": {c.QUEUE_NAME_LABEL: ko.QUEUE_NAME, c.POOL_LABEL: GPU_JOBSET_POOL},
            "annotations": {c.ANN_COUNT: str(GANG), **_gpu_annotations(rid)},
        },
        "spec": {"suspend": True, "replicatedJobs": [replicated("leader"), replicated("workers")]},
    }


@dataclass(frozen=True)
class _GpuGang:
    """One gang of the GPU scenes: what is submitted, as which kind, on which pool."""

    title: str
    kind: str
    name: str
    pool: str
    body: Callable[[str], dict[str, Any]]  # the manifest, given the block's id


def _gpu_scene(env: LocalEnvironment, obs: Observer) -> None:
    """A 2 x p5.48xlarge Job gang on a Capacity Block that starts a few seconds from now."""
    _block_scene(env, obs, _GpuGang("4. GPU gang", "Job", GPU_JOB, GPU_POOL, _gpu_job))


def _jobset_scene(env: LocalEnvironment, obs: Observer) -> None:
    """The same with a JobSet the real JobSet controller runs."""
    gang = _GpuGang("5. JobSet GPU gang", "JobSet", GPU_JOBSET, GPU_JOBSET_POOL, _gpu_jobset)
    _block_scene(env, obs, gang)


def _block_scene(env: LocalEnvironment, obs: Observer, gang: _GpuGang) -> None:
    """A gang on a Capacity Block that starts a few seconds from now: held at $0 (nothing
    launched) until the start, then admitted with one EFA interface per network card, all
    in the pool's cluster placement group; its pool is then released and the block has
    every slot free again."""
    assert env.control_plane is not None
    emu = env.emulator_client
    ec2 = env.ec2_client()
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())
    zone = sorted({s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]})[0]
    now = emu.now()
    starts = now + GPU_BLOCK_LEAD_SECONDS
    rid = emu.add_capacity_reservation(
        GPU_TYPE,
        zone,
        GANG,
        "capacity-block",
        start=starts,
        end=now + 2 * 3600,
        # Given to the cluster by its tag, as an installer does: the webhook refuses others,
        # and the controller's policy launches only into reservations tagged so.
        tags={c.TAG_CLUSTER: env.cluster_name},
    )
    print(
        f"\n== {gang.title} on a Capacity Block: {GANG} x {GPU_TYPE}, EFA, cluster placement "
        f"group; block {rid} in {zone} starts at {time.strftime('%H:%M:%S', time.gmtime(starts))}"
        f" UTC (in {GPU_BLOCK_LEAD_SECONDS:.0f}s)",
        flush=True,
    )
    obs.jobs[gang.name] = JobRecord(gang.name, gang.pool, time.monotonic(), kind=gang.kind)
    body = gang.body(rid)
    if gang.kind == "Job":
        obs.batch.create_namespaced_job(NAMESPACE, body)
    else:
        custom.create_namespaced_custom_object(*JOBSETS, body)
    obs.say(f"submitted {gang.kind} {gang.name} (pool {gang.pool}, {GANG} x {GPU_TYPE} on {rid})")

    def before_start(done: Callable[[], bool]) -> Callable[[], bool]:
        def probe() -> bool:
            if emu.now() < starts and obs.live_in(gang.pool):
                raise DemoFailed(f"instances of {gang.pool} running before {rid} started")
            return done()

        return probe

    def reason() -> str | None:
        return (obs.pool_status(gang.pool).get("lastError") or {}).get("reason")

    obs.wait(
        f"{gang.name} held until its block starts",
        before_start(lambda: emu.now() >= starts or reason() == "ReservationNotActive"),
    )
    if emu.now() < starts:
        message = (obs.pool_status(gang.pool).get("lastError") or {}).get("message", "")
        obs.say(
            f"{gang.kind} {gang.name} held at $0 until the block starts: check "
            f"{obs.workload_check(gang.name)}, {obs.live_in(gang.pool)} instances running; "
            f"the pool says: {message}"
        )
    obs.wait(f"{rid} to start", before_start(lambda: emu.now() >= starts))
    obs.say(f"{rid} is active")
    obs.wait(f"{gang.name} to be admitted", lambda: obs.jobs[gang.name].ready_at is not None)
    pages = ec2.describe_instances(
        Filters=[
            {"Name": f"tag:{c.TAG_POOL}", "Values": [gang.pool]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
    )["Reservations"]
    instances = [i for r in pages for i in r["Instances"]]
    outside = [i["InstanceId"] for i in instances if i.get("CapacityReservationId") != rid]
    efa = sorted(
        {
            sum(n.get("InterfaceType") in ("efa", "efa-only") for n in i["NetworkInterfaces"])
            for i in instances
        }
    )
    groups = {i["Placement"].get("GroupName") for i in instances}
    if len(instances) != GANG or outside or len(groups) != 1 or None in groups:
        raise DemoFailed(
            f"{gang.name} admitted on {len(instances)} instances, {outside} outside {rid}, "
            f"placement groups {groups}"
        )
    obs.say(
        f"{gang.kind} {gang.name} admitted: {GANG} x {GPU_TYPE} in {rid}, "
        f"{'/'.join(map(str, efa))} EFA interfaces each, all in placement group {groups.pop()}"
    )
    _ready_to_usable(env, obs, gang.pool)
    obs.wait(f"{gang.name} to complete", lambda: obs.jobs[gang.name].done_at is not None)
    custom.delete_cluster_custom_object(*GNP, gang.pool)
    obs.wait(
        f"pool {gang.pool} released",
        lambda: not obs.live_in(gang.pool) and not obs.pool_status(gang.pool),
    )
    (block,) = ec2.describe_capacity_reservations(CapacityReservationIds=[rid])[
        "CapacityReservations"
    ]
    obs.say(
        f"released: {rid} has {block['AvailableInstanceCount']} of "
        f"{block['TotalInstanceCount']} slots free again"
    )


def _ready_to_usable(env: LocalEnvironment, obs: Observer, pool: str) -> None:
    """Per node of `pool`: the wait between its Node turning Ready and its device plugins
    (the DaemonSets `devenv.device_plugins` models) making its GPUs and EFA allocatable."""
    assert env.control_plane is not None and env.nodes is not None
    devices = env.nodes.devices
    if devices is None:
        return
    core = k8s.CoreV1Api(env.control_plane.api_client())

    def names() -> list[str]:
        nodes = core.list_node(label_selector=f"{c.POOL_LABEL}={pool}").items
        return sorted(n.metadata.name for n in nodes)

    def usable() -> bool:
        records = devices.records()
        return all(
            n in records and set(records[n].hardware) <= set(records[n].registered) for n in names()
        )

    obs.wait(f"{pool}'s nodes to advertise their GPUs and EFA", usable)
    records = devices.records()
    for name in names():
        record = records[name]
        wait = max(record.registered.values(), default=record.ready) - record.ready
        have = ", ".join(f"{k} {v}" for k, v in sorted(record.hardware.items()))
        obs.say(f"node {name}: Ready -> usable ({have} allocatable) after {wait:.1f}s")
