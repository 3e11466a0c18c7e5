"""The chart's settings ConfigMap and ServiceAccount in the embedded default, as an install has.

Used by `LocalEnvironment` (dev up, the demo, the e2e fixtures). The controller runs in
this process, so no Deployment is installed, but what an operator's tools read from a
cluster is: the pinned helm renders `templates/configmap.yaml` and
`templates/serviceaccount.yaml` from the environment's settings as chart values (release
`atomic-gang`, namespace `atomic-gang-system`, so the chart's Lease name and namespace are
the controller's), and they are created or replaced. `atomic-gang doctor --kubeconfig`
finds the settings through them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client as k8s

from provisioner.api.settings import Settings
from provisioner.toolchain.versions import KUBE_APISERVER

CHART: Final = Path(__file__).resolve().parents[1] / "charts" / "atomic-gang-provisioner"
RELEASE: Final = "atomic-gang"
SERVICE_ACCOUNT: Final = "atomic-gang-controller"
_TEMPLATES: Final = ("templates/configmap.yaml", "templates/serviceaccount.yaml")


def chart_values(settings: Settings) -> dict[str, str]:
    """The chart values that render `settings` (what the ConfigMap carries of them)."""
    s = settings.model_dump(mode="json")
    values = {
        "image.repository": "localhost/atomic-gang-provisioner",
        "clusterName": s["cluster_name"],
        "defaults.region": s["defaults"]["region"],
        "defaults.nodeRoleArn": s["defaults"]["node_role_arn"],
        "defaults.mode": s["defaults"]["mode"],
        "defaults.keepWarmTTL": s["defaults"]["keep_warm_ttl"],
        "defaults.maxLifetime": s["defaults"]["max_lifetime"],
        "limits.maxGangSize": str(s["limits"]["max_gang_size"]),
        "limits.maxKeepWarmTTL": s["limits"]["max_keep_warm_ttl"],
        "reapIntervalSeconds": str(s["reap_interval_seconds"]),
        "instanceIndexRefreshSeconds": str(s["instance_index_refresh_seconds"]),
        "joinDeadlineSeconds": str(s["join_deadline_seconds"]),
        "capacityBlockReleaseSeconds": str(s["capacity_block_release_seconds"]),
        "acquireAttemptsBeforeRetry": str(s["acquire_attempts_before_retry"]),
        "maxConcurrentPoolReconciles": str(s["max_concurrent_pool_reconciles"]),
        "retryBackoff.initial": s["retry_backoff"]["initial"],
        "retryBackoff.max": s["retry_backoff"]["max"],
        "metrics.port": str(s["metrics_port"]),
        "health.port": str(s["health_port"]),
        "webhook.port": str(s["webhook_port"]),
        "pulumi.stateDir": s["pulumi"]["state_dir"],
        "pulumi.backendUrl": s["pulumi"]["backend_url"],
        "pulumi.secretsProvider": s["pulumi"]["secrets_provider"],
        "pulumi.passphraseSecret.name": "local",
        "kueue.clusterQueue.nominalQuota.cpu": "1",
        "kueue.clusterQueue.nominalQuota.memory": "1Gi",
        "serviceAccount.name": SERVICE_ACCOUNT,
    }
    if s["aws"]["endpoint_url"]:
        values["aws.endpointUrl"] = s["aws"]["endpoint_url"]
    return values


def render(helm: Path, settings: Settings, namespace: str) -> list[dict[str, Any]]:
    argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", namespace]
    argv += ["--kube-version", KUBE_APISERVER.version]
    for template in _TEMPLATES:
        argv += ["--show-only", template]
    for key, value in chart_values(settings).items():
        argv += ["--set-string", f"{key}={value}"]
    # Numbers and booleans as YAML values, not strings: the chart's `int` takes either, but
    # iam.* booleans must stay booleans.
    iam = settings.iam
    argv += [
        "--set",
        f"iam.selfManageInstanceProfile={str(iam.self_manage_instance_profile).lower()}",
    ]
    argv += ["--set", f"iam.manageAccessEntry={str(iam.manage_access_entry).lower()}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"helm could not render the chart's settings: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def install(api: k8s.ApiClient, helm: Path, settings: Settings, namespace: str) -> None:
    """Create or replace the rendered ConfigMap and ServiceAccount in `namespace`."""
    core = k8s.CoreV1Api(api)
    for doc in render(helm, settings, namespace):
        name = doc["metadata"]["name"]
        create, replace = (
            (core.create_namespaced_config_map, core.replace_namespaced_config_map)
            if doc["kind"] == "ConfigMap"
            else (core.create_namespaced_service_account, core.replace_namespaced_service_account)
        )
        try:
            create(namespace, doc)
        except k8s.ApiException as err:
            if err.status != 409:  # a restart, or the previous test's environment
                raise
            replace(name, namespace, doc)
