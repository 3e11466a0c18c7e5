"""The emulator's cost patches (P11-P13, P15, P16) give moto's own answers, and skip what they
say.

Each listing is asked of the patched backend and of moto's original on the same bucket (a
versioned one, with overwritten keys, a delete marker and names that share a prefix), the
way the Pulumi CLI asks: under one stack's path, with and without a delimiter, paged.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import boto3
import moto.core.responses
import moto.ec2.utils
import pytest
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.core.serialize import AttributePicker
from moto.core.utils import method_names_from_class
from moto.ec2.models import EC2Backend, ec2_backends
from moto.ec2.responses import EC2Response
from moto.s3.models import S3Backend, s3_backends
from moto.s3.utils import _VersionedKeyStore

import devenv.emulator.instances
from devenv.emulator.hot_paths import (
    MOTO_TAG_FILTER_MATCHES,
    method_names,
    motos_own_reads,
    pick_attribute,
    tag_filter_matches,
    value_patterns,
)
from devenv.emulator.instance_reads import reservations_by_instance_ids
from devenv.emulator.patching import original
from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
BUCKET = "state"
KEYS = (
    ".pulumi/meta.yaml",
    ".pulumi/stacks/gang/pool-a.json",
    ".pulumi/stacks/gang/pool-a.json.bak",
    ".pulumi/stacks/gang/pool-ab.json",
    ".pulumi/stacks/gang/pool-b.json",
    ".pulumi/backups/gang/pool-a/pool-a.1.json",
    ".pulumi/backups/gang/pool-a/pool-a.2.json",
    ".pulumi/history/gang/pool-a/pool-a-1.history.json",
    ".pulumi/locks/gang/pool-a/lock-1.json",
)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with emulator_in_process(monkeypatch):
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        client.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        for key in KEYS:
            client.put_object(Bucket=BUCKET, Key=key, Body=b"v1")
        client.put_object(Bucket=BUCKET, Key=KEYS[1], Body=b"v2")  # a second version
        client.delete_object(Bucket=BUCKET, Key=KEYS[6])  # a delete marker on top
        yield client


def backend_and_bucket() -> tuple[S3Backend, Any]:
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    return backend, backend.get_bucket(BUCKET)


def names(listing: tuple[Any, ...]) -> tuple[Any, ...]:
    keys, folders, truncated, marker = listing
    return ([(k.name, k.value) for k in keys], list(folders), truncated, marker)


@pytest.mark.parametrize(
    ("prefix", "delimiter", "max_keys"),
    [
        (".pulumi/stacks/gang/pool-a.json", "/", None),  # how the CLI finds a checkpoint
        (".pulumi/stacks/gang/pool-a", None, None),  # pool-ab shares the prefix
        (".pulumi/backups/gang/pool-a/", "/", None),  # one backup behind a delete marker
        (".pulumi/", "/", None),  # folders only
        (".pulumi/", None, 3),  # paged
        (".pulumi/nothing/", "/", None),
        (None, "/", None),  # no prefix: moto's own path
    ],
)
def test_a_listing_is_the_one_moto_gives(
    s3: Any, prefix: str | None, delimiter: str | None, max_keys: int | None
) -> None:
    backend, bucket = backend_and_bucket()
    moto_listing = original(S3Backend, "list_objects")
    expected = names(moto_listing(backend, bucket, prefix, delimiter, None, max_keys))
    assert names(backend.list_objects(bucket, prefix, delimiter, None, max_keys)) == expected


def test_a_paged_v2_listing_through_the_api_is_the_one_moto_gives(s3: Any) -> None:
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=".pulumi/", PaginationConfig={"PageSize": 2}
    )
    listed = [o["Key"] for page in pages for o in page.get("Contents", [])]
    deleted = KEYS[6]
    assert listed == sorted(k for k in KEYS if k.startswith(".pulumi/") and k != deleted)


def test_a_listing_under_a_prefix_does_not_walk_the_whole_bucket(s3: Any) -> None:
    """moto's own listing walks every key of the bucket through its versioned store."""
    _backend, bucket = backend_and_bucket()

    class Unwalkable(_VersionedKeyStore):  # type: ignore[misc]
        def _iteritems(self) -> Iterator[tuple[str, Any]]:
            raise AssertionError("the listing walked every key of the bucket")

        items = iteritems = _iteritems

    store = Unwalkable()
    for name in dict.keys(bucket.keys):
        store.setlist(name, bucket.keys.getlist(name))
    bucket.keys = store
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=".pulumi/stacks/gang/pool-a.json")
    assert [o["Key"] for o in listed["Contents"]] == list(KEYS[1:3])


