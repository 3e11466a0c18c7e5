"""The lock files of a stack that was never created, removed from the backend by the leader:
both backends, a holder that is not stale kept, an S3 failure keeping its kind, and where
an ``s3://`` backend is reached."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.api.constants import FailureKind
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.cloud.statebucket import StateBucket
from provisioner.pulumi_driver.errors import BACKEND_REFUSED, BACKEND_UNAVAILABLE, StackError
from provisioner.pulumi_driver.fence import FencingToken
from provisioner.pulumi_driver.locks import BreakRule
from provisioner.pulumi_driver.orphan_locks import (
    FileLockFiles,
    LockFiles,
    S3LockFiles,
    lock_files_for,
    remove_stale,
    s3_location,
)
from provisioner.pulumi_driver.statefile import FileBackend
from tests.support.backends import backend_settings, state_bucket

pytestmark = pytest.mark.unit

PROJECT = "atomic-gang-c1"
BUCKET = "state"
LOCK = {"pid": 4242, "username": "root", "hostname": "vm", "timestamp": "2026-11-29T15:33:49Z"}


@pytest.fixture
def s3() -> Iterator[Any]:
    with state_bucket(BUCKET) as client:
        yield client


class World:
    """One backend's lock files, and a way to write and see them as the CLI does."""

    def __init__(self, locks: LockFiles, put: Any, keys: Any) -> None:
        self.locks, self.put, self.keys = locks, put, keys


def file_world(tmp_path: Path) -> World:
    backend = FileBackend(tmp_path, PROJECT)

    def put(stack: str, name: str, body: bytes) -> None:
        backend.lock_dir(stack).mkdir(parents=True, exist_ok=True)
        (backend.lock_dir(stack) / name).write_bytes(body)

    def keys() -> list[str]:
        found = (tmp_path / ".pulumi").rglob("*.json") if (tmp_path / ".pulumi").is_dir() else []
        return sorted(str(p.relative_to(tmp_path)) for p in found)

    return World(FileLockFiles(backend), put, keys)


def s3_world(client: Any, prefix: str) -> World:
    root = f"{prefix}/" if prefix else ""

    def put(stack: str, name: str, body: bytes) -> None:
        key = f"{root}.pulumi/locks/organization/{PROJECT}/{stack}/{name}"
        client.put_object(Bucket=BUCKET, Key=key, Body=body)

    def keys() -> list[str]:
        found = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
        return sorted(o["Key"].removeprefix(root) for o in found)

    return World(S3LockFiles(StateBucket(client, BUCKET), prefix, PROJECT), put, keys)


