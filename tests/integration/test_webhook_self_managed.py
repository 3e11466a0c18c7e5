"""The webhook's self-managed certificate against the real kube-apiserver.

The chart's default install (webhook.certMode=selfSigned) renders an empty Secret and a
webhook configuration without a caBundle. Here both are created as rendered (in this test's
namespace; the configuration reaches the server by URL, as there is no Service network),
and the webhook is built by the composition root from the settings the chart gives the
controller. The API server must then call it over TLS and refuse a bad gang Job, through a
GitOps-style reset of the caBundle and through a CA rotation.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set
from kubernetes import client as k8s  # type: ignore[import-untyped]
from kubernetes.client.rest import ApiException  # type: ignore[import-untyped]

from devenv.processes import free_port
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.assembly import ServedWebhook, build_webhook
from provisioner.kube.client import KubeClient
from provisioner.webhook.certs import WebhookCerts
from tests.chart.conftest import Helm

ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
HOOK = "validate-job.atomic-gang.k8s.aws"
DENIED = f'admission webhook "{HOOK}" denied the request'
# Gang labels and a count that is not a number: the webhook's own refusal.
BAD_JOB_LABELS = {c.POOL_LABEL: "pretrain", c.QUEUE_NAME_LABEL: "atomic-gang-queue"}


def bad_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": BAD_JOB_LABELS,
            "annotations": {c.ANN_COUNT: "four", c.ANN_INSTANCE_TYPE: "p4d.24xlarge"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "registry.example/trainer:1"}],
                }
            },
        },
    }


def answer(batch: k8s.BatchV1Api, namespace: str) -> str:
    """The API server's message for a bad gang Job (the webhook's, or its failure to call)."""
    try:
        batch.create_namespaced_job(namespace, bad_job("probe"), dry_run="All")
    except ApiException as err:
        return str(json.loads(err.body).get("message", err.body))
    return "created"


def wait_denied(batch: k8s.BatchV1Api, namespace: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    message = ""
    while time.monotonic() < deadline:
        message = answer(batch, namespace)
        if message.startswith(DENIED):
            return message
        time.sleep(0.2)
    raise AssertionError(f"the webhook never refused the bad Job itself; last answer: {message}")


class Installed:
    def __init__(self, kube_api: Any, namespace: str, rendered: Any, port: int) -> None:
        self.admission = k8s.AdmissionregistrationV1Api(kube_api)
        self.core = k8s.CoreV1Api(kube_api)
        self.namespace = namespace
        # The webhook's certificate Secret (the chart also renders the ownership key's).
        deployment = rendered.one("Deployment")["metadata"]["name"]
        secret = rendered.one("Secret", f"{deployment}-webhook-certs")
        secret["metadata"]["namespace"] = namespace
        self.secret_name = secret["metadata"]["name"]
        # What `helm install` adds: the release's ownership, which must survive the writes.
        secret["metadata"]["annotations"] = {"meta.helm.sh/release-name": "atomic-gang"}
        self.secret_metadata = {k: secret["metadata"][k] for k in ("labels", "annotations")}
        self.core.create_namespaced_secret(namespace, secret)
        config = rendered.one("ValidatingWebhookConfiguration")
        config["metadata"]["name"] = f"atomic-gang-certs-{uuid.uuid4().hex[:8]}"
        for hook in config["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]  # as the chart renders it
            path = hook["clientConfig"]["service"]["path"]  # the job or the pod path
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}"}
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        self.manifest = config
        self.name = config["metadata"]["name"]
        self.admission.create_validating_webhook_configuration(config)

    def ca_bundle(self) -> bytes:
        config = self.admission.read_validating_webhook_configuration(self.name)
        encoded = config.webhooks[0].client_config.ca_bundle or ""
        return base64.b64decode(encoded)

    def secret(self) -> WebhookCerts:
        data = self.core.read_namespaced_secret(self.secret_name, self.namespace).data
        certs = WebhookCerts.from_secret_data(data)
        assert certs is not None
        return certs

    def reapply_manifest(self) -> None:
        """What a sync that replaces the object from the manifest does: no caBundle."""
        current = self.admission.read_validating_webhook_configuration(self.name)
        body = json.loads(json.dumps(self.manifest))
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        self.admission.replace_validating_webhook_configuration(self.name, body)

    def remove(self) -> None:
        self.admission.delete_validating_webhook_configuration(self.name)


@pytest.fixture
def installed(
    tools: Any, kube_api: Any, kube_client: KubeClient, namespace: str, tmp_path: Path
) -> Iterator[tuple[Installed, ServedWebhook]]:
    rendered = Helm(tools["helm"].binary).render(namespace=namespace)  # every default
    port = free_port()
    install = Installed(kube_api, namespace, rendered, port)
    chart_settings = yaml.safe_load(rendered.settings()["data"]["settings.yaml"])
    managed = chart_settings["webhook"]["selfManaged"]
    # Only the address differs from an install: the API server dials 127.0.0.1.
    managed |= {"webhookConfiguration": install.name, "hosts": ["127.0.0.1"], "checkInterval": "1s"}
    settings = Settings.model_validate(
        {
            "clusterName": "demo",
            "defaults": {"region": "us-east-1", "nodeRoleArn": ROLE},
            "pulumi": {"ephemeralState": True},
            "webhook": {"certDir": str(tmp_path / "serving"), "selfManaged": managed},
        }
    )
    served = build_webhook(settings, kube_client, host="127.0.0.1", port=port)
    served.start()
    try:
        yield install, served
    finally:
        served.stop()
        install.remove()


def served_port(install: Installed) -> int:
    url = install.manifest["webhooks"][0]["clientConfig"]["url"]
    return int(url.split(":")[2].split("/")[0])


def test_the_api_server_calls_the_webhook_with_its_self_managed_certificate(
    installed: tuple[Installed, ServedWebhook], kube_api: Any, namespace: str
) -> None:
    install, served = installed
    batch = k8s.BatchV1Api(kube_api)
    message = wait_denied(batch, namespace, timeout=60)
    assert c.ANN_COUNT in message
    assert batch.list_namespaced_job(namespace).items == []
    certs = install.secret()
    assert install.ca_bundle() == certs.ca.cert_pem
    assert served.server.serving_cert_pem == certs.serving.cert_pem
    assert served.ready()

    # A sync re-applies the manifest, which has no caBundle: every call now fails TLS...
    install.reapply_manifest()
    assert install.ca_bundle() == b""
    # ... until the controller puts it back, within a few check intervals.
    wait_denied(batch, namespace, timeout=30)
    assert install.ca_bundle() == certs.ca.cert_pem
    assert install.secret() == certs  # nothing was regenerated for a reset caBundle

    # An operator forces a CA rotation by removing the CA key: a new CA and serving
    # certificate, the old CA kept in the bundle while the switch happens. Every call in
    # between is answered by the webhook itself.
    install.core.patch_namespaced_secret(
        install.secret_name, namespace, [{"op": "remove", "path": "/data/ca.key"}]
    )
    deadline = time.monotonic() + 60
    answers = []
    while served.server.serving_cert_pem == certs.serving.cert_pem:
        assert time.monotonic() < deadline, "the rotated certificate was never served"
        answers.append(answer(batch, namespace))
        time.sleep(0.2)
    rotated = install.secret()
    assert rotated.ca != certs.ca and rotated.previous_ca_pem == certs.ca.cert_pem
    assert served.server.serving_cert_pem == rotated.serving.cert_pem
    assert install.ca_bundle() == rotated.ca.cert_pem + certs.ca.cert_pem
    for _ in range(10):  # and after it
        answers.append(answer(batch, namespace))
        time.sleep(0.2)
    assert answers and all(a.startswith(DENIED) for a in answers), answers
    # The API server keeps its connection open; once idle past the server's keep-alive it
    # dials again and must verify the new certificate against the bundle.
    time.sleep(7)
    wait_denied(batch, namespace, timeout=5)
    presented = ssl.get_server_certificate(("127.0.0.1", served_port(install)))
    assert presented.encode().strip() == rotated.serving.cert_pem.strip()
    assert served.ready()
    assert batch.list_namespaced_job(namespace).items == []
    meta = install.core.read_namespaced_secret(install.secret_name, namespace).metadata
    assert (meta.labels, meta.annotations) == (
        install.secret_metadata["labels"],
        install.secret_metadata["annotations"],
    )
