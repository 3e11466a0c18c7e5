"""Settings are data: building them reads nothing of the machine, and every duration is one
type (a `timedelta`) whichever way the chart spells it."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from provisioner.api.settings import Settings, StackOperations
from provisioner.api.settings_sources import build_arg_parser
from provisioner.host import HostResources, read_host

pytestmark = pytest.mark.unit

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
BASE: dict[str, Any] = {
    "clusterName": "demo",
    "defaults": {"region": "us-east-1", "nodeRoleArn": ROLE},
    "pulumi": {"backendUrl": "s3://atomic-gang-state?region=us-east-1"},
}
SECONDS_KEYS = {
    "join_deadline_seconds": "join_deadline",
    "capacity_block_release_seconds": "capacity_block_release",
    "reap_interval_seconds": "reap_interval",
    "instance_index_refresh_seconds": "instance_index_refresh",
}


@pytest.fixture
def no_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that fails every read of its CPUs or cgroup files."""

    def refuse(*_args: object, **_kw: object) -> Any:
        raise AssertionError("the host was read")

    monkeypatch.setattr(os, "sched_getaffinity", refuse, raising=False)
    monkeypatch.setattr(os, "cpu_count", refuse)
    monkeypatch.setattr(Path, "read_text", refuse)


@pytest.mark.usefixtures("no_host")
def test_building_settings_reads_nothing_of_the_host() -> None:
    settings = Settings.model_validate(BASE)
    assert settings.stack_operations.workers is None
    assert StackOperations().workers is None


@pytest.mark.usefixtures("no_host")
def test_the_host_check_can_fail() -> None:
    # What the composition root calls, fed the same machine: the fixture catches a read.
    with pytest.raises(AssertionError, match="the host was read"):
        read_host()


@pytest.mark.parametrize(
    ("workers", "host", "expected"),
    [
        (None, HostResources(cpus=2, memory_limit=None), 4),
        (None, HostResources(cpus=16, memory_limit=2**30), 4),
        (3, HostResources(cpus=16, memory_limit=None), 3),  # set: the host is not asked
    ],
)
def test_the_executor_is_sized_by_the_setting_or_else_the_host(
    workers: int | None, host: HostResources, expected: int
) -> None:
    operations = StackOperations(workers=workers)
    assert operations.workers_on(host.cpus, host.memory_limit) == expected


def test_durations_in_seconds_are_timedeltas_read_and_written_under_their_keys() -> None:
    settings = Settings.model_validate(
        {**BASE, "joinDeadlineSeconds": 300, "capacityBlockReleaseSeconds": "1900"}
    )
    assert settings.join_deadline == timedelta(seconds=300)
    assert settings.capacity_block_release == timedelta(seconds=1900)
    assert settings.reap_interval == timedelta(seconds=120)
    assert settings.instance_index_refresh == timedelta(seconds=10)
    for mode in ("python", "json"):
        dumped = settings.model_dump(mode=mode)
        assert {key: dumped[key] for key in SECONDS_KEYS} == {
            "join_deadline_seconds": 300,
            "capacity_block_release_seconds": 1900,
            "reap_interval_seconds": 120,
            "instance_index_refresh_seconds": 10,
        }
        assert not set(SECONDS_KEYS.values()) & set(dumped)
        assert Settings.model_validate(dumped) == settings


def test_a_duration_in_seconds_keeps_its_flag_and_its_bound() -> None:
    help_text = build_arg_parser().format_help()
    for key in SECONDS_KEYS:
        assert "--" + key.replace("_", "-") in help_text
    with pytest.raises(ValidationError) as err:
        Settings.model_validate({**BASE, "capacityBlockReleaseSeconds": 600})
    assert "capacity_block_release_seconds" in str(err.value)
    assert "greater than or equal to 1800" in str(err.value)
    with pytest.raises(ValidationError, match="whole number of seconds"):
        Settings.model_validate({**BASE, "join_deadline_seconds": timedelta(seconds=1.5)})
