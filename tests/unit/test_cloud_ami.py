"""AMI resolution: an explicit id wins; otherwise SSM by the type's architecture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.stub import Stubber

from devenv.emulator import eks_ami_id
from provisioner.cloud.ami import ami_parameter_name, pick_architecture
from provisioner.cloud.errors import CloudError, ErrorKind
from tests.unit.test_cloud_helpers import REGION, World, emulated_aws

pytestmark = pytest.mark.unit


@pytest.fixture
def world() -> Iterator[World]:
    with emulated_aws() as w:
        yield w


def test_explicit_ami_wins_without_any_call(world: World) -> None:
    # Stubbers with no queued answers fail any call made through them.
    with Stubber(world.clients.ssm) as ssm, Stubber(world.clients.ec2) as ec2:
        choice = world.engine.resolve_ami(
            k8s_version="1.33",
            instance_type="p5.48xlarge",
            variant="nvidia",
            explicit_ami_id="ami-0123456789abcdef0",
        )
        ssm.assert_no_pending_responses()
        ec2.assert_no_pending_responses()
    assert choice.ami_id == "ami-0123456789abcdef0" and choice.source == "explicit"


@pytest.mark.parametrize(
    ("instance_type", "variant", "arch"),
    [
        ("p5.48xlarge", "nvidia", "x86_64"),
        ("m5.large", "standard", "x86_64"),
        ("m7g.large", "standard", "arm64"),
        ("g5g.xlarge", "nvidia", "arm64"),
        ("trn1.32xlarge", "neuron", "x86_64"),
    ],
)
def test_ssm_path_follows_the_instance_types_architecture(
    world: World, instance_type: str, variant: str, arch: str
) -> None:
    choice = world.engine.resolve_ami(
        k8s_version="1.33", instance_type=instance_type, variant=variant
    )
    assert choice.source == "ssm" and choice.architecture == arch
    assert choice.parameter_name == (
        f"/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/{arch}/{variant}/recommended/image_id"
    )
    assert choice.ami_id == eks_ami_id(REGION, "1.33", arch, variant)


def test_missing_parameter_is_a_config_error_naming_the_path(world: World) -> None:
    with pytest.raises(CloudError) as caught:
        world.engine.resolve_ami(k8s_version="1.12", instance_type="m5.large", variant="standard")
    assert caught.value.kind is ErrorKind.CONFIG
    assert caught.value.reason == "AmiParameterNotFound"
    assert "/aws/service/eks/optimized-ami/1.12/" in caught.value.message


def test_unknown_variant_and_architecture_are_config_errors() -> None:
    with pytest.raises(CloudError, match="InvalidAmiVariant"):
        ami_parameter_name("1.33", "x86_64", "gpu")
    with pytest.raises(CloudError, match="UnsupportedArchitecture"):
        pick_architecture("mac2.metal", ("arm64_mac",))
    assert pick_architecture("t2.micro", ("i386", "x86_64")) == "x86_64"
