"""A pool's Pulumi stack through its life: prepare, record, remove, destroy; failures named;
two pools at once. Real Pulumi CLI, `file://` backend in a temp dir, EC2 emulator."""

from __future__ import annotations

import base64
import json
import logging
import shutil
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devenv.state_backend import StateBackend, seed_state_backend
from provisioner.api import constants as c
from provisioner.api.constants import FailureKind
from provisioner.api.settings import Settings
from provisioner.commands import pools as pools_command
from provisioner.pulumi_driver import StackDriver, StackError
from stacks.outputs import INSTANCE_IDS
from tests.integration.test_stack_support import (
    CLUSTER,
    PASSPHRASE,
    AwsWorld,
    make_settings,
    pulumi_root,
    stack_ls,
)


@pytest.fixture
def world(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> AwsWorld:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
    return AwsWorld(emulator)


def _driver(world: AwsWorld, state: Path, pulumi_tool: Any, **iam: bool) -> StackDriver:
    return StackDriver(
        make_settings(world, state, **iam), pulumi_root(pulumi_tool), logging.getLogger("stack")
    )


def _default_version(world: AwsWorld, template_id: str) -> dict[str, Any]:
    versions = world.ec2.describe_launch_template_versions(
        LaunchTemplateId=template_id, Versions=["$Default"]
    )["LaunchTemplateVersions"]
    return dict(versions[0]["LaunchTemplateData"])


def _states(world: AwsWorld, ids: list[str]) -> set[str]:
    found = world.ec2.describe_instances(InstanceIds=ids)["Reservations"]
    return {i["State"]["Name"] for r in found for i in r["Instances"]}


def _attach_secondary_eni(world: AwsWorld, instance_id: str) -> str:
    """An ENI attached after launch keeps DeleteOnTermination=false: a leak unless cleaned."""
    described = world.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    subnet = described[0]["Instances"][0]["SubnetId"]
    eni = world.ec2.create_network_interface(SubnetId=subnet, Description="extra")
    eni_id = str(eni["NetworkInterface"]["NetworkInterfaceId"])
    world.ec2.attach_network_interface(
        NetworkInterfaceId=eni_id, InstanceId=instance_id, DeviceIndex=1
    )
    return eni_id


def test_pool_stack_prepare_record_remove_destroy(
    world: AwsWorld,
    tmp_path: Path,
    pulumi_tool: Any,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    world.ready()
    state = tmp_path / "state"
    driver = _driver(world, state, pulumi_tool)
    spec = world.spec("train-a")
    caplog.set_level(logging.INFO, logger="stack")

    prepared = driver.prepare(spec)

    # The launch template: user data from the engine, IMDSv2, the profile, the pool's tags.
    assert prepared.operation.result == "succeeded"
    template_id = prepared.outputs.launch_template_id
    (template,) = world.launch_templates()
    assert template["LaunchTemplateId"] == template_id
    assert template["LaunchTemplateName"] == f"atomic-gang-{CLUSTER}-train-a"
    assert {t["Key"]: t["Value"] for t in template["Tags"]} == dict(spec.tags)
    data = _default_version(world, template_id)
    assert base64.b64decode(data["UserData"]).decode() == spec.user_data
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["ImageId"] == world.ami
    profile_arn = world.iam.get_instance_profile(InstanceProfileName=world.profile_name)[
        "InstanceProfile"
    ]["Arn"]
    assert data["IamInstanceProfile"] == {"Arn": profile_arn}
    instance_tags = {t["Key"]: t["Value"] for t in data["TagSpecifications"][0]["Tags"]}
    assert instance_tags[c.TAG_POOL] == "train-a"
    assert instance_tags[c.cluster_ownership_tag(CLUSTER)] == "owned"
    assert prepared.outputs.instance_profile_arn == profile_arn
    # Engine events reached the controller's log, tagged with the pool.
    assert any(
        getattr(r, "pool", None) == "train-a" and "LaunchTemplate" in r.getMessage()
        for r in caplog.records
    )

    # The warm path: a second driver reads the outputs without running the CLI.
    fresh = _driver(world, state, pulumi_tool)
    assert fresh.outputs("train-a") == prepared.outputs
    assert not fresh.needs_prepare(spec)
    assert fresh.needs_prepare(world.spec("train-a", instance_type="m5.xlarge"))

    # Record gen-0, then remove it: the gang is released, the template stays.
    gen0 = world.launch("train-a", template_id, 2, generation=0)
    recorded = driver.record_instance_set("train-a", "gen-0", gen0)
    assert recorded.outputs.instance_ids == tuple(gen0)
    assert recorded.changes.get("create") == 1
    removed = driver.remove_instance_set("train-a")
    assert removed.outputs.record is None
    assert _states(world, gen0) == {"terminated"}
    assert [t["LaunchTemplateId"] for t in world.launch_templates()] == [template_id]

    # Record gen-1 with a secondary ENI that would outlive its instance.
    gen1 = world.launch("train-a", template_id, 3, generation=1)
    eni_id = _attach_secondary_eni(world, gen1[0])
    recorded = driver.record_instance_set("train-a", "gen-1", gen1)
    assert recorded.outputs.instance_ids == tuple(gen1)
    raw = fresh.outputs("train-a")
    assert raw is not None and list(raw.instance_ids) == gen1
    assert driver._file is not None  # the stack outputs themselves, as an operator sees them
    assert driver._file.outputs("train-a")[INSTANCE_IDS] == gen1  # type: ignore[index]

    # The inventory: `atomic-gang pools` and the operator's `pulumi stack ls`.
    assert pools_command.main(_pools_argv(world, state, pulumi_tool)) == 0
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("train-a"))
    assert ",".join(gen1) in row and "ok, 6 resources" in row and "record succeeded" in row
    assert driver.operator_command() in table
    home = tmp_path / "operator-home"
    assert stack_ls(driver.operator_command(), Path(pulumi_tool.binary), home) == ["train-a"]

    destroyed = driver.destroy("train-a")

    assert destroyed.result == "succeeded"
    assert _states(world, gen1) == {"terminated"}
    assert (
        world.ec2.describe_network_interfaces(
            Filters=[{"Name": "network-interface-id", "Values": [eni_id]}]
        )["NetworkInterfaces"]
        == []
    )
    assert world.launch_templates() == []
    assert stack_ls(driver.operator_command(), Path(pulumi_tool.binary), home) == []
    assert driver.outputs("train-a") is None
    # The shared node identity outlives the pool.
    assert world.iam.get_instance_profile(InstanceProfileName=world.profile_name)


def _pools_argv(world: AwsWorld, state: Path, pulumi_tool: Any) -> list[str]:
    return [
        "--no-kube",
        "--pulumi-root",
        str(pulumi_root(pulumi_tool)),
        "--cluster-name",
        CLUSTER,
        "--defaults.region",
        "us-east-1",
        "--defaults.node-role-arn",
        world.role_arn,
        "--pulumi.state-dir",
        str(state),
        "--pulumi.backend-url",
        f"file://{state}",
    ]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_gpu_pool_template_targets_its_block_with_one_efa_interface_per_card(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any
) -> None:
    world.ready()
    driver = _driver(world, tmp_path / "state", pulumi_tool)
    spec = replace(
        world.spec("train-p5"),
        efa_network_cards=(0, 1, 2, 3),
        capacity_reservation_id="cr-0fedcba9876543210",
        capacity_reservation_kind="capacity-block",
    )

    prepared = driver.prepare(spec)

    data = _default_version(world, prepared.outputs.launch_template_id)
    # CreateFleet reaches a Capacity Block only through these two template fields.
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0fedcba9876543210"}
    }
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    interfaces = data["NetworkInterfaces"]
    assert [(n["NetworkCardIndex"], n["DeviceIndex"]) for n in interfaces] == [
        (0, 0),
        (1, 1),
        (2, 1),
        (3, 1),
    ]
    assert {n["InterfaceType"] for n in interfaces} == {"efa"}
    driver.destroy("train-p5")


