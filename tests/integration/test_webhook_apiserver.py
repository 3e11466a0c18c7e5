"""The Job webhook against the real kube-apiserver.

The webhook runs as its own process (`python -m provisioner.webhook`) on 127.0.0.1 with a
certificate from the control plane's CA. It is registered with the chart's own
ValidatingWebhookConfiguration, rendered by helm, with two local changes: the apiserver
reaches it by URL with our CA (there is no Service network here), and it only sees this
test's namespace (the control plane is shared by the whole session).
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from kubernetes import client as k8s  # type: ignore[import-untyped]
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from devenv.processes import Supervised, free_port
from provisioner.api import constants as c
from provisioner.api.settings_sources import load_settings
from provisioner.api.shape import GangShapeError, parse_gang_shape
from provisioner.webhook.server import GANG_JOB_WEBHOOK_PATH
from tests.chart.conftest import Helm
from tests.support.pools import pool as pool_body
from tests.support.pools import pool_spec

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
SETTINGS = {
    "clusterName": "demo",
    "defaults": {"region": "us-east-1", "nodeRoleArn": ROLE},
    # The controller's settings file: it names a stack backend, which the webhook never uses.
    "pulumi": {"ephemeralState": True},
}
HOOK = "validate-job.atomic-gang.k8s.aws"
GANG_LABELS = {c.POOL_LABEL: "pretrain", c.QUEUE_NAME_LABEL: "atomic-gang-queue"}
GANG_ANNOTATIONS = {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}


class WebhookProcess:
    def __init__(self, control_plane: Any, work: Path) -> None:
        self.port = free_port()
        self.ca_pem: bytes = control_plane.ca.cert_pem
        cert, key = control_plane.ca.serving("127.0.0.1").write(work, "tls.crt", "tls.key")
        self.settings_file = work / "settings.yaml"
        self.settings_file.write_text(yaml.safe_dump(SETTINGS))
        argv = [sys.executable, "-m", "provisioner.webhook", "--config", str(self.settings_file)]
        argv += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
        argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        # The webhook reads the pool a gang Job names from the cluster.
        argv += ["--kubeconfig", str(control_plane.info.kubeconfig)]
        self.proc = Supervised("webhook", argv, work / "webhook.log")
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        url = f"https://127.0.0.1:{self.port}/healthz"
        self.proc.wait_ready(
            lambda: urllib.request.urlopen(url, timeout=2, context=context).status == 200,
            30,
            "webhook /healthz",
        )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{GANG_JOB_WEBHOOK_PATH}"


@pytest.fixture
def webhook(control_plane: Any, tmp_path: Path) -> Iterator[WebhookProcess]:
    process = WebhookProcess(control_plane, tmp_path)
    yield process
    process.proc.stop()


def chart_webhook_config(tools: Any, webhook: WebhookProcess, namespace: str) -> dict[str, Any]:
    helm = Helm(tools["helm"].binary)
    rendered = helm.render({"webhook.certMode": "selfSigned"})
    config = rendered.one("ValidatingWebhookConfiguration")
    config["metadata"] = {"name": f"atomic-gang-test-{uuid.uuid4().hex[:8]}"}
    for hook in config["webhooks"]:
        hook["clientConfig"] = {
            # Each hook at its own path: the gang job one, or the pod one.
            "url": f"https://127.0.0.1:{webhook.port}{hook['clientConfig']['service']['path']}",
            "caBundle": base64.b64encode(webhook.ca_pem).decode(),
        }
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return dict(config)


def job(
    name: str, labels: dict[str, str], annotations: dict[str, str], pods: int = 4
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": True,  # nothing here runs pods; keep the Job inert anyway
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "registry.example/trainer:1"}],
                }
            },
        },
    }


def refusal(batch: k8s.BatchV1Api, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job(namespace, body)
    return dict(json.loads(err.value.body))


@contextlib.contextmanager
def register(
    kube_api: Any, config: dict[str, Any], batch: k8s.BatchV1Api, namespace: str
) -> Iterator[None]:
    admission = k8s.AdmissionregistrationV1Api(kube_api)
    admission.create_validating_webhook_configuration(config)
    # The apiserver picks up a new configuration asynchronously: wait until a dry-run
    # create of an invalid gang Job is refused by it.
    probe = job("probe", GANG_LABELS, {c.ANN_COUNT: "nope"})
    deadline = time.monotonic() + 30
    while True:
        try:
            batch.create_namespaced_job(namespace, probe, dry_run="All")
        except ApiException as err:
            if HOOK in str(err.body):
                break
        assert time.monotonic() < deadline, "the webhook configuration never took effect"
        time.sleep(0.2)
    try:
        yield
    finally:
        admission.delete_validating_webhook_configuration(config["metadata"]["name"])


@pytest.fixture
def batch(kube_api: Any) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(kube_api)


@pytest.fixture
def chart_webhook(
    tools: Any, kube_api: Any, webhook: WebhookProcess, batch: k8s.BatchV1Api, namespace: str
) -> Iterator[WebhookProcess]:
    """Registered exactly as the chart registers it (selectors included)."""
    config = chart_webhook_config(tools, webhook, namespace)
    with register(kube_api, config, batch, namespace):
        yield webhook


@pytest.fixture
def every_job_webhook(
    tools: Any, kube_api: Any, webhook: WebhookProcess, batch: k8s.BatchV1Api, namespace: str
) -> Iterator[WebhookProcess]:
    """Registered with the chart's selection removed: the server sees every Job."""
    config = chart_webhook_config(tools, webhook, namespace)
    for hook in config["webhooks"]:
        hook.pop("objectSelector", None)
        hook.pop("matchConditions", None)
    with register(kube_api, config, batch, namespace):
        yield webhook


