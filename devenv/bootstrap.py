"""What an EKS cluster holds for gang nodes, created in the EC2 emulator.

Called by `LocalEnvironment.start` (the embedded default, the demo) and by the controller
integration harness: the EKS cluster record pointing at the local apiserver (with the
emulator's subnets), the node IAM role, its instance profile under the naming convention
the controller verifies, and the role's EC2_LINUX access entry. Against a real account the
bootstrap program in `infra/` creates the same three identity pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3

from devenv.controlplane import SERVICE_CIDR, ControlPlaneInfo
from provisioner.cloud.naming import instance_profile_name

NODE_ROLE_NAME = "eks-gang-node-role"
K8S_VERSION = "1.36"


@dataclass(frozen=True)
class NodeIdentity:
    role_arn: str
    role_name: str
    instance_profile: str


def register_cluster_and_identity(
    endpoint_url: str,
    control_plane: ControlPlaneInfo,
    cluster: str,
    region: str,
    role_name: str = NODE_ROLE_NAME,
) -> NodeIdentity:
    """The cluster record, node role, convention-named profile and access entry."""
    from devenv.emulator import EmulatorClient

    ec2 = _client("ec2", region, endpoint_url)
    subnets = [s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]]
    EmulatorClient(endpoint_url).register_eks_cluster(
        cluster,
        endpoint=control_plane.endpoint,
        certificate_authority_data=control_plane.ca_base64,
        service_ipv4_cidr=SERVICE_CIDR,
        version=K8S_VERSION,
        subnet_ids=subnets,
        region=region,
    )
    iam = _client("iam", region, endpoint_url)
    role = iam.create_role(
        RoleName=role_name,
        AssumeRolePolicyDocument='{"Version":"2012-10-17","Statement":[]}',
    )["Role"]["Arn"]
    profile = instance_profile_name(cluster, role_name)
    iam.create_instance_profile(InstanceProfileName=profile)
    iam.add_role_to_instance_profile(InstanceProfileName=profile, RoleName=role_name)
    eks = _client("eks", region, endpoint_url)
    eks.create_access_entry(clusterName=cluster, principalArn=role, type="EC2_LINUX")
    return NodeIdentity(role_arn=str(role), role_name=role_name, instance_profile=profile)


def _client(service: str, region: str, endpoint_url: str) -> Any:
    # The emulator accepts any key; fixed ones keep a developer's real profile out of reach.
    return boto3.client(
        service,
        region_name=region,
        endpoint_url=endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