def test_prepare_names_the_missing_identity_and_the_fix(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any, failed_updates: None
) -> None:
    driver = _driver(world, tmp_path / "state", pulumi_tool)
    spec = world.spec("infer-b")

    # Neither a profile nor an access entry: both are named, the profile first.
    with pytest.raises(StackError) as missing:
        driver.prepare(spec)
    assert missing.value.reason == "InstanceProfileNotFound"
    assert missing.value.kind is FailureKind.CONFIG
    assert world.profile_name in missing.value.message
    assert "iam.selfManageInstanceProfile=true" in missing.value.message
    assert "Also AccessEntryMissing" in missing.value.message

    # A profile holding another role.
    world.iam.create_role(RoleName="someone-else", AssumeRolePolicyDocument="{}")
    world.create_profile(role_name="someone-else")
    with pytest.raises(StackError) as wrong:
        driver.prepare(spec)
    assert wrong.value.reason == "InstanceProfileRoleMismatch"
    assert world.profile_name in wrong.value.message
    assert world.role_arn in wrong.value.message and "add the role" in wrong.value.message
    assert wrong.value.kind is FailureKind.CONFIG
    last = driver.last_operation("infer-b")
    assert last is not None and last.result == "failed"
    assert last.reason == "InstanceProfileRoleMismatch"

    # The right profile, no access entry.
    world.iam.remove_role_from_instance_profile(
        InstanceProfileName=world.profile_name, RoleName="someone-else"
    )
    world.iam.add_role_to_instance_profile(
        InstanceProfileName=world.profile_name, RoleName="gang-node"
    )
    with pytest.raises(StackError) as no_entry:
        driver.prepare(spec)
    assert no_entry.value.reason == "AccessEntryMissing"
    assert world.role_arn in no_entry.value.message and "EC2_LINUX" in no_entry.value.message
    # Nothing is built while the node identity is wrong.
    assert world.launch_templates() == []

    # With iam.manageAccessEntry the stack creates the entry instead.
    managed = _driver(world, tmp_path / "state", pulumi_tool, manage_access_entry=True)
    prepared = managed.prepare(world.spec("infer-b", manage_access_entry=True))
    assert prepared.operation.result == "succeeded"
    entry = world.eks.describe_access_entry(clusterName=CLUSTER, principalArn=world.role_arn)
    assert entry["accessEntry"]["type"] == "EC2_LINUX"
    assert managed.destroy("infer-b").result == "succeeded"


