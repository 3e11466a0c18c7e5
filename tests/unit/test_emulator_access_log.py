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
