"""The settings the chart hands the controller load as the controller loads them: the
ConfigMap's file plus the Deployment's flags give a valid `Settings` equal to the values."""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

import pytest

from provisioner.api.settings import Settings, StackOperations, StartupTaint
from provisioner.api.settings_sources import settings_from_argv
from tests.chart.conftest import NAMESPACE, NODE_ROLE, STATE_BACKEND, STATE_SECRETS, Helm, Rendered


def controller_settings(rendered: Rendered, tmp_path: Path) -> Settings:
    config = rendered.settings()
    deployment = rendered.one("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "settings"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "settings"]
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    args = container["args"]
    assert args[0] == "controller"
    config_path = args[args.index("--config") + 1]
    assert Path(config_path).parent == Path(mount["mountPath"])
    # Write the ConfigMap where the test can read it, and point --config there.
    local = tmp_path / Path(config_path).name
    local.write_text(config["data"][Path(config_path).name])
    # The controller takes its own flags first and hands the rest to the settings loader.
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--log-level")
    known, rest = own.parse_known_args(args[1:])
    assert known.log_level == "INFO"
    return settings_from_argv([a if a != config_path else str(local) for a in rest])


def test_default_settings(rendered: Rendered, tmp_path: Path) -> None:
    settings = controller_settings(rendered, tmp_path)
    assert settings.cluster_name == "my-eks-cluster"
    assert settings.defaults.region == "us-east-1"
    assert settings.defaults.node_role_arn == NODE_ROLE
    assert settings.defaults.keep_warm_ttl == timedelta(minutes=10)
    assert settings.limits.max_keep_warm_ttl == timedelta(hours=24)
    assert settings.leader_election.enabled is True
    assert settings.leader_election.lease_namespace == NAMESPACE
    assert settings.pulumi.backend_url == STATE_BACKEND
    assert settings.pulumi.secrets_provider == STATE_SECRETS
    assert settings.retry_backoff.initial == timedelta(seconds=5)
    assert settings.retry_backoff.max == timedelta(minutes=5)
    # Left empty, the controller runs two stack operations per CPU, within its memory limit
    # (sized to the host at start-up: unset in the settings).
    assert settings.stack_operations.workers == StackOperations().workers
    ports = {
        p["name"]: p["containerPort"]
        for p in rendered.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert ports == {
        "webhook": settings.webhook_port,
        "metrics": settings.metrics_port,
        "health": settings.health_port,
    }


@pytest.mark.parametrize(
    ("values", "field", "expected"),
    [
        ({"defaults.keepWarmTTL": "15m"}, "defaults.keep_warm_ttl", timedelta(minutes=15)),
        ({"defaults.mode": "fleet"}, "defaults.mode", "fleet"),
        ({"limits.maxGangSize": 128}, "limits.max_gang_size", 128),
        ({"reapIntervalSeconds": 30}, "reap_interval", timedelta(seconds=30)),
        ({"instanceIndexRefreshSeconds": 3}, "instance_index_refresh", timedelta(seconds=3)),
        ({"retryBackoff.initial": "1s"}, "retry_backoff.initial", timedelta(seconds=1)),
        ({"retryBackoff.max": "90s"}, "retry_backoff.max", timedelta(seconds=90)),
        ({"iam.selfManageInstanceProfile": True}, "iam.self_manage_instance_profile", True),
        ({"iam.manageAccessEntry": True}, "iam.manage_access_entry", True),
        ({"pulumi.backendUrl": "s3://bucket/gangs"}, "pulumi.backend_url", "s3://bucket/gangs"),
        ({"aws.endpointUrl": "http://127.0.0.1:5000"}, "aws.endpoint_url", "http://127.0.0.1:5000"),
        ({"webhook.port": 10250}, "webhook_port", 10250),
        ({"leaderElection.leaseName": "gang-leader"}, "leader_election.lease_name", "gang-leader"),
        ({"stackOperations.workers": 3}, "stack_operations.workers", 3),
        ({}, "stack_operations.provider_host", "shared"),
        (
            {"stackOperations.providerHost": "perOperation"},
            "stack_operations.provider_host",
            "perOperation",
        ),
    ],
)
def test_values_reach_the_settings(
    helm: Helm, tmp_path: Path, values: dict[str, object], field: str, expected: object
) -> None:
    settings = controller_settings(helm.render(values), tmp_path)
    node: object = settings
    for part in field.split("."):
        node = getattr(node, part)
    assert node == expected


def test_settings_change_rolls_the_pods(helm: Helm, rendered: Rendered) -> None:
    def checksum(r: Rendered) -> str:
        return str(
            r.one("Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/settings"]
        )

    assert checksum(rendered) == checksum(helm.render())
    assert checksum(rendered) != checksum(helm.render({"joinDeadlineSeconds": 900}))


def test_the_ownership_key_secret_is_mounted_where_the_settings_read_it(
    helm: Helm, tmp_path: Path
) -> None:
    assert controller_settings(helm.render(), tmp_path).ownership.key_file is None
    rendered = helm.render({"ownership.keySecret": "agp-ownership"})
    settings = controller_settings(rendered, tmp_path)
    # A key the installer provides replaces the self-managed one.
    assert settings.ownership.self_managed is None
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "ownership-key"]
    assert volume["secret"] == {
        "secretName": "agp-ownership",
        "items": [{"key": "key", "path": "key"}],
    }
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "ownership-key"]
    assert settings.ownership.key_file == Path(mount["mountPath"]) / "key"


