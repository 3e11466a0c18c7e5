"""How many Pulumi CLI processes each stack operation starts, counted on the real CLI.

The driver runs the project's CLI through a wrapper `bin/pulumi` that appends its arguments
to a file, then execs the real one. On both backends, after the leader's `recover()`: a new
pool's prepare is `stack init` + `up` (no `stack select` that fails first), a record or a
remove is one `up` (no `stack output` or `stack history` after it), a destroy is one
`destroy --remove` (no `stack rm` after it). The outputs still come back right: they are
read from the update's events. Every one of them runs with the Go collector tuned for a
short process (`GOGC`, `GOMEMLIMIT` from `cli_env`), as the wrapper's log shows.

The provider hosts are counted too, through a wrapper of the launcher the CLI starts for
each engine run: with ``stackOperations.providerHost: shared`` (the default) the CLI starts
none, every engine attaching to the driver's one host; with ``perOperation`` one per `up`
and `destroy`, as Pulumi does by default.

On the S3 backend the state bucket's requests of each operation are counted too (by the
emulator) and held to what they were when the CLI's per-process legacy-layout listing and
its `.json.bak` copy before each checkpoint write were cut: a change that adds requests to
every `up` fails here, naming each call's count (a destroy writes its state once, at its end:
`sdk.STATE_ONCE_ENVIRONMENT`). No `.json.bak` is written, and after the
destroy no object of the stack is left.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from devenv.state_backend import seed_state_backend
from provisioner.api.settings import Settings
from provisioner.pulumi_driver import StackDriver
from provisioner.pulumi_driver.cli_env import LAUNCHER
from tests.integration.test_stack_support import PASSPHRASE, REGION, AwsWorld, make_settings


class CountingCli:
    """A CLI root whose `bin/pulumi` logs each invocation, then runs the real CLI."""

    def __init__(self, real: Path, where: Path) -> None:
        self.log = where / "invocations.log"
        self.root = where / "cli"
        (self.root / "bin").mkdir(parents=True)
        # The CLI looks for bundled plugins beside its own executable: a link to it here
        # makes it find the counting launcher below, not the real one beside the original.
        binary = self.root / "bin" / "pulumi-real"
        try:
            os.link(real, binary)
        except OSError:  # another filesystem
            shutil.copy2(real, binary)
        shim = self.root / "bin" / "pulumi"
        # Beside it, the Go runtime settings each process was started with.
        self.runtime = where / "runtime.log"
        shim.write_text(
            f'#!/bin/sh\necho "$*" >> "{self.log}"\n'
            f'echo "$1 GOGC=${{GOGC-}} GOMEMLIMIT=${{GOMEMLIMIT-}}" >> "{self.runtime}"\n'
            f'exec "{binary}" "$@"\n'
        )
        shim.chmod(0o755)
        # The real CLI finds the launcher beside itself (the driver checks it is there):
        # this one logs each provider host it starts, then runs the real launcher.
        launcher = self.root / "bin" / LAUNCHER
        launcher.write_text(
            f'#!/bin/sh\necho "{PROVIDER_HOST}" >> "{self.log}"\n'
            f'exec "{real.parent / LAUNCHER}" "$@"\n'
        )
        launcher.chmod(0o755)
        self.log.touch()
        self._seen = 0

    def new_commands(self) -> list[str]:
        """The subcommands run since the last call (`up`, `stack init`, ...)."""
        lines = self.log.read_text().splitlines()
        new, self._seen = lines[self._seen :], len(lines)
        return [_subcommand(line) for line in new]


PROVIDER_HOST = "provider-host"


class StateRequests:
    """The state bucket's requests since the last `take()`, by the emulator's call names
    (`s3:GET bucket?list-type` a listing, `s3:PUT object` a write or a copy, ...), and the
    keys written (its S3 write log)."""

    def __init__(self, emulator: Any) -> None:
        self._client = emulator.client
        self._calls = self._s3_calls()
        self._writes = len(self._client.s3_writes())

    def _s3_calls(self) -> Counter[str]:
        costs = self._client.request_costs().items()
        return Counter({k: int(v["requests"]) for k, v in costs if k.startswith("s3:")})

    def take(self) -> tuple[Counter[str], list[str]]:
        calls, before = self._s3_calls(), self._calls
        writes = self._client.s3_writes(after=self._writes)
        self._calls, self._writes = calls, self._writes + len(writes)
        return calls - before, [w["key"] for w in writes]


# Each operation's state-bucket requests on the pinned CLI (`toolchain.versions.PULUMI`)
# with the pool program's resources, as the emulator counts them; before the cut (a legacy
# listing per CLI process, the CLI's `.json.bak` copy before each checkpoint write reaching
# S3) they were 79, 29, 29 and 89; a destroy that wrote a checkpoint before and after each
# delete, 77; a new stack's first prepare that wrote every checkpoint, 65 (now its state once,
# plus its intent's write and delete, ``intents``), and a record or remove on the stack the
# driver saw complete, 25 (now its state once). A change of the CLI's request pattern fails
# here.
S3_REQUESTS = {"prepare": 37, "record": 19, "remove": 19, "destroy": 50}


def _subcommand(line: str) -> str:
    if line == PROVIDER_HOST:
        return line
    words = [w for w in shlex.split(line) if not w.startswith("-")]
    return " ".join(words[:2]) if words[:1] == ["stack"] else words[0]


@pytest.fixture
def world(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> AwsWorld:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
    return AwsWorld(emulator).ready()


@pytest.mark.parametrize(
    ("backend", "provider_host"),
    [("file", "shared"), ("s3", "shared"), ("s3", "perOperation")],
)
def test_an_up_is_one_cli_process_and_so_is_a_destroy(
    world: AwsWorld,
    emulator: Any,
    tmp_path: Path,
    pulumi_tool: Any,
    backend: str,
    provider_host: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("GOGC", "GOMEMLIMIT"):
        monkeypatch.delenv(name, raising=False)  # the operator's would win (`cli_env`)
    settings = make_settings(world, tmp_path / "state")
    data = settings.model_dump()
    data["stack_operations"] = {**data["stack_operations"], "provider_host": provider_host}
    if backend == "s3":
        state = seed_state_backend(world.endpoint, REGION)
        data["pulumi"] = {"state_dir": str(tmp_path / "state"), **state.pulumi_settings()}
    settings = Settings.model_validate(data)
    # Each engine run (`up`, `destroy`) starts a provider host of its own only per operation.
    host = ["provider-host"] if provider_host == "perOperation" else []
    cli = CountingCli(Path(pulumi_tool.binary), tmp_path)
    driver = StackDriver(settings, cli.root, logging.getLogger("stack"))
    assert cli.new_commands() == ["version"]
    driver.recover()  # as the controller does on becoming leader
    listing = ["stack ls"] if backend == "s3" else []
    assert cli.new_commands() == listing
    requests = StateRequests(emulator)
    counted: dict[str, Counter[str]] = {}
    copies: list[str] = []

    def count(operation: str) -> None:
        counted[operation], written = requests.take()
        copies.extend(key for key in written if key.endswith(".bak"))

    prepared = driver.prepare(world.spec("count-a"))
    count("prepare")
    assert cli.new_commands() == ["stack init", "up", *host]
    template = prepared.outputs.launch_template_id
    assert [t["LaunchTemplateId"] for t in world.launch_templates()] == [template]

    ids = world.launch("count-a", template, 2)
    requests.take()  # the launch's own calls are EC2's
    recorded = driver.record_instance_set("count-a", "gen-0", ids)
    count("record")
    assert cli.new_commands() == ["up", *host]
    assert recorded.outputs.instance_ids == tuple(ids)
    assert recorded.outputs.launch_template_id == template
    assert recorded.changes.get("create") == 1

    removed = driver.remove_instance_set("count-a")
    count("remove")
    assert cli.new_commands() == ["up", *host]
    assert removed.outputs.record is None
    assert world.live_instances("count-a") == []
    # Three updates left their history and no checkpoint backups: on a versioned bucket a
    # backup is a second copy of what the bucket keeps, and nothing ever removed them.
    written = (
        state.stack_keys()
        if backend == "s3"
        else [str(p.relative_to(tmp_path / "state")) for p in (tmp_path / "state").rglob("*")]
    )
    assert any("/history/" in key for key in written), written
    assert not [key for key in written if "/backups/" in key or key.endswith("/backups")]

    # A second driver (a restarted controller) reads what the updates left in the backend.
    fresh = StackDriver(settings, cli.root, logging.getLogger("stack"))
    assert fresh.read_outputs("count-a") == removed.outputs
    cli.new_commands()

    requests.take()
    assert driver.destroy("count-a").result == "succeeded"
    count("destroy")
    assert cli.new_commands() == ["destroy", *host]
    if backend == "s3":
        totals = {operation: sum(calls.values()) for operation, calls in counted.items()}
        assert totals == S3_REQUESTS, {op: dict(calls) for op, calls in counted.items()}
        assert copies == []
        # The stack is gone whole: a `destroy --remove` leaves no `.json.bak` behind.
        assert [key for key in state.stack_keys() if "count-a" in key] == []
    assert world.launch_templates() == []
    assert driver.outputs("count-a") is None
    assert cli.new_commands() == []
    # Every operation's CLI ran with the collector tuned for a short process (`cli_env`);
    # only the SDK's version check at the driver's start runs in the controller's own.
    started = [line.split(" ", 1) for line in cli.runtime.read_text().splitlines()]
    assert {runtime for first, runtime in started if first != "version"} == {
        "GOGC=400 GOMEMLIMIT=100MiB"
    }
    driver.close()
    fresh.close()
