"""The chart's settings ConfigMap and ServiceAccount in the embedded default, as an install has.

Used by `LocalEnvironment` (dev up, the demo, the e2e fixtures). The controller runs in
this process, so no Deployment is installed, but what an operator's tools read from a
cluster is: the pinned helm renders `templates/configmap.yaml`,
`templates/serviceaccount.yaml` and `templates/ownership.yaml` from the environment's
settings as chart values (release `atomic-gang`, namespace `atomic-gang-system`, so the
chart's Lease name and namespace are the controller's), and they are created or replaced,
except the ownership key's empty Secret, which is only created: the controller fills it as
in an install. `atomic-gang doctor --kubeconfig` finds the settings through them.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import yaml
from kubernetes import client as k8s

from provisioner.api.settings import Settings
from provisioner.toolchain.versions import KUBE_APISERVER

CHART: Final = Path(__file__).resolve().parents[1] / "charts" / "atomic-gang-provisioner"
RELEASE: Final = "atomic-gang"
SERVICE_ACCOUNT: Final = "atomic-gang-controller"
_TEMPLATES: Final = (
    "templates/configmap.yaml",
    "templates/serviceaccount.yaml",
    "templates/ownership.yaml",
)


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
        "limits.maxLifetime": s["limits"]["max_lifetime"],
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


def template_argv(
    helm: Path, settings: Settings, namespace: str, templates: Iterable[str]
) -> list[str]:
    """`helm template` of the chart as release `RELEASE` in `namespace`, only `templates`,
    with `chart_values(settings)` as strings; a caller appends what else it sets."""
    argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", namespace]
    argv += ["--kube-version", KUBE_APISERVER.version]
    for template in templates:
        argv += ["--show-only", template]
    for key, value in chart_values(settings).items():
        argv += ["--set-string", f"{key}={value}"]
    return argv


def run_template(argv: list[str], what: str) -> list[dict[str, Any]]:
    """The documents `helm template` renders; a failure names `what` and helm's words."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"helm could not render {what}: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def render(helm: Path, settings: Settings, namespace: str) -> list[dict[str, Any]]:
    argv = template_argv(helm, settings, namespace, _TEMPLATES)
    # Numbers and booleans as YAML values, not strings: the chart's `int` takes either, but
    # iam.* booleans must stay booleans.
    iam = settings.iam
    argv += [
        "--set",
        f"iam.selfManageInstanceProfile={str(iam.self_manage_instance_profile).lower()}",
    ]
    argv += ["--set", f"iam.manageAccessEntry={str(iam.manage_access_entry).lower()}"]
    # Lists as JSON: what a Job may choose, as the in-process controller has it.
    lists = {
        "allowedInstanceTypes": list(settings.allowed_instance_types),
        "amiPolicy.allowedOwners": list(settings.ami_policy.allowed_owners),
        "amiPolicy.allowedImageIds": list(settings.ami_policy.allowed_image_ids),
    }
    for key, items in lists.items():
        argv += ["--set-json", f"{key}={json.dumps(items)}"]
    # Company rules for instances, as the in-process controller has them.
    argv += ["--set-json", f"tags={json.dumps(dict(settings.instances.extra_tags))}"]
    volume = settings.instances.root_volume
    if volume is not None:
        rendered = volume.model_dump(exclude_none=True)
        rendered["volume_size"] = f"{volume.volume_size}Gi"
        camel = {"volume_size": "volumeSize", "volume_type": "volumeType"}
        chart = {camel.get(k, k): v for k, v in rendered.items()}
        argv += ["--set-json", f"rootVolume={json.dumps(chart)}"]
    return run_template(argv, "the chart's settings")


def install(api: k8s.ApiClient, helm: Path, settings: Settings, namespace: str) -> dict[str, Any]:
    """Create or replace the rendered ConfigMap and ServiceAccount in `namespace`, create
    the ownership key's empty Secret as an install does, and return the settings the
    ConfigMap carries (as a mapping)."""
    core = k8s.CoreV1Api(api)
    rendered: dict[str, Any] = {}
    for doc in render(helm, settings, namespace):
        name = doc["metadata"]["name"]
        if doc["kind"] == "Secret":
            # Created, never replaced: a restart over the same etcd keeps the key the
            # controller wrote, as the chart's keep policy does across a reinstall.
            try:
                core.create_namespaced_secret(namespace, doc)
            except k8s.ApiException as err:
                if err.status != 409:
                    raise
            continue
        if doc["kind"] in ("Role", "RoleBinding"):
            continue  # the in-process controller runs with the environment's own credentials
        if doc["kind"] == "ConfigMap":
            rendered = yaml.safe_load(doc["data"]["settings.yaml"])
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
    return rendered