# -- webhook certificates (issue #30, certs) ---------------------------------------------------
def test_default_webhook_certificate_is_self_managed(rendered: Rendered, tmp_path: Path) -> None:
    """The controller loads the default render's settings as: make and rotate the
    certificate in the rendered Secret, for the rendered webhook configuration."""
    managed = controller_settings(rendered, tmp_path).webhook.self_managed
    assert managed is not None
    secret = f"{rendered.one('Deployment')['metadata']['name']}-webhook-certs"
    assert managed.secret_name == rendered.one("Secret", secret)["metadata"]["name"]
    assert managed.namespace == NAMESPACE
    config = rendered.one("ValidatingWebhookConfiguration")["metadata"]["name"]
    assert managed.webhook_configuration == config
    assert (managed.ca_validity, managed.cert_validity) == (
        timedelta(days=365),
        timedelta(days=90),
    )
    assert managed.check_interval == timedelta(seconds=10)


@pytest.mark.parametrize("mode", ["certManager", "provided"])
def test_mounted_certificates_are_not_self_managed(helm: Helm, tmp_path: Path, mode: str) -> None:
    values: dict[str, object] = {"webhook.certMode": mode}
    if mode == "provided":
        values |= {"webhook.tls.secretName": "my-tls", "webhook.caBundle": "Q0E="}
    settings = controller_settings(helm.render(values), tmp_path)
    assert settings.webhook.self_managed is None


# -- the self-managed ownership key (issue #30, ownkey) -----------------------------------------
def test_default_ownership_key_is_self_managed_in_the_rendered_secret(
    rendered: Rendered, tmp_path: Path
) -> None:
    """The controller loads the default render's settings as: keep the ownership key in
    the Secret the chart renders, in the release namespace."""
    ownership = controller_settings(rendered, tmp_path).ownership
    assert ownership.key_file is None
    assert ownership.self_managed is not None
    secret = rendered.one("Secret", ownership.self_managed.secret_name)
    assert secret["metadata"]["name"].endswith("-ownership-key")
    assert ownership.self_managed.namespace == NAMESPACE == secret["metadata"]["namespace"]


def test_startup_taints_reach_the_settings(helm: Helm, tmp_path: Path) -> None:
    # Default: none; a node is usable once Ready with room for one gang pod.
    assert controller_settings(helm.render({}), tmp_path).startup_taints == ()
    taints = [
        {"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"},
        {"key": "example.com/setup", "value": "pending"},
    ]
    settings = controller_settings(helm.render({"startupTaints": taints}), tmp_path)
    assert settings.startup_taints == (
        StartupTaint(key="node.cilium.io/agent-not-ready", effect="NoExecute"),
        StartupTaint(key="example.com/setup", value="pending", effect="NoSchedule"),
    )
