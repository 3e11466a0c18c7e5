"""The webhooks a controller run here serves, registered with the local apiserver.

Kueue, JobSet and Trainer serve their webhooks with a certificate our CA signed; their
configurations (from their own module's manifests) are registered with a 127.0.0.1 URL and
that CA, once every hook's path has a handler behind it. JobSet's and Trainer's are taken
away with the process; Kueue's stay across its restarts, as an install's do.
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
    configuration name prefix, the hooks kept (any rule on one of ``groups``, or on one of
    ``resources`` as (group, resource)), and the namespaces its hooks leave alone."""

    manifests: str
    prefix: str
    groups: frozenset[str]
    resources: frozenset[tuple[str, str]] = frozenset()
    skip_namespaces: tuple[str, ...] = ()

    def wants(self, hook: dict[str, Any]) -> bool:
        return any(
            group in self.groups or (group, resource) in self.resources
            for rule in hook.get("rules", [])
            for group in rule.get("apiGroups", [])
            for resource in rule.get("resources", []) or [""]
        )


class Webhooks:
    """A controller's own webhook configurations, registered at 127.0.0.1 with our CA."""

    def __init__(self, control_plane: ControlPlane, own: OwnWebhooks) -> None:
        self._cp = control_plane
        self._own = own
        self.names: list[tuple[str, str]] = []

    def configurations(self, tool: ResolvedTool, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
        """Only the hooks `OwnWebhooks.wants`: the rest sit in front of kinds nothing here
        runs (JobSet's Pod webhooks: no kubelet or scheduler runs here) and fail closed."""
        docs = []
        for doc in load_yaml_documents([tool.asset(self._own.manifests)]):
            doc = copy.deepcopy(doc)
            doc["metadata"] = {"name": f"{self._own.prefix}-{doc['metadata']['name']}"}
            hooks = []
            for hook in doc.get("webhooks", []):
                if not self._own.wants(hook):
                    continue
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{hook['clientConfig']['service']['path']}",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                }
                if self._own.skip_namespaces:
                    hook["namespaceSelector"] = {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/metadata.name",
                                "operator": "NotIn",
                                "values": list(self._own.skip_namespaces),
                            }
                        ]
                    }
                hooks.append(hook)
            doc["webhooks"] = hooks
            docs.append(doc)
        return docs

    def register(self, docs: list[dict[str, Any]]) -> None:
        """Each configuration replaced (deleted, then created): a restart's port differs."""
        adm = k8s.AdmissionregistrationV1Api(self._cp.api_client())
        registered = []
        for doc in docs:
            name = doc["metadata"]["name"]
            _delete_webhook_configuration(adm, doc["kind"], name)
            if doc["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(doc)
            else:
                adm.create_validating_webhook_configuration(doc)
            registered.append((doc["kind"], name))
        self.names = registered

    def remove(self) -> None:
        """Taken away with the process: they fail closed."""
        if self.names:
            adm = k8s.AdmissionregistrationV1Api(self._cp.api_client())
            for kind, name in self.names:
                _delete_webhook_configuration(adm, kind, name)
            self.names = []


def hooks_served(docs: list[dict[str, Any]], context: ssl.SSLContext) -> bool:
    """Whether every hook's URL has a handler behind it, over TLS verified with ``context``.
    JobSet and Trainer register their webhook handlers in a goroutine of their own, after
    their /readyz (the webhook server listening) can already pass; until then the server
    answers each hook's path with 404, which the apiserver would turn into a failed call for
    the first object made. (Kueue registers its handlers before its manager starts, so it
    passes at once, but a handler missing from its build would show here, not in a test.)"""
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
