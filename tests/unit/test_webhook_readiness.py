"""The readiness rule: a replica is not ready until it serves a certificate whose CA is in
every webhook's caBundle; /readyz names the gate it waits for."""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from devenv.processes import free_port
from provisioner.api.settings import Settings
from provisioner.assembly import ServedWebhook
from provisioner.controllers.manager import ControllerParts, Manager
from provisioner.controllers.metrics import ControllerMetrics
from provisioner.webhook.certs import CertPolicy, Renewal, issue
from provisioner.webhook.rotator import CertRotator
from provisioner.webhook.server import WebhookServer
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_cert_store import FakeCertStore
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


def served_webhook(store: FakeCertStore, directory: Path) -> ServedWebhook:
    rotator = CertRotator(
        store, hosts=("127.0.0.1",), policy=CertPolicy(), serve_dir=directory, ca_name="ca"
    )
    server = WebhookServer(
        SETTINGS,
        rotator.cert_file,
        rotator.key_file,
        pools=pool_lookup(),
        host="127.0.0.1",
        port=free_port(),
        reload_interval=0.05,
    )
    return ServedWebhook(server, rotator, threading.Event())


def wait_until(condition: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_ready_only_while_the_served_certificate_is_trusted(tmp_path: Path) -> None:
    store = FakeCertStore()
    webhook = served_webhook(store, tmp_path)
    assert webhook.rotator is not None
    assert not webhook.ready()  # nothing served yet
    webhook.rotator.sync()  # fills the Secret, sets the bundle, starts the server
    wait_until(lambda: webhook.server.started)
    try:
        assert webhook.ready()
        # A sync resets the caBundle and the patch back is refused this pass: not ready.
        store.bundles = [b"", b""]
        store.conflict_next_bundle_write = True
        webhook.rotator.sync()
        assert not webhook.ready()
        webhook.rotator.sync()
        assert webhook.ready()
    finally:
        webhook.stop()


def test_mounted_certificates_are_ready_once_the_server_listens(tmp_path: Path) -> None:
    """A Service sends a Ready pod reviews at once: before it listens they are refused."""
    pair = issue(
        None, Renewal.CA, ("127.0.0.1",), CertPolicy(), dt.datetime.now(dt.UTC), ca_name="ca"
    ).serving
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    port = free_port()
    server = WebhookServer(
        SETTINGS,
        tmp_path / "tls.crt",
        tmp_path / "tls.key",
        pools=pool_lookup(),
        host="127.0.0.1",
        port=port,
    )
    webhook = ServedWebhook(server, None, threading.Event())
    assert not webhook.ready()  # not listening yet
    webhook.start()
    try:
        wait_until(webhook.ready)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        webhook.stop()


def test_readyz_names_the_gate_it_waits_for() -> None:
    parts = ControllerParts(
        informers=(),
        controllers=(),
        executor=None,  # type: ignore[arg-type]  # never started here
        index=None,  # type: ignore[arg-type]
        reaper=None,  # type: ignore[arg-type]
        stacks=None,  # type: ignore[arg-type]
        recorder=None,  # type: ignore[arg-type]
    )
    trusted = threading.Event()
    manager = Manager(SETTINGS, parts, "test", ControllerMetrics())
    manager.readiness_gates["webhook serving a certificate the caBundle trusts"] = trusted.is_set
    readyz = next(r for r in manager.health_app().routes if r.path == "/readyz")  # type: ignore[attr-defined]
    answer = asyncio.run(readyz.endpoint(None))
    assert answer.status_code == 503
    assert b"webhook serving a certificate the caBundle trusts" in answer.body
    assert not manager.ready()
    trusted.set()
    assert manager.ready()
    assert asyncio.run(readyz.endpoint(None)).status_code == 200


def test_the_webhook_gate_is_in_place_before_the_manager_answers_readyz() -> None:
    """The image test on a fresh machine met "connection refused": the gate was added after
    `manager.start()`, whose /readyz answered ready as soon as the informers synced."""
    from provisioner.commands.controller import WEBHOOK_GATE, start

    seen_at_start: list[list[str]] = []

    class RecordingManager:
        def __init__(self) -> None:
            self.readiness_gates: dict[str, Any] = {}

        def start(self) -> None:
            seen_at_start.append(list(self.readiness_gates))

    class NotListening:
        started = False

        def ready(self) -> bool:
            return False

        def start(self) -> None:
            self.started = True

    manager, webhook = RecordingManager(), NotListening()
    start(manager, webhook)  # type: ignore[arg-type]
    assert seen_at_start == [[WEBHOOK_GATE]]
    assert webhook.started
    assert manager.readiness_gates[WEBHOOK_GATE]() is False
