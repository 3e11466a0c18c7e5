"""The trust policies (the controller role's, for Pod Identity or IRSA; the node role's)
and the AWS-managed policies the node role carries.
"""

from __future__ import annotations

from typing import Final

from provisioner.cloud.iam_document import VERSION, Policy, partition_of

__all__ = [
    "EC2_PRINCIPAL",
    "NODE_ROLE_POLICY_NAMES",
    "POD_IDENTITY_PRINCIPAL",
    "irsa_trust_policy",
    "node_role_policy_arns",
    "node_role_trust_policy",
    "pod_identity_trust_policy",
]

POD_IDENTITY_PRINCIPAL: Final = "pods.eks.amazonaws.com"
EC2_PRINCIPAL: Final = "ec2.amazonaws.com"

# The EKS worker policies, in the reference's order; SSM is the optional last one.
NODE_ROLE_POLICY_NAMES: Final = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonSSMManagedInstanceCore",
)


def pod_identity_trust_policy() -> Policy:
    """Trust for EKS Pod Identity: the agent assumes the role and tags the session."""
    return {
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "EksPodIdentity",
                "Effect": "Allow",
                "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }


def irsa_trust_policy(oidc_provider_arn: str, namespace: str, service_account: str) -> Policy:
    """Trust for IRSA: only this ServiceAccount's web identity token, for STS."""
    issuer = oidc_provider_arn.split(":oidc-provider/", 1)[-1]
    return {
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "EksIrsa",
                "Effect": "Allow",
                "Principal": {"Federated": oidc_provider_arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{issuer}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                        f"{issuer}:aud": "sts.amazonaws.com",
                    }
                },
            }
        ],
    }


def node_role_trust_policy() -> Policy:
    """Trust for the gang nodes' role: EC2 instances assume it."""
    return {
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "Ec2Nodes",
                "Effect": "Allow",
                "Principal": {"Service": EC2_PRINCIPAL},
                "Action": "sts:AssumeRole",
            }
        ],
    }


def node_role_policy_arns(region: str, *, ssm: bool = True) -> tuple[str, ...]:
    """The AWS-managed worker policies for the node role (SSM access optional)."""
    names = NODE_ROLE_POLICY_NAMES if ssm else NODE_ROLE_POLICY_NAMES[:-1]
    return tuple(f"arn:{partition_of(region)}:iam::aws:policy/{name}" for name in names)
