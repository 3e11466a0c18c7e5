"""The emulator's EKS set-up calls (`devenv/emulator/eks_setup.py`), in-process: add-ons and
the cluster's authentication mode, as the EKS API Reference documents them, each refusal fed
the request that breaks it once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.support.emulated import emulator_in_process

pytestmark = pytest.mark.unit

REGION = "us-east-1"
CLUSTER = "my-eks-cluster"


@pytest.fixture
def eks(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with emulator_in_process(monkeypatch):
        client = boto3.client(
            "eks", region_name=REGION, config=Config(retries={"total_max_attempts": 1})
        )
        client.create_cluster(
            name=CLUSTER,
            roleArn="arn:aws:iam::123456789012:role/eks-cluster-role",
            resourcesVpcConfig={"subnetIds": []},
        )
        yield client


def error_code(error: pytest.ExceptionInfo[ClientError]) -> str:
    return str(error.value.response["Error"]["Code"])


def test_a_cluster_made_through_the_api_starts_in_config_map(eks: Any) -> None:
    mode = eks.describe_cluster(name=CLUSTER)["cluster"]["accessConfig"]["authenticationMode"]
    assert mode == "CONFIG_MAP"
    eks.create_cluster(
        name="console-like",
        roleArn="arn:aws:iam::123456789012:role/eks-cluster-role",
        resourcesVpcConfig={"subnetIds": []},
        accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"},
    )
    described = eks.describe_cluster(name="console-like")["cluster"]
    assert described["accessConfig"]["authenticationMode"] == "API_AND_CONFIG_MAP"


def test_the_authentication_mode_moves_only_forward(eks: Any) -> None:
    update = eks.update_cluster_config(
        name=CLUSTER, accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"}
    )["update"]
    assert update["type"] == "AccessConfigUpdate"
    assert update["params"] == [{"type": "AuthenticationMode", "value": "API_AND_CONFIG_MAP"}]
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    assert cluster["accessConfig"]["authenticationMode"] == "API_AND_CONFIG_MAP"
    for back in ("CONFIG_MAP", "API_AND_CONFIG_MAP"):
        with pytest.raises(ClientError) as refused:
            eks.update_cluster_config(name=CLUSTER, accessConfig={"authenticationMode": back})
        assert error_code(refused) == "InvalidParameterException"
    eks.update_cluster_config(name=CLUSTER, accessConfig={"authenticationMode": "API"})
    cluster = eks.describe_cluster(name=CLUSTER)["cluster"]
    assert cluster["accessConfig"]["authenticationMode"] == "API"


def test_an_addon_is_created_then_active(eks: Any) -> None:
    name = "eks-pod-identity-agent"
    created = eks.create_addon(clusterName=CLUSTER, addonName=name)["addon"]
    assert (created["addonName"], created["status"]) == (name, "CREATING")
    assert eks.describe_addon(clusterName=CLUSTER, addonName=name)["addon"]["status"] == "ACTIVE"
    assert eks.list_addons(clusterName=CLUSTER)["addons"] == [name]
    with pytest.raises(ClientError) as again:
        eks.create_addon(clusterName=CLUSTER, addonName=name)
    assert error_code(again) == "ResourceInUseException"
    eks.delete_addon(clusterName=CLUSTER, addonName=name)
    with pytest.raises(ClientError) as gone:
        eks.describe_addon(clusterName=CLUSTER, addonName=name)
    assert error_code(gone) == "ResourceNotFoundException"
