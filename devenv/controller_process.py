"""The controller as a child process: its settings file, argv and environment, in one place.

Used by the scale bench (``bench/bench_scale.py``), the chaos suite
(``tests/chaos/harness.py``) and the failover test
(``tests/integration/test_controller_failover.py``): each starts `python -m provisioner
controller` against the local environment and must give it the same things. Its settings
come from a file; the environment drops ``ATOMIC_GANG_*`` (the controller refuses variables
it does not know, and the suites' own knobs share the prefix) and ``AWS_PROFILE`` (a
developer's real profile must never reach the emulator, nor the emulator's keys AWS), and
adds the emulator's fixed keys and the Pulumi passphrase.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from devenv.processes import Supervised, free_port
from provisioner.api import constants as c

__all__ = [
    "EMULATOR_KEYS",
    "controller_argv",
    "controller_env",
    "start_controller",
    "write_settings",
]

EMULATOR_KEYS: Final = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}


def write_settings(path: Path, settings: Mapping[str, Any]) -> Path:
    """``settings`` (camelCase or snake_case keys, as `Settings` accepts) as the child's
    ``--config`` file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(settings)))
    return path


def controller_argv(
    *,
    kubeconfig: Path,
    pulumi_root: Path,
    config: Path,
    identity: str,
    log_level: str = "INFO",
    health_port: int | None = None,
    metrics_port: int | None = None,
) -> list[str]:
    """`python -m provisioner controller` with flags for everything that differs per child;
    free ports for health and metrics unless given."""
    return [
        sys.executable,
        "-m",
        "provisioner",
        "controller",
        f"--kubeconfig={kubeconfig}",
        f"--pulumi-root={pulumi_root}",
        f"--config={config}",
        f"--log-level={log_level}",
        f"--identity={identity}",
        f"--health-port={health_port or free_port()}",
        f"--metrics-port={metrics_port or free_port()}",
    ]


def controller_env(
    *, passphrase: str, region: str | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This process's environment, cleaned for a controller against the emulator."""
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(c.ENV_PREFIX) and k != "AWS_PROFILE"
    }
    env = {**inherited, **EMULATOR_KEYS, "PULUMI_CONFIG_PASSPHRASE": passphrase}
    if region:
        env["AWS_DEFAULT_REGION"] = region
    return {**env, **(extra or {})}


def start_controller(
    name: str,
    log_path: Path,
    *,
    kubeconfig: Path,
    pulumi_root: Path,
    config: Path,
    passphrase: str,
    identity: str | None = None,
    region: str | None = None,
    metrics_port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> Supervised:
    """A supervised controller child named ``name``, logging to ``log_path``."""
    return Supervised(
        name,
        controller_argv(
            kubeconfig=kubeconfig,
            pulumi_root=pulumi_root,
            config=config,
            identity=identity or name,
            metrics_port=metrics_port,
        ),
        log_path,
        env=controller_env(passphrase=passphrase, region=region, extra=env),
    )
