"""Where the driver keeps things, and the environment every Pulumi CLI process gets.

Called once by `StackDriver.__init__`. Everything lives under ``pulumi.stateDir``:

    <stateDir>/                    the file:// backend root (when the backend is the default)
    <stateDir>/home/               PULUMI_HOME: the CLI's own settings and plugin cache
    <stateDir>/workspaces/<pool>/  one work dir per stack (Pulumi.yaml, Pulumi.<pool>.yaml)
    <stateDir>/workspaces/_project the project's work dir, for listing stacks
    <stateDir>/operations/<pool>.json  the driver's operation markers (oplog)

A work dir per stack, because the CLI keeps "the current stack" per work dir: two pools
sharing one would race on that file.

The backend (`s3://bucket/prefix?region=…`) and secrets (`awskms://alias/…?region=…`) are
opened by the CLI itself, through gocloud on the AWS SDK for Go v2, with the controller's
own credentials (inherited environment). With ``aws.endpointUrl`` set (the local emulator,
which serves S3 and KMS on its one port) the CLI is pointed there by the SDK's standard
per-service variables, ``AWS_ENDPOINT_URL_S3`` and ``AWS_ENDPOINT_URL_KMS``; the URLs stay
exactly what production uses. The SDK addresses a bucket path-style when the endpoint is an
IP address, so an emulator on 127.0.0.1 needs no ``use_path_style`` in the URL. Without an
override nothing is added and the CLI talks to AWS.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from provisioner.api.constants import FailureKind
from provisioner.api.settings import Settings
from provisioner.pulumi_driver.errors import SECRETS_UNAVAILABLE, StackError

__all__ = [
    "BACKEND_TUNING",
    "GO_RUNTIME_TUNING",
    "LAUNCHER",
    "StatePaths",
    "aws_environment",
    "checkpoint_backups_off",
    "cli_backend_url",
    "cli_environment",
    "launcher_dir",
    "secrets_problem",
]

LAUNCHER: Final = "pulumi-resource-pulumi-python"
PROJECT_WORKSPACE: Final = "_project"

# How the CLI uses the state backend: (variable, value, the older name the CLI reads when
# the variable is unset). Set for every CLI process unless the controller's own environment
# already names the variable or its older name: an operator who wants the CLI's default
# back sets it on the controller, and the CLI inherits it.
# - Checkpoint backups off. After each update the CLI copies the stack's checkpoint to
#   .pulumi/backups/, a new object per operation that nothing ever removes, at the cost of
#   a listing, a read and a write of the state bucket. The bootstrap's bucket is versioned,
#   so every checkpoint an update replaces is kept there already. With backups off the S3
#   fence also answers itself the CLI's copy of the checkpoint to `<stack>.json.bak` before
#   each checkpoint write (``s3_fence``): the same second copy, a request per write. The
#   update history (`pulumi stack history`) is still written.
# - No legacy-layout warning. Each CLI process lists .pulumi/stacks/ to warn about stack
#   files an older CLI left there in the layout before projects; nothing writes that layout
#   here (the backend's meta.yaml says version 1), so the listing is a request per process
#   that finds nothing.
BACKEND_TUNING: Final = (
    (
        "PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS",
        "true",
        "PULUMI_DISABLE_CHECKPOINT_BACKUPS",
    ),
    (
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING",
        "true",
        "PULUMI_SELF_MANAGED_STATE_NO_LEGACY_WARNING",
    ),
)

# How the CLI's Go runtime collects garbage. A CLI process lives a few hundred milliseconds,
# most of its CPU spent starting (package inits that allocate tens of MiB), and at Go's
# default (GOGC=100) the collector runs several times before the first engine event: in
# `bench_stack_ops` a pool's six CLI processes took 1.20-1.26 child CPU-s at the default and
# 0.97-1.02 with these, an `up`'s peak RSS going from 100 to 109 MiB. GOMEMLIMIT caps what the
# laxer collector may hold, so a CLI stays inside STACK_OPERATION_MEMORY (the sizing of the
# stack workers) whatever the stack. The two are read together: an operator who sets either
# on the controller gets neither of ours, and the CLI inherits the controller's.
GO_RUNTIME_TUNING: Final = (("GOGC", "400"), ("GOMEMLIMIT", "100MiB"))


def launcher_dir() -> Path:
    """The package's own dynamic-provider launcher, for a CLI that lacks one beside it."""
    return Path(__file__).parent / "bin"


