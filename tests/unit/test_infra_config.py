"""The bootstrap's stack configuration: keys, defaults (in step with Pulumi.yaml), refusals."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml  # type: ignore[import-untyped]  # no stubs in the pinned dev set

from infra.config import BootstrapConfig, ConfigError, load_config

pytestmark = pytest.mark.unit

PROJECT_FILE = Path(__file__).resolve().parents[2] / "Pulumi.yaml"
PROJECT = "atomic-gang-bootstrap"
REQUIRED = {
    "clusterName": "demo",
    "region": "us-east-1",
    "cpuQuota": "64",
    "memoryQuota": "256Gi",
    "imageRepository": "registry.example/atomic-gang-provisioner",
}
# Pulumi.yaml key -> BootstrapConfig field, for every key the program reads.
FIELD_OF_KEY = {
    "clusterName": "cluster_name",
    "region": "region",
    "cpuQuota": "cpu_quota",
    "memoryQuota": "memory_quota",
    "gpuQuota": "gpu_quota",
    "efaQuota": "efa_quota",
    "accountId": "account_id",
    "controllerNamespace": "controller_namespace",
    "serviceAccountName": "service_account",
    "nodeRoleName": "node_role_name",
    "extraNodeRoleArns": "extra_node_role_arns",
    "nodeRoleSsm": "node_role_ssm",
    "localQueueNamespaces": "local_queue_namespaces",
    "queueName": "queue_name",
    "admissionCheckName": "admission_check_name",
    "clusterQueueName": "cluster_queue_name",
    "resourceFlavorName": "resource_flavor_name",
    "releaseName": "release_name",
    "imageRepository": "image_repository",
    "imageTag": "image_tag",
    "webhookCertMode": "webhook_cert_mode",
    "selfManageInstanceProfile": "self_manage_instance_profile",
    "manageAccessEntry": "manage_access_entry",
    "stateBucketName": "state_bucket_name",
    "createAwsResources": "create_aws_resources",
    "nodeRoleArn": "node_role_arn",
    "stackBackendUrl": "stack_backend_url",
    "stackSecretsProvider": "stack_secrets_provider",
    "waitForController": "wait_for_controller",
    "chartValues": "chart_values",
}
# What the chart is wired to when the bootstrap makes no AWS resource.
GIVEN_AWS = {
    "nodeRoleArn": "arn:aws:iam::123456789012:role/gang-nodes",
    "stackBackendUrl": "s3://stacks?region=us-east-1",
    "stackSecretsProvider": "awskms://alias/stacks?region=us-east-1",
}


class _NoResources(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        raise AssertionError("reading configuration creates nothing")

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, []


@pytest.fixture
def stack_config() -> Iterator[dict[str, str]]:
    """Set values in here, then call load_config()."""
    pulumi.runtime.set_mocks(_NoResources(), project=PROJECT, stack="test", preview=False)
    values: dict[str, str] = {}
    yield values
    pulumi.runtime.set_all_config({})


def load(values: dict[str, str], **more: str) -> BootstrapConfig:
    pulumi.runtime.set_all_config({f"{PROJECT}:{k}": v for k, v in {**values, **more}.items()})
    return load_config()


def project_config() -> dict[str, Any]:
    return dict(yaml.safe_load(PROJECT_FILE.read_text())["config"])


def test_the_project_file_declares_every_key_and_only_those() -> None:
    assert set(project_config()) == set(FIELD_OF_KEY)
    assert set(FIELD_OF_KEY.values()) == {f.name for f in fields(BootstrapConfig)}


def test_the_project_files_defaults_are_the_programs() -> None:
    defaults = {
        f.name: f.default_factory() if f.default_factory is not MISSING else f.default
        for f in fields(BootstrapConfig)
    }
    for key, spec in project_config().items():
        field = FIELD_OF_KEY[key]
        if "default" not in spec:
            assert key in REQUIRED, f"{key} has no default in Pulumi.yaml but is optional"
            continue
        expected = defaults[field]
        assert spec["default"] == (list(expected) if isinstance(expected, tuple) else expected), key


def test_the_project_file_points_at_infra() -> None:
    project = yaml.safe_load(PROJECT_FILE.read_text())
    assert project["name"] == PROJECT
    assert project["main"] == "infra/"
    assert project["runtime"]["name"] == "python"
    assert (PROJECT_FILE.parent / "infra" / "__main__.py").is_file()


def test_load_reads_the_required_keys_and_defaults(stack_config: dict[str, str]) -> None:
    cfg = load(REQUIRED)
    assert (cfg.cluster_name, cfg.region, cfg.cpu_quota, cfg.memory_quota) == (
        "demo",
        "us-east-1",
        "64",
        "256Gi",
    )
    assert cfg.local_queue_namespaces == ("default",)
    assert cfg.node_role == "atomic-gang-node-demo"
    assert cfg.controller_role == "atomic-gang-controller-demo"
    # GPUs and EFA devices are covered by default, with the documented quotas.
    assert cfg.quotas == {
        "cpu": "64",
        "memory": "256Gi",
        "nvidia.com/gpu": "512",
        "vpc.amazonaws.com/efa": "2048",
    }


def test_load_reads_lists_and_flags(stack_config: dict[str, str]) -> None:
    cfg = load(
        REQUIRED,
        localQueueNamespaces='["a","b"]',
        extraNodeRoleArns='["arn:aws:iam::123456789012:role/x"]',
        selfManageInstanceProfile="true",
        nodeRoleSsm="false",
        gpuQuota="16",
        efaQuota="64",
    )
    assert cfg.local_queue_namespaces == ("a", "b")
    assert cfg.extra_node_role_arns == ("arn:aws:iam::123456789012:role/x",)
    assert cfg.self_manage_instance_profile is True
    assert cfg.node_role_ssm is False
    assert cfg.quotas["nvidia.com/gpu"] == "16"
    assert cfg.quotas["vpc.amazonaws.com/efa"] == "64"


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_a_missing_required_key_is_named(stack_config: dict[str, str], missing: str) -> None:
    with pytest.raises(pulumi.ConfigMissingError, match=missing):
        load({k: v for k, v in REQUIRED.items() if k != missing})


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"cpuQuota": "0"}, "cpuQuota is 0"),
        ({"memoryQuota": "0Gi"}, "memoryQuota is 0Gi"),
        ({"clusterName": "-bad"}, "clusterName"),
        ({"webhookCertMode": "acme"}, "webhookCertMode"),
        ({"localQueueNamespaces": "[]"}, "localQueueNamespaces is empty"),
        ({"extraNodeRoleArns": '"one"'}, "extraNodeRoleArns must be a list"),
    ],
)
def test_bad_values_are_refused_by_name(
    stack_config: dict[str, str], changes: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        load(REQUIRED, **changes)


def test_the_aws_half_is_on_by_default_and_waits_for_the_controller(
    stack_config: dict[str, str],
) -> None:
    cfg = load(REQUIRED)
    assert cfg.create_aws_resources is True and cfg.wait_for_controller is True
    assert cfg.chart_values == {}


def test_without_the_aws_half_the_wiring_comes_from_the_stack(
    stack_config: dict[str, str],
) -> None:
    cfg = load(
        REQUIRED,
        createAwsResources="false",
        waitForController="false",
        chartValues='{"replicaCount": 1, "webhook": {"failurePolicy": "Ignore"}}',
        **GIVEN_AWS,
    )
    assert cfg.create_aws_resources is False and cfg.wait_for_controller is False
    assert (cfg.node_role_arn, cfg.stack_backend_url, cfg.stack_secrets_provider) == tuple(
        GIVEN_AWS.values()
    )
    assert cfg.chart_values == {"replicaCount": 1, "webhook": {"failurePolicy": "Ignore"}}


@pytest.mark.parametrize("missing", sorted(GIVEN_AWS))
def test_without_the_aws_half_each_wiring_key_is_required_by_name(
    stack_config: dict[str, str], missing: str
) -> None:
    given = {k: v for k, v in GIVEN_AWS.items() if k != missing}
    with pytest.raises(ConfigError, match=f"createAwsResources=false needs {missing}"):
        load(REQUIRED, createAwsResources="false", **given)


def test_with_the_aws_half_the_wiring_keys_are_refused_by_name(
    stack_config: dict[str, str],
) -> None:
    # The bootstrap makes the node role and the state store itself: a given one would be
    # silently ignored.
    with pytest.raises(ConfigError, match="nodeRoleArn: read only with createAwsResources"):
        load(REQUIRED, nodeRoleArn=GIVEN_AWS["nodeRoleArn"])


def test_chart_values_must_be_an_object(stack_config: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="chartValues must be an object"):
        load(REQUIRED, chartValues='["replicaCount"]')


def test_long_cluster_names_keep_role_names_within_iams_limit() -> None:
    cfg = BootstrapConfig(
        cluster_name="c" * 100, region="us-east-1", cpu_quota="1", memory_quota="1Gi"
    )
    assert len(cfg.controller_role) == 64 and len(cfg.node_role) == 64
    other = BootstrapConfig(
        cluster_name="c" * 99 + "d", region="us-east-1", cpu_quota="1", memory_quota="1Gi"
    )
    assert other.controller_role != cfg.controller_role
