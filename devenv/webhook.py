"""The Job webhook in the embedded default, registered exactly as the chart registers it.

Used by `LocalEnvironment` (dev up, the demo, the e2e fixtures). Serves the product's
`WebhookServer` on 127.0.0.1 with a certificate from the control plane's CA, renders the
chart's ValidatingWebhookConfiguration with the pinned helm (rules, matchConditions,
namespaceSelector, failurePolicy, timeout as an install gets them) and changes one thing:
the apiserver reaches the server by URL with our CA, as there is no Service network here.
`stop()` removes the registration first, so a stopped environment blocks no Job.
"""

from __future__ import annotations

import base64
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from devenv.processes import free_port
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.toolchain.versions import KUBE_APISERVER
from provisioner.webhook.server import JOB_WEBHOOK_PATH, WebhookServer

CHART = Path(__file__).resolve().parents[1] / "charts" / "atomic-gang-provisioner"
CONFIG_NAME = "atomic-gang-devenv"


def chart_webhook_configuration(
    helm: Path, settings: Settings, ca_pem: bytes, url: str
) -> dict[str, Any]:
    """The chart's ValidatingWebhookConfiguration for these settings, reached at `url`."""
    ca = base64.b64encode(ca_pem).decode()
    values = {
        "image.repository": "localhost/atomic-gang-provisioner",
        "clusterName": settings.cluster_name,
        "defaults.region": settings.defaults.region,
        "defaults.nodeRoleArn": settings.defaults.node_role_arn,
        # The chart refuses to render without a durable backend and its secrets; the webhook
        # uses neither, but the embedded default's own are the honest values to give.
        "pulumi.backendUrl": settings.pulumi.backend_url,
        "pulumi.secretsProvider": settings.pulumi.secrets_provider,
        "pulumi.passphraseSecret.name": "local",
        "kueue.clusterQueue.nominalQuota.cpu": "1",
        "kueue.clusterQueue.nominalQuota.memory": "1Gi",
        "webhook.certMode": "provided",
        "webhook.tls.secretName": "local",
        "webhook.caBundle": ca,
    }
    argv = [
        str(helm),
        "template",
        "atomic-gang",
        str(CHART),
        "--show-only",
        "templates/webhook.yaml",
    ]
    argv += ["--kube-version", KUBE_APISERVER.version]
    for key, value in values.items():
        argv += ["--set-string", f"{key}={value}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"helm could not render the chart's webhook: {done.stderr.strip()}")
    (config,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    config["metadata"] = {"name": CONFIG_NAME, "labels": config["metadata"].get("labels", {})}
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": ca}
    return dict(config)


class LocalWebhook:
    def __init__(self, api: k8s.ApiClient, ca: Any, helm: Path, work_dir: Path) -> None:
        self._api, self._ca, self._helm, self._work_dir = api, ca, helm, work_dir
        self._server: WebhookServer | None = None
        self.config: dict[str, Any] | None = None

    def start(self, settings: Settings) -> None:
        self._work_dir.mkdir(parents=True, exist_ok=True)
        cert, key = self._ca.serving("127.0.0.1").write(self._work_dir, "tls.crt", "tls.key")
        port = free_port()
        self._server = WebhookServer(settings, cert, key, host="127.0.0.1", port=port)
        threading.Thread(target=self._server.run, name="webhook", daemon=True).start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("the local webhook server did not start within 30 s")
            time.sleep(0.05)
        url = f"https://127.0.0.1:{port}{JOB_WEBHOOK_PATH}"
        self.config = chart_webhook_configuration(self._helm, settings, self._ca.cert_pem, url)
        admission = k8s.AdmissionregistrationV1Api(self._api)
        try:
            admission.create_validating_webhook_configuration(self.config)
        except k8s.ApiException as err:
            if err.status != 409:  # a restart over the same etcd finds the old one
                raise
            current = admission.read_validating_webhook_configuration(CONFIG_NAME)
            self.config["metadata"]["resourceVersion"] = current.metadata.resource_version
            admission.replace_validating_webhook_configuration(CONFIG_NAME, self.config)
        self._wait_effective()

    def _wait_effective(self, timeout: float = 30) -> None:
        """The apiserver loads a new configuration asynchronously: wait until a dry-run
        create of a broken gang Job is refused by it."""
        hook = self.config["webhooks"][0]["name"] if self.config else ""
        probe = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "webhook-probe", "annotations": {f"{c.PREFIX}count": "x"}},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "probe", "image": "probe"}],
                    }
                },
            },
        }
        batch = k8s.BatchV1Api(self._api)
        deadline = time.monotonic() + timeout
        while True:
            try:
                batch.create_namespaced_job("default", probe, dry_run="All")
            except k8s.ApiException as err:
                if hook in str(err.body):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the apiserver never called webhook {hook} within {timeout} s")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.config is not None:
            try:
                k8s.AdmissionregistrationV1Api(self._api).delete_validating_webhook_configuration(
                    CONFIG_NAME
                )
            except k8s.ApiException as err:
                if err.status != 404:
                    raise
            self.config = None
        if self._server is not None:
            self._server.stop()
            self._server = None
