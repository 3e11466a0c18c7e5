"""The Job webhook refuses a gang Job naming a pool of another namespace, reading the pool
through its lookup; a pool it cannot read is an error the failurePolicy decides."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devenv.pki import CertificateAuthority
from devenv.processes import free_port
from provisioner.api import constants as c
from provisioner.api.gangnodepool import GangNodePool
from provisioner.api.settings import Settings
from provisioner.api.tenancy import PoolLookupError
from provisioner.kube.errors import KubeForbidden
from provisioner.kube.pool_reads import pool_lookup as kube_pool_lookup
from provisioner.kube.resources import ResourceRef
from provisioner.webhook.review import review
from provisioner.webhook.server import JOB_WEBHOOK_PATH, WebhookServer
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_kube import FakeKube
from tests.support.jobs import job as job_body
from tests.support.pools import NODE_ROLE, pool, pool_lookup, pool_spec
from tests.unit.test_webhook_server import Running

pytestmark = pytest.mark.unit

LABELS = {c.POOL_LABEL: "pretrain", c.QUEUE_NAME_LABEL: "atomic-gang-queue"}
ANNOTATIONS = {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}
OWNED_BY_A = pool("pretrain", spec=pool_spec(pool="pretrain", owner_namespace="team-a"))


def settings(shared: list[dict[str, Any]] | None = None) -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "nodeRoleArn": NODE_ROLE},
            # Left out unless set: the default is what most tests show.
            **({"tenancy": {"sharedPools": shared}} if shared else {}),
        }
    )


def admission(namespace: str, labels: dict[str, str] = LABELS) -> dict[str, Any]:
    obj = job_body(
        "trainer",
        namespace=namespace,
        uid=None,
        labels=labels,
        annotations=ANNOTATIONS,
        parallelism=4,
        completions=4,
    )
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "namespace": namespace,
            "operation": "CREATE",
            "object": obj,
        },
    }


def test_a_job_naming_a_pool_of_another_namespace_is_refused_with_the_fix() -> None:
    out = review(admission("team-b"), settings(), pools=pool_lookup(OWNED_BY_A))["response"]
    assert out["allowed"] is False
    status = out["status"]
    assert status["code"] == 422
    assert status["details"]["causes"] == [
        {
            "type": "FieldValueForbidden",
            "field": f"metadata.labels[{c.POOL_LABEL}]",
            "message": status["message"],
        }
    ]
    message = status["message"]
    assert "pool pretrain belongs to namespace team-a" in message
    assert "a Job in namespace team-b may not claim it" in message
    assert "a pool name of your own" in message
    assert "share pool pretrain with namespace team-b" in message
    assert "tenancy.sharedPools" in message


def test_the_refusal_comes_beside_the_shape_problems() -> None:
    body = admission("team-b")
    body["request"]["object"]["metadata"]["annotations"][c.ANN_COUNT] = "3"
    out = review(body, settings(), pools=pool_lookup(OWNED_BY_A))["response"]
    fields = [cause["field"] for cause in out["status"]["details"]["causes"]]
    assert fields == [f"metadata.annotations[{c.ANN_COUNT}]", f"metadata.labels[{c.POOL_LABEL}]"]


@pytest.mark.parametrize(
    ("namespace", "pools", "shared"),
    [
        ("team-a", (OWNED_BY_A,), None),  # its own namespace
        ("team-b", (), None),  # no pool yet: the Job's Workload creates it, in team-b
        ("team-b", (pool("pretrain", spec=pool_spec(pool="pretrain")),), None),  # unowned
        ("team-b", (OWNED_BY_A,), [{"pool": "pretrain", "namespaces": ["team-b"]}]),
        ("team-b", (OWNED_BY_A,), [{"pool": "pre*", "namespaces": ["*"]}]),
    ],
    ids=["owner", "no-pool", "unowned-pool", "shared-by-name", "shared-by-glob"],
)
def test_jobs_that_may_use_the_pool_are_allowed(
    namespace: str, pools: tuple[dict[str, Any], ...], shared: list[dict[str, Any]] | None
) -> None:
    out = review(admission(namespace), settings(shared), pools=pool_lookup(*pools))["response"]
    assert out == {"uid": "u-1", "allowed": True}


def test_a_pool_label_that_names_no_pool_is_not_looked_up() -> None:
    asked: list[str] = []

    def lookup(name: str) -> GangNodePool | None:
        asked.append(name)
        return None

    out = review(
        admission("team-b", {**LABELS, c.POOL_LABEL: "Not_A_Pool"}), settings(), pools=lookup
    )
    assert out["response"]["allowed"] is False  # by the shape rules
    assert asked == []


def test_a_pool_that_cannot_be_read_is_an_error_not_a_verdict() -> None:
    def broken(name: str) -> GangNodePool | None:
        raise PoolLookupError(f"could not read GangNodePool {name}")

    with pytest.raises(PoolLookupError):
        review(admission("team-b"), settings(), pools=broken)


class RefusingKube(FakeKube):
    def get(self, ref: ResourceRef, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        raise KubeForbidden("gangnodepools is forbidden", status=403)


def test_the_kube_lookup_reads_the_pool_and_turns_failures_into_lookup_errors() -> None:
    read = kube_pool_lookup(FakeKube(OWNED_BY_A))  # type: ignore[arg-type]
    found = read("pretrain")
    assert found is not None and found.spec.owner_namespace == "team-a"
    assert read("other") is None
    with pytest.raises(PoolLookupError, match="GangNodePool pretrain"):
        kube_pool_lookup(RefusingKube())("pretrain")  # type: ignore[arg-type]


@pytest.fixture
def unreadable(tmp_path: Path) -> Iterator[Running]:
    def broken(name: str) -> GangNodePool | None:
        raise PoolLookupError(f"could not read GangNodePool {name}: forbidden")

    ca = CertificateAuthority()
    cert, key = ca.serving("127.0.0.1").write(tmp_path, "tls.crt", "tls.key")
    port = free_port()
    server = WebhookServer(settings(), cert, key, pools=broken, host="127.0.0.1", port=port)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    yield Running(server, port, ca)
    server.stop()
    thread.join(timeout=10)


def test_the_server_answers_an_unreadable_pool_with_503_for_the_failure_policy(
    unreadable: Running,
) -> None:
    status, raw = unreadable.call(JOB_WEBHOOK_PATH, json.dumps(admission("team-b")).encode())
    assert status == 503
    assert b"could not read GangNodePool pretrain" in raw
