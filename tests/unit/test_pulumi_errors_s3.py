"""S3 failures as the real Pulumi CLI prints them, named by the driver's classifier.

Each text below was printed by the project's pinned CLI (v3.260.0) against the emulator's
S3 with a fault switch armed (`inject_fault` on GetObject/PutObject, a bucket that does not
exist); request ids are kept as printed. The same faults reach the controller in
`tests/faults/test_state_backend_faults.py`, which asserts the reason in the pool's status.
"""

from __future__ import annotations

import pytest
from pulumi.automation import CommandResult
from pulumi.automation import errors as auto_errors

from provisioner.api.constants import FailureKind
from provisioner.pulumi_driver import errors

pytestmark = pytest.mark.unit

# Every object read failing (500): the first read of an `up` or `destroy`.
READ_500 = (
    'error: read ".pulumi/meta.yaml": blob (key ".pulumi/meta.yaml") (code=Unknown): operation '
    "error S3: GetObject, exceeded maximum number of attempts, 3, https response error "
    "StatusCode: 500, RequestID: aca43106-f2cb-4cf6-8cf3-c1d75a9daf63, HostID: , api error "
    "InternalError: An internal error has occurred."
)
# Every object write failing (500): an `up` or `destroy` saving its checkpoint.
CHECKPOINT_500 = (
    "error: 2 errors occurred:\n"
    "    1) operation error S3: PutObject, exceeded maximum number of attempts, 3, https "
    "response error StatusCode: 500, RequestID: 53d818bf-3026-48a2-ab8e-0c0329b87348, HostID: "
    ", api error InternalError: An internal error has occurred.\n"
    "    2) Unknown"
)
# A `stack init` writing its lock (500).
LOCK_500 = (
    'error: could not create stack: blob (key ".pulumi/locks/organization/capture/dev3/'
    '4ba2198d-957a-49b9-9dab-c73645c7c048.json") (code=Unknown): operation error S3: PutObject, '
    "exceeded maximum number of attempts, 3, https response error StatusCode: 500, RequestID: "
    "c63300a9-2691-4b01-a091-267a02431e5c, HostID: , api error InternalError: An internal "
    "error has occurred."
)
# The controller's role lacking the grant (403).
LOCK_403 = (
    'error: could not create stack: blob (key ".pulumi/locks/organization/capture/dev9/'
    '855b57a6-0b23-43f9-85c2-d89179fd0b91.json") (code=PermissionDenied): operation error S3: '
    "PutObject, https response error StatusCode: 403, RequestID: "
    "4e83a1f6-110b-413f-9712-571c6051b50f, HostID: , api error AccessDenied: AccessDenied"
)
# A backend URL naming a bucket that does not exist (404).
NO_BUCKET_404 = (
    "error: error listing stacks: could not list bucket: blob (code=NotFound): operation error "
    "S3: ListObjectsV2, https response error StatusCode: 404, RequestID: MOAZYPpXED7NDzO2HWRl, "
    "HostID: 9Gjjt1m+cjU4OPvX9O9=, NoSuchBucket: The specified bucket does not exist"
)


def _classify(stderr: str) -> errors.StackError:
    exc = auto_errors.create_command_error(CommandResult(stdout="", stderr=stderr, code=1))
    return errors.classify(exc, [], pool="p1", operation="destroy")


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        (READ_500, "S3 GetObject answered 500 (InternalError: An internal error has occurred.)"),
        (CHECKPOINT_500, "S3 PutObject answered 500 (InternalError"),
        (LOCK_500, "S3 PutObject answered 500 (InternalError"),
    ],
    ids=["read", "checkpoint", "lock"],
)
def test_s3_answering_5xx_is_the_backend_unavailable_and_retried(stderr: str, said: str) -> None:
    err = _classify(stderr)
    assert (err.reason, err.kind) == (errors.BACKEND_UNAVAILABLE, FailureKind.RETRYABLE)
    assert err.message.startswith("The Pulumi state backend failed during the destroy of pool p1")
    assert said in err.message


def test_the_object_a_failed_call_was_for_is_named() -> None:
    assert "for .pulumi/meta.yaml" in _classify(READ_500).message


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        (LOCK_403, "S3 PutObject answered 403 (AccessDenied: AccessDenied)"),
        (NO_BUCKET_404, "S3 ListObjectsV2 answered 404 (NoSuchBucket: The specified bucket"),
    ],
    ids=["denied", "no-bucket"],
)
def test_s3_refusing_the_call_needs_a_fix_not_a_wait(stderr: str, said: str) -> None:
    err = _classify(stderr)
    assert (err.reason, err.kind) == (errors.BACKEND_REFUSED, FailureKind.CONFIG)
    assert said in err.message and "pulumi.backendUrl" in err.message