@pytest.fixture(params=["file", "s3", "s3-prefixed"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    if request.param == "file":
        return file_world(tmp_path)
    client = request.getfixturevalue("s3")
    return s3_world(client, "c/prod" if request.param == "s3-prefixed" else "")


def leading_rule() -> BreakRule:
    """A leader whose predecessor's fence has closed (``locks.is_stale``)."""
    return BreakRule(FencingToken("me-1", 1, float("inf"), 0.0), now=1.0, host="this-host")


def lock_key(stack: str, name: str) -> str:
    return f".pulumi/locks/organization/{PROJECT}/{stack}/{name}"


def test_the_leader_removes_every_stale_lock_of_the_stack_and_nothing_else(world: World) -> None:
    world.put("pool-a", "0be5.json", json.dumps(LOCK).encode())
    world.put("pool-a", "garbled.json", b"{not json")  # a holder of unknown age is stale too
    world.put("pool-b", "77aa.json", json.dumps(LOCK).encode())  # another stack's

    found = world.locks.list("pool-a")
    assert [lock.holder.pid for lock in found] == [4242, 0]
    assert found[0].holder.created_at is not None

    removal = remove_stale(world.locks, "pool-a", leading_rule)

    assert [h.pid for h in removal.removed] == [4242, 0] and removal.kept == ()
    assert world.keys() == [lock_key("pool-b", "77aa.json")]
    assert world.locks.list("pool-a") == []
    # Nothing left: a second pass removes nothing and does not fail.
    assert remove_stale(world.locks, "pool-a", leading_rule).removed == ()


def test_a_replica_that_does_not_lead_removes_no_lock(world: World) -> None:
    # Not leading, every holder may be the live leader (locks.is_stale): its lock stays.
    world.put("pool-a", "0be5.json", json.dumps(LOCK).encode())

    removal = remove_stale(world.locks, "pool-a", BreakRule.not_leading)

    assert removal.removed == () and [h.pid for h in removal.kept] == [4242]
    assert world.keys() == [lock_key("pool-a", "0be5.json")]


def test_a_stack_without_locks_has_nothing_to_remove(world: World) -> None:
    assert world.locks.list("never-made") == []
    assert remove_stale(world.locks, "never-made", leading_rule).removed == ()


def test_only_json_objects_in_the_lock_prefix_are_locks(s3: Any) -> None:
    world = s3_world(s3, "")
    world.put("pool-a", "0be5.json", json.dumps(LOCK).encode())
    world.put("pool-a", "note.txt", b"x")
    world.put("pool-ab", "0be5.json", json.dumps(LOCK).encode())  # a stack sharing the name's start

    remove_stale(world.locks, "pool-a", leading_rule)

    assert world.keys() == [lock_key("pool-a", "note.txt"), lock_key("pool-ab", "0be5.json")]


class FailingStore:
    def __init__(self, kind: ErrorKind) -> None:
        self.kind = kind

    def keys(self, prefix: str) -> list[str]:
        return [f"{prefix}0be5.json"]

    def read(self, key: str) -> bytes | None:
        return json.dumps(LOCK).encode()

    def delete(self, key: str) -> None:
        raise CloudError(self.kind, "Code", "Reason", f"Deleting {key} failed.")


@pytest.mark.parametrize(
    ("cloud", "reason", "kind"),
    [
        # a 5xx, throttling: wait and retry
        (ErrorKind.RETRYABLE, BACKEND_UNAVAILABLE, FailureKind.RETRYABLE),
        (ErrorKind.UNKNOWN, BACKEND_UNAVAILABLE, FailureKind.RETRYABLE),
        # AccessDenied: the policy needs a fix, as the CLI's own refusals read
        (ErrorKind.CONFIG, BACKEND_REFUSED, FailureKind.CONFIG),
    ],
)
def test_an_s3_failure_keeps_its_kind(cloud: ErrorKind, reason: str, kind: FailureKind) -> None:
    locks = S3LockFiles(FailingStore(cloud), "", PROJECT)

    with pytest.raises(StackError) as failed:
        remove_stale(locks, "pool-a", leading_rule)

    assert (failed.value.reason, failed.value.kind) == (reason, kind)
    assert "pool-a" in failed.value.message and "Deleting" in failed.value.message


def test_a_lock_gone_between_listing_and_reading_is_skipped(s3: Any) -> None:
    class Vanishing(StateBucket):
        def read(self, key: str) -> bytes | None:
            s3.delete_object(Bucket=BUCKET, Key=key)
            return super().read(key)

    world = s3_world(s3, "")
    world.put("pool-a", "0be5.json", json.dumps(LOCK).encode())
    locks = S3LockFiles(Vanishing(s3, BUCKET), "", PROJECT)

    assert locks.list("pool-a") == []


@pytest.mark.parametrize(
    ("url", "env", "endpoint", "where"),
    [
        # The URL's region wins over the process's, which wins over the controller's.
        ("s3://b?region=us-west-2", {"AWS_REGION": "ap-south-1"}, None, ("b", "", "us-west-2")),
        ("s3://b/c/prod/", {"AWS_REGION": "ap-south-1"}, None, ("b", "c/prod", "ap-south-1")),
        ("s3://b", {"AWS_DEFAULT_REGION": "ca-central-1"}, None, ("b", "", "ca-central-1")),
        ("s3://b", {}, "http://127.0.0.1:5000", ("b", "", "eu-west-1")),
    ],
)
def test_an_s3_backend_is_reached_where_the_cli_reaches_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    env: dict[str, str],
    endpoint: str | None,
    where: tuple[str, str, str],
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    found = s3_location(backend_settings(tmp_path, url, endpoint))

    assert found is not None
    assert (found.bucket, found.prefix, found.region) == where
    assert found.endpoint_url == endpoint


def test_lock_files_follow_the_backend(tmp_path: Path) -> None:
    file_settings = backend_settings(tmp_path, f"file://{tmp_path}")
    assert s3_location(file_settings) is None
    backend = FileBackend(tmp_path, PROJECT)
    assert isinstance(lock_files_for(file_settings, backend), FileLockFiles)
    s3_settings = backend_settings(tmp_path, "s3://b?region=us-east-1", "http://127.0.0.1:5000")
    assert isinstance(lock_files_for(s3_settings, None), S3LockFiles)
    assert lock_files_for(backend_settings(tmp_path, "https://api.pulumi.com"), None) is None