@dataclass(frozen=True)
class StatePaths:
    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    def workspace(self, stack: str) -> Path:
        return self.root / "workspaces" / stack

    @property
    def project_workspace(self) -> Path:
        return self.workspace(PROJECT_WORKSPACE)

    @property
    def operations(self) -> Path:
        return self.root / "operations"


def cli_backend_url(url: str) -> str:
    """The backend URL as the CLI is given it. For a `file://` backend, the blob library
    under the CLI (gocloud's fileblob) writes a metadata sidecar, `<file>.attrs`, beside
    each state file by truncating and rewriting it in place; a CLI killed in between (the
    fence kills a stepped-down leader's CLI) leaves it empty, and every later read of that
    stack fails with "failed to load checkpoint: EOF". Pulumi reads no blob metadata, so a
    file backend is opened with fileblob's `metadata=skip`: no sidecar is written. Other
    backends, and a URL that sets `metadata` itself, are given as they are."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if parts.scheme != "file" or any(key == "metadata" for key, _ in query):
        return url
    return urlunsplit(parts._replace(query=urlencode([*query, ("metadata", "skip")])))


def cli_environment(settings: Settings, pulumi_root: Path, paths: StatePaths) -> dict[str, str]:
    """The variables added to every CLI process (on top of the controller's own)."""
    pulumi = settings.pulumi
    env = {
        "PULUMI_HOME": str(paths.home),
        "PULUMI_BACKEND_URL": cli_backend_url(pulumi.backend_url),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        # The provider host must run on this interpreter, to import the same `stacks`,
        # boto3 and pulumi as the controller.
        "ATOMIC_GANG_PYTHON": sys.executable,
    }
    env.update(
        (name, value)
        for name, value, older in BACKEND_TUNING
        if name not in os.environ and older not in os.environ
    )
    if not any(name in os.environ for name, _ in GO_RUNTIME_TUNING):
        env.update(GO_RUNTIME_TUNING)
    env.update(aws_environment(settings))
    if (pulumi_root / "bin" / LAUNCHER).is_file():
        # Our launcher sits beside the CLI, where the CLI looks first; nothing on PATH may
        # stand in for it.
        env["PULUMI_IGNORE_AMBIENT_PLUGINS"] = "true"
    else:
        # A CLI without our launcher beside it finds plugins on PATH: put ours first.
        env["PATH"] = os.pathsep.join([str(launcher_dir()), os.environ.get("PATH", "")])
    return env


def checkpoint_backups_off(env: dict[str, str]) -> bool:
    """Whether a CLI started with ``env`` on top of this process's environment writes no
    checkpoint backups, read as the CLI reads it ("1" or "true" in any case, the current
    name before the older one)."""
    seen = {**os.environ, **env}
    name, _, older = BACKEND_TUNING[0]
    value = seen.get(name, seen.get(older, ""))
    return value == "1" or value.lower() == "true"


def aws_environment(settings: Settings) -> dict[str, str]:
    """Where the CLI's S3 backend and KMS secrets are reached (module docstring): the
    controller's region unless the process already names one (a URL's ``?region=`` wins
    over both), and the ``aws.endpointUrl`` override for S3 and KMS when there is one.
    Also what an operator's `pulumi stack ls` needs beside the backend URL."""
    env: dict[str, str] = {}
    if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        env["AWS_REGION"] = settings.defaults.region
    endpoint = settings.aws.endpoint_url
    if endpoint:
        env["AWS_ENDPOINT_URL_S3"] = endpoint
        env["AWS_ENDPOINT_URL_KMS"] = endpoint
    return env


def secrets_problem(settings: Settings) -> StackError | None:
    """Why stack operations could not open the stacks' secrets, or None. Checked before the
    first operation on a stack (listing stacks and reading outputs need no secrets)."""
    if settings.pulumi.secrets_provider != "passphrase":
        return None
    if "PULUMI_CONFIG_PASSPHRASE" in os.environ or "PULUMI_CONFIG_PASSPHRASE_FILE" in os.environ:
        return None
    return StackError(
        SECRETS_UNAVAILABLE,
        "pulumi.secretsProvider is passphrase but neither PULUMI_CONFIG_PASSPHRASE nor "
        "PULUMI_CONFIG_PASSPHRASE_FILE is set; mount the passphrase Secret into the "
        "controller, or set pulumi.secretsProvider to an awskms:// key.",
        kind=FailureKind.CONFIG,
    )
