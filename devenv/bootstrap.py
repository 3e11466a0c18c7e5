"""What an EKS cluster holds for gang nodes, created in the EC2 emulator.

Called by `LocalEnvironment.start` (the embedded default, the demo) and by the controller
integration harness: the EKS cluster record pointing at the local apiserver (with the
emulator's subnets), the node IAM role, its instance profile under the naming convention
the controller verifies, and the role's EC2_LINUX access entry; and, for the local
environment, the controller's role with the product's policy and its Pod Identity
association. Against a real account the bootstrap program in `infra/` creates the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3

from devenv.controlplane import SERVICE_CIDR, ControlPlaneInfo
from provisioner.cloud.iam_policy import StackState, controller_policy, pod_identity_trust_policy
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


CONTROLLER_ROLE_NAME = "atomic-gang-controller"


@dataclass(frozen=True)
class ControllerIdentity:
    role_arn: str
    association_id: str


def register_controller_identity(
    endpoint_url: str,
    cluster: str,
    region: str,
    *,
    namespace: str,
    service_account: str,
    node_role_arn: str,
    state: StackState,
    buy_capacity_blocks: bool = False,
) -> ControllerIdentity:
    """The controller role with the product's policy, and its Pod Identity association.

    The trust allows Pod Identity, as the bootstrap's does, and also the account's own
    principals: what an operator adds to run `atomic-gang doctor --as-controller` from
    outside the pod (AWS refuses the AssumeRole otherwise, and so does the emulator).
    """
    account = "123456789012"  # moto's default account, the one every local call lands in
    trust = pod_identity_trust_policy()
    trust["Statement"].append(
        {
            "Sid": "OperatorsAsController",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{account}:root"},
            "Action": "sts:AssumeRole",
        }
    )
    iam = _client("iam", region, endpoint_url)
    try:
        role = iam.create_role(
            RoleName=CONTROLLER_ROLE_NAME, AssumeRolePolicyDocument=json.dumps(trust)
        )["Role"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        role = iam.get_role(RoleName=CONTROLLER_ROLE_NAME)["Role"]["Arn"]
    policy = controller_policy(
        account_id=account,
        region=region,
        node_role_arns=[node_role_arn],
        cluster_name=cluster,
        state=state,
        buy_capacity_blocks=buy_capacity_blocks,
    )
    iam.put_role_policy(
        RoleName=CONTROLLER_ROLE_NAME,
        PolicyName="atomic-gang-controller",
        PolicyDocument=json.dumps(policy),
    )
    eks = _client("eks", region, endpoint_url)
    found = eks.list_pod_identity_associations(
        clusterName=cluster, namespace=namespace, serviceAccount=service_account
    )["associations"]
    if found:
        association = found[0]["associationId"]
    else:
        association = eks.create_pod_identity_association(
            clusterName=cluster, namespace=namespace, serviceAccount=service_account, roleArn=role
        )["association"]["associationId"]
    return ControllerIdentity(role_arn=str(role), association_id=str(association))
