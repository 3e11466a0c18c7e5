"""The intent of a first prepare in flight (``pulumi_driver.intents``): kept where the
backend is, read back whole only while the stack holds no outputs, gone once cleared, and
an S3 failure keeping its kind. The driver's use of it, with the real CLI and a killed
prepare, is ``tests/integration/test_stack_crash.py``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.api.constants import FailureKind
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.pulumi_driver.errors import BACKEND_REFUSED, BACKEND_UNAVAILABLE, StackError
from provisioner.pulumi_driver.intents import INTENTS_DIR, PrepareIntents, prepare_intents_for
from provisioner.pulumi_driver.statefile import FileBackend
from stacks.spec import PoolSpec
from tests.support.backends import backend_settings, state_bucket

pytestmark = pytest.mark.unit

PROJECT = "atomic-gang-c1"
BUCKET = "state"
SPEC = PoolSpec(
    cluster="c1",
    pool="pool-a",
    region="us-east-1",
    node_role_arn="arn:aws:iam::123456789012:role/gang-node",
    instance_profile_name="atomic-gang-instance-profile-c1-gang-node",
    image_id="ami-0123456789abcdef0",
    instance_type="p5.48xlarge",
    user_data="nodeadm",
    security_group_ids=("sg-1",),
    efa_network_cards=(0, 1),
    placement_group=True,
    tags={"atomic-gang.k8s.aws/pool": "pool-a"},
)


@pytest.fixture
def s3() -> Iterator[Any]:
    with state_bucket(BUCKET) as client:
        yield client


def test_a_file_backend_keeps_the_intent_beside_its_stacks(tmp_path: Path) -> None:
    settings = backend_settings(tmp_path, f"file://{tmp_path}")
    intents = prepare_intents_for(settings, FileBackend(tmp_path, PROJECT), None)
    path = tmp_path / ".pulumi" / INTENTS_DIR / settings.pulumi.project_name / "pool-a.json"

    assert intents.enabled and intents.unfinished("pool-a", None) is None
    intents.mark(SPEC)

    assert path.is_file() and not list(path.parent.glob("*.partial"))
    assert intents.unfinished("pool-a", None) == SPEC
    # A stack with outputs has nothing unfinished, whatever is kept.
    assert intents.unfinished("pool-a", object()) is None
    intents.clear("pool-a")
    assert not path.exists() and intents.unfinished("pool-a", None) is None
    intents.clear("pool-a")  # clearing twice is fine: a destroy clears what may not be there


def test_an_s3_backend_keeps_the_intent_under_its_prefix(tmp_path: Path, s3: Any) -> None:
    settings = backend_settings(tmp_path, f"s3://{BUCKET}/team/prod?region=us-east-1")
    intents = prepare_intents_for(settings, None, None)
    key = f"team/prod/.pulumi/{INTENTS_DIR}/{settings.pulumi.project_name}/pool-a.json"

    intents.mark(SPEC)

    listed = s3.list_objects_v2(Bucket=BUCKET)["Contents"]
    assert [o["Key"] for o in listed] == [key]
    assert intents.unfinished("pool-a", None) == SPEC
    intents.clear("pool-a")
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)
    assert intents.unfinished("pool-a", None) is None


def test_a_backend_with_nowhere_to_keep_it_disables_the_intents(tmp_path: Path) -> None:
    intents = prepare_intents_for(backend_settings(tmp_path, "https://api.pulumi.com"), None, None)

    assert not intents.enabled
    intents.mark(SPEC)
    intents.clear("pool-a")
    assert intents.unfinished("pool-a", None) is None


class FailingBucket:
    def __init__(self, kind: ErrorKind) -> None:
        self.kind = kind

    def write(self, key: str, body: bytes) -> None:
        raise CloudError(self.kind, "Code", "Reason", f"Writing {key} failed.")

    def read(self, key: str) -> bytes | None:
        return None

    def delete(self, key: str) -> None:
        return None


@pytest.mark.parametrize(
    ("cloud", "reason", "kind"),
    [
        (ErrorKind.RETRYABLE, BACKEND_UNAVAILABLE, FailureKind.RETRYABLE),
        (ErrorKind.CONFIG, BACKEND_REFUSED, FailureKind.CONFIG),
    ],
)
def test_an_intent_that_cannot_be_written_stops_the_prepare_with_its_kind(
    cloud: ErrorKind, reason: str, kind: FailureKind
) -> None:
    intents = PrepareIntents(FailingBucket(cloud), f".pulumi/{INTENTS_DIR}/{PROJECT}")

    with pytest.raises(StackError) as failed:
        intents.mark(SPEC)

    assert (failed.value.reason, failed.value.kind) == (reason, kind)
    assert "pool-a" in failed.value.message and "could not be written" in failed.value.message


def _intents_and_runs(tmp_path: Path) -> tuple[PrepareIntents, list[str]]:
    intents = prepare_intents_for(
        backend_settings(tmp_path, f"file://{tmp_path}"), FileBackend(tmp_path, PROJECT), None
    )
    intents.mark(SPEC)
    return intents, []


def test_a_prepare_run_again_before_a_destroy_that_fails_for_now_stops_the_destroy(
    tmp_path: Path,
) -> None:
    """The failed run stopped before reaching every resource: what the interrupted prepare
    made of the rest is in no state, so a failure that passes with time fails the destroy
    (retried with the pool's backoff) and the intent stays for the next try."""
    intents, ran = _intents_and_runs(tmp_path)

    def failing() -> None:
        ran.append("failing")
        raise StackError("PoolResourceFailed", "IAM unavailable", kind=FailureKind.RETRYABLE)

    with pytest.raises(StackError) as failed:
        intents.finish(SPEC, failing, logging.getLogger("stack"))

    assert (failed.value.reason, failed.value.kind) == ("PoolResourceFailed", FailureKind.RETRYABLE)
    assert (failed.value.pool, failed.value.operation) == ("pool-a", "destroy")
    assert "the destroy waits for it" in failed.value.message
    assert failed.value.message.endswith("IAM unavailable")
    assert ran == ["failing"] and intents.unfinished("pool-a", None) == SPEC
    intents.finish(SPEC, lambda: ran.append("succeeding"), logging.getLogger("stack"))
    assert ran == ["failing", "succeeding"] and intents.unfinished("pool-a", None) is None


def test_a_prepare_run_again_before_a_destroy_that_is_refused_lets_the_destroy_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal would hold the pool's deletion until a person acts: the destroy goes on
    with what the state holds, and the log says why."""
    intents, ran = _intents_and_runs(tmp_path)

    def refused() -> None:
        ran.append("refused")
        raise StackError("PoolResourceFailed", "refused", kind=FailureKind.CONFIG)

    intents.finish(SPEC, refused, logging.getLogger("stack"))

    assert ran == ["refused"] and intents.unfinished("pool-a", None) == SPEC
    assert "failed (PoolResourceFailed, config); destroying what the state holds" in caplog.text
