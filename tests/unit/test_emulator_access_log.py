"""The emulator logs a line per request only when asked; errors always."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from werkzeug import serving

from devenv.emulator.server import set_access_log


@pytest.fixture(autouse=True)
def _restore_level() -> Iterator[None]:
    logger = logging.getLogger("werkzeug")
    level = logger.level
    yield
    logger.setLevel(level)


def _logged(caplog: pytest.LogCaptureFixture, kind: str, text: str) -> bool:
    caplog.clear()
    # werkzeug's own entry point: what `log_request` and `log_error` call.
    serving._log(kind, text)
    return any(text in r.getMessage() for r in caplog.records)


def test_no_request_lines_by_default_but_errors(caplog: pytest.LogCaptureFixture) -> None:
    set_access_log(False)
    assert not _logged(caplog, "info", '"GET /?Action=DescribeInstances HTTP/1.1" 200 -')
    assert _logged(caplog, "error", "Error on request: boom")


def test_request_lines_with_access_log(caplog: pytest.LogCaptureFixture) -> None:
    set_access_log(True)
    assert _logged(caplog, "info", '"GET /?Action=DescribeInstances HTTP/1.1" 200 -')
