"""The bootstrap's Kubernetes half for real: `pulumi up`, then `pulumi destroy`, of `infra/`
(the Kueue objects and the Helm release of the chart) on the embedded default, through the
real Pulumi CLI and the Kubernetes provider built from Go modules
(`devenv/bootstrap_kubernetes.py`, in a child process).

The AWS half is off (`createAwsResources=false`): the pulumi-aws provider is not served by
the Go module proxy, so it is covered under Pulumi's mocks (`tests/unit/test_infra_*.py`).
The session's Kueue manager runs, so Kueue adds its `resource-in-use` finalizers to the
ClusterQueue, the flavor and the check and removes them on delete as in a cluster; no
Workload is ever queued on them. The
apiserver is shared with the worker's other tests: every name here is this test's own, and
the release's validating webhook selects only this test's namespace, where no Job is made.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from devenv.processes import descendants
from provisioner.api import constants as c

# Run by `make test` only once `late-builds` has finished, so no step of this test ever
# waits on a build inside its timeout (a build can take 15 minutes on a busy machine).
pytestmark = pytest.mark.late_tools

REPO = Path(__file__).resolve().parents[2]
KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)
IN_USE = "kueue.x-k8s.io/resource-in-use"
# Each step takes seconds; a bound well under pytest's own names the step that hung.
STEP_SECONDS = 240


class Bootstrap:
    """Runs `python -m devenv.bootstrap_kubernetes <action>` on one work directory."""

    def __init__(self, work_dir: Path, kubeconfig: Path, config: dict[str, Any], tools: Any):
        self.argv = [
            sys.executable,
            "-m",
            "devenv.bootstrap_kubernetes",
            "--work-dir",
            str(work_dir),
            "--kubeconfig",
            str(kubeconfig),
            "--config",
            json.dumps(config),
            "--pulumi",
            str(tools["pulumi"].binary),
            "--provider",
            str(tools["pulumi-kubernetes"].binary),
        ]
        # Whether anything `up` made may still be in the cluster.
        self.standing = False

    def __call__(self, action: str) -> dict[str, Any]:
        self.standing = self.standing or action == "up"
        proc = subprocess.Popen(
            [*self.argv, action],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=STEP_SECONDS)
        except subprocess.TimeoutExpired:
            # A step that hangs goes with the CLI and the provider it started (the CLI puts
            # its plugins in process groups of their own), or they would outlive the test.
            for pid in [*descendants(proc.pid), proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"{action} did not finish in {STEP_SECONDS}s:\n{stderr[-6000:]}")
        assert proc.returncode == 0, f"{action} failed:\n{stderr[-6000:]}"
        self.standing = action == "up"
        return dict(json.loads(stdout.strip().splitlines()[-1]))


@pytest.fixture
def bootstraps() -> Iterator[list[Bootstrap]]:
    """Each one is destroyed at the end if the test left it standing: a release's settings
    ConfigMap, left on the shared apiserver, would be found by later tests' discovery."""
    made: list[Bootstrap] = []
    yield made
    for bootstrap in made:
        if bootstrap.standing:
            with contextlib.suppress(AssertionError, pytest.fail.Exception):
                bootstrap("destroy")


@pytest.fixture
def names(kube_api: Any) -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:8]
    made = {
        "queue": f"boot-queue-{suffix}",
        "clusterQueue": f"boot-cq-{suffix}",
        "check": f"boot-check-{suffix}",
        "flavor": f"boot-flavor-{suffix}",
        "release": f"boot-{suffix}",
        "releaseNamespace": f"boot-{suffix}",
    }
    yield made
    # Helm never deletes a namespace it created (nor does the bootstrap's destroy).
    core = k8s.CoreV1Api(kube_api)
    if core.list_namespace(field_selector=f"metadata.name={made['releaseNamespace']}").items:
        core.delete_namespace(made["releaseNamespace"])


def _kueue_objects(custom: k8s.CustomObjectsApi, names: dict[str, str], ns: str) -> dict[str, Any]:
    """Each of the bootstrap's Kueue objects, None where it does not exist."""

    def get(plural: str, name: str, namespace: str | None = None) -> Any:
        try:
            if namespace:
                return custom.get_namespaced_custom_object(*KUEUE, namespace, plural, name)
            return custom.get_cluster_custom_object(*KUEUE, plural, name)
        except k8s.ApiException as err:
            if err.status == 404:
                return None
            raise

    return {
        "AdmissionCheck": get("admissionchecks", names["check"]),
        "ResourceFlavor": get("resourceflavors", names["flavor"]),
        "ClusterQueue": get("clusterqueues", names["clusterQueue"]),
        "LocalQueue": get("localqueues", names["queue"], ns),
    }


