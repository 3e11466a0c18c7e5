"""The stack driver's pure parts: error mapping, lock staleness, pending-operation
resolution, operation markers, state-file reads, engine-event ordering, CLI environment,
and the provider-serialization guard."""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import subprocess
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pulumi.automation import CommandResult, ConcurrentUpdateError, EngineEvent
from pulumi.automation import errors as auto_errors

from provisioner.api.constants import FailureKind
from provisioner.api.settings import STACK_OPERATION_MEMORY, AwsSettings, Settings
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.pulumi_driver import errors
from provisioner.pulumi_driver.cli_env import (
    BACKEND_TUNING,
    GO_RUNTIME_TUNING,
    LAUNCHER,
    StatePaths,
    aws_environment,
    checkpoint_backups_off,
    cli_environment,
    launcher_dir,
    secrets_problem,
)
from provisioner.pulumi_driver.engine_log import EngineLog
from provisioner.pulumi_driver.fence import FencingToken
from provisioner.pulumi_driver.locks import (
    BreakRule,
    LockHolder,
    holders_from_files,
    holders_from_message,
    is_stale,
    pid_alive,
    pulumi_alive,
)
from provisioner.pulumi_driver.oplog import OperationLog
from provisioner.pulumi_driver.pending import resolve
from provisioner.pulumi_driver.statefile import FileBackend, file_backend_root
from stacks.base import provider_serialization
from stacks.failures import PoolResourceError, as_pool_error
from stacks.launch_template import LaunchTemplateProvider

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/gang-node"
LOCKED = (
    "error: the stack is currently locked by 1 lock(s). Either wait for the other "
    "process(es) to end or delete the lock file with `pulumi cancel`.\n"
    "  file:///s/.pulumi/locks/organization/p/s1/0be5.json: created by root@vm (pid 16427) "
    "at 2026-11-29T15:33:49Z"
)


def _command_error(stderr: str = "", stdout: str = "") -> Exception:
    return auto_errors.create_command_error(CommandResult(stdout=stdout, stderr=stderr, code=1))


# --- errors -------------------------------------------------------------------------------
def test_locked_stack_is_a_retryable_named_reason() -> None:
    exc = _command_error(stderr=LOCKED)
    assert isinstance(exc, ConcurrentUpdateError) and errors.is_locked(exc)
    err = errors.classify(exc, [], pool="p1", operation="prepare")
    assert err.reason == errors.STACK_LOCKED and err.retryable
    assert "pulumi cancel --stack p1" in err.message
    cloud = _command_error(stderr="error: [409] Conflict: Another update is currently in progress.")
    assert errors.classify(cloud, [], pool="p1", operation="up").reason == errors.STACK_LOCKED


def _as_the_provider_host_reports(exc: BaseException) -> str:
    """The text the CLI gets for an exception a dynamic provider raised: the provider host
    (`pulumi.dynamic.__main__`) aborts the gRPC call with `traceback.format_exc()`."""
    try:
        raise exc
    except BaseException:
        return "error: " + traceback.format_exc()


def test_provider_failures_come_back_with_their_reasons_in_program_order() -> None:
    diagnostics = [
        _as_the_provider_host_reports(
            PoolResourceError(
                "InstanceProfileRoleMismatch",
                "Instance profile ip holds [x], not the node role r; add the role to the profile.",
            )
        ),
        _as_the_provider_host_reports(
            PoolResourceError(
                "AccessEntryMissing",
                "Node role r has no access entry; create one of type EC2_LINUX.",
            )
        ),
    ]
    err = errors.classify(
        _command_error(stdout="update failed"), diagnostics, pool="p", operation="prepare"
    )
    assert err.reason == "InstanceProfileRoleMismatch" and err.kind is FailureKind.CONFIG
    assert err.message.startswith("Instance profile ip holds [x]")
    assert "Also AccessEntryMissing: Node role r has no access entry" in err.message
    pending = _as_the_provider_host_reports(
        PoolResourceError(
            "EnisPending",
            "Network interfaces ['eni-1'] had not detached.",
            kind=FailureKind.RETRYABLE,
        )
    )
    assert errors.classify(_command_error(), [pending], pool="p", operation="destroy").retryable


