"""The emulator's EC2 write log (``devenv.emulator.ec2_writes``): CloudTrail's write events
(``readOnly: false``) with the key that signed each, readable at once."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

from devenv.emulator.ec2_writes import Ec2WriteLog

_FORM = "application/x-www-form-urlencoded"


def _signed(service: str, key_id: str) -> str:
    return (
        f"AWS4-HMAC-SHA256 Credential={key_id}/20261205/us-east-1/{service}/aws4_request, "
        "SignedHeaders=host, Signature=0"
    )


def _call(log: Ec2WriteLog, action: str, key: str, service: str = "ec2") -> bytes:
    """One query-protocol call, its Action in the form body; what the app was handed."""
    body = f"Action={action}&Version=2016-11-15".encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "CONTENT_TYPE": _FORM,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "HTTP_AUTHORIZATION": _signed(service, key),
    }
    seen: list[bytes] = []

    def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        seen.append(environ["wsgi.input"].read())
        start("200 OK", [])
        return [b""]

    log.wrap(app, environ, lambda *a: None)
    return seen[0]


def test_each_mutating_ec2_call_is_logged_with_its_signer_and_reads_are_not() -> None:
    log = Ec2WriteLog()
    assert _call(log, "RunInstances", "key-replica-a").startswith(b"Action=RunInstances")
    _call(log, "DescribeInstances", "key-replica-a")  # a read
    _call(log, "GetConsoleOutput", "key-replica-a")  # a read
    _call(log, "CreateInstanceProfile", "key-replica-a", service="iam")  # not EC2
    _call(log, "TerminateInstances", "key-replica-b")
    _call(log, "CreateTags", "key-replica-b")

    writes = log.report()
    assert [(w["seq"], w["action"], w["requester"]) for w in writes] == [
        (1, "RunInstances", "key-replica-a"),
        (2, "TerminateInstances", "key-replica-b"),
        (3, "CreateTags", "key-replica-b"),
    ]
    assert all(w["status"] == 200 and w["received"] <= w["answered"] for w in writes)
    assert [w["seq"] for w in log.report(after=2)] == [3]
    log.clear()
    assert log.report() == []