def test_an_invalid_gang_job_is_refused_at_create_naming_the_field(
    chart_webhook: WebhookProcess, batch: k8s.BatchV1Api, namespace: str
) -> None:
    body = job("mismatch", GANG_LABELS, {**GANG_ANNOTATIONS, c.ANN_COUNT: "3"})
    status = refusal(batch, namespace, body)

    # The words the Workload path would put in the admission check, behind the apiserver's
    # own prefix.
    with pytest.raises(GangShapeError) as expected:
        parse_gang_shape(
            GANG_LABELS,
            body["metadata"]["annotations"],
            4,
            load_settings(chart_webhook.settings_file),
        )
    assert status["code"] == 422
    assert status["reason"] == "Invalid"
    assert status["message"] == f'admission webhook "{HOOK}" denied the request: {expected.value}'
    assert status["details"]["causes"][0]["field"] == f"metadata.annotations[{c.ANN_COUNT}]"
    assert batch.list_namespaced_job(namespace).items == []


def test_a_valid_gang_job_is_created(
    chart_webhook: WebhookProcess, batch: k8s.BatchV1Api, namespace: str
) -> None:
    created = batch.create_namespaced_job(namespace, job("pretrain", GANG_LABELS, GANG_ANNOTATIONS))
    assert created.metadata.annotations[c.ANN_COUNT] == "4"
    assert batch.read_namespaced_job("pretrain", namespace).metadata.uid == created.metadata.uid


@pytest.mark.parametrize("registration", ["chart_webhook", "every_job_webhook"])
def test_a_non_gang_job_is_untouched(
    registration: str, request: pytest.FixtureRequest, batch: k8s.BatchV1Api, namespace: str
) -> None:
    request.getfixturevalue(registration)
    labels = {"app": "etl", c.QUEUE_NAME_LABEL: "batch-queue"}
    annotations = {"example.com/owner": "team-a"}
    body = job("etl", labels, annotations, pods=3)
    created = batch.create_namespaced_job(namespace, body)
    assert created.metadata.labels == {**created.metadata.labels, **labels}
    assert created.metadata.annotations == annotations
    assert created.spec.parallelism == 3


@pytest.mark.parametrize("registration", ["chart_webhook", "every_job_webhook"])
def test_annotations_without_the_pool_label_are_refused(
    registration: str, request: pytest.FixtureRequest, batch: k8s.BatchV1Api, namespace: str
) -> None:
    request.getfixturevalue(registration)
    labels = {c.QUEUE_NAME_LABEL: "atomic-gang-queue"}
    status = refusal(batch, namespace, job("no-pool", labels, GANG_ANNOTATIONS))
    fields = [cause["field"] for cause in status["details"]["causes"]]
    assert fields == [f"metadata.labels[{c.POOL_LABEL}]"]


