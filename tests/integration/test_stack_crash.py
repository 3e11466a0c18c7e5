"""A driver killed with SIGKILL in the middle of an `up`, or of a destroy, is recovered by
the next driver.

The child (this module run with `python -m`, see `child_main`) prepares a pool's stack and
records its gang. The parent watches the stack's state file (or EC2) and, at the chosen
moment, stops and kills the child's whole process tree at once (the driver, the Pulumi
CLI, the provider host), as a crashed pod loses them all. Killed while recording, what is
left is a lock and a pending create; killed in a new stack's first prepare, which writes
its state once, a lock, the state from before the `up` and the prepare's intent
(``intents``). A new driver's `recover()` must clear the lock and the pending create, and
the next operations must converge with exactly the gang's N instances and one launch
template, or, when the pool goes instead, leave nothing: nothing leaked, nothing
duplicated.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provisioner.api.constants import FailureKind
from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import DEFAULT_MAX_ATTEMPTS
from provisioner.pulumi_driver import StackDriver
from provisioner.pulumi_driver.errors import StackError
from provisioner.pulumi_driver.intents import INTENTS_DIR
from provisioner.pulumi_driver.statefile import FileBackend
from stacks.base import type_token
from stacks.spec import PoolSpec
from tests.integration.test_stack_support import (
    PASSPHRASE,
    AwsWorld,
    make_settings,
    pulumi_root,
    stack_ls,
)

REPO = Path(__file__).resolve().parents[2]
POOL = "crashy"
KILL_WAIT_SECONDS = 120.0


def child_main(argv: list[str]) -> int:
    """The driver process the test kills: prepare (unless ``restarted``), then record the
    given gang."""
    config = json.loads(argv[0])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    world = config["world"]

    driver = StackDriver(
        Settings.model_validate(config["settings"]),
        Path(config["pulumi_root"]),
        logging.getLogger("child"),
    )
    if config.get("destroy"):
        driver.destroy(POOL)
        return 0
    if not config.get("restarted"):
        # A restarted controller finds the stack prepared (the parent did it) and goes
        # straight to the record, on a stack this process has not seen complete.
        driver.prepare(PoolSpec.from_dict(config["spec"]))
    if world["ids"]:
        driver.record_instance_set(POOL, "gen-0", world["ids"])
    return 0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _kill_tree(root: int) -> list[int]:
    """Freeze every process first, so none reacts to another's death, then kill them all.
    The provider host runs in its own process group, so the tree is walked, not the group."""
    pids = _descendants(root)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    return pids


def _pending_types(state_file: Path) -> list[str]:
    try:
        latest = json.loads(state_file.read_text())["checkpoint"]["latest"] or {}
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [op["resource"]["type"] for op in latest.get("pending_operations") or ()]


def _run_child_until_pending(
    config: dict[str, Any], state_file: Path, kind: str, log: Path
) -> list[int]:
    return _run_child_until(
        config, lambda: type_token(kind) in _pending_types(state_file), f"a pending {kind}", log
    )


def _run_child_until(
    config: dict[str, Any], seen: Callable[[], bool], what: str, log: Path
) -> list[int]:
    """Run the child until ``seen()``, then kill its whole tree; the pids killed."""
    with log.open("wb") as sink:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.test_stack_crash", json.dumps(config)],
            cwd=REPO,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    try:
        while not seen():
            if child.poll() is not None:
                pytest.fail(f"the child ended before {what} was seen:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {KILL_WAIT_SECONDS}s:\n{log.read_text()}")
            time.sleep(0.002)
        return _kill_tree(child.pid)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def _child_config(
    settings: Settings,
    pulumi_tool: Any,
    spec: PoolSpec,
    ids: list[str] | None = None,
    **flags: bool,
) -> dict[str, Any]:
    """What `child_main` is given: the driver's settings and CLI, the pool's spec, the gang
    to record (none: prepare only) and ``flags`` (`restarted`, `destroy`)."""
    return {
        "settings": settings.model_dump(mode="json"),
        "pulumi_root": str(pulumi_root(pulumi_tool)),
        "spec": spec.to_dict(),
        "world": {"ids": ids or []},
        **flags,
    }


def _files(state: Path, settings: Settings) -> FileBackend:
    """The `file://` backend under ``state``, to read its state and lock files as the CLI
    left them."""
    return FileBackend(state, settings.pulumi.project_name)


def _driver(settings: Settings, pulumi_tool: Any) -> StackDriver:
    return StackDriver(settings, pulumi_root(pulumi_tool), logging.getLogger("stack"))


def _stacks_listed(driver: StackDriver, pulumi_tool: Any, tmp_path: Path) -> list[str]:
    """The project's stacks as an operator's `pulumi stack ls` prints them."""
    home = tmp_path / "operator-home"
    return stack_ls(driver.operator_command(), Path(pulumi_tool.binary), home)


@dataclass(frozen=True)
class KilledFirstPrepare:
    settings: Settings
    spec: PoolSpec
    files: FileBackend  # the `file://` backend the stack is in
    intent: Path  # the prepare's intent beside the stack
    made: str  # the launch template EC2 made before the kill
    killed: list[int]  # the processes killed


def _kill_first_prepare(
    world: AwsWorld, emulator: Any, tmp_path: Path, pulumi_tool: Any
) -> KilledFirstPrepare:
    """A new pool's first prepare in the child, killed (driver, CLI and provider host at
    once) after EC2 made the launch template and while it holds the answer a minute."""
    state = tmp_path / "state"
    settings = make_settings(world, state)
    spec = world.spec(POOL)
    emulator.client.delay_calls("CreateLaunchTemplate", 60.0, after=True)
    config = _child_config(settings, pulumi_tool, spec)
    killed = _run_child_until(
        config, lambda: world.launch_templates() != [], "the template made", tmp_path / "log"
    )
    (made,) = [t["LaunchTemplateId"] for t in world.launch_templates()]
    return KilledFirstPrepare(
        settings=settings,
        spec=spec,
        files=_files(state, settings),
        intent=state / ".pulumi" / INTENTS_DIR / settings.pulumi.project_name / f"{POOL}.json",
        made=made,
        killed=killed,
    )


@pytest.fixture
def world(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> AwsWorld:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
    return AwsWorld(emulator).ready()


def test_sigkill_mid_record_leaves_lock_and_pending_create_then_recovers(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any
) -> None:
    """A restarted controller's record (it has not seen the stack complete) writes its
    checkpoints: killed with the set's create pending, recovery adopts the set."""
    kill_at = "InstanceSet"
    state = tmp_path / "state"
    settings = make_settings(world, state)
    spec = world.spec(POOL)
    driver = _driver(settings, pulumi_tool)
    # The gang exists before the crash: the engine launched it from the pool's template.
    template = driver.prepare(spec).outputs.launch_template_id
    ids = world.launch(POOL, template, 3)
    config = _child_config(settings, pulumi_tool, spec, ids, restarted=True)
    state_file = _files(state, settings).stacks_dir / f"{POOL}.json"

    killed = _run_child_until_pending(config, state_file, kill_at, tmp_path / "child.log")

    # What the crash left: a lock and a pending create.
    assert len(killed) >= 3, f"expected driver, CLI and provider host, killed {killed}"
    lock_dir = _files(state, settings).lock_dir(POOL)
    assert list(lock_dir.glob("*.json")), "the killed update left no lock"
    assert _pending_types(state_file) == [type_token(kill_at)]

    recovering = _driver(settings, pulumi_tool)
    (report,) = recovering.recover()

    assert report.pool == POOL and report.lock_cancelled and not report.deferred
    assert report.aborted is not None and report.aborted.result == "aborted"
    assert report.aborted.operation == "record"
    assert [r.pending for r in report.resolutions] == ["creating"]
    assert not list(lock_dir.glob("*.json"))
    assert _pending_types(state_file) == []
    # A second recovery finds nothing to do.
    assert all(r.clean for r in recovering.recover())

    # Converge: the reconciler asks again for what it wanted.
    recovering.prepare(spec)
    recorded = recovering.record_instance_set(POOL, "gen-0", ids)

    assert recorded.outputs.instance_ids == tuple(sorted(ids))
    assert world.live_instances(POOL) == sorted(ids)  # exactly N: no leak, no duplicate
    templates = world.launch_templates()
    assert [t["LaunchTemplateId"] for t in templates] == [recorded.outputs.launch_template_id]
    # The interrupted recording was adopted, so recording again changed nothing.
    assert recorded.changes.get("create") is None

    assert recovering.destroy(POOL).result == "succeeded"
    assert world.live_instances(POOL) == []
    assert world.launch_templates() == []
    assert _stacks_listed(recovering, pulumi_tool, tmp_path) == []


