"""What each kind of AWS request costs the emulator: requests and CPU seconds, by API call.

The emulator shares the benchmarks' two cores with the controller and Pulumi, so what loads
it loads the figures too; `GET /_emulator/requests` says which calls did (a benchmark prints
the costliest). CPU is the handling thread's own (`time.thread_time`), so time spent waiting
for moto's lock is not counted against the call that waited.

A call is named by its API: `ec2:DescribeInstances`, `kms:Decrypt`; S3 by what it touches
(`s3:GET object`, `s3:GET bucket?list-type`), as the Pulumi CLI's state reads and writes are
most of S3's traffic and their paths name one stack each. Each call also says which clients
made it, by the access key id that signed it: the dev environment gives its node simulator a
key of its own, so its polling is told apart from the controller's own calls.
"""

from __future__ import annotations

import io
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

_FORM = "application/x-www-form-urlencoded"


class RequestAccounting:
    """Counts and CPU seconds per call name; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[str, _Cost] = {}

    def timed(self, app: WSGIApp, environ: dict[str, Any], start: Callable[..., Any]) -> Any:
        name = call_name(environ)
        client = access_key(environ.get("HTTP_AUTHORIZATION", "")) or "unsigned"
        began = time.thread_time()
        try:
            return app(environ, start)
        finally:
            spent = time.thread_time() - began
            with self._lock:
                cost = self._calls.setdefault(name, _Cost())
                cost.requests += 1
                cost.cpu_seconds += spent
                cost.clients[client] += 1

    def report(self) -> dict[str, dict[str, Any]]:
        """Every call name with its `requests`, `cpu_seconds` and requests by `clients`
        (access key id), costliest first."""
        with self._lock:
            rows = sorted(self._calls.items(), key=lambda item: -item[1].cpu_seconds)
            return {
                name: {
                    "requests": cost.requests,
                    "cpu_seconds": round(cost.cpu_seconds, 3),
                    "clients": dict(cost.clients.most_common()),
                }
                for name, cost in rows
            }

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()


@dataclass
class _Cost:
    requests: int = 0
    cpu_seconds: float = 0.0
    clients: Counter[str] = field(default_factory=Counter)


def call_name(environ: dict[str, Any]) -> str:
    """`service:Action` for the request, read without consuming its body."""
    target = environ.get("HTTP_X_AMZ_TARGET")
    service = signing_service(environ.get("HTTP_AUTHORIZATION", ""))
    if target:  # JSON protocols (KMS, SSM, STS's JSON form): Service_Version.Action
        return f"{service or 'json'}:{target.rsplit('.', 1)[-1]}"
    method = str(environ.get("REQUEST_METHOD", ""))
    if service == "s3":
        path = str(environ.get("PATH_INFO", "")).strip("/")
        query = urllib.parse.parse_qs(str(environ.get("QUERY_STRING", "")))
        what = "object" if "/" in path else "bucket"
        listing = "?list-type" if "list-type" in query else ""
        return f"s3:{method} {what}{listing}"
    action = _query_action(environ)
    if action:
        return f"{service or 'aws'}:{action}"
    return f"{service or 'aws'}:{method} {environ.get('PATH_INFO', '')}"


def _credential_scope(authorization: str) -> list[str]:
    # SigV4: "AWS4-HMAC-SHA256 Credential=KEY/date/region/service/aws4_request, ..."
    return authorization.split("Credential=", 1)[-1].split(",", 1)[0].split("/")


def signing_service(authorization: str) -> str | None:
    scope = _credential_scope(authorization)
    return scope[3] if len(scope) >= 5 else None


def access_key(authorization: str) -> str | None:
    """The access key id that signed the request (SigV4), or None."""
    if "Credential=" not in authorization:
        return None
    scope = _credential_scope(authorization)
    if len(scope) < 2:
        return None
    return scope[0].strip() or None


def _query_action(environ: dict[str, Any]) -> str | None:
    """The Action of a query-protocol call (EC2, IAM), from the query or the form body; the
    body is put back for moto to read."""
    query = urllib.parse.parse_qs(str(environ.get("QUERY_STRING", "")))
    if "Action" in query:
        return query["Action"][0]
    if not str(environ.get("CONTENT_TYPE", "")).startswith(_FORM):
        return None
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    form = urllib.parse.parse_qs(body.decode(errors="replace"))
    return form["Action"][0] if "Action" in form else None
