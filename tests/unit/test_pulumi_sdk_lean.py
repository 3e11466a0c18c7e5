"""What ``provisioner.pulumi_driver.sdk`` leans on in the pinned Automation API, run against a
CLI that records its commands and runs nothing. An SDK upgrade that changes any of it fails
here, saying what to re-check, instead of quietly starting the CLI processes again (or
returning an update's result without its outputs)."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pulumi.automation import CommandResult, EngineEvent, OnOutput, PulumiCommand
from semver import VersionInfo

from provisioner.pulumi_driver.engine_log import EngineLog
from provisioner.pulumi_driver.sdk import (
    SDK_VERSION,
    STATE_ONCE_ENVIRONMENT,
    PoolStack,
    PoolWorkspace,
)

pytestmark = pytest.mark.unit

RECHECK = (
    "provisioner/pulumi_driver/sdk.py leans on pulumi/automation/_stack.py: "
    "Stack(name, workspace, StackInitMode) selects through Workspace.select_stack and creates "
    "through Workspace.create_stack; up() ends with self.outputs() and self.info(), "
    "destroy() and refresh() with self.info(); every command passes --stack. Re-read them "
    "in the new SDK and fix sdk.py"
)


class RecordingCli(PulumiCommand):
    """A `PulumiCommand` that records each command and answers as an empty stack would."""

    def __init__(self) -> None:  # no `pulumi version` run: there is no CLI
        self.command = "pulumi"
        self.version = VersionInfo.parse(SDK_VERSION)
        self.commands: list[list[str]] = []
        self.environments: list[dict[str, str]] = []

    def run(
        self,
        args: list[str],
        cwd: str,
        additional_env: Mapping[str, str],
        on_output: OnOutput | None = None,
        on_error: OnOutput | None = None,
    ) -> CommandResult:
        self.commands.append(list(args))
        self.environments.append(dict(additional_env))
        stdout = {"history": "[]", "output": "{}"}.get(args[1] if len(args) > 1 else "", "")
        return CommandResult(stdout=stdout, stderr="", code=0)

    def subcommands(self) -> list[str]:
        return [" ".join(a for a in c[:2] if not a.startswith("-")) for c in self.commands]


@pytest.fixture
def cli() -> RecordingCli:
    return RecordingCli()


def _stack(cli: RecordingCli, tmp_path: Path) -> PoolStack:
    workspace = PoolWorkspace(work_dir=str(tmp_path), pulumi_command=cli)
    return PoolStack.attach("pool-a", workspace)


def _events(operation: str) -> EngineLog:
    """An operation's log, fed what the engine reports at the end of an update."""
    events = EngineLog(logging.getLogger("test"), "pool-a", operation)
    events.on_event(
        EngineEvent.from_json(
            {
                "sequence": 1,
                "timestamp": 0,
                "resOutputsEvent": {
                    "metadata": {
                        "op": "same",
                        "urn": "urn:pulumi:pool-a::p::pulumi:pulumi:Stack::p-pool-a",
                        "type": "pulumi:pulumi:Stack",
                        "provider": "",
                        "new": {
                            "type": "pulumi:pulumi:Stack",
                            "urn": "urn:pulumi:pool-a::p::pulumi:pulumi:Stack::p-pool-a",
                            "outputs": {"pool": "pool-a", "instanceIds": ["i-1"]},
                        },
                    }
                },
            }
        )
    )
    events.on_event(
        EngineEvent.from_json(
            {
                "sequence": 2,
                "timestamp": 0,
                "summaryEvent": {
                    "maybeCorrupt": False,
                    "durationSeconds": 1,
                    "resourceChanges": {"create": 1, "same": 4},
                    "PolicyPacks": {},
                },
            }
        )
    )
    return events


def _noop() -> None:
    pass


def test_the_installed_sdk_is_the_one_sdk_py_was_checked_against() -> None:
    installed = importlib.metadata.version("pulumi")
    assert installed == SDK_VERSION, (
        f"pulumi {installed} is installed; sdk.py was checked against {SDK_VERSION}. "
        f"{RECHECK}, then set SDK_VERSION."
    )


def test_attaching_to_a_stack_starts_no_cli_and_creating_one_only_stack_init(
    cli: RecordingCli, tmp_path: Path
) -> None:
    _stack(cli, tmp_path)
    assert cli.commands == [], RECHECK

    workspace = PoolWorkspace(
        work_dir=str(tmp_path), pulumi_command=cli, secrets_provider="passphrase"
    )
    PoolStack.init("pool-b", workspace)
    assert cli.commands == [["stack", "init", "pool-b", "--secrets-provider", "passphrase"]]