# The kind a provider's failure has once it is back in the controller, for each kind of
# CloudError behind it: waiting helps only against AWS being unavailable or unknown.
_KIND_AFTER_THE_BOUNDARY = {
    ErrorKind.RETRYABLE: FailureKind.RETRYABLE,
    ErrorKind.UNKNOWN: FailureKind.RETRYABLE,
    ErrorKind.CONFIG: FailureKind.CONFIG,
    ErrorKind.NOT_FOUND: FailureKind.CONFIG,
    ErrorKind.CAPACITY: FailureKind.CONFIG,
    ErrorKind.MALFORMED: FailureKind.CONFIG,
    # Only the engine's reservation lookup raises it; a provider that did would be a bug
    # someone must fix, not a wait.
    ErrorKind.NOT_ACTIVE: FailureKind.CONFIG,
}


@pytest.mark.parametrize("cloud_kind", list(ErrorKind))
def test_a_cloud_error_raised_in_a_provider_arrives_as_its_kind(cloud_kind: ErrorKind) -> None:
    cloud = CloudError(cloud_kind, "Code", "SomeReason", "AWS said no; fix it.")
    text = _as_the_provider_host_reports(as_pool_error(cloud, "GetInstanceProfile p"))
    # The CLI quotes the host's answer inside its own error line, after other noise.
    diagnostics = ["warning: something unrelated", f"  {text}"]
    err = errors.classify(_command_error(), diagnostics, pool="p", operation="prepare")
    assert err.kind is _KIND_AFTER_THE_BOUNDARY[cloud_kind]
    assert (err.reason, err.message) == ("SomeReason", "AWS said no; fix it.")


@pytest.mark.parametrize("kind", list(FailureKind))
def test_a_kind_a_provider_names_arrives_unchanged(kind: FailureKind) -> None:
    text = _as_the_provider_host_reports(PoolResourceError("Named", "What to do.", kind=kind))
    assert errors.classify(_command_error(), [text], pool="p", operation="record").kind is kind


def test_one_failure_that_needs_a_fix_makes_the_operation_need_it() -> None:
    transient = PoolResourceError("AwsUnavailable", "Throttled.", kind=FailureKind.RETRYABLE)
    config = PoolResourceError("AccessEntryMissing", "Create one.")
    diagnostics = [_as_the_provider_host_reports(e) for e in (transient, config)]
    err = errors.classify(_command_error(), diagnostics, pool="p", operation="prepare")
    assert err.reason == "AwsUnavailable" and err.kind is FailureKind.CONFIG


def test_a_traceback_without_the_marker_is_not_read_as_a_provider_failure() -> None:
    # The old wire format (reason after the class name) is not parsed: only the marker is.
    text = "stacks.failures.PoolResourceError: AccessEntryMissing: Node role r has none."
    err = errors.classify(_command_error(stderr=f"error: {text}"), [], pool="p", operation="up")
    assert err.reason == errors.STACK_OPERATION_FAILED


def test_a_pool_resource_error_survives_pickling() -> None:
    err = PoolResourceError("EnisPending", "Wait.", kind=FailureKind.RETRYABLE)
    back = pickle.loads(pickle.dumps(err))
    assert (back.reason, back.message, back.kind, str(back)) == (
        err.reason,
        err.message,
        err.kind,
        str(err),
    )


@pytest.mark.parametrize(
    ("stderr", "reason", "kind"),
    [
        (
            "error: incorrect passphrase, please set PULUMI_CONFIG_PASSPHRASE",
            "SecretsUnavailable",
            FailureKind.CONFIG,
        ),
        (
            "error: could not load checkpoint: blob (key) not found",
            "BackendUnavailable",
            FailureKind.RETRYABLE,
        ),
        ("error: no stack named 'p1' found", "StackNotFound", FailureKind.NOT_PREPARED),
        ("error: something new and strange", "StackOperationFailed", FailureKind.RETRYABLE),
    ],
)
def test_known_cli_failures_are_named(stderr: str, reason: str, kind: FailureKind) -> None:
    err = errors.classify(_command_error(stderr=stderr), [], pool="p1", operation="destroy")
    assert (err.reason, err.kind) == (reason, kind)
    assert err.pool == "p1" and err.operation == "destroy"