def test_a_response_classes_handlers_are_listed_once_with_every_patched_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with emulator_in_process(monkeypatch):
        assert moto.core.responses.method_names_from_class is method_names
        listed = method_names(EC2Response)
        assert listed == frozenset(method_names_from_class(EC2Response))
        assert "describe_capacity_reservations" in listed, "added by install()"
        assert method_names(EC2Response) is listed


def raw_describe(ec2: Any, **kwargs: Any) -> bytes:
    """The DescribeInstances answer as the emulator wrote it, its request id left out."""
    bodies: list[bytes] = []

    def keep(http_response: Any, **_: Any) -> None:
        bodies.append(http_response.content)

    ec2.meta.events.register("after-call.ec2.DescribeInstances", keep)
    try:
        ec2.describe_instances(**kwargs)
    finally:
        ec2.meta.events.unregister("after-call.ec2.DescribeInstances", keep)
    return re.sub(rb"<requestId>[^<]*</requestId>", b"", bodies[0])


def test_an_instance_listing_is_written_as_moto_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Instances of two pools with tags, one without, ENIs and the emulator's own fields:
    the answer the patched picker writes is byte for byte the one moto's writes."""
    with emulator_in_process(monkeypatch):
        ec2 = boto3.client("ec2", region_name=REGION)
        image = ec2.describe_images()["Images"][0]["ImageId"]
        for pool in ("pool-a", "pool-b"):
            ec2.run_instances(
                ImageId=image,
                MinCount=3,
                MaxCount=3,
                InstanceType="m5.large",
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": [{"Key": "pool", "Value": pool}]}
                ],
            )
        # Untagged: moto's response transformer leaves out an instance's empty tag set.
        ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.large")
        patched = raw_describe(ec2)
        assert patched.count(b"<instanceId>") == 7
        assert patched.count(b"<tagSet>") == 6, "the transformer ran"

        monkeypatch.setattr(AttributePicker, "__call__", original(AttributePicker, "__call__"))
        assert raw_describe(ec2) == patched
        filtered = {"Filters": [{"Name": "tag:pool", "Values": ["pool-b"]}]}
        moto_filtered = raw_describe(ec2, **filtered)
        monkeypatch.setattr(AttributePicker, "__call__", pick_attribute)
        assert raw_describe(ec2, **filtered) == moto_filtered


TAG_FILTERS = (
    ("tag:pool", ["pool-a"]),  # a literal: compared as a string
    ("tag:pool", ["pool-a", "pool-b"]),
    ("tag:pool", ["pool-*"]),  # fnmatch's wildcards
    ("tag:pool", ["pool-?"]),
    ("tag:pool", ["pool-[ab]"]),
    ("tag:pool", ["pool-\\*"]),  # moto's escape: a literal `*`
    ("tag:pool", ["pool.a"]),  # a regex special in a literal matches itself only
    ("tag:pool", ["POOL-A"]),
    ("tag:pool", [""]),
    ("tag:missing", ["x"]),
    ("tag:empty", [""]),
    ("tag-key", ["pool"]),
    ("tag-key", ["po*"]),
    ("tag-value", ["pool-a"]),
    ("tag-value", ["*-b"]),
)
POOL_TAGS = ("pool-a", "pool-b", "pool-*", "pool.a", "pool-ab")