def test_self_managed_instance_profile_is_created(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any
) -> None:
    world.create_access_entry()
    driver = _driver(world, tmp_path / "state", pulumi_tool, self_manage_instance_profile=True)
    prepared = driver.prepare(world.spec("train-c", manage_instance_profile=True))
    profile = world.iam.get_instance_profile(InstanceProfileName=world.profile_name)
    roles = [r["Arn"] for r in profile["InstanceProfile"]["Roles"]]
    assert roles == [world.role_arn]
    assert prepared.outputs.instance_profile_arn == profile["InstanceProfile"]["Arn"]
    assert driver.destroy("train-c").result == "succeeded"


def test_two_pools_prepared_recorded_and_destroyed_concurrently(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any
) -> None:
    world.ready()
    driver = _driver(world, tmp_path / "state", pulumi_tool)
    pools = ("left", "right")

    def life(pool: str) -> tuple[list[str], str, tuple[str, ...]]:
        prepared = driver.prepare(world.spec(pool))
        template = prepared.outputs.launch_template_id
        ids = world.launch(pool, template, 2)
        recorded = driver.record_instance_set(pool, "gen-0", ids)
        return ids, template, recorded.outputs.instance_ids

    with ThreadPoolExecutor(max_workers=2) as pool_threads:
        lives = dict(zip(pools, pool_threads.map(life, pools), strict=True))

    for pool, (ids, template, recorded) in lives.items():
        assert recorded == tuple(ids)
        outputs = driver.outputs(pool)
        assert outputs is not None and outputs.launch_template_id == template
        data = _default_version(world, template)
        assert base64.b64decode(data["UserData"]).decode() == world.user_data(pool)
        assert world.live_instances(pool) == ids
    assert lives["left"][1] != lives["right"][1]
    assert {s.name for s in driver.list_stacks()} == set(pools)

    with ThreadPoolExecutor(max_workers=2) as pool_threads:
        results = list(pool_threads.map(driver.destroy, pools))

    assert [r.result for r in results] == ["succeeded", "succeeded"]
    for pool, (ids, _, _) in lives.items():
        assert world.live_instances(pool) == []
        assert _states(world, ids) == {"terminated"}
    assert world.launch_templates() == []
    assert driver.list_stacks() == []