def test_unknown_failure_keeps_the_clis_last_error_line() -> None:
    err = errors.classify(
        _command_error(stderr="warning: x\nerror: first\nerror: the real one"),
        [],
        pool="p1",
        operation="prepare",
    )
    assert err.message.endswith("the real one")


# --- locks --------------------------------------------------------------------------------
def test_lock_holders_from_message_and_files(tmp_path: Path) -> None:
    (holder,) = holders_from_message(LOCKED)
    assert (holder.user, holder.host, holder.pid) == ("root", "vm", 16427)
    assert holder.created_at == datetime(2026, 11, 29, 15, 33, 49, tzinfo=UTC)

    lock = tmp_path / "a.json"
    lock.write_text(
        json.dumps(
            {
                "pid": 7,
                "username": "u",
                "hostname": "h",
                "timestamp": "2026-11-29T15:33:49.636218662Z",
            }
        )
    )
    (tmp_path / "b.json").write_text("{not json")
    found = holders_from_files([lock, tmp_path / "b.json"])
    assert found[0] == LockHolder(
        "u", "h", 7, datetime(2026, 11, 29, 15, 33, 49, 636218, tzinfo=UTC)
    )
    assert found[1].created_at is None


def _token(valid_until: float = 100.0, others_fenced_since: float = 50.0) -> FencingToken:
    return FencingToken("me-1", 3, valid_until, others_fenced_since)


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.mark.parametrize(
    "holder",
    [
        LockHolder("u", "me", os.getpid(), None),  # this host
        LockHolder("u", "other-pod", 10, None),  # another pod, age unknown
        LockHolder("", "", 0, None),  # an unreadable lock file
    ],
)
def test_a_replica_without_a_valid_token_breaks_no_lock(holder: LockHolder) -> None:
    assert is_stale(holder, BreakRule.not_leading()) is False
    # A token whose renew deadline passed is no token.
    assert is_stale(holder, BreakRule(_token(valid_until=60.0), now=60.0, host="me")) is False


def test_a_lock_of_this_host_goes_only_when_no_cli_runs_under_its_pid(tmp_path: Path) -> None:
    leading = BreakRule(_token(), now=70.0, host="me")
    cli = tmp_path / "pulumi"
    cli.symlink_to(shutil.which("sleep") or "/bin/sleep")
    running = subprocess.Popen([str(cli), "30"])
    try:
        assert is_stale(LockHolder("u", "me", running.pid, None), leading) is False
    finally:
        running.kill()
        running.wait()
    assert is_stale(LockHolder("u", "me", _dead_pid(), None), leading) is True
    # A live process that is not a Pulumi CLI: the pid was reused (a restarted container
    # keeps its host name and numbers its processes afresh).
    assert is_stale(LockHolder("u", "me", os.getpid(), None), leading) is True


def test_a_process_caught_mid_exec_counts_as_a_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    # Between close-on-exec (when Popen returns) and the kernel laying out the new stack,
    # /proc/<pid>/cmdline reads empty; a CI run once met a just-started CLI there and broke
    # its lock. Unknown is not "no CLI".
    cmdline = f"/proc/{os.getpid()}/cmdline"
    real_read_bytes = Path.read_bytes

    def read_bytes(path: Path) -> bytes:
        return b"" if str(path) == cmdline else real_read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    assert pulumi_alive(os.getpid()) is True
    leading = BreakRule(_token(), now=70.0, host="me")
    assert is_stale(LockHolder("u", "me", os.getpid(), None), leading) is False


def test_a_lock_of_another_host_goes_once_its_fence_has_surely_closed() -> None:
    holder = LockHolder("u", "old-leader-pod", 10, datetime(2030, 1, 1, tzinfo=UTC))
    # Leading, but the previous holder's Lease has not yet run out on our clock.
    assert is_stale(holder, BreakRule(_token(others_fenced_since=50.0), 49.0, "me")) is False
    assert is_stale(holder, BreakRule(_token(others_fenced_since=50.0), 50.0, "me")) is True
    # An unreadable lock file names no host: treated as another host's.
    assert is_stale(LockHolder("", "", 0, None), BreakRule(_token(), 70.0, "me")) is True


