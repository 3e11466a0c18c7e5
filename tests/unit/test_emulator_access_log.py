"""`--access-log` wraps the emulator's app in `AccessLog`: a line per request in its log."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from werkzeug.test import Client
from werkzeug.wrappers import Response

from devenv.emulator.server import ACCESS_LOG, AccessLog


def _teapot(environ: dict[str, Any], start_response: Any) -> Any:
    return Response("short and stout", status=418)(environ, start_response)


def test_a_line_per_request_with_method_path_and_status(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOG)
    answer = Client(AccessLog(_teapot)).get("/?Action=DescribeInstances")
    assert answer.status_code == 418 and answer.get_data() == b"short and stout"
    lines = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOG]
    assert lines == ['"GET /?Action=DescribeInstances" 418']


def test_a_copy_names_its_source_and_a_json_call_its_target(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What the method and path leave out: a CopyObject's source and a KMS call's action."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOG)
    client = Client(AccessLog(_teapot))
    client.put("/bucket/.pulumi/stacks/p/s.json.bak", headers={"x-amz-copy-source": "bucket/k"})
    client.post("/", headers={"X-Amz-Target": "TrentService.Decrypt"})
    lines = [r.getMessage() for r in caplog.records if r.name == ACCESS_LOG]
    assert lines == [
        '"PUT /bucket/.pulumi/stacks/p/s.json.bak" 418 copy=bucket/k',
        '"POST /" 418 target=TrentService.Decrypt',
    ]
