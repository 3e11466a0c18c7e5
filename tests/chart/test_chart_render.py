"""Positive renders: the objects the chart makes, and how its values wire them together."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set

from provisioner.api import constants as c
from provisioner.api.gang_class import load_class_crd
from provisioner.api.gangnodepool import load_crd
from provisioner.webhook.server import (
    DEFAULT_CERT_DIR,
    GANG_JOB_WEBHOOK_PATH,
    GANG_POD_WEBHOOK_PATH,
)
from tests.chart.conftest import (
    CHART,
    NAMESPACE,
    NODE_ROLE,
    REQUIRED,
    STATE_BACKEND,
    STATE_SECRETS,
    Helm,
    Rendered,
)

ROLE_ARN = "arn:aws:iam::123456789012:role/atomic-gang-controller-role"


def container(rendered: Rendered) -> dict[str, Any]:
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    (only,) = pod["containers"]
    return dict(only)


def mounts(rendered: Rendered) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container(rendered)["volumeMounts"]}


def volumes(rendered: Rendered) -> dict[str, dict[str, Any]]:
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    return {v["name"]: v for v in pod["volumes"]}


def env(rendered: Rendered) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(rendered)["env"]}


def passphrase_secrets(rendered: Rendered) -> list[dict[str, Any]]:
    """Secrets other than the webhook certificate's and the ownership key's (rendered empty,
    filled by the controller): the chart must never make a stack passphrase."""
    return [
        s
        for s in rendered.all("Secret")
        if not s["metadata"]["name"].endswith(("-certs", "-ownership-key"))
    ]


def webhook_secret(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("Secret", f"{rendered.one('Deployment')['metadata']['name']}-webhook-certs")


def test_the_default_render_holds_every_object(rendered: Rendered) -> None:
    assert rendered.kinds() == sorted(
        [
            "AdmissionCheck",
            "ClusterQueue",
            "ClusterRole",
            "ClusterRole",  # the webhook certificate's (certMode=selfSigned)
            "ClusterRole",  # people's: read-only pools, aggregated into view/edit/admin
            "ClusterRole",  # people's: GangClasses, aggregated into edit/admin
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "ConfigMap",  # the settings
            "ConfigMap",  # the Grafana dashboard
            "CustomResourceDefinition",
            "CustomResourceDefinition",  # GangClass
            "Deployment",
            "GangClass",  # the default class the AdmissionCheck names
            "LocalQueue",
            "PodDisruptionBudget",
            "ResourceFlavor",
            "Role",
            "Role",  # the webhook certificate's
            "Role",  # the ownership key's
            "RoleBinding",
            "RoleBinding",
            "RoleBinding",
            "Secret",  # the webhook certificate's, rendered empty
            "Secret",  # the ownership key's, rendered empty
            "Service",
            "ServiceAccount",
            "ValidatingAdmissionPolicy",  # the controller's Node writes, narrowed
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        ]
    )
    for obj in rendered.objects:
        if obj["kind"] not in ("CustomResourceDefinition",):
            assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "atomic-gang"


def test_the_crds_are_the_packages_crds_byte_for_byte(rendered: Rendered) -> None:
    package = Path(__file__).resolve().parents[2] / "provisioner/api/crds"
    for name in ("gangnodepool.yaml", "gangclass.yaml"):
        assert (CHART / "crds" / name).read_bytes() == (package / name).read_bytes(), name
    crds = sorted(
        rendered.all("CustomResourceDefinition"), key=lambda crd: crd["spec"]["names"]["kind"]
    )
    assert crds == [load_class_crd(), load_crd()]


def test_deployment_runs_two_replicas_under_leader_election(rendered: Rendered) -> None:
    deployment = rendered.one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    args = container(rendered)["args"]
    assert args[:3] == ["controller", "--config", "/etc/atomic-gang/settings.yaml"]
    assert "--leader-election.enabled=true" in args
    assert f"--leader-election.lease-namespace={NAMESPACE}" in args
    assert env(rendered)["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_deployment_is_non_root_with_a_read_only_root(rendered: Rendered) -> None:
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    security = container(rendered)["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    # Everything the controller and the Pulumi CLI write lands on an emptyDir.
    writable = {
        path for path, name in mounts(rendered).items() if "emptyDir" in volumes(rendered)[name]
    }
    assert writable == {"/var/lib/atomic-gang", "/tmp"}
    for path in (
        "/var/lib/atomic-gang/pulumi",
        env(rendered)["PULUMI_HOME"],
        env(rendered)["HOME"],
    ):
        assert any(path == w or path.startswith(w + "/") for w in writable), path


def test_deployment_probes_and_ports(rendered: Rendered) -> None:
    main = container(rendered)
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"webhook": 9443, "metrics": 8080, "health": 8081}
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_pdb_and_service_select_the_controller_pods(rendered: Rendered) -> None:
    pod_labels = rendered.one("Deployment")["spec"]["template"]["metadata"]["labels"]
    pdb = rendered.one("PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= pod_labels.items()
    service = rendered.one("Service")["spec"]
    assert service["selector"].items() <= pod_labels.items()
    assert {(p["name"], p["port"], p["targetPort"]) for p in service["ports"]} == {
        ("webhook", 443, "webhook"),
        ("metrics", 8080, "metrics"),
    }


def test_webhook_reaches_the_service_and_fails_closed(rendered: Rendered) -> None:
    config = rendered.one("ValidatingWebhookConfiguration")
    hook, _ = config["webhooks"]
    service = rendered.one("Service")["metadata"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["clientConfig"]["service"] == {
        "name": service["name"],
        "namespace": NAMESPACE,
        "path": GANG_JOB_WEBHOOK_PATH,
        "port": 443,
    }
    # Every kind a gang is submitted as, at the version Kueue v0.19.2's integrations serve.
    assert hook["rules"] == [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": [resource],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
        for group, version, resource in (
            ("batch", "v1", "jobs"),
            ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
            ("kubeflow.org", "v1", "pytorchjobs"),
            ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
            ("kubeflow.org", "v2beta1", "mpijobs"),
        )
    ]
    # Gang Jobs are chosen by a CEL matchCondition (label or any of our annotations), not by
    # an objectSelector, which could not see annotations.
    assert "objectSelector" not in hook
    (condition,) = hook["matchConditions"]
    assert f"'{c.POOL_LABEL}' in object.metadata.labels" in condition["expression"]
    assert f"k.startsWith('{c.PREFIX}')" in condition["expression"]


def test_the_pod_webhook_sends_only_pods_that_may_reach_gang_nodes(rendered: Rendered) -> None:
    """Only a pool's own pods on its nodes (docs/POD_ADMISSION.md): the second hook of the
    same configuration (one caBundle, one rotator), on its own path, failing closed, never
    for kube-system, and only for pods that tolerate the gang taint or every taint, or name
    a node."""
    job_hook, hook = rendered.one("ValidatingWebhookConfiguration")["webhooks"]
    assert hook["name"] == "validate-pod.atomic-gang.k8s.aws"
    assert hook["clientConfig"]["service"] == {
        **job_hook["clientConfig"]["service"],
        "path": GANG_POD_WEBHOOK_PATH,
    }
    assert hook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    assert (hook["failurePolicy"], hook["sideEffects"]) == ("Fail", "None")
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
    ]
    (condition,) = hook["matchConditions"]
    assert f"t.key == '{c.GANG_TAINT_KEY}'" in condition["expression"]
    assert "t.operator == 'Exists'" in condition["expression"]
    assert "object.spec.nodeName" in condition["expression"]


def test_the_pod_webhook_can_be_turned_off_or_fail_open(helm: Helm) -> None:
    off = helm.render({"webhook.pods.enabled": False})
    (hook,) = off.one("ValidatingWebhookConfiguration")["webhooks"]
    assert hook["name"] == "validate-job.atomic-gang.k8s.aws"
    ignore = helm.render({"webhook.pods.failurePolicy": "Ignore"})
    assert ignore.one("ValidatingWebhookConfiguration")["webhooks"][1]["failurePolicy"] == "Ignore"


def test_cert_manager_mode(helm: Helm) -> None:
    rendered = helm.render({"webhook.certMode": "certManager"})
    certificate = rendered.one("Certificate")
    issuer = rendered.one("Issuer")
    config = rendered.one("ValidatingWebhookConfiguration")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"{NAMESPACE}/{certificate['metadata']['name']}"
    )
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    assert certificate["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
    }
    service = rendered.one("Service")["metadata"]["name"]
    assert f"{service}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    assert mounts(rendered)[str(DEFAULT_CERT_DIR)] == "webhook-tls"
    assert (
        volumes(rendered)["webhook-tls"]["secret"]["secretName"]
        == certificate["spec"]["secretName"]
    )


def test_cert_manager_mode_with_an_existing_issuer(helm: Helm) -> None:
    issuer = {"name": "corp-ca", "kind": "ClusterIssuer"}
    rendered = helm.render(
        {"webhook.certMode": "certManager", "webhook.certManager.issuerRef": issuer}
    )
    assert rendered.all("Issuer") == []
    assert rendered.one("Certificate")["spec"]["issuerRef"] == issuer


# -- webhook certificates (issue #30, certs) ---------------------------------------------------
SELF_MANAGED_CERT_DIR = "/var/lib/atomic-gang/webhook-tls"


def test_self_signed_is_the_default_and_needs_no_cert_manager(rendered: Rendered) -> None:
    """The default install renders nothing of cert-manager's (no CRD it needs), no
    certificate material and no caBundle: the controller makes and injects them."""
    assert not [o for o in rendered.objects if o["apiVersion"].startswith("cert-manager.io/")]
    config = rendered.one("ValidatingWebhookConfiguration")
    assert "cert-manager.io/inject-ca-from" not in (config["metadata"].get("annotations") or {})
    # An empty caBundle in the manifest would be "restored" by every sync; it is left out.
    for hook in config["webhooks"]:
        assert "caBundle" not in hook["clientConfig"]
    secret = webhook_secret(rendered)
    assert secret["type"] == "Opaque" and "data" not in secret and "stringData" not in secret
    # Served from what the controller writes, not from a mounted Secret.
    assert "webhook-tls" not in volumes(rendered)
    assert SELF_MANAGED_CERT_DIR not in mounts(rendered)
    assert SELF_MANAGED_CERT_DIR.startswith(
        next(p for p, name in mounts(rendered).items() if name == "work")
    )


def test_self_signed_settings_name_the_secret_the_configuration_and_the_hosts(
    rendered: Rendered,
) -> None:
    settings = yaml.safe_load(rendered.settings()["data"]["settings.yaml"])
    managed = settings["webhook"]["selfManaged"]
    assert settings["webhook"]["certDir"] == SELF_MANAGED_CERT_DIR
    assert managed["secretName"] == webhook_secret(rendered)["metadata"]["name"]
    assert managed["namespace"] == NAMESPACE
    config = rendered.one("ValidatingWebhookConfiguration")
    assert managed["webhookConfiguration"] == config["metadata"]["name"]
    service = config["webhooks"][0]["clientConfig"]["service"]
    assert f"{service['name']}.{NAMESPACE}.svc" in managed["hosts"]
    assert (managed["caValidity"], managed["certValidity"]) == ("8760h", "2160h")


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"webhook.certMode": "selfSigned"},
        {"webhook.certMode": "certManager"},
        {"webhook.certMode": "provided", "webhook.tls.secretName": "t", "webhook.caBundle": "Q0E="},
    ],
    ids=["default", "selfSigned", "certManager", "provided"],
)
def test_two_renders_are_byte_identical(helm: Helm, values: dict[str, str]) -> None:
    """Nothing random or time-dependent is rendered (no genCA), so a GitOps tool that
    re-renders on every sync sees no change and rolls nothing."""
    first = helm.run(*helm._args({**REQUIRED, **values}, ()))
    second = helm.run(*helm._args({**REQUIRED, **values}, ()))
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout == second.stdout


def test_no_template_generates_keys_or_reads_the_clock() -> None:
    for function in ("genCA", "genSelfSignedCert", "genSignedCert", "genPrivateKey", "now"):
        for path in (CHART / "templates").glob("*"):
            assert f"{function} " not in path.read_text(), f"{path.name} uses {function}"


def test_self_signed_lifetimes_reach_the_settings(helm: Helm) -> None:
    rendered = helm.render(
        {
            "webhook.selfSigned.caValidity": "17520h",
            "webhook.selfSigned.certValidity": "720h",
            "webhook.selfSigned.checkInterval": "30s",
        }
    )
    managed = yaml.safe_load(rendered.settings()["data"]["settings.yaml"])["webhook"]
    assert managed["selfManaged"]["caValidity"] == "17520h"
    assert managed["selfManaged"]["certValidity"] == "720h"
    assert managed["selfManaged"]["checkInterval"] == "30s"


def test_provided_mode_uses_the_given_secret_and_ca(helm: Helm) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    rendered = helm.render(
        {"webhook.certMode": "provided", "webhook.tls.secretName": "my-tls", "webhook.caBundle": ca}
    )
    assert passphrase_secrets(rendered) == []
    assert not [s for s in rendered.all("Secret") if "webhook" in s["metadata"]["name"]]
    assert rendered.all("Certificate") == []
    assert volumes(rendered)["webhook-tls"]["secret"]["secretName"] == "my-tls"
    hook = rendered.one("ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["clientConfig"]["caBundle"] == ca


def test_webhook_options(helm: Helm) -> None:
    ignore = helm.render(
        {"webhook.failurePolicy": "Ignore"}, "--set", "webhook.matchConditions=null"
    )
    hook = ignore.one("ValidatingWebhookConfiguration")["webhooks"][0]
    assert hook["failurePolicy"] == "Ignore"
    assert "matchConditions" not in hook and "objectSelector" not in hook  # every Job is sent

    off = helm.render({"webhook.enabled": False})
    assert off.all("ValidatingWebhookConfiguration") == []
    assert off.all("Certificate") == []
    assert str(DEFAULT_CERT_DIR) not in mounts(off)
    assert [p["name"] for p in off.one("Service")["spec"]["ports"]] == ["metrics"]


@pytest.mark.parametrize(
    ("values", "annotations", "env_from"),
    [
        ({}, None, None),
        (
            {"auth.mode": "irsa", "serviceAccount.roleArn": ROLE_ARN},
            {"eks.amazonaws.com/role-arn": ROLE_ARN},
            None,
        ),
        (
            {"auth.mode": "static", "auth.static.secretName": "aws-keys"},
            None,
            [{"secretRef": {"name": "aws-keys"}}],
        ),
    ],
    ids=["podIdentity", "irsa", "static"],
)
def test_auth_modes(
    helm: Helm,
    values: dict[str, Any],
    annotations: dict[str, str] | None,
    env_from: list[dict[str, Any]] | None,
) -> None:
    rendered = helm.render(values)
    account = rendered.one("ServiceAccount")
    assert account["metadata"]["name"] == "atomic-gang-controller"
    assert account["metadata"].get("annotations") == annotations
    assert container(rendered).get("envFrom") == env_from
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "atomic-gang-controller"


def test_an_existing_service_account(helm: Helm) -> None:
    rendered = helm.render({"serviceAccount.create": False, "serviceAccount.name": "mine"})
    assert rendered.all("ServiceAccount") == []
    assert rendered.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "mine"
    for binding in rendered.all("ClusterRoleBinding") + rendered.all("RoleBinding"):
        subjects = binding["subjects"]
        assert subjects == [{"kind": "ServiceAccount", "name": "mine", "namespace": NAMESPACE}]


def test_kueue_objects_are_wired_together(rendered: Rendered) -> None:
    check = rendered.one("AdmissionCheck")
    flavor = rendered.one("ResourceFlavor")
    queue = rendered.one("ClusterQueue")
    (local,) = rendered.all("LocalQueue")
    assert check["metadata"]["name"] == "atomic-gang-check"
    assert check["spec"]["controllerName"] == c.CONTROLLER_NAME
    assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"] == [
        {"name": "atomic-gang-check"}
    ]
    (group,) = queue["spec"]["resourceGroups"]
    # GPUs and EFA devices are covered by default: a GPU Job is admitted out of the box.
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"]
    (flavor_quota,) = group["flavors"]
    assert flavor_quota["name"] == flavor["metadata"]["name"]
    assert flavor_quota["resources"] == [
        {"name": "cpu", "nominalQuota": "256"},
        {"name": "memory", "nominalQuota": "1Ti"},
        {"name": "nvidia.com/gpu", "nominalQuota": "512"},
        {"name": "vpc.amazonaws.com/efa", "nominalQuota": "2048"},
    ]
    assert local["metadata"] == {
        **local["metadata"],
        "name": "atomic-gang-queue",
        "namespace": "default",
    }
    assert local["spec"] == {"clusterQueue": queue["metadata"]["name"]}


def test_kueue_extra_resources_and_namespaces(helm: Helm) -> None:
    rendered = helm.render(
        {
            "kueue.clusterQueue.nominalQuota": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": 32},
            "kueue.localQueueNamespaces": ["team-a", "team-b"],
            "kueue.queueName": "gpu-gang",
        }
    )
    group = rendered.one("ClusterQueue")["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"]
    # nominalQuota wins over the default GPU quota; EFA keeps its default.
    assert group["flavors"][0]["resources"][2:] == [
        {"name": "nvidia.com/gpu", "nominalQuota": "32"},
        {"name": "vpc.amazonaws.com/efa", "nominalQuota": "2048"},
    ]
    assert sorted(
        (q["metadata"]["namespace"], q["metadata"]["name"]) for q in rendered.all("LocalQueue")
    ) == [("team-a", "gpu-gang"), ("team-b", "gpu-gang")]


def test_gpu_and_efa_are_covered_by_default(helm: Helm) -> None:
    rendered = helm.render({"kueue.clusterQueue.nominalQuota": {"cpu": "96", "memory": "1Ti"}})
    group = rendered.one("ClusterQueue")["spec"]["resourceGroups"][0]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"]
    # The same quotas as the bootstrap's and the local environment's.
    assert group["flavors"][0]["resources"][2:] == [
        {"name": name, "nominalQuota": quota}
        for name, quota in sorted(c.DEFAULT_ACCELERATOR_QUOTA.items())
    ]
    plain = helm.render(
        {"kueue.clusterQueue.nominalQuota": {"cpu": "96", "memory": "1Ti"}},
        "--set-json",
        "kueue.clusterQueue.acceleratorQuota=null",
    )
    cpu_only = plain.one("ClusterQueue")["spec"]["resourceGroups"][0]
    assert cpu_only["coveredResources"] == ["cpu", "memory"]


def test_kueue_objects_can_each_be_left_out(helm: Helm) -> None:
    rendered = helm.render(
        {
            f"kueue.create.{k}": False
            for k in ("admissionCheck", "resourceFlavor", "clusterQueue", "localQueues")
        }
    )
    for kind in ("AdmissionCheck", "ResourceFlavor", "ClusterQueue", "LocalQueue"):
        assert rendered.all(kind) == []


def test_service_monitor(helm: Helm, rendered: Rendered) -> None:
    assert rendered.all("ServiceMonitor") == []
    on = helm.render(
        {
            "metrics.serviceMonitor.enabled": True,
            "metrics.serviceMonitor.labels": {"release": "prom"},
        }
    )
    monitor = on.one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    service = on.one("Service")["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service.items()
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]


def test_stacks_use_the_durable_backend_and_kms_without_any_secret(rendered: Rendered) -> None:
    assert passphrase_secrets(rendered) == []
    assert "PULUMI_CONFIG_PASSPHRASE" not in env(rendered)
    settings = yaml.safe_load(rendered.settings()["data"]["settings.yaml"])
    assert settings["pulumi"]["backendUrl"] == STATE_BACKEND
    assert settings["pulumi"]["secretsProvider"] == STATE_SECRETS


def test_an_empty_backend_fails_naming_the_value(helm: Helm) -> None:
    error = helm.render_error({"pulumi.backendUrl": ""})
    assert "pulumi.backendUrl is required" in error
    assert "pulumi.ephemeralState=true" in error


def test_a_passphrase_comes_only_from_a_secret_the_user_names(helm: Helm) -> None:
    error = helm.render_error({"pulumi.secretsProvider": "passphrase"})
    assert "pulumi.passphraseSecret.name is required" in error
    own = helm.render(
        {"pulumi.secretsProvider": "passphrase", "pulumi.passphraseSecret.name": "mine"}
    )
    assert passphrase_secrets(own) == []
    assert env(own)["PULUMI_CONFIG_PASSPHRASE"] == {
        "secretKeyRef": {"name": "mine", "key": "passphrase"}
    }
    # The same render twice is the same render: nothing is generated at template time.
    again = helm.render(
        {"pulumi.secretsProvider": "passphrase", "pulumi.passphraseSecret.name": "mine"}
    )
    assert again.objects == own.objects


def test_ephemeral_state_is_explicit_single_replica_and_keyed_to_the_pod(helm: Helm) -> None:
    values = {
        "pulumi.backendUrl": None,
        "pulumi.secretsProvider": "passphrase",
        "pulumi.ephemeralState": True,
        "replicaCount": 1,
    }
    ephemeral = helm.render(values, base=True)
    assert passphrase_secrets(ephemeral) == []
    assert env(ephemeral)["PULUMI_CONFIG_PASSPHRASE"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    settings = yaml.safe_load(ephemeral.settings()["data"]["settings.yaml"])
    # The controller keeps its stacks in file://<stateDir> only because it is told so.
    assert settings["pulumi"]["backendUrl"] == "" and settings["pulumi"]["ephemeralState"] is True
    two = helm.render_error({**values, "replicaCount": 2})
    assert "pulumi.ephemeralState=true with replicaCount=2" in two
    both = helm.render_error({**values, "pulumi.backendUrl": STATE_BACKEND})
    assert "contradict" in both


def test_leader_election_off_with_one_replica(helm: Helm) -> None:
    rendered = helm.render({"replicaCount": 1, "leaderElection.enabled": False})
    assert rendered.one("Deployment")["spec"]["replicas"] == 1
    assert "--leader-election.enabled=false" in container(rendered)["args"]
    assert sorted(r["metadata"]["name"] for r in rendered.all("Role")) == [
        "atomic-gang-provisioner-ownership-key",
        "atomic-gang-provisioner-webhook-certs",
    ]


# The reference's "Chart values reference" table: key -> default.
REFERENCE_DEFAULTS: dict[str, Any] = {
    "clusterName": "",
    "defaults.region": "",
    "defaults.nodeRoleArn": "",
    "defaults.mode": "runinstances",
    "defaults.keepWarmTTL": "10m",
    "defaults.maxLifetime": "4h",
    "controllerName": "atomic-gang.k8s.aws/ec2-atomic",
    "integrationMode": "admissioncheck",
    "replicaCount": 2,
    "auth.mode": "podIdentity",
    "limits.maxGangSize": 64,
    "limits.maxKeepWarmTTL": "24h",
    # Not the reference's []: the accelerator families gangs are for (issue 30).
    "allowedInstanceTypes": [
        "p4d.*",
        "p4de.*",
        "p5.*",
        "p5e.*",
        "p5en.*",
        "p6-b200.*",
        "g5.*",
        "g6.*",
        "g6e.*",
        "trn1.*",
        "trn1n.*",
        "trn2.*",
        "inf2.*",
    ],
    "allowedNodeRoleArns": [],
    "reapIntervalSeconds": 120,
    "joinDeadlineSeconds": 600,
    "acquireAttemptsBeforeRetry": 20,
    "unknownErrorAttemptsBeforeRetry": 3,
    "maxConcurrentPoolReconciles": 5,
    "stackOperations.workers": None,  # two per CPU, within the memory limit
    "leaderElection.enabled": True,
    "webhook.enabled": True,
    "webhook.certMode": "selfSigned",
    "webhook.failurePolicy": "Fail",
    "nodeBootstrap.enabled": False,
    "iam.selfManageInstanceProfile": False,
    "kueue.create.admissionCheck": True,
    "kueue.create.resourceFlavor": True,
    "kueue.create.clusterQueue": True,
    "kueue.create.localQueues": True,
    "kueue.clusterQueue.nominalQuota": {},
    "kueue.localQueueNamespaces": ["default"],
    "metrics.serviceMonitor.enabled": False,
    "podDisruptionBudget.enabled": True,
    "serviceAccount.name": "atomic-gang-controller",
    "kueue.queueName": "atomic-gang-queue",
    "kueue.admissionCheckName": "atomic-gang-check",
}


@pytest.mark.parametrize("key", sorted(REFERENCE_DEFAULTS))
def test_values_keep_the_reference_defaults(key: str) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    node: Any = values
    for part in key.split("."):
        node = node[part]
    assert node == REFERENCE_DEFAULTS[key]


def test_allowlists_reach_the_settings(helm: Helm) -> None:
    other = "arn:aws:iam::123456789012:role/second-node-role"
    rendered = helm.render(
        {"allowedNodeRoleArns": [NODE_ROLE, other], "allowedInstanceTypes": ["p5.*"]}
    )
    settings = yaml.safe_load(rendered.settings()["data"]["settings.yaml"])
    assert settings["allowedNodeRoleArns"] == [NODE_ROLE, other]
    assert settings["allowedInstanceTypes"] == ["p5.*"]


def test_helm_template_needs_no_kube_version_flag(helm: Helm) -> None:
    # The toolchain's helm carries its client-go's Kubernetes version (versions.py), which
    # meets the chart's kubeVersion; an unstamped build reports v1.20.0 and fails here.
    args = ["template", "atomic-gang", str(CHART)]
    for key, value in REQUIRED.items():
        args += ["--set-string", f"{key}={value}"]
    done = helm.run(*args)
    assert done.returncode == 0, done.stderr
    assert "kind: Deployment" in done.stdout


def test_the_grafana_dashboard_is_a_configmap_the_sidecar_discovers(rendered: Rendered) -> None:
    name = rendered.one("Deployment")["metadata"]["name"]
    config = rendered.one("ConfigMap", f"{name}-dashboard")
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config["data"]["atomic-gang-provisioner.json"])
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in ("phase", "acquisitions", "shortfalls", "time to ready", "stranded", "lag"):
        assert topic in titles
    # Every panel's query names an exported metric: tests/image checks it against a running
    # controller's /metrics.


# -- the self-managed ownership key (issue #30, ownkey) -----------------------------------------
def test_the_ownership_key_secret_is_rendered_empty_and_kept(
    helm: Helm, rendered: Rendered
) -> None:
    """The default renders the key's Secret with no data (the controller generates the key:
    two renders stay byte-identical) and kept on uninstall (a reinstall must find the key,
    or the instances signed with it can no longer be proven ours). A provided key
    (keySecret) renders none."""
    name = f"{rendered.one('Deployment')['metadata']['name']}-ownership-key"
    secret = rendered.one("Secret", name)
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert secret["type"] == "Opaque" and "data" not in secret and "stringData" not in secret
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    provided = helm.render({"ownership.keySecret": "my-ownership-key"})
    assert name not in [s["metadata"]["name"] for s in provided.all("Secret")]
