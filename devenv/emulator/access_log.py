"""The emulator's `--access-log`: a line per request, as a web server's access log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

__all__ = ["ACCESS_LOG", "AccessLog"]

ACCESS_LOG: Final = "atomic-gang.emulator.access"


class AccessLog:
    """WSGI middleware for `--access-log`: a line per request, method, path and status."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self._app = app
        self._log = logging.getLogger(ACCESS_LOG)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        def logged(status: str, headers: Any, *rest: Any) -> Any:
            self._log.info(
                '"%s %s%s" %s',
                environ.get("REQUEST_METHOD"),
                environ.get("PATH_INFO"),
                f"?{environ['QUERY_STRING']}" if environ.get("QUERY_STRING") else "",
                status.split(" ", 1)[0],
            )
            return start_response(status, headers, *rest)

        return self._app(environ, logged)
