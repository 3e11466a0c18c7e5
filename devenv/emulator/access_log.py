"""The emulator's `--access-log`: a line per request, as a web server's access log.

Two things the method and path do not say are added when the request carries them: an S3
copy's source (`CopyObject` is a PUT whose source is a header), and a JSON-protocol call's
action (KMS and the like POST to `/` and name the action in `X-Amz-Target`). With them a
bench can tell, from the log alone, which state-bucket and KMS requests an operation made
(`bench.backend_requests`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

__all__ = ["ACCESS_LOG", "AccessLog"]

ACCESS_LOG: Final = "atomic-gang.emulator.access"


class AccessLog:
    """WSGI middleware for `--access-log`: a line per request, method, path and status,
    then ``copy=<source>`` and ``target=<X-Amz-Target>`` when the request has them."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self._app = app
        self._log = logging.getLogger(ACCESS_LOG)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        extra = "".join(
            f" {label}={environ[key]}"
            for label, key in (("copy", "HTTP_X_AMZ_COPY_SOURCE"), ("target", "HTTP_X_AMZ_TARGET"))
            if environ.get(key)
        )

        def logged(status: str, headers: Any, *rest: Any) -> Any:
            self._log.info(
                '"%s %s%s" %s%s',
                environ.get("REQUEST_METHOD"),
                environ.get("PATH_INFO"),
                f"?{environ['QUERY_STRING']}" if environ.get("QUERY_STRING") else "",
                status.split(" ", 1)[0],
                extra,
            )
            return start_response(status, headers, *rest)

        return self._app(environ, logged)