def test_pid_alive_sees_this_process_and_not_a_free_pid() -> None:
    import os

    assert pid_alive(os.getpid())
    assert not pid_alive(0)
    assert not pid_alive(2**22 + 12345)


# --- pending operations -------------------------------------------------------------------
def _pending_deployment() -> dict[str, Any]:
    def resource(name: str, type_: str) -> dict[str, Any]:
        return {
            "urn": f"urn:pulumi:p1::proj::{type_}::{name}",
            "type": type_,
            "inputs": {"__provider": "gASV", "name": name},
        }

    done = {**resource("profile", "t:Profile"), "id": "ip", "outputs": {"arn": "a"}}
    return {
        "resources": [{"urn": "urn:root", "type": "pulumi:pulumi:Stack"}, done],
        "pending_operations": [
            {"type": "creating", "resource": resource("template", "t:Template")},
            {"type": "creating", "resource": resource("gang", "t:Gang")},
            {"type": "deleting", "resource": done},
        ],
    }


def test_resolve_adopts_what_exists_drops_what_does_not_and_refreshes_the_rest() -> None:
    asked: list[str] = []

    def find(type_: str, inputs: Any) -> tuple[str, dict[str, Any]] | None:
        asked.append(type_)
        return (
            ("lt-1", {"name": inputs["name"], "launch_template_id": "lt-1"})
            if type_ == "t:Template"
            else None
        )

    original = _pending_deployment()
    edited, done = resolve(original, find)

    assert asked == ["t:Template", "t:Gang"]
    assert [(r.action, r.resource_id) for r in done] == [
        ("adopted", "lt-1"),
        ("dropped", None),
        ("refresh", None),
    ]
    assert "pending_operations" not in edited
    adopted = edited["resources"][-1]
    assert adopted["id"] == "lt-1"
    assert adopted["outputs"] == {
        "name": "template",
        "launch_template_id": "lt-1",
        "__provider": "gASV",
    }
    assert len(edited["resources"]) == 3
    assert "pending_operations" in original  # the input is not changed
    assert "adopted" in done[0].describe() and "dropped" in done[1].describe()


# --- operation markers --------------------------------------------------------------------
def test_marker_before_result_after_and_abort_on_restart(tmp_path: Path) -> None:
    log = OperationLog(tmp_path / "ops")
    started = log.begin("p1", "record")
    assert log.last("p1") == started and started.in_progress
    assert "record in progress" in started.summary()

    # A restart finds the marker without a result.
    aborted = OperationLog(tmp_path / "ops").abort_unfinished("p1")
    assert aborted is not None and aborted.result == "aborted" and aborted.reason == "Interrupted"
    assert OperationLog(tmp_path / "ops").abort_unfinished("p1") is None

    done = log.finish(log.begin("p1", "destroy"), "failed", "StackLocked", "locked")
    assert log.last("p1") == done and done.summary().startswith("destroy failed (StackLocked)")
    assert log.last("nothing") is None


# --- state files --------------------------------------------------------------------------
def test_file_backend_reads_outputs_pending_and_locks(tmp_path: Path) -> None:
    assert file_backend_root(f"file://{tmp_path}") == tmp_path
    assert file_backend_root("s3://bucket/prefix") is None
    backend = FileBackend(tmp_path, "proj")
    assert backend.stack_names() == [] and backend.outputs("p1") is None

    backend.stacks_dir.mkdir(parents=True)
    latest = {
        "resources": [{"type": "pulumi:pulumi:Stack", "outputs": {"pool": "p1"}}, {"type": "x"}],
        "pending_operations": [{"type": "creating"}],
    }
    (backend.stacks_dir / "p1.json").write_text(json.dumps({"checkpoint": {"latest": latest}}))
    (backend.stacks_dir / "p1.json.bak").write_text("old")
    (backend.stacks_dir / "p2.json").write_text("{truncated")
    backend.lock_dir("p1").mkdir(parents=True)
    (backend.lock_dir("p1") / "l.json").write_text(
        json.dumps(
            {"pid": 1, "username": "u", "hostname": "h", "timestamp": "2030-01-01T00:00:00Z"}
        )
    )

    assert backend.stack_names() == ["p1", "p2"]
    assert backend.outputs("p1") == {"pool": "p1"}
    assert backend.pending_operations("p1") == [{"type": "creating"}]
    assert backend.resource_count("p1") == 2
    assert [h.pid for h in backend.lock_holders("p1")] == [1]
    assert backend.outputs("p2") is None and backend.lock_holders("p2") == []


