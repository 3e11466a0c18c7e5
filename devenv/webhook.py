"""The gang job and pod webhook in the embedded default, installed as the chart installs it.

Used by `LocalEnvironment` (dev up, the demo, the e2e fixtures). Renders the chart's
webhook objects with the pinned helm in its default certificate mode (selfSigned): the
empty certificate Secret, created in the controller's namespace, and the
ValidatingWebhookConfiguration (rules, matchConditions, namespaceSelector, failurePolicy,
timeout as an install gets them, and no caBundle). The webhook is built by the product's
composition root (`build_webhook`) from the settings the chart renders for the controller,
so its own rotator fills the Secret and sets the caBundle. One thing differs: the apiserver
reaches the server by URL on 127.0.0.1, as there is no Service network here, so the
certificate names that address. `stop()` removes the registration first, so a stopped
environment blocks no Job.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from devenv.chart_install import run_template, template_argv
from devenv.processes import free_port
from provisioner.api import constants as c
from provisioner.api.settings import SelfManagedCerts, Settings, WebhookSettings
from provisioner.assembly import ServedWebhook, build_webhook
from provisioner.kube.client import KubeClient
from provisioner.webhook.review import PoolLookup

CONFIG_NAME = "atomic-gang-devenv"
_TEMPLATES = ("templates/webhook.yaml", "templates/configmap.yaml")
# The embedded default checks the Secret and caBundle often: a reset is undone at once.
_CHECK_INTERVAL = "1s"


def render_chart_webhook(
    helm: Path, settings: Settings, namespace: str
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The chart's certificate Secret, webhook configuration and the controller's settings
    file (as a mapping) for these settings, in the chart's default certificate mode."""
    argv = template_argv(helm, settings, namespace, _TEMPLATES)
    docs = run_template(argv, "the chart's webhook")
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    (config,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    (settings_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return secret, config, yaml.safe_load(settings_map["data"]["settings.yaml"])


def chart_webhook_configuration(config: dict[str, Any], base_url: str) -> dict[str, Any]:
    """The chart's configuration, renamed for the embedded default, each hook reached at
    `base_url` plus the path the chart's Service reference names (the gang job and the
    pod webhook serve different paths)."""
    config = dict(config)
    config["metadata"] = {"name": CONFIG_NAME, "labels": config["metadata"].get("labels", {})}
    for hook in config["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"{base_url}{path}"}  # the caBundle is the controller's
    return config


class LocalWebhook:
    def __init__(self, api: k8s.ApiClient, helm: Path, work_dir: Path, namespace: str) -> None:
        self._api, self._helm, self._work_dir, self._namespace = api, helm, work_dir, namespace
        self._served: ServedWebhook | None = None
        self.config: dict[str, Any] | None = None

    def start(self, settings: Settings, pools: PoolLookup) -> None:
        self._work_dir.mkdir(parents=True, exist_ok=True)
        secret, config, rendered = render_chart_webhook(self._helm, settings, self._namespace)
        port = free_port()
        managed = {
            **rendered["webhook"]["selfManaged"],
            "webhookConfiguration": CONFIG_NAME,
            "hosts": ["127.0.0.1"],
            "checkInterval": _CHECK_INTERVAL,
        }
        webhook = WebhookSettings(
            cert_dir=self._work_dir / "serving",
            self_managed=SelfManagedCerts.model_validate(managed),
        )
        self._create_secret(secret)
        self.config = chart_webhook_configuration(config, f"https://127.0.0.1:{port}")
        self._register(self.config)
        self._served = build_webhook(
            settings.model_copy(update={"webhook": webhook}),
            KubeClient(self._api),
            pools=pools,
            host="127.0.0.1",
            port=port,
        )
        self._served.start()
        self._wait_effective()

    def _create_secret(self, secret: dict[str, Any]) -> None:
        try:
            k8s.CoreV1Api(self._api).create_namespaced_secret(self._namespace, secret)
        except k8s.ApiException as err:
            if err.status != 409:  # a restart over the same etcd keeps the certificates
                raise

    def _register(self, config: dict[str, Any]) -> None:
        admission = k8s.AdmissionregistrationV1Api(self._api)
        try:
            admission.create_validating_webhook_configuration(config)
        except k8s.ApiException as err:
            if err.status != 409:  # a restart over the same etcd finds the old one
                raise
            current = admission.read_validating_webhook_configuration(CONFIG_NAME)
            config["metadata"]["resourceVersion"] = current.metadata.resource_version
            admission.replace_validating_webhook_configuration(CONFIG_NAME, config)
            config["metadata"].pop("resourceVersion")

    def _wait_effective(self, timeout: float = 60) -> None:
        """The controller sets the caBundle, and the apiserver loads a changed configuration
        asynchronously: wait until a dry-run create of a broken gang Job is refused by the
        webhook itself (not by a failed call, which names the webhook too)."""
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
        last = "the probe Job was created"
        while True:
            try:
                batch.create_namespaced_job("default", probe, dry_run="All")
            except k8s.ApiException as err:
                try:
                    last = str(json.loads(err.body).get("message", err.body))
                except (TypeError, ValueError):
                    last = str(err.body)
                if last.startswith(f'admission webhook "{hook}" denied the request'):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"webhook {hook} did not answer within {timeout} s; the apiserver said: {last}"
                )
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
        if self._served is not None:
            self._served.stop()
            self._served = None
