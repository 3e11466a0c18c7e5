"""The emulator's S3 write log (``devenv.emulator.s3_writes``): what S3 server access logs
record for each write, readable at once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from devenv.emulator.s3_writes import S3WriteLog


def _signed(service: str, key_id: str) -> str:
    return (
        f"AWS4-HMAC-SHA256 Credential={key_id}/20261203/us-east-1/{service}/aws4_request, "
        "SignedHeaders=host, Signature=0"
    )


def _app(status: str) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        start(status, [])
        return [b""]

    return app


def _call(log: S3WriteLog, method: str, path: str, service: str = "s3", **extra: str) -> None:
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "HTTP_AUTHORIZATION": _signed(service, "key-replica-a"),
        **extra,
    }
    log.wrap(_app("200 OK" if method != "DELETE" else "204 No Content"), environ, lambda *a: None)


def test_each_s3_write_is_logged_with_its_signer_key_and_status() -> None:
    log = S3WriteLog()
    _call(log, "PUT", "/state/.pulumi/stacks/p/pool%20a.json", HTTP_X_ATOMIC_GANG_WRITER="vm/1")
    _call(log, "GET", "/state/.pulumi/stacks/p/pool.json")  # a read: not a write
    _call(log, "POST", "/", service="ec2")  # another service's call
    _call(log, "DELETE", "/state/.pulumi/locks/p/pool/1.json")

    writes = log.report()
    assert [(w["seq"], w["method"], w["bucket"], w["key"]) for w in writes] == [
        (1, "PUT", "state", ".pulumi/stacks/p/pool a.json"),
        (2, "DELETE", "state", ".pulumi/locks/p/pool/1.json"),
    ]
    assert {w["requester"] for w in writes} == {"key-replica-a"}
    assert [w["status"] for w in writes] == [200, 204]
    assert writes[0]["writer"] == "vm/1" and writes[1]["writer"] == ""
    assert all(w["received"] <= w["answered"] for w in writes)
    assert [w["seq"] for w in log.report(after=1)] == [2]
    log.clear()
    assert log.report() == []
