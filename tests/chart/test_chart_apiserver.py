"""The rendered objects are accepted by the real kube-apiserver (server-side dry run), with
Kueue's CRDs installed, so a schema mistake in a template fails here and not at install."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import dynamic  # type: ignore[import-untyped]

from tests.chart.conftest import Helm

# Their CRDs (cert-manager, Prometheus Operator) are not part of the local control plane;
# ours is installed by the session already and compared byte for byte elsewhere.
_NOT_HERE = {"Certificate", "Issuer", "ServiceMonitor", "CustomResourceDefinition"}


@pytest.mark.parametrize("cert_mode", ["certManager", "selfSigned"])
def test_every_object_passes_apiserver_validation(
    helm: Helm, kube_api: Any, kueue_crds: list[str], namespace: str, cert_mode: str
) -> None:
    rendered = helm.render(
        {
            "webhook.certMode": cert_mode,
            "kueue.localQueueNamespaces": [namespace],
            "kueue.clusterQueue.nominalQuota": {
                "cpu": "64",
                "memory": "256Gi",
                "nvidia.com/gpu": 8,
            },
        },
        namespace=namespace,
    )
    client = dynamic.DynamicClient(kube_api)
    checked = []
    for obj in rendered.objects:
        if obj["kind"] in _NOT_HERE:
            continue
        api = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        # A server-side apply dry run validates the object whether or not one of that name
        # already exists in the shared control plane (other suites create the default
        # AdmissionCheck); a dry-run create would report a conflict instead.
        namespace = obj["metadata"].get("namespace") if api.namespaced else None
        api.server_side_apply(
            body=obj,
            namespace=namespace,
            field_manager="chart-render-test",
            force_conflicts=True,
            dry_run="All",
        )
        checked.append(obj["kind"])
    assert {"Deployment", "ValidatingWebhookConfiguration", "ClusterQueue", "LocalQueue"} <= set(
        checked
    )