def test_sigkill_mid_record_of_a_complete_stack_leaves_the_state_as_it_was_and_records_again(
    world: AwsWorld, emulator: Any, tmp_path: Path, pulumi_tool: Any
) -> None:
    """A record on a stack the driver last saw complete writes its state once
    (`sdk.STATE_ONCE_ENVIRONMENT`): its only create is the set's, which checks the
    instances and makes nothing. Killed while EC2 holds that check's answer, it leaves a
    lock and the state from before it, no pending create; the next record records."""
    state = tmp_path / "state"
    settings = make_settings(world, state)
    spec = world.spec(POOL)
    driver = _driver(settings, pulumi_tool)
    template = driver.prepare(spec).outputs.launch_template_id
    ids = world.launch(POOL, template, 3)
    state_file = _files(state, settings).stacks_dir / f"{POOL}.json"
    before = _resource_types(state_file)
    emulator.client.delay_calls("DescribeInstances", 60.0, after=True)
    config = _child_config(settings, pulumi_tool, spec, ids)

    log = tmp_path / "log"
    # The engine says it began the set's create; EC2 holds the check's answer a minute.
    creating = f"record: create {type_token('InstanceSet')}::"
    killed = _run_child_until(
        config, lambda: log.is_file() and creating in log.read_text(), "the set's create", log
    )

    assert len(killed) >= 3, f"expected driver, CLI and provider host, killed {killed}"
    lock_dir = _files(state, settings).lock_dir(POOL)
    assert list(lock_dir.glob("*.json")), "the killed record left no lock"
    assert _resource_types(state_file) == before, "the state moved before the record's end"
    assert _pending_types(state_file) == []

    recovering = _driver(settings, pulumi_tool)
    (report,) = recovering.recover()
    assert report.lock_cancelled and report.aborted is not None
    assert report.aborted.operation == "record" and report.resolutions == ()
    recovering.prepare(spec)  # the reconciler's next pass: nothing to change
    recorded = recovering.record_instance_set(POOL, "gen-0", ids)
    assert recorded.outputs.instance_ids == tuple(sorted(ids))
    assert recorded.changes.get("create") == 1
    assert world.live_instances(POOL) == sorted(ids)  # exactly N: no leak, no duplicate
    assert [t["LaunchTemplateId"] for t in world.launch_templates()] == [template]

    assert recovering.destroy(POOL).result == "succeeded"
    assert world.live_instances(POOL) == [] and world.launch_templates() == []


