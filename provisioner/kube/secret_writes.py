"""Writing the data of a Secret the chart rendered and the controller fills.

Used by the webhook certificate store (`webhook_certs`) and the ownership key store
(`ownership_key`): both read the Secret, decide, and write the whole object back with a
replace preconditioned on the resourceVersion they read, so replicas racing on one Secret
write it once and the others re-read the winner's data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provisioner.kube.client import KubeClient
from provisioner.kube.errors import KubeConflict
from provisioner.kube.resources import SECRETS

__all__ = ["replace_secret_data"]


def replace_secret_data(
    kube: KubeClient,
    *,
    namespace: str,
    name: str,
    read_metadata: Mapping[str, Any],
    data: Mapping[str, str],
    resource_version: str,
) -> bool:
    """Replace the Opaque Secret's data; False when another writer changed it since
    `resource_version` (a conflict). Other API errors propagate."""
    # A replace writes the whole object: keep the labels and annotations read (Helm's
    # ownership annotations and its keep policy among them, or the next upgrade refuses the
    # Secret, or an uninstall deletes it).
    kept = {k: read_metadata[k] for k in ("labels", "annotations") if k in read_metadata}
    body: dict[str, Any] = {
        "metadata": {
            **kept,
            "name": name,
            "namespace": namespace,
            "resourceVersion": resource_version,
        },
        "type": "Opaque",
        "data": dict(data),
    }
    try:
        kube.replace(SECRETS, body)
    except KubeConflict:
        return False
    return True