def test_with_the_controller_stopped_a_gang_job_is_refused(
    chart_webhook: WebhookProcess, batch: k8s.BatchV1Api, namespace: str
) -> None:
    chart_webhook.proc.stop()
    status = refusal(batch, namespace, job("pretrain", GANG_LABELS, GANG_ANNOTATIONS))
    assert f'failed calling webhook "{HOOK}"' in status["message"]
    assert batch.list_namespaced_job(namespace).items == []
    # The chart sends only gang Jobs (our label or annotations), so the outage stops nothing
    # else; a Job with our annotations alone is refused too.
    batch.create_namespaced_job(namespace, job("etl", {"app": "etl"}, {}, pods=1))
    status = refusal(batch, namespace, job("no-pool", {}, GANG_ANNOTATIONS))
    assert f'failed calling webhook "{HOOK}"' in status["message"]


# --- only a pool's own pods on its nodes (docs/POD_ADMISSION.md) ---------------------------
POD_HOOK = "validate-pod.atomic-gang.k8s.aws"
EVERYTHING = [{"operator": "Exists"}]


def pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    containers = [{"name": "c", "image": "registry.example/agent:1"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": containers, **spec}}  # fmt: skip


@pytest.fixture
def pool_of_team_a(kube_api: Any) -> Iterator[tuple[str, str]]:
    """A pool owned by namespace team-a and one Node of it: (pool, node)."""
    name = f"int-{uuid.uuid4().hex[:8]}"
    custom, core = k8s.CustomObjectsApi(kube_api), k8s.CoreV1Api(kube_api)
    body = pool_body(name, spec=pool_spec(pool=name, owner_namespace="team-a"))
    custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, body)
    node = f"ip-{name}"
    core.create_node({"metadata": {"name": node, "labels": {c.POOL_LABEL: name}}})
    yield name, node
    core.delete_node(node)
    custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.GNP_PLURAL, name)


def test_a_pod_reaching_a_pool_of_another_namespace_is_refused_and_plain_pods_are_not_sent(
    chart_webhook: WebhookProcess, kube_api: Any, namespace: str, pool_of_team_a: tuple[str, str]
) -> None:
    pool_name, node = pool_of_team_a
    core = k8s.CoreV1Api(kube_api)
    on_node = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}  # fmt: skip
    for spec in (
        {"tolerations": EVERYTHING, "nodeSelector": {c.POOL_LABEL: pool_name}},
        {"tolerations": EVERYTHING, "affinity": on_node},
        {"nodeName": node},
    ):
        with pytest.raises(ApiException) as err:
            core.create_namespaced_pod(namespace, pod("intruder", spec))
        message = json.loads(err.value.body)["message"]
        assert message.startswith(f'admission webhook "{POD_HOOK}" denied the request'), message
        assert f"pool {pool_name}" in message and "belongs to namespace team-a" in message
    # Tolerating everything without selecting a gang node, or nothing at all: created.
    for name, spec in (("agent", {"tolerations": EVERYTHING}), ("plain", {})):
        assert core.create_namespaced_pod(namespace, pod(name, spec), dry_run="All").metadata

    # A pod created bound to a node of no pool (as a static or hand-placed pod is): sent
    # once, at its creation, and allowed.
    core.create_namespaced_pod(namespace, pod("bound", {"nodeName": "no-gang-node"}))

    # With no replica answering, only the pods the matchCondition sends are held back.
    chart_webhook.proc.stop()
    assert core.create_namespaced_pod(namespace, pod("plain", {}), dry_run="All").metadata
    # A bound pod's later updates are not sent: its node cannot change, and it tolerates
    # nothing of ours, so a label on it does not wait on the webhook.
    labelled = core.patch_namespaced_pod("bound", namespace, {"metadata": {"labels": {"x": "y"}}})
    assert labelled.metadata.labels["x"] == "y"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, pod("agent", {"tolerations": EVERYTHING}))
    assert f'failed calling webhook "{POD_HOOK}"' in json.loads(err.value.body)["message"]