def test_an_up_is_one_cli_process_and_answers_from_its_own_events(
    cli: RecordingCli, tmp_path: Path
) -> None:
    stack = _stack(cli, tmp_path)
    events = _events("record")

    with stack.answering_from(events):
        result = stack.up(program=_noop, on_event=events.on_event, color="never")

    assert cli.subcommands() == ["up"], RECHECK
    assert "--stack" in cli.commands[0] and "pool-a" in cli.commands[0], RECHECK
    assert {k: v.value for k, v in result.outputs.items()} == {
        "pool": "pool-a",
        "instanceIds": ["i-1"],
    }
    assert not any(v.secret for v in result.outputs.values())
    assert result.summary.result == "succeeded"
    assert result.summary.resource_changes == {"create": 1, "same": 4}


@pytest.mark.parametrize("operation", ["destroy", "refresh"])
def test_a_destroy_or_refresh_is_one_cli_process(
    cli: RecordingCli, tmp_path: Path, operation: str
) -> None:
    stack = _stack(cli, tmp_path)
    events = _events(operation)
    run: Any = getattr(stack, operation)

    with stack.answering_from(events):
        result = run(program=_noop, on_event=events.on_event, color="never")

    assert cli.subcommands() == [operation], RECHECK
    assert result.summary.resource_changes == {"create": 1, "same": 4}


def test_a_destroy_that_removes_the_stack_is_one_cli_process(
    cli: RecordingCli, tmp_path: Path
) -> None:
    stack = _stack(cli, tmp_path)
    events = _events("destroy")

    with stack.answering_from(events):
        result = stack.destroy_and_remove(program=_noop, on_event=events.on_event)

    assert cli.subcommands() == ["destroy"], RECHECK
    assert cli.commands[0][:2] == ["destroy", "--remove"]
    assert cli.commands[0][-2:] == ["--stack", "pool-a"]
    assert result.summary.resource_changes == {"create": 1, "same": 4}
    # Only the one destroy: a later one on the same stack object removes nothing.
    with stack.answering_from(events):
        stack.destroy(program=_noop, on_event=events.on_event)
    assert "--remove" not in cli.commands[1]


def test_only_a_removing_destroy_and_a_state_once_up_skip_the_checkpoints_before_their_end(
    cli: RecordingCli, tmp_path: Path
) -> None:
    """Their one process each, and not the workspace: the environment every stack shares is
    given back as it was, and a plain `up` writes its checkpoints (its pending creates)."""
    stack = _stack(cli, tmp_path)
    shared = stack.workspace.env_vars
    shared["ANY"] = "shared"

    with stack.answering_from(_events("destroy")):
        stack.destroy_and_remove(program=_noop)
    with stack.answering_from(_events("update")):
        stack.up(program=_noop)
    with stack.answering_from(_events("update")):
        stack.up_writing_state_once(program=_noop)

    removing, up, once = cli.environments
    for skipping in (removing, once):
        assert {k: skipping.get(k) for k in STATE_ONCE_ENVIRONMENT} == STATE_ONCE_ENVIRONMENT
        assert skipping["ANY"] == "shared"
    assert cli.subcommands() == ["destroy", "up", "up"], RECHECK
    assert not STATE_ONCE_ENVIRONMENT.keys() & up.keys()
    assert stack.workspace.env_vars is shared
    assert not STATE_ONCE_ENVIRONMENT.keys() & shared.keys()


def test_the_drivers_up_goes_on_past_a_failed_resource_in_both_modes(
    cli: RecordingCli, tmp_path: Path
) -> None:
    """`--continue-on-error`: a run whose access entry fails before the instance profile's
    step has started still runs the profile's, so both wrong inputs are reported (CI saw
    the report name only the access entry when its registration reached the engine
    first)."""
    stack = _stack(cli, tmp_path)

    for once in (False, True):
        with stack.answering_from(_events("update")):
            stack.update(_noop, state_once=once)

    assert cli.subcommands() == ["up", "up"], RECHECK
    assert all("--continue-on-error" in command for command in cli.commands)
    plain, once_env = cli.environments
    assert not STATE_ONCE_ENVIRONMENT.keys() & plain.keys()
    assert {k: once_env.get(k) for k in STATE_ONCE_ENVIRONMENT} == STATE_ONCE_ENVIRONMENT


def test_a_removing_destroy_outside_an_operation_is_refused(
    cli: RecordingCli, tmp_path: Path
) -> None:
    # Outside, the SDK's own `self.info()` would read a stack this destroy removed.
    with pytest.raises(RuntimeError, match="inside answering_from"):
        _stack(cli, tmp_path).destroy_and_remove(program=_noop)
    assert cli.commands == []


def test_outside_an_operation_outputs_and_info_ask_the_cli(
    cli: RecordingCli, tmp_path: Path
) -> None:
    stack = _stack(cli, tmp_path)
    with stack.answering_from(_events("prepare")):
        pass

    assert stack.outputs() == {}
    assert stack.info() is None
    assert cli.subcommands() == ["stack output", "stack output", "stack history"]