@pytest.mark.parametrize("then", ["prepare", "destroy"])
def test_sigkill_mid_first_prepare_leaves_its_intent_and_nothing_made_outlives_the_pool(
    world: AwsWorld, emulator: Any, tmp_path: Path, pulumi_tool: Any, then: str
) -> None:
    """A new stack's first prepare writes its state once (`sdk.STATE_ONCE_ENVIRONMENT`),
    with its spec kept beside the stack (``intents``). Killed after EC2 made the launch
    template, before the CLI heard of it, it leaves a lock, an empty state (no pending
    create to adopt) and the intent. The pool's next prepare adopts the template; a
    destroy instead runs the prepare again first, so the template goes with the stack."""
    first = _kill_first_prepare(world, emulator, tmp_path, pulumi_tool)
    settings, spec, intent, made = first.settings, first.spec, first.intent, first.made
    state_file = first.files.stacks_dir / f"{POOL}.json"

    assert len(first.killed) >= 3, f"expected driver, CLI and provider host: {first.killed}"
    lock_dir = first.files.lock_dir(POOL)
    assert list(lock_dir.glob("*.json")), "the killed update left no lock"
    assert _resource_types(state_file) == [], "a checkpoint was written before the up's end"
    assert PoolSpec.from_dict(json.loads(intent.read_text())) == spec

    recovering = _driver(settings, pulumi_tool)
    (report,) = recovering.recover()
    assert report.lock_cancelled and report.aborted is not None
    assert report.aborted.operation == "prepare" and report.resolutions == ()

    if then == "prepare":
        prepared = recovering.prepare(spec)
        # The template the killed prepare made, adopted: not a second one.
        assert prepared.outputs.launch_template_id == made
        assert [t["LaunchTemplateId"] for t in world.launch_templates()] == [made]
        assert not intent.exists()
    assert recovering.destroy(POOL).result == "succeeded"
    assert world.launch_templates() == []
    assert not intent.exists()
    assert _stacks_listed(recovering, pulumi_tool, tmp_path) == []


