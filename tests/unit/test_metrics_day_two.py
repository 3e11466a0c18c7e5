"""The controller's day-two metrics, read back from its own registry: process metrics, the
leader gauge, the webhook's answers by kind and result, and AWS calls by action and error
code (EC2 answering through moto in-process, and an endpoint that does not answer)."""

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

import boto3
import pytest
from moto import mock_aws
from prometheus_client import generate_latest

from devenv.pki import CertificateAuthority
from devenv.processes import free_port
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.cloud.ec2api import build_clients
from provisioner.controllers.metrics import AwsCallMetrics, ControllerMetrics, WebhookMetrics
from provisioner.webhook.server import JOB_WEBHOOK_PATH, WebhookServer
from tests.support.backends import UNREACHED_BACKEND
from tests.support.pools import pool_lookup
from tests.unit.test_manager_sync_gate import Informer, manager

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


def _value(metrics: ControllerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


# --- process -------------------------------------------------------------------------------
def test_the_registry_carries_the_process_metrics() -> None:
    metrics = ControllerMetrics()
    exposed = generate_latest(metrics.registry).decode()
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "python_info",
    ):
        assert f"\n{name}" in exposed, name
    assert (_value(metrics, "process_resident_memory_bytes")) > 0
    # Still this controller's own registry: a second one does not share its counters.
    other = ControllerMetrics()
    metrics.aws_calls.labels("ec2", "RunInstances", "none").inc()
    assert (
        _value(
            other,
            "atomic_gang_aws_calls_total",
            service="ec2",
            action="RunInstances",
            error_code="none",
        )
        == 0
    )


# --- leader --------------------------------------------------------------------------------
def test_the_leader_gauge_follows_the_lease() -> None:
    log: list[str] = []
    built, _ = manager([Informer("pools", synced=True)], log)
    built.sync_wait = 1.0
    assert _value(built.metrics, "atomic_gang_leader") == 0
    built.start_leading()
    assert _value(built.metrics, "atomic_gang_leader") == 1
    built.stop_leading()
    assert _value(built.metrics, "atomic_gang_leader") == 0


# --- AWS calls -----------------------------------------------------------------------------
def _calls(metrics: ControllerMetrics, action: str, code: str, service: str = "ec2") -> float:
    return _value(
        metrics, "atomic_gang_aws_calls_total", service=service, action=action, error_code=code
    )


def test_aws_calls_are_counted_by_action_and_error_code() -> None:
    metrics = ControllerMetrics()
    with mock_aws():
        session = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s")
        clients = build_clients(
            session, "us-east-1", max_attempts=1, observer=AwsCallMetrics(metrics)
        )
        clients.ec2.describe_instances()
        clients.ec2.describe_instances()
        with pytest.raises(Exception, match="InvalidInstanceID"):
            clients.ec2.terminate_instances(InstanceIds=["i-0123456789abcdef0"])
    assert _calls(metrics, "DescribeInstances", "none") == 2
    assert _calls(metrics, "TerminateInstances", "InvalidInstanceID.NotFound") == 1
    assert _calls(metrics, "TerminateInstances", "none") == 0


def test_an_aws_call_without_an_answer_is_counted_under_the_exception() -> None:
    metrics = ControllerMetrics()
    session = boto3.session.Session(aws_access_key_id="k", aws_secret_access_key="s")
    clients = build_clients(
        session,
        "us-east-1",
        "http://127.0.0.1:1",  # nothing listens: the connection is refused
        max_attempts=1,
        connect_timeout=1,
        observer=AwsCallMetrics(metrics),
    )
    with pytest.raises(Exception, match="Could not connect"):
        clients.ec2.describe_subnets()
    assert _calls(metrics, "DescribeSubnets", "EndpointConnectionError") == 1


# --- webhook -------------------------------------------------------------------------------
class Served:
    def __init__(self, port: int, ca: CertificateAuthority, metrics: ControllerMetrics) -> None:
        self.port, self.ca, self.metrics = port, ca, metrics

    def post(self, body: bytes) -> int:
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{JOB_WEBHOOK_PATH}",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        context = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as resp:
                resp.read()  # the whole answer, as the API server reads it
                return int(resp.status)
        except urllib.error.HTTPError as err:
            err.read()
            return int(err.code)

    def count(self, kind: str, result: str) -> float:
        return _value(self.metrics, "atomic_gang_webhook_requests_total", kind=kind, result=result)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    ca = CertificateAuthority()
    cert, key = ca.serving("127.0.0.1", "localhost").write(tmp_path, "tls.crt", "tls.key")
    port = free_port()
    metrics = ControllerMetrics()
    server = WebhookServer(
        SETTINGS,
        cert,
        key,
        pools=pool_lookup(),
        host="127.0.0.1",
        port=port,
        reload_interval=3600,
        observer=WebhookMetrics(metrics),
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "webhook did not start"
        time.sleep(0.02)
    yield Served(port, ca, metrics)
    server.stop()
    thread.join(timeout=10)


def _review(annotations: dict[str, str], kind: str = "Job") -> bytes:
    obj: dict[str, Any] = {
        "metadata": {
            "name": "trainer",
            "labels": {c.POOL_LABEL: "p", c.QUEUE_NAME_LABEL: "q"},
            "annotations": annotations,
        },
        "spec": {"parallelism": 2, "completions": 2},
    }
    request = {
        "uid": "u-1",
        "kind": {"group": "batch", "version": "v1", "kind": kind},
        "operation": "CREATE",
        "object": obj,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def test_webhook_answers_are_counted_by_kind_and_result(served: Served) -> None:
    good = {c.ANN_COUNT: "2", c.ANN_INSTANCE_TYPE: "m5.large"}
    assert served.post(_review(good)) == 200
    assert served.post(_review(good)) == 200
    assert served.post(_review({c.ANN_COUNT: "3"})) == 200  # parallelism 2: denied
    assert served.post(b"{not json") == 400
    assert served.count("Job", "allowed") == 2
    assert served.count("Job", "denied") == 1
    assert served.count("other", "bad-request") == 1
    assert served.count("Job", "bad-request") == 0


def test_a_kind_the_webhook_does_not_judge_is_counted_as_other(served: Served) -> None:
    served.post(_review({c.ANN_COUNT: "2"}, kind="NotAGang" * 8))
    samples = [
        s.labels["kind"]
        for family in served.metrics.registry.collect()
        if family.name == "atomic_gang_webhook_requests"
        for s in family.samples
    ]
    assert samples and set(samples) == {"other"}, samples
