"""A `file://` backend and its blob-metadata sidecars (`<file>.attrs`): the CLI is told not
to write them, and one a killed CLI left unreadable is removed by the driver's recovery.

gocloud's fileblob (under the Pulumi CLI) rewrites a sidecar in place, truncating it first;
a CLI killed in between left `pool-locked.json.attrs` empty in a cold test run, and every
later read of that stack failed with "failed to load checkpoint: EOF"."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.pulumi_driver.cli_env import cli_backend_url
from provisioner.pulumi_driver.statefile import FileBackend

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("given", "told"),
    [
        ("file:///var/lib/state", "file:///var/lib/state?metadata=skip"),
        ("file://~/state", "file://~/state?metadata=skip"),
        ("file:///s?no_tmp_dir=true", "file:///s?no_tmp_dir=true&metadata=skip"),
        ("file:///s?metadata=skip", "file:///s?metadata=skip"),
        ("s3://bucket?region=us-east-1", "s3://bucket?region=us-east-1"),
    ],
)
def test_a_file_backend_is_opened_without_metadata_sidecars(given: str, told: str) -> None:
    assert cli_backend_url(given) == told


def test_recovery_removes_only_the_sidecars_that_do_not_parse(tmp_path: Path) -> None:
    stacks = tmp_path / ".pulumi" / "stacks" / "proj"
    stacks.mkdir(parents=True)
    (stacks / "pool-a.json").write_text('{"version": 3, "checkpoint": {}}')
    empty = stacks / "pool-a.json.attrs"
    empty.write_bytes(b"")
    cut = stacks / "pool-b.json.attrs"
    cut.write_text('{"user.content_type": "applic')
    good = tmp_path / ".pulumi" / "meta.yaml.attrs"
    good.write_text('{"user.content_type": "application/octet-stream"}')

    removed = FileBackend(tmp_path, "proj").remove_unreadable_sidecars()

    assert removed == sorted([empty, cut])
    assert not empty.exists() and not cut.exists() and good.exists()
    assert (stacks / "pool-a.json").exists(), "the state itself is never touched"
    assert FileBackend(tmp_path, "proj").remove_unreadable_sidecars() == []