def _release_objects(api: Any, names: dict[str, str]) -> dict[str, list[str]]:
    """What the Helm release made, found by its instance label, and Helm's record of it."""
    instance = f"app.kubernetes.io/instance={names['release']}"
    ns = names["releaseNamespace"]
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    rbac, admission = k8s.RbacAuthorizationV1Api(api), k8s.AdmissionregistrationV1Api(api)
    listed = {
        "helm release record": core.list_namespaced_secret(
            ns, label_selector=f"owner=helm,name={names['release']}"
        ),
        "Deployment": apps.list_namespaced_deployment(ns, label_selector=instance),
        "ServiceAccount": core.list_namespaced_service_account(ns, label_selector=instance),
        "ClusterRole": rbac.list_cluster_role(label_selector=instance),
        "ValidatingWebhookConfiguration": admission.list_validating_webhook_configuration(
            label_selector=instance
        ),
    }
    return {kind: [o.metadata.name for o in found.items] for kind, found in listed.items()}


def test_up_makes_the_queues_and_the_release_and_destroy_removes_them(
    control_plane: Any,
    kube_api: Any,
    kueue: Any,
    tools: Any,
    namespace: str,
    names: dict[str, str],
    bootstraps: list[Bootstrap],
    tmp_path: Path,
) -> None:
    config = {
        "clusterName": "bootstrap-test",
        "region": "us-east-1",
        "cpuQuota": "8",
        "memoryQuota": "32Gi",
        "imageRepository": "registry.invalid/atomic-gang-provisioner",
        "imageTag": "test",
        "localQueueNamespaces": [namespace],
        "queueName": names["queue"],
        "clusterQueueName": names["clusterQueue"],
        "admissionCheckName": names["check"],
        "resourceFlavorName": names["flavor"],
        "releaseName": names["release"],
        "controllerNamespace": names["releaseNamespace"],
        "createAwsResources": False,
        "waitForController": False,
        "nodeRoleArn": "arn:aws:iam::123456789012:role/bootstrap-test-nodes",
        "stackBackendUrl": "s3://bootstrap-test-stacks?region=us-east-1",
        "stackSecretsProvider": "awskms://alias/bootstrap-test?region=us-east-1",
        # The chart's Job and pod webhooks (failurePolicy Fail) see only this test's namespace.
        "chartValues": {
            "webhook": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "pods": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            }
        },
    }
    bootstrap = Bootstrap(tmp_path / "bootstrap", control_plane.info.kubeconfig, config, tools)
    bootstraps.append(bootstrap)
    custom = k8s.CustomObjectsApi(kube_api)

    outputs = bootstrap("up")["outputs"]

    assert outputs["queueName"] == names["queue"]
    assert outputs["releaseNamespace"] == names["releaseNamespace"]
    made = _kueue_objects(custom, names, namespace)
    assert all(made.values()), {kind: obj is not None for kind, obj in made.items()}
    queue = made["ClusterQueue"]
    assert queue["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": names["check"]}]
    }
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["name"] == names["flavor"]
    assert made["LocalQueue"]["spec"]["clusterQueue"] == names["clusterQueue"]
    # The real Kueue saw them: its finalizer is on the queue, the flavor and the check.
    for kind in ("ClusterQueue", "ResourceFlavor", "AdmissionCheck"):
        assert IN_USE in made[kind]["metadata"].get("finalizers", []), kind
    release = _release_objects(kube_api, names)
    assert all(release.values()), release
    (webhook,) = (
        k8s.AdmissionregistrationV1Api(kube_api)
        .list_validating_webhook_configuration(
            label_selector=f"app.kubernetes.io/instance={names['release']}"
        )
        .items
    )
    for hook in webhook.webhooks:  # the Job hook and the pod hook
        assert hook.namespace_selector.match_labels == {"kubernetes.io/metadata.name": namespace}
    # Nothing holds the queues: destroy needs no Workload evicted first.
    workloads = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    assert workloads == []

    assert bootstrap("destroy") == {"result": "succeeded"}

    assert _kueue_objects(custom, names, namespace) == dict.fromkeys(made)
    assert _release_objects(kube_api, names) == {kind: [] for kind in release}
    # Only what the chart keeps on purpose outlives the release (docs/UPGRADING.md): the
    # ownership key, so a reinstall still proves the old instances ours.
    kept = k8s.CoreV1Api(kube_api).list_namespaced_secret(
        names["releaseNamespace"], label_selector=f"app.kubernetes.io/instance={names['release']}"
    )
    assert [s.metadata.name for s in kept.items] == [
        f"{names['release']}-atomic-gang-provisioner-ownership-key"
    ]
