"""The settings the chart hands the controller load as the controller loads them: the
ConfigMap's file plus the Deployment's flags give a valid `Settings` equal to the values."""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

import pytest

from provisioner.api.settings import Settings, StackOperations
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
    # Left empty, the controller runs two stack operations per CPU, within its memory limit.
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
        ({"reapIntervalSeconds": 30}, "reap_interval_seconds", 30),
        ({"instanceIndexRefreshSeconds": 3}, "instance_index_refresh_seconds", 3),
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
