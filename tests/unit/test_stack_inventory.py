"""The stacks read straight from the state backend, without the Pulumi CLI (`inventory`).

A stateful fake bucket holds documents in the CLI's project-scoped layout; the file backend
is a temporary directory. Each test checks what `atomic-gang pools` shows from them.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from provisioner.api.settings import Settings
from provisioner.pulumi_driver.inventory import (
    S3StateFiles,
    StackInventory,
    inventory_for,
    reads_without_cli,
)
from provisioner.pulumi_driver.oplog import OperationLog
from tests.unit.test_stacks_spec_outputs import IDS, root_outputs

pytestmark = pytest.mark.unit

PROJECT = "atomic-gang-demo"
STACKS = f"state/.pulumi/stacks/{PROJECT}/"
ROLE = "arn:aws:iam::123456789012:role/nodes"
LOCKS = f"state/.pulumi/locks/organization/{PROJECT}/"


class FakeBucket:
    """The `ObjectStore` calls the inventory makes, over a dict; counts reads."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = dict(objects)
        self.reads: list[str] = []

    def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    def read(self, key: str) -> bytes | None:
        self.reads.append(key)
        return self.objects.get(key)

    def delete(self, key: str) -> None:
        raise AssertionError(f"the inventory deleted {key}")

    def reset(self) -> None:
        self.reads.clear()


def _document(*, pending: int = 0, gang: bool = True) -> bytes:
    resources: list[dict[str, Any]] = [{"type": "pulumi:pulumi:Stack", "outputs": root_outputs()}]
    if gang:
        resources.append(
            {
                "type": "pulumi-python:dynamic/atomicgang:InstanceSet",
                "outputs": {"group": "gen-1", "instance_ids": list(IDS)},
            }
        )
    latest = {"resources": resources, "pending_operations": [{"type": "creating"}] * pending}
    return json.dumps({"version": 3, "checkpoint": {"latest": latest}}).encode()


def _settings(backend: str, state_dir: Path | None = None) -> Settings:
    pulumi: dict[str, Any] = {"backendUrl": backend, "projectName": PROJECT}
    if state_dir is not None:
        pulumi["stateDir"] = str(state_dir)
    return Settings.model_validate(
        {
            "clusterName": "demo",
            "defaults": {
                "region": "us-east-1",
                "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes",
            },
            "pulumi": pulumi,
        }
    )


def test_a_bucket_lists_each_stack_with_its_state_and_gang() -> None:
    bucket = FakeBucket(
        {
            f"{STACKS}ready.json": _document(),
            f"{STACKS}zipped.json.gz": gzip.compress(_document(gang=False)),
            f"{STACKS}busy.json": _document(pending=2),
            f"{STACKS}busy.json.bak": b"a backup, not a stack",
            f"{STACKS}broken.json": b"{not json",
            f"{LOCKS}busy/1234.json": b"{}",
            "state/.pulumi/stacks/other-project/theirs.json": _document(),
        }
    )
    inventory = StackInventory(S3StateFiles(bucket, "/state/", PROJECT), _settings("s3://b"), None)

    stacks = {s.name: s for s in inventory.list_stacks()}

    assert sorted(stacks) == ["broken", "busy", "ready", "zipped"]
    assert (stacks["ready"].resource_count, stacks["ready"].locked) == (2, False)
    assert stacks["ready"].pending_operations == 0
    assert (stacks["busy"].locked, stacks["busy"].pending_operations) == (True, 2)
    assert stacks["zipped"].resource_count == 1
    # A document that does not parse is unknown, not empty.
    assert (stacks["broken"].resource_count, stacks["broken"].pending_operations) == (None, None)
    ready = inventory.outputs("ready")
    assert ready is not None and ready.instance_ids == tuple(sorted(IDS))
    zipped = inventory.outputs("zipped")
    assert zipped is not None and zipped.instance_ids == ()
    assert inventory.outputs("broken") is None and inventory.outputs("gone") is None
    # One read per stack document, however many questions are asked of it.
    names = ("broken.json", "busy.json", "ready.json", "zipped.json.gz")
    assert sorted(bucket.reads) == [f"{STACKS}{n}" for n in names]


def test_each_listing_reads_the_bucket_again_so_a_destroyed_stack_goes() -> None:
    # `drain` lists until the last stack is gone, on one inventory.
    bucket = FakeBucket({f"{STACKS}a.json": _document(), f"{STACKS}b.json": _document()})
    inventory = StackInventory(S3StateFiles(bucket, "/state/", PROJECT), _settings("s3://b"), None)
    assert [s.name for s in inventory.list_stacks()] == ["a", "b"]
    del bucket.objects[f"{STACKS}a.json"]
    assert [s.name for s in inventory.list_stacks()] == ["b"]
    assert inventory.outputs("a") is None


def test_an_empty_bucket_has_no_stacks() -> None:
    inventory = StackInventory(S3StateFiles(FakeBucket({}), "", PROJECT), _settings("s3://b"), None)
    assert inventory.list_stacks() == []


def test_a_file_backend_on_this_machine_is_read_with_the_controllers_records(
    tmp_path: Path,
) -> None:
    stacks = tmp_path / "backend" / ".pulumi" / "stacks" / PROJECT
    stacks.mkdir(parents=True)
    (stacks / "p1.json").write_bytes(_document())
    log = OperationLog(tmp_path / "state" / "operations")  # the controller's, as it writes
    log.finish(log.begin("p1", "prepare"), "succeeded")
    settings = _settings(f"file://{tmp_path / 'backend'}", tmp_path / "state")

    inventory = inventory_for(settings, local_state=True)

    assert isinstance(inventory, StackInventory)
    assert [s.name for s in inventory.list_stacks()] == ["p1"]
    last = inventory.last_operation("p1")
    assert last is not None and last.operation == "prepare"
    # From the cluster's ConfigMap, the state directory is the pod's: its records are not read.
    remote = inventory_for(settings, local_state=False)
    assert isinstance(remote, StackInventory) and remote.last_operation("p1") is None


def test_backends_it_cannot_read_say_why(tmp_path: Path) -> None:
    gone = inventory_for(_settings(f"file://{tmp_path / 'pod-disk'}"), local_state=False)
    assert isinstance(gone, str) and "not on this machine" in gone
    assert not (tmp_path / "pod-disk").exists()  # looking created nothing
    cloud = _settings("https://api.pulumi.com")
    assert not reads_without_cli(cloud)
    answer = inventory_for(cloud, local_state=False)
    assert isinstance(answer, str) and "--pulumi-root" in answer
    assert reads_without_cli(_settings("s3://bucket/prefix?region=us-east-1"))


def test_the_operator_command_names_the_backend_and_project() -> None:
    inventory = StackInventory(S3StateFiles(FakeBucket({}), "", PROJECT), _settings("s3://b"), None)
    assert inventory.operator_command().endswith(f"pulumi stack ls --project {PROJECT}")
    assert "PULUMI_BACKEND_URL=s3://b" in inventory.operator_command()