@pytest.fixture
def tagged(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Instances tagged with every pool name above (one with an empty tag), one untagged."""
    with emulator_in_process(monkeypatch):
        ec2 = boto3.client("ec2", region_name=REGION)
        image = ec2.describe_images()["Images"][0]["ImageId"]
        for pool in POOL_TAGS:
            tags = [{"Key": "pool", "Value": pool}, {"Key": "empty", "Value": ""}]
            ec2.run_instances(
                ImageId=image,
                MinCount=1,
                MaxCount=1,
                InstanceType="m5.large",
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            )
        ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.large")
        yield ec2


def test_a_tag_filter_matches_what_motos_matches(tagged: Any) -> None:
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
    instances = list(backend.all_instances())
    assert len(instances) == len(POOL_TAGS) + 1
    for name, values in TAG_FILTERS:
        for instance in instances:
            expected = MOTO_TAG_FILTER_MATCHES(instance, name, values)
            assert tag_filter_matches(instance, name, values) == expected, (name, values)
    assert moto.ec2.utils.tag_filter_matches is tag_filter_matches, "installed"


def test_a_filtered_instance_listing_is_the_one_moto_gives(tagged: Any) -> None:
    filters = [
        [{"Name": name, "Values": values}, {"Name": "instance-state-name", "Values": ["running"]}]
        for name, values in TAG_FILTERS
    ]
    patched = [raw_describe(tagged, Filters=f) for f in filters]
    assert sum(body.count(b"<instanceId>") for body in patched) > len(POOL_TAGS)
    with motos_own_reads():
        assert moto.ec2.utils.tag_filter_matches is MOTO_TAG_FILTER_MATCHES
        assert [raw_describe(tagged, Filters=f) for f in filters] == patched


def test_a_filters_patterns_are_made_once_and_literals_need_none() -> None:
    assert value_patterns(("pool-a", "pool.b")) is None
    made = value_patterns(("pool-*",))
    assert made is not None and made[0].match("pool-x") and not made[0].match("xpool-x")
    assert value_patterns(("pool-*",)) is made


def _answer(read: Any, *args: Any) -> Any:
    """What a backend read gives: its instances' ids, by reservation, or its error."""
    try:
        found = read(*args)
    except Exception as err:
        return (type(err).__name__, str(err))
    if found is None or not isinstance(found, list):
        return getattr(found, "id", found)
    return [(r.id, [i.id for i in r.instances]) if hasattr(r, "instances") else r.id for r in found]


@pytest.fixture
def three_reservations(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[str]]]:
    """Three reservations of one, two and three instances, the middle one terminated."""
    with emulator_in_process(monkeypatch):
        ec2 = boto3.client("ec2", region_name=REGION)
        image = ec2.describe_images()["Images"][0]["ImageId"]
        ids = []
        for count in (1, 2, 3):
            launched = ec2.run_instances(
                ImageId=image, MinCount=count, MaxCount=count, InstanceType="m5.large"
            )
            ids.extend(i["InstanceId"] for i in launched["Instances"])
        ec2.terminate_instances(InstanceIds=ids[1:3])
        yield ec2, ids


def test_a_read_by_id_is_the_one_moto_gives(three_reservations: tuple[Any, list[str]]) -> None:
    _ec2, ids = three_reservations
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
    unknown = "i-0123456789abcdef0"
    asks = [[ids[0]], ids[2:5], [ids[5], ids[0]], [ids[4], ids[4]], [ids[1], unknown], []]
    for name in ("get_instance", "get_instance_by_id"):
        for instance_id in (*ids, unknown):
            theirs = original(EC2Backend, name)
            expected = _answer(theirs, backend, instance_id)
            assert _answer(getattr(backend, name), instance_id) == expected
    running = [{"name": "instance-state-name", "values": ["running"]}]
    moto_multi = original(EC2Backend, "get_multi_instances_by_id")
    moto_by_ids = original(EC2Backend, "get_reservations_by_instance_ids")
    for ask in asks:
        for filters in (None, running):
            expected = _answer(moto_multi, backend, ask, filters)
            assert _answer(backend.get_multi_instances_by_id, ask, filters) == expected
        for by_state in (None, {"instance-state-name": ["running"]}):
            expected = _answer(moto_by_ids, backend, ask, by_state)
            assert _answer(reservations_by_instance_ids, backend, ask, by_state) == expected


def test_a_listing_by_instance_id_filter_is_the_one_moto_gives(
    three_reservations: tuple[Any, list[str]],
) -> None:
    ec2, ids = three_reservations
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
    filters = [
        {"instance-id": [ids[0], ids[4]]},
        {"instance-id": [ids[1]], "instance-state-name": ["running"]},
        {"instance-id": ["i-0123456789abcdef0"]},
        {"instance-id": [ids[3]], "no-such-filter": ["x"]},  # moto's NotImplementedError
        {"no-such-filter": ["x"], "instance-id": ["i-0123456789abcdef0"]},  # and here too
        {"instance-state-name": ["terminated"]},
        None,
    ]
    moto_all = original(EC2Backend, "all_reservations")
    for f in filters:
        assert _answer(backend.all_reservations, f) == _answer(moto_all, backend, f)
    by_filter = {"Filters": [{"Name": "instance-id", "Values": [ids[2], ids[5]]}]}
    by_ids = {"InstanceIds": [ids[5], ids[0]]}
    patched = [raw_describe(ec2, **by_filter), raw_describe(ec2, **by_ids)]
    assert [body.count(b"<instanceId>") for body in patched] == [2, 2]
    with motos_own_reads():
        assert EC2Backend.all_reservations is original(EC2Backend, "all_reservations")
        assert devenv.emulator.instances.reservations_by_instance_ids is not (
            reservations_by_instance_ids
        )
        assert [raw_describe(ec2, **by_filter), raw_describe(ec2, **by_ids)] == patched
