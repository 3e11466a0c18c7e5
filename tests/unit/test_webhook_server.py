"""The webhook's HTTPS server on 127.0.0.1: routes, status codes, certificate reloading."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devenv.pki import CertificateAuthority
from devenv.processes import free_port
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.webhook.server import JOB_WEBHOOK_PATH, MAX_BODY_BYTES, WebhookServer
from tests.support.backends import UNREACHED_BACKEND
from tests.support.pools import pool_lookup

pytestmark = pytest.mark.unit

SETTINGS = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {
            "region": "us-east-1",
            "node_role_arn": "arn:aws:iam::123456789012:role/eks-gang-node-role",
        },
    }
)


class Running:
    def __init__(self, server: WebhookServer, port: int, ca: CertificateAuthority) -> None:
        self.server, self.port, self.ca = server, port, ca

    def context(self, ca: CertificateAuthority | None = None) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=(ca or self.ca).cert_pem.decode())

    def call(self, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{path}",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST" if body is not None else "GET",
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context()) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    ca = CertificateAuthority()
    cert, key = ca.serving("127.0.0.1", "localhost").write(tmp_path, "tls.crt", "tls.key")
    port = free_port()
    server = WebhookServer(
        SETTINGS,
        cert,
        key,
        pools=pool_lookup(),
        host="127.0.0.1",
        port=port,
        reload_interval=3600,
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "the webhook server exited while starting"
        assert time.monotonic() < deadline, "the webhook server did not start"
        time.sleep(0.02)
    yield Running(server, port, ca)
    server.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()


def review_body(annotations: dict[str, str]) -> bytes:
    obj: dict[str, Any] = {
        "metadata": {
            "name": "trainer",
            "labels": {c.POOL_LABEL: "p", c.QUEUE_NAME_LABEL: "q"},
            "annotations": annotations,
        },
        "spec": {"parallelism": 2, "completions": 2},
    }
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u-1", "operation": "CREATE", "object": obj},
        }
    ).encode()


def test_healthz(running: Running) -> None:
    assert running.call("/healthz") == (200, b"ok")


def test_reviews_are_answered_as_admission_reviews(running: Running) -> None:
    status, raw = running.call(
        JOB_WEBHOOK_PATH, review_body({c.ANN_COUNT: "2", c.ANN_INSTANCE_TYPE: "m5.large"})
    )
    assert status == 200
    assert json.loads(raw)["response"] == {"uid": "u-1", "allowed": True}

    status, raw = running.call(JOB_WEBHOOK_PATH, review_body({c.ANN_COUNT: "3"}))
    assert status == 200
    response = json.loads(raw)["response"]
    assert response["allowed"] is False
    assert c.ANN_COUNT in response["status"]["message"]


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b'{"apiVersion": "v1", "kind": "Pod"}', 400),
        (b"x" * (MAX_BODY_BYTES + 1), 413),
    ],
)
def test_bad_requests(running: Running, body: bytes, status: int) -> None:
    assert running.call(JOB_WEBHOOK_PATH, body)[0] == status


def test_only_post_reviews(running: Running) -> None:
    assert running.call(JOB_WEBHOOK_PATH)[0] == 405


def test_a_replaced_certificate_is_served_without_a_restart(
    running: Running, tmp_path: Path
) -> None:
    context = running.server.ssl_context
    assert context is not None
    seen = running.server.reload_if_changed(context, ())
    assert running.server.reload_if_changed(context, seen) == seen  # unchanged: no reload

    rotated = CertificateAuthority("rotated-ca")
    fresh = rotated.serving("127.0.0.1").write(tmp_path / "new", "tls.crt", "tls.key")
    # Swap the files the way a Secret volume does: new inodes under the same names.
    for new, current in zip(
        fresh, (running.server.cert_file, running.server.key_file), strict=True
    ):
        new.replace(current)
    running.server.reload_if_changed(context, seen)

    url = f"https://127.0.0.1:{running.port}/healthz"
    with urllib.request.urlopen(url, timeout=10, context=running.context(rotated)) as resp:
        assert resp.status == 200
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=10, context=running.context())


def test_a_broken_certificate_keeps_the_old_one(running: Running) -> None:
    context = running.server.ssl_context
    assert context is not None
    seen = running.server.reload_if_changed(context, ())
    running.server.cert_file.write_text("not a certificate")
    assert running.server.reload_if_changed(context, seen) == seen
    assert running.call("/healthz") == (200, b"ok")
