"""`bench_emulator_reads` runs each read both ways and leaves the emulator's patches in place."""

from __future__ import annotations

import moto.ec2.utils
import pytest
from moto.ec2.models import EC2Backend

import devenv.emulator.instances
from bench import bench_emulator_reads
from devenv.emulator import instance_reads
from devenv.emulator.hot_paths import MOTO_TAG_FILTER_MATCHES, motos_own_reads, tag_filter_matches
from devenv.emulator.instance_reads import BACKEND_READS

pytestmark = pytest.mark.unit


def test_it_prints_each_read_both_ways_and_puts_the_patches_back(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    assert bench_emulator_reads.main(["--pools", "3", "--calls", "1"]) == 0
    printed = capsys.readouterr().out
    rows = printed.split("\n\n")[0].splitlines()[3:]  # the table, before the comparison
    compared = printed.split("\n\n")[1]  # then its figures beside the recorded ones
    assert compared.startswith(
        ("Against the baseline recorded", "No baseline recorded for bench_emulator_reads")
    )
    assert [row.split("  ")[0] for row in rows] == [
        "one pool's live instances",
        "every instance, every state (6, all pages)",
        "a set by instance-id filter",
        "a set by ids",
        "DescribeInstanceAttribute",
    ]
    assert moto.ec2.utils.tag_filter_matches is tag_filter_matches
    assert set(BACKEND_READS) == {
        "get_instance",
        "get_instance_by_id",
        "get_multi_instances_by_id",
        "all_reservations",
    }
    for name in BACKEND_READS:
        assert getattr(EC2Backend, name) is getattr(instance_reads, name)
    assert (
        devenv.emulator.instances.reservations_by_instance_ids
        is instance_reads.reservations_by_instance_ids
    )
    with motos_own_reads():
        assert moto.ec2.utils.tag_filter_matches is MOTO_TAG_FILTER_MATCHES
        assert EC2Backend.all_reservations is not instance_reads.all_reservations
