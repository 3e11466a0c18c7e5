"""`pulumi` and `stackOperations`: where every pool's stack lives, and the executor that runs
the stack operations."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Literal, Self

from pydantic import Field, field_validator, model_validator

from provisioner.api.fields import NonNegativeDuration
from provisioner.api.settings.section import Section

__all__ = [
    "CONTROLLER_MEMORY",
    "DEFAULT_STATE_DIR",
    "STACK_OPERATIONS_PER_CPU",
    "STACK_OPERATION_MEMORY",
    "PulumiSettings",
    "StackOperations",
    "backend_url",
    "default_stack_workers",
]

DEFAULT_STATE_DIR: Final = Path("/var/lib/atomic-gang/pulumi")


def backend_url(pulumi: Mapping[str, Any]) -> str:
    """The backend the settings name, or file://<stateDir> when they opt into ephemeral
    state. A file backend lives on one replica's disk and dies with it, so it is never
    chosen for the user by an empty value."""
    url = str(pulumi.get("backend_url") or "")
    ephemeral = str(pulumi.get("ephemeral_state")).lower() in ("true", "1", "yes")
    file_url = f"file://{pulumi.get('state_dir') or DEFAULT_STATE_DIR}"
    if url and ephemeral and url != file_url:  # the latter: settings dumped and read again
        raise ValueError(
            f"pulumi.ephemeralState=true and pulumi.backendUrl={url} contradict each other: "
            "unset one"
        )
    if url:
        return url
    if ephemeral:
        return file_url
    raise ValueError(
        "pulumi.backendUrl is required: the durable backend every pool's Pulumi stack lives "
        "in, shared by all replicas, e.g. s3://<bucket>?region=<region> (the bootstrap's "
        "stackBackendUrl output). For a throwaway controller that may lose its stacks with "
        "its disk, set pulumi.ephemeralState=true instead"
    )


class PulumiSettings(Section):
    state_dir: Path = Field(
        default=DEFAULT_STATE_DIR, description="Work and file-backend directory."
    )
    backend_url: str = Field(
        default="",
        description="The durable backend every pool's stack lives in, e.g. s3://<bucket>?region=…; "
        "required unless ephemeralState.",
    )
    ephemeral_state: bool = Field(
        default=False,
        description="Keep the stacks in file://<stateDir> instead (lost with the disk); the "
        "chart's pulumi.ephemeralState.",
    )
    secrets_provider: str = Field(default="passphrase", min_length=1, description="e.g. awskms://…")
    project_name: str = Field(default="", description="Default atomic-gang-<clusterName>.")

    @model_validator(mode="after")
    def _check_project(self) -> Self:
        if self.project_name and not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", self.project_name):
            raise ValueError(
                f"pulumi.projectName {self.project_name!r} may hold only letters, digits, "
                "'-', '_' and '.'"
            )
        return self


# Sizing of the stack-operation executor (see `default_stack_workers`). A Pulumi operation
# spends most of its time waiting on AWS and the state bucket (0.57 CPU-s of a 2.8 s `up`
# in the 200-pool benchmark), so a CPU keeps two busy. Each one in flight is a Pulumi CLI
# with its engine: in `bench_scale` at 200 pools with four at once, the controller's process
# group peaked at 931 MiB beside the controller's own 270 and the shared provider host's
# 95, about 140 MiB an operation. The controller and that host are kept 400 MiB.
STACK_OPERATIONS_PER_CPU: Final = 2
STACK_OPERATION_MEMORY: Final = 150 * 2**20
CONTROLLER_MEMORY: Final = 400 * 2**20


def default_stack_workers(cpus: int, memory: int | None) -> int:
    """Two stack operations per CPU, no more than the memory limit (None: no limit) holds
    beside the controller, and at least one. The memory bound is what keeps a controller
    scheduled on a large node under the chart's 1 GiB limit from being OOM-killed mid-`up`.
    Pure: the composition root reads the host (`provisioner.host`) and passes it in."""
    by_cpu = STACK_OPERATIONS_PER_CPU * cpus
    if memory is None:
        return by_cpu
    by_memory = (memory - CONTROLLER_MEMORY) // STACK_OPERATION_MEMORY
    return max(1, min(by_cpu, by_memory))


class StackOperations(Section):
    """The executor that runs Pulumi operations (prepare, record, remove a set, destroy)
    apart from the reconcile workers, so no pool's events wait behind another pool's `up`.

    Each operation is mostly a Pulumi CLI process and its engine waiting on AWS and the
    state bucket; the default (`default_stack_workers`) keeps two per CPU, bounded by the
    container's memory limit.
    """

    # Unset, the executor is sized to the host the controller starts on: the composition
    # root reads it once and calls `workers_on`. Settings stay data; building them in a
    # test reads nothing of the machine.
    workers: int | None = Field(
        default=None,
        description=(
            "Pulumi operations run at once, one pool each (default: two per CPU, no more "
            "than the container's memory limit holds at 150 MiB each beside 400 MiB for "
            "the controller)."
        ),
    )

    idle_stack_ttl: NonNegativeDuration = Field(
        default=timedelta(days=7),
        description=(
            "How long a released pool keeps its prepared stack (launch template, placement "
            "group) for the next claim before the stack is destroyed; 0 destroys it with "
            "the set."
        ),
    )

    provider_host: Literal["shared", "perOperation"] = Field(
        default="shared",
        description=(
            "shared: one long-lived host process serves the stacks' dynamic providers to "
            "every `up` and `destroy` (the CLI attaches to it); perOperation: the CLI starts "
            "a Python provider host for each, as Pulumi does by default (about twice the CPU)."
        ),
    )

    @field_validator("workers")
    @classmethod
    def _at_least_one(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(
                f"stackOperations.workers must be at least 1 (got {v}): with no worker no "
                "pool's stack is ever prepared, recorded or destroyed; leave it unset for "
                "two per CPU within the memory limit"
            )
        return v

    def workers_on(self, cpus: int, memory_limit: int | None) -> int:
        """The executor's size on a host with `cpus` CPUs and `memory_limit` bytes (None:
        no limit): `workers` when set, else `default_stack_workers`."""
        if self.workers is not None:
            return self.workers
        return default_stack_workers(cpus, memory_limit)