# --- engine events ------------------------------------------------------------------------
def _diag(urn: str, message: str) -> EngineEvent:
    return EngineEvent.from_json(
        {
            "sequence": 1,
            "timestamp": 0,
            "diagnosticEvent": {
                "message": message,
                "color": "never",
                "severity": "error",
                "urn": urn,
            },
        }
    )


def test_error_diagnostics_are_kept_in_program_order_and_logged_with_the_pool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = EngineLog(logging.getLogger("t"), "p1", "prepare", ("instance-profile", "access-entry"))
    with caplog.at_level(logging.INFO, logger="t"):
        log.on_event(_diag("urn:pulumi:p1::x::T::access-entry", "entry broken"))
        log.on_event(_diag("urn:pulumi:p1::x::T::instance-profile", "profile broken"))
        log.on_error("error: update failed")

    assert log.diagnostics == ["profile broken", "entry broken", "error: update failed"]
    assert all(getattr(r, "pool", None) == "p1" for r in caplog.records)
    assert "T::access-entry" in caplog.records[0].getMessage()


# --- the CLI's environment ----------------------------------------------------------------
def _settings(tmp_path: Path, **pulumi: str) -> Settings:
    return Settings.model_validate(
        {
            "cluster_name": "demo",
            "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
            "pulumi": {"state_dir": str(tmp_path), "backend_url": f"file://{tmp_path}", **pulumi},
        }
    )


def test_cli_environment_with_and_without_the_launcher_beside_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin")
    paths = StatePaths(tmp_path)
    (tmp_path / "bundled" / "bin").mkdir(parents=True)
    (tmp_path / "bundled" / "bin" / LAUNCHER).write_text("#!/bin/sh\n")

    bundled = cli_environment(_settings(tmp_path), tmp_path / "bundled", paths)
    assert bundled["PULUMI_IGNORE_AMBIENT_PLUGINS"] == "true" and "PATH" not in bundled
    assert bundled["PULUMI_HOME"] == str(tmp_path / "home")
    assert bundled["PULUMI_BACKEND_URL"] == f"file://{tmp_path}?metadata=skip"
    assert bundled["PULUMI_SKIP_UPDATE_CHECK"] == "true"

    on_path = cli_environment(_settings(tmp_path), tmp_path / "elsewhere", paths)
    assert on_path["PATH"] == f"{launcher_dir()}:/usr/bin"
    assert "PULUMI_IGNORE_AMBIENT_PLUGINS" not in on_path
    assert (launcher_dir() / LAUNCHER).is_file()


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_the_cli_writes_no_checkpoint_backups_and_no_legacy_listing_unless_the_operator_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    for name, _, older in BACKEND_TUNING:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(older, raising=False)
    s3 = {"backend_url": "s3://state?region=us-east-1", "secrets_provider": "awskms://alias/s"}
    settings = _settings(tmp_path, **(s3 if backend == "s3" else {}))

    env = cli_environment(settings, tmp_path, StatePaths(tmp_path))
    assert env["PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS"] == "true"
    assert env["PULUMI_DIY_BACKEND_NO_LEGACY_WARNING"] == "true"
    assert checkpoint_backups_off(env)  # so the S3 fence answers the `.json.bak` copies

    # Set on the controller, under either of the names the CLI reads, the operator's value
    # is the one the CLI inherits: nothing of ours stands in front of it.
    monkeypatch.setenv("PULUMI_DISABLE_CHECKPOINT_BACKUPS", "0")
    monkeypatch.setenv("PULUMI_SELF_MANAGED_STATE_NO_LEGACY_WARNING", "false")
    env = cli_environment(settings, tmp_path, StatePaths(tmp_path))
    assert not [name for name, _, _ in BACKEND_TUNING if name in env]
    assert not checkpoint_backups_off(env)
    # Read as the CLI reads it: the current name before the older one, "true" in any case.
    monkeypatch.setenv("PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS", "TRUE")
    assert checkpoint_backups_off(cli_environment(settings, tmp_path, StatePaths(tmp_path)))
    monkeypatch.setenv("PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS", "yes")
    assert not checkpoint_backups_off({})


