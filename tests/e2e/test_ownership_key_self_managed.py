"""On the embedded default, the controller keeps its ownership key as an install does.

`LocalEnvironment` creates the chart's empty ownership-key Secret and runs the controller
with the chart's default settings (`ownership.selfManaged`): the controller's start fills
the Secret with 32 random bytes, and a later start reads the same key without writing.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from kubernetes import client as k8s

from devenv.environment import LocalEnvironment
from provisioner.assembly import read_ownership_key
from provisioner.kube.client import KubeClient


def test_the_controller_fills_the_charts_secret_and_reads_it_back(
    gang_local: Callable[..., LocalEnvironment],
) -> None:
    env = gang_local()
    assert env.settings is not None and env.control_plane is not None
    managed = env.settings.ownership.self_managed
    assert managed is not None and env.settings.ownership.key_file is None
    assert managed.secret_name.endswith("-ownership-key")
    core = k8s.CoreV1Api(env.control_plane.api_client())
    secret = core.read_namespaced_secret(managed.secret_name, managed.namespace)
    assert secret.metadata.annotations["helm.sh/resource-policy"] == "keep"
    stored = base64.b64decode(secret.data["key"])
    assert len(stored) == 32
    # A restart reads the key it finds and writes nothing.
    kube = KubeClient.from_kubeconfig(env.kubeconfig_path())
    try:
        key = read_ownership_key(env.settings, kube)
    finally:
        kube.close()  # its TLS connection is not left for the garbage collector to report
    assert key is not None and key.secret == stored
    again = core.read_namespaced_secret(managed.secret_name, managed.namespace)
    assert again.metadata.resource_version == secret.metadata.resource_version