def _s3_lock(
    backend: StateBackend, project: str, pool: str, pid: int, host: str | None = None
) -> str:
    """A lock file as the CLI writes one, held by ``pid`` on ``host`` (default: this host),
    taken just now."""
    key = f".pulumi/locks/organization/{project}/{pool}/4c0ffee0-0000-4000-8000-000000000000.json"
    body = {
        "pid": pid,
        "username": "controller",
        "hostname": host or socket.gethostname(),
        "timestamp": datetime.now(UTC).isoformat(),
    }
    backend.client("s3").put_object(Bucket=backend.bucket, Key=key, Body=json.dumps(body).encode())
    return key


def _running_cli(where: Path) -> subprocess.Popen[bytes]:
    """A live process this host knows as a Pulumi CLI (by its program's name)."""
    program = where / "pulumi"
    program.symlink_to(shutil.which("sleep") or "/bin/sleep")
    return subprocess.Popen([str(program), "120"])


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _locks(backend: StateBackend) -> list[str]:
    return [k for k in backend.stack_keys() if "/locks/" in k]


def test_s3_backend_with_kms_secrets_and_leader_only_lock_breaking(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    world.ready()
    backend = seed_state_backend(world.endpoint, "us-east-1")

    def settings_for(state_dir: Path) -> Settings:
        # Each replica has its own disk, as the chart runs them; the stacks are in the bucket.
        base = make_settings(world, state_dir)
        pulumi = {"state_dir": str(state_dir), **backend.pulumi_settings()}
        return base.model_validate({**base.model_dump(), "pulumi": pulumi})

    settings = settings_for(tmp_path / "leader")
    assert settings.pulumi.backend_url == "s3://atomic-gang-state?region=us-east-1"
    driver = StackDriver(settings, pulumi_root(pulumi_tool), logging.getLogger("stack"))
    spec = world.spec("remote")
    prepared = driver.prepare(spec)
    project = settings.pulumi.project_name
    assert f".pulumi/stacks/{project}/remote.json" in backend.stack_keys()

    # Another replica reads the stack from the bucket: no state file, no passphrase.
    other = StackDriver(
        settings_for(tmp_path / "standby"), pulumi_root(pulumi_tool), logging.getLogger("stack")
    )
    assert other.outputs("remote") == prepared.outputs
    assert [s.name for s in other.list_stacks()] == ["remote"]

    # A standby (it has not recovered, so it does not lead) never breaks a lock: this one
    # could be the live leader's.
    ids = world.launch("remote", prepared.outputs.launch_template_id, 2)
    cli = _running_cli(tmp_path)
    held = _s3_lock(backend, project, "remote", cli.pid)
    with pytest.raises(StackError) as locked:
        other.record_instance_set("remote", "gen-0", ids)
    assert locked.value.reason == "StackLocked" and locked.value.retryable
    assert _locks(backend) == [held]

    # On becoming leader it still leaves a lock of a live CLI on this host: it may still be
    # writing (locks.is_stale).
    caplog.set_level(logging.WARNING, logger="stack")
    (report,) = other.recover()
    assert report.live_lock_holders and _locks(backend) == [held]
    cli.kill()
    cli.wait()
    # A lock of a dead process on this host goes at the next recovery...
    _s3_lock(backend, project, "remote", _dead_pid())
    other.recover()
    assert _locks(backend) == []
    # ...and one of another host goes once that host's fence has closed (leading by
    # configuration, at once): met by an operation, it is cleared and the operation goes on.
    _s3_lock(backend, project, "remote", 4242, host="old-leader-pod")
    recorded = other.record_instance_set("remote", "gen-0", ids)
    assert recorded.outputs.instance_ids == tuple(ids)
    assert any("cancelling stale lock" in r.getMessage() for r in caplog.records)
    assert _locks(backend) == []

    # Stepped down, it writes nothing and breaks no lock.
    other.step_down()
    held = _s3_lock(backend, project, "remote", 4242, host="old-leader-pod")
    with pytest.raises(StackError) as fenced:
        other.remove_instance_set("remote")
    assert fenced.value.reason == "FenceClosed"
    assert _locks(backend) == [held]
    backend.client("s3").delete_object(Bucket=backend.bucket, Key=held)
    other.recover()

    home = tmp_path / "operator-home"
    command = other.operator_command()
    assert f"AWS_ENDPOINT_URL_S3={world.endpoint}" in command
    assert stack_ls(command, Path(pulumi_tool.binary), home) == ["remote"]

    assert other.destroy("remote").result == "succeeded"
    assert world.live_instances("remote") == []
    assert other.list_stacks() == []
    assert stack_ls(command, Path(pulumi_tool.binary), home) == []


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_the_lock_a_failed_stack_init_left_is_removed_by_the_leader_alone(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any, backend: str
) -> None:
    # A `stack init` whose lock write was stored but answered with an error leaves a lock
    # and no stack; `pulumi cancel` cannot load the stack to clear it (orphan_locks).
    world.ready()
    settings = make_settings(world, tmp_path / "state")
    state = seed_state_backend(world.endpoint, "us-east-1") if backend == "s3" else None
    if state is not None:
        pulumi = {"state_dir": str(tmp_path / "state"), **state.pulumi_settings()}
        settings = settings.model_validate({**settings.model_dump(), "pulumi": pulumi})
    project = settings.pulumi.project_name
    taken = datetime.now(UTC).isoformat()
    lock = json.dumps({"pid": 1, "username": "root", "hostname": "gone-pod", "timestamp": taken})
    name = "0rphan00-0000-4000-8000-000000000000.json"
    lock_dir = tmp_path / "state" / ".pulumi" / "locks" / "organization" / project / "orphan"

    def locks() -> list[str]:
        if state is not None:
            return [k.rsplit("/", 1)[-1] for k in _locks(state)]
        return sorted(p.name for p in lock_dir.glob("*.json")) if lock_dir.is_dir() else []

    if state is not None:
        key = f".pulumi/locks/organization/{project}/orphan/{name}"
        state.client("s3").put_object(Bucket=state.bucket, Key=key, Body=lock.encode())
    else:
        lock_dir.mkdir(parents=True)
        (lock_dir / name).write_text(lock)
    driver = StackDriver(settings, pulumi_root(pulumi_tool), logging.getLogger("stack"))

    # Not leading, it leaves the lock: it could be the live leader's.
    with pytest.raises(StackError) as locked:
        driver.prepare(world.spec("orphan"))
    assert locked.value.reason == "StackLocked" and locked.value.retryable
    assert locks() == [name]

    driver.recover()
    prepared = driver.prepare(world.spec("orphan"))

    assert locks() == []
    assert [s.name for s in driver.list_stacks()] == ["orphan"]
    assert driver.outputs("orphan") == prepared.outputs
    assert driver.destroy("orphan").result == "succeeded"


def test_a_replica_restarted_without_its_local_state_loses_no_stack(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    world.ready()
    backend = seed_state_backend(world.endpoint, "us-east-1")
    base = make_settings(world, tmp_path / "state")
    pulumi = {"state_dir": str(tmp_path / "state"), **backend.pulumi_settings()}
    settings = base.model_validate({**base.model_dump(), "pulumi": pulumi})
    first = StackDriver(settings, pulumi_root(pulumi_tool), logging.getLogger("stack"))
    for pool in ("alpha", "beta"):
        template = first.prepare(world.spec(pool)).outputs.launch_template_id
        first.record_instance_set(pool, "gen-0", world.launch(pool, template, 2))
    del first
    shutil.rmtree(tmp_path / "state")  # the pod's emptyDir, gone with the pod

    restarted = StackDriver(settings, pulumi_root(pulumi_tool), logging.getLogger("stack"))
    restarted.recover()
    assert sorted(s.name for s in restarted.list_stacks()) == ["alpha", "beta"]
    alpha = restarted.outputs("alpha")
    assert alpha is not None and len(alpha.instance_ids) == 2

    # The inventory from the controller's settings alone, on a machine with no state at all.
    argv = _pools_argv(world, tmp_path / "operator-state", pulumi_tool)
    argv += ["--pulumi.backend-url", backend.backend_url]
    argv += ["--pulumi.secrets-provider", backend.secrets_provider]
    argv += ["--aws.endpoint-url", world.endpoint]
    capsys.readouterr()
    assert pools_command.main(argv) == 0
    table = capsys.readouterr().out
    rows = {line.split()[0]: line for line in table.splitlines()[1:] if line.strip()}
    assert ",".join(alpha.instance_ids) in rows["alpha"] and "ok, 6 resources" in rows["alpha"]
    assert "ok, 6 resources" in rows["beta"]
    command = restarted.operator_command()
    assert command in table
    home = tmp_path / "operator-home"
    assert stack_ls(command, Path(pulumi_tool.binary), home) == ["alpha", "beta"]
    for pool in ("alpha", "beta"):
        assert restarted.destroy(pool).result == "succeeded"
        assert world.live_instances(pool) == []
    assert restarted.list_stacks() == []
    assert world.launch_templates() == []
    assert stack_ls(command, Path(pulumi_tool.binary), home) == []
    # The inventory read from the bucket (what `drain` waits on) agrees: no stack is left.
    assert pools_command.main(argv) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert table == [table[0]], table  # the header only


def test_an_update_that_meets_its_template_deleted_by_hand_refreshes_once_and_remakes_it(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any
) -> None:
    # As an operator found it: the template deleted outside the stack, then a changed spec
    # (a rotated AMI) makes every prepare try to add a version to the missing template.
    world.ready()
    driver = _driver(world, tmp_path / "state", pulumi_tool)
    spec = world.spec("drifted")
    old = driver.prepare(spec).outputs.launch_template_id
    world.ec2.delete_launch_template(LaunchTemplateId=old)

    rotated = replace(spec, image_id="ami-0bbbbbbbbbbbbbbbb")
    result = driver.prepare(rotated)

    new = result.outputs.launch_template_id
    assert new != old
    assert result.repairs == (
        f"launch template {old} was deleted outside the stack; recreated as {new}",
    )
    assert _default_version(world, new)["ImageId"] == "ami-0bbbbbbbbbbbbbbbb"
    assert [op.operation for op in [driver.last_operation("drifted")] if op] == ["prepare"]
    # The repaired stack is an ordinary one: the next prepare of the same spec changes nothing.
    assert driver.prepare(rotated).repairs == ()
