"""A `file://` backend's blob-metadata sidecars, on the real Pulumi CLI and the emulator.

The CLI's blob library rewrites `<stack>.json.attrs` in place, truncating it first; a cold
test run's controller, killed by its fence on step-down between the two, left one empty,
and every later operation of that stack failed with "failed to load checkpoint: EOF" (the
pool stuck Releasing). The driver now opens a file backend without sidecars, and its
recovery removes one that does not parse."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from provisioner.pulumi_driver import StackDriver, StackError
from tests.integration.test_stack_support import PASSPHRASE, AwsWorld, make_settings, pulumi_root

pytestmark = pytest.mark.integration


def test_no_sidecar_is_written_and_one_left_empty_is_removed_by_recovery(
    emulator: Any, tmp_path: Path, pulumi_tool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
    world = AwsWorld(emulator)
    world.ready()
    state = tmp_path / "state"
    settings = make_settings(world, state)
    driver = StackDriver(settings, pulumi_root(pulumi_tool), logging.getLogger("stack"))
    spec = world.spec("train-a")
    driver.prepare(spec)
    assert sorted(state.rglob("*.attrs")) == [], "the CLI wrote blob-metadata sidecars"

    # What a CLI killed between truncating and rewriting the sidecar leaves.
    checkpoint = state / ".pulumi" / "stacks" / settings.pulumi.project_name / "train-a.json"
    assert checkpoint.is_file()
    sidecar = checkpoint.with_name(f"{checkpoint.name}.attrs")
    sidecar.write_bytes(b"")
    with pytest.raises(StackError, match="EOF"):
        driver.prepare(spec)

    driver.recover()
    assert not sidecar.exists()
    assert driver.prepare(spec).operation.result == "succeeded"
    driver.destroy("train-a")
    driver.close()