def test_the_clis_collector_is_tuned_for_a_short_process_unless_the_operator_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, _ in GO_RUNTIME_TUNING:
        monkeypatch.delenv(name, raising=False)
    env = cli_environment(_settings(tmp_path), tmp_path, StatePaths(tmp_path))
    assert env["GOGC"] == "400" and env["GOMEMLIMIT"] == "100MiB"
    # The cap keeps a CLI inside what the stack workers' sizing allows each operation.
    assert STACK_OPERATION_MEMORY > 100 * 2**20

    # Either set on the controller, the CLI inherits the operator's runtime: none of ours.
    for name, value in (("GOGC", "100"), ("GOMEMLIMIT", "1GiB")):
        monkeypatch.setenv(name, value)
        env = cli_environment(_settings(tmp_path), tmp_path, StatePaths(tmp_path))
        assert not [n for n, _ in GO_RUNTIME_TUNING if n in env], name
        monkeypatch.delenv(name)


def test_the_clis_s3_and_kms_follow_the_aws_endpoint_override_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    s3 = {"backend_url": "s3://state?region=us-east-1", "secrets_provider": "awskms://alias/s"}
    on_aws = cli_environment(_settings(tmp_path, **s3), tmp_path, StatePaths(tmp_path))
    assert on_aws["PULUMI_BACKEND_URL"] == "s3://state?region=us-east-1"
    assert not [k for k in on_aws if k.startswith("AWS_ENDPOINT_URL")]  # real AWS
    assert on_aws["AWS_REGION"] == "us-east-1"  # a URL without ?region= still resolves

    local = _settings(tmp_path, **s3).model_copy(
        update={"aws": AwsSettings(endpoint_url="http://127.0.0.1:5000")}
    )
    emulated = cli_environment(local, tmp_path, StatePaths(tmp_path))
    assert emulated["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:5000"
    assert emulated["AWS_ENDPOINT_URL_KMS"] == "http://127.0.0.1:5000"
    assert emulated["PULUMI_BACKEND_URL"] == on_aws["PULUMI_BACKEND_URL"]  # the same URL
    assert aws_environment(local) == {k: v for k, v in emulated.items() if k.startswith("AWS_")}
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert "AWS_REGION" not in aws_environment(local)  # the process's own region wins


def test_passphrase_is_required_only_for_the_passphrase_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
    problem = secrets_problem(_settings(tmp_path))
    assert problem is not None and problem.reason == errors.SECRETS_UNAVAILABLE
    assert secrets_problem(_settings(tmp_path, secrets_provider="awskms://alias/x")) is None
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "")
    assert secrets_problem(_settings(tmp_path)) is None


# --- provider serialization ---------------------------------------------------------------
def test_serialization_guard_leaves_the_pickler_as_it_found_it() -> None:
    from pulumi.dynamic.dynamic import serialize_provider

    py_pickler: Any = pickle._Pickler

    def patched() -> tuple[Any, ...]:
        return (
            pickle.Pickler,
            py_pickler.__dict__.get("_batch_setitems"),
            py_pickler.__dict__.get("save_dict"),
        )

    before = patched()
    with provider_serialization():
        serialize_provider(LaunchTemplateProvider())
        once = patched()
        serialize_provider(LaunchTemplateProvider())
        # Unguarded, each serialization wraps the previous patch once more.
        assert patched()[1] is not once[1]
    assert patched() == before
    for _ in range(50):
        with provider_serialization():
            serialize_provider(LaunchTemplateProvider())
    assert patched() == before