def test_a_destroy_whose_run_of_the_interrupted_prepare_fails_for_now_waits_and_leaves_nothing(
    world: AwsWorld, emulator: Any, tmp_path: Path, pulumi_tool: Any
) -> None:
    """As above, killed after EC2 made the template; then the pool goes, and the prepare the
    destroy runs first meets IAM unavailable at the instance profile (every attempt of the
    client's), before the template (which depends on it) is adopted. The destroy fails
    with it and destroys nothing: going on would drop the intent and leave the template in
    EC2 with no stack to find it. Once IAM answers, the next destroy adopts the template
    and leaves nothing."""
    first = _kill_first_prepare(world, emulator, tmp_path, pulumi_tool)
    intent, made = first.intent, first.made
    assert len(first.killed) >= 3, f"expected driver, CLI and provider host: {first.killed}"
    recovering = _driver(first.settings, pulumi_tool)
    recovering.recover()

    emulator.client.inject_fault(
        "GetInstanceProfile", "ServiceUnavailable", status=503, count=DEFAULT_MAX_ATTEMPTS
    )
    with pytest.raises(StackError) as failed:
        recovering.destroy(POOL)

    assert failed.value.operation == "destroy" and failed.value.kind is FailureKind.RETRYABLE
    assert "the destroy waits for it" in failed.value.message
    assert [t["LaunchTemplateId"] for t in world.launch_templates()] == [made]
    assert intent.is_file()
    assert recovering.destroy(POOL).result == "succeeded"
    assert world.launch_templates() == [] and not intent.exists()
    assert _stacks_listed(recovering, pulumi_tool, tmp_path) == []


def _resource_types(state_file: Path) -> list[str]:
    """The types of the state's resources, sorted: the engine writes resources that do not
    depend on each other in the order their steps ended, so a no-op `up` (the child's own
    prepare) may write the same resources in another order."""
    latest = json.loads(state_file.read_text())["checkpoint"]["latest"] or {}
    return sorted(resource["type"] for resource in latest.get("resources") or ())


def test_sigkill_mid_destroy_leaves_the_state_as_it_was_and_the_next_destroy_finishes(
    world: AwsWorld, emulator: Any, tmp_path: Path, pulumi_tool: Any
) -> None:
    """A destroy writes the stack's state once, at its end (`sdk.STATE_ONCE_ENVIRONMENT`).
    Killed after EC2 terminated the gang and deleted the launch template, before the CLI
    heard of the delete, it leaves a lock and the state from before it, with no pending
    delete; the next destroy deletes every resource again, what is gone as done."""
    state = tmp_path / "state"
    settings = make_settings(world, state)
    spec = world.spec(POOL)
    driver = _driver(settings, pulumi_tool)
    template = driver.prepare(spec).outputs.launch_template_id
    ids = world.launch(POOL, template, 3)
    driver.record_instance_set(POOL, "gen-0", ids)
    state_file = _files(state, settings).stacks_dir / f"{POOL}.json"
    recorded = _resource_types(state_file)
    assert type_token("InstanceSet") in recorded and type_token("LaunchTemplate") in recorded
    # EC2 deletes the template, then its answer is held: the CLI is killed while it waits.
    emulator.client.delay_calls("DeleteLaunchTemplate", 60.0, after=True)
    config = _child_config(settings, pulumi_tool, spec, destroy=True)

    killed = _run_child_until(
        config, lambda: world.launch_templates() == [], "the template deleted", tmp_path / "log"
    )

    assert len(killed) >= 3, f"expected driver, CLI and provider host, killed {killed}"
    assert world.live_instances(POOL) == []
    lock_dir = _files(state, settings).lock_dir(POOL)
    assert list(lock_dir.glob("*.json")), "the killed destroy left no lock"
    assert _resource_types(state_file) == recorded, "the state moved before the destroy's end"
    assert _pending_types(state_file) == []

    recovering = _driver(settings, pulumi_tool)
    (report,) = recovering.recover()
    assert report.pool == POOL and report.lock_cancelled
    assert report.aborted is not None and report.aborted.operation == "destroy"
    assert report.resolutions == () and not report.refreshed  # nothing was pending

    assert recovering.destroy(POOL).result == "succeeded"
    assert world.live_instances(POOL) == [] and world.launch_templates() == []
    assert _stacks_listed(recovering, pulumi_tool, tmp_path) == []


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
