"""The webhooks a training-job controller serves, registered with the local apiserver.

JobSet and Trainer serve their webhooks with a certificate our CA signed; their
configurations (from their own module's manifests) are registered with a 127.0.0.1 URL and
that CA, once every hook's path has a handler behind it, and taken away with the process.
"""

from __future__ import annotations

import base64
import copy
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devenv.controlplane import ControlPlane, load_yaml_documents
from provisioner.toolchain.installer import ResolvedTool


@dataclass(frozen=True)
class OwnWebhooks:
    """The webhooks a controller registers here: its manifests (a path in its module), the
    configuration name prefix, and the API groups whose hooks are kept."""

    manifests: str
    prefix: str
    groups: frozenset[str]


class Webhooks:
    """A controller's own webhook configurations, registered at 127.0.0.1 with our CA."""

    def __init__(self, control_plane: ControlPlane, own: OwnWebhooks) -> None:
        self._cp = control_plane
        self._own = own
        self.names: list[tuple[str, str]] = []

    def configurations(self, tool: ResolvedTool, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
        """Only hooks on the groups named: JobSet's Pod webhooks are left out, as no kubelet
        or scheduler runs here and they would sit in front of every Pod."""
        docs = []
        for doc in load_yaml_documents([tool.asset(self._own.manifests)]):
            doc = copy.deepcopy(doc)
            doc["metadata"] = {"name": f"{self._own.prefix}-{doc['metadata']['name']}"}
            hooks = []
            for hook in doc.get("webhooks", []):
                groups = {g for rule in hook["rules"] for g in rule.get("apiGroups", [])}
                if not groups & self._own.groups:
                    continue
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                }
                hooks.append(hook)
            doc["webhooks"] = hooks
            docs.append(doc)
        return docs

    def register(self, docs: list[dict[str, Any]]) -> None:
        adm = k8s.AdmissionregistrationV1Api(self._cp.api_client())
        for doc in docs:
            name = doc["metadata"]["name"]
            _delete_webhook_configuration(adm, doc["kind"], name)
            if doc["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(doc)
            else:
                adm.create_validating_webhook_configuration(doc)
            self.names.append((doc["kind"], name))

    def remove(self) -> None:
        """Taken away with the process: they fail closed."""
        if self.names:
            adm = k8s.AdmissionregistrationV1Api(self._cp.api_client())
            for kind, name in self.names:
                _delete_webhook_configuration(adm, kind, name)
            self.names = []


def hooks_served(docs: list[dict[str, Any]], context: ssl.SSLContext) -> bool:
    """Whether every hook's URL has a handler behind it. JobSet and Trainer register their
    webhook handlers in a goroutine of their own, after their /readyz (the webhook server
    listening) can already pass; until then the server answers each hook's path with 404,
    which the apiserver would turn into a failed call for the first object made."""
    urls = [hook["clientConfig"]["url"] for doc in docs for hook in doc["webhooks"]]
    return all(_handled(url, context) for url in urls)


def _handled(url: str, context: ssl.SSLContext) -> bool:
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=b""), timeout=2, context=context)
    except urllib.error.HTTPError as err:
        return err.code != 404  # a handler's refusal of an empty review is still a handler
    return True


def _delete_webhook_configuration(
    adm: k8s.AdmissionregistrationV1Api, kind: str, name: str
) -> None:
    delete = (
        adm.delete_mutating_webhook_configuration
        if kind == "MutatingWebhookConfiguration"
        else adm.delete_validating_webhook_configuration
    )
    try:
        delete(name)
    except ApiException as err:
        if err.status != 404:
            raise
