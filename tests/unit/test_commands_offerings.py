"""`atomic-gang offerings` against the emulator in-process: the offerings EC2 lists for the
gang's shape, the one the controller's rule would buy marked, nothing bought; none fitting
names the earliest offering and its fee; bad flags are usage errors naming the fix."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from provisioner.commands import cli
from tests.unit.test_cloud_helpers import REGION, World, emulated_aws

pytestmark = pytest.mark.unit

P5 = "p5.48xlarge"
ZONE = f"{REGION}a"
ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"


@pytest.fixture
def world() -> Iterator[World]:
    # The command reads the system clock; so does the emulator's calendar here.
    with emulated_aws() as w:
        yield w


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "clusterName": "demo",
                "defaults": {"region": REGION, "nodeRoleArn": ROLE},
                "pulumi": {"ephemeralState": True},
            }
        )
    )
    return path


def _scene(world: World) -> None:
    """The issue's offerings for 2 x p5 for a day: +40 s over the cap, +5 min under it,
    +10 min under it and cheaper (fees per instance; the block costs twice)."""
    now = time.time()
    for start_in, fee in ((40, "900"), (300, "700"), (600, "500")):
        world.emu.add_capacity_block_offering(P5, ZONE, 2, now + start_in, 24, fee)


def _run(capsys: pytest.CaptureFixture[str], config: Path, *flags: str) -> tuple[int, str]:
    argv = ["offerings", "--instance-type", P5, "--count", "2", "--duration", "24h", *flags]
    code = cli.main([*argv, "--config", str(config)])
    return code, capsys.readouterr().out


def test_the_earliest_offering_under_the_cap_is_marked_and_nothing_is_bought(
    world: World, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _scene(world)
    code, out = _run(capsys, config, "--max-fee", "1600", "-o", "json")
    assert code == 0
    shown = json.loads(out)
    fees = [o["upfrontFee"] for o in shown["offerings"]]
    assert fees == ["1800.00", "1400.00", "1000.00"]
    assert shown["chosen"] == shown["offerings"][1]["offeringId"]
    assert shown["earliest"] == shown["offerings"][0]["offeringId"]
    assert world.emu.capacity_reservation_views() == [], "listing buys nothing"
    assert [e["instances"] for e in world.emu.capacity_block_calendar()] == [2, 2, 2]

    code, table = _run(capsys, config, "--max-fee", "1600")
    assert code == 0
    marked = [line for line in table.splitlines() if line.startswith("*  cb-")]
    assert len(marked) == 1 and shown["chosen"] in marked[0] and "1400.00 USD" in marked[0]
    assert f"would be bought: {shown['chosen']}" in table


def test_nothing_under_the_cap_by_the_latest_start_names_the_earliest_and_its_fee(
    world: World, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _scene(world)
    code, out = _run(capsys, config, "--max-fee", "1600", "--latest-start", "2m", "-o", "yaml")
    assert code == 0
    shown = yaml.safe_load(out)
    assert shown["chosen"] is None
    assert shown["earliest"] == shown["offerings"][0]["offeringId"]
    assert shown["earliest"] in shown["why"] and "1800.00 USD" in shown["why"]
    code, table = _run(capsys, config, "--max-fee", "1600", "--latest-start", "2m")
    assert "nothing would be bought" in table and not any(
        line.startswith("*") for line in table.splitlines()
    )


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--duration", "25h"), "whole days from 24h to 336h"),
        (("--duration", "360h"), "whole weeks from 504h"),
        (("--count", "65"), "outside 1-64"),
        (("--max-fee", "cheap"), "is not an amount"),
        (("--latest-start", "tomorrow"), "neither a duration from now"),
    ],
)
def test_bad_flags_are_usage_errors_naming_the_fix(
    config: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], says: str
) -> None:
    argv = ["offerings", "--instance-type", P5, "--count", "2", "--duration", "24h"]
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, *flags, "--config", str(config)])
    assert exited.value.code == 2
    assert says in capsys.readouterr().err
