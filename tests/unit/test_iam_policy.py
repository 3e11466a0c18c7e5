"""The controller's IAM policy: its tag conditions, its PassRole scope, its trust policies,
and that it grants every AWS call the code makes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.cloud import ec2api
from provisioner.cloud.iam_policy import (
    EKS_AMI_PARAMETERS,
    StackState,
    controller_policy,
    irsa_trust_policy,
    main,
    node_role_policy_arns,
    node_role_trust_policy,
    partition_of,
    pod_identity_trust_policy,
)
from provisioner.cloud.naming import instance_profile_name

pytestmark = pytest.mark.unit

ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/eks-gang-node-role"
ROLE_B = f"arn:aws:iam::{ACCOUNT}:role/second-node-role"
REPO = Path(__file__).resolve().parents[2]


def policy(**kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "account_id": ACCOUNT,
        "region": "us-east-1",
        "node_role_arns": [ROLE],
        "cluster_name": "demo",
    }
    return controller_policy(**{**args, **kwargs})


def statements(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in doc["Statement"]}


def actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def test_every_mutating_ec2_grant_names_this_cluster() -> None:
    # What the evaluator tests (test_iam_enforcement) exercise case by case; here: no
    # mutating EC2 or SSM grant is left without this cluster in its condition or resource.
    doc = policy(cluster_name="team-a")
    for statement in doc["Statement"]:
        mutating = [
            a
            for a in actions(statement)
            if a.startswith("ec2:") and not a.startswith("ec2:Describe")
        ]
        # Launch parts that carry no tags of their own; each launch also needs the
        # instance's request tags and this cluster's template (test_iam_launch_resources).
        unscoped = (
            "LaunchGangVolumesAndInterfacesFromATemplate",
            "LaunchGangFleetVolumes",
            "LaunchIntoTheClustersNetwork",
            "LaunchOnlyImagesOfTheAllowedOwners",
        )
        if not mutating or statement["Sid"] in unscoped:
            continue
        text = json.dumps(statement.get("Condition"))
        assert '"team-a"' in text, statement["Sid"]
        assert statement["Resource"] != "*", statement["Sid"]


def test_the_tag_condition_covers_only_what_a_launch_creates() -> None:
    by_sid = statements(policy())
    tagged = {
        "StringEquals": {
            f"aws:RequestTag/{c.TAG_MANAGED}": "true",
            f"aws:RequestTag/{c.TAG_CLUSTER}": "demo",
        }
    }
    run = by_sid["LaunchGangInstancesFromATemplate"]
    assert run["Resource"] == "arn:aws:ec2:us-east-1:123456789012:instance/*"
    assert run["Condition"] == {
        **tagged,
        "ArnLike": {"ec2:LaunchTemplate": "arn:aws:ec2:us-east-1:123456789012:launch-template/*"},
    }
    fleet = by_sid["LaunchGangFleets"]
    assert sorted(arn.split(":")[-1] for arn in fleet["Resource"]) == ["fleet/*", "instance/*"]
    assert fleet["Condition"] == tagged
    network = by_sid["LaunchIntoTheClustersNetwork"]
    assert "Condition" not in network
    kinds = {arn.split(":")[-1].split("/")[0] for arn in network["Resource"]}
    assert kinds == {"subnet", "security-group", "placement-group"}
    image = by_sid["LaunchOnlyImagesOfTheAllowedOwners"]
    assert image["Resource"] == "arn:aws:ec2:us-east-1::image/*"  # AMIs have no account
    # amiPolicy's default owners; `self` is the account itself in ec2:Owner.
    assert image["Condition"] == {"StringEquals": {"ec2:Owner": ["123456789012", "amazon"]}}


def test_ssm_reaches_only_the_eks_optimized_ami_parameters() -> None:
    read = statements(policy(region="cn-north-1"))["ReadEKSOptimizedAMIParameters"]
    assert read["Resource"] == (
        "arn:aws-cn:ssm:cn-north-1::parameter/aws/service/eks/optimized-ami/*"
    )
    # Every parameter name the controller builds lies under it.
    from provisioner.cloud.ami import ami_parameter_name

    name = ami_parameter_name("1.36", "x86_64", "nvidia")
    assert name.startswith(EKS_AMI_PARAMETERS.rstrip("*"))


def test_pass_role_reaches_only_the_allowed_node_roles_and_only_ec2() -> None:
    pass_role = statements(policy(node_role_arns=[ROLE_B, ROLE, ROLE_B]))["PassNodeRoleToEC2Only"]
    assert actions(pass_role) == ["iam:PassRole"]
    assert pass_role["Resource"] == [ROLE, ROLE_B]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    # No other statement may pass a role.
    others = [s for s in policy()["Statement"] if s["Sid"] != "PassNodeRoleToEC2Only"]
    assert not any(a.startswith("iam:PassRole") for s in others for a in actions(s))


def test_eni_delete_is_scoped_to_the_clusters_region_account_and_cni_tag() -> None:
    eni = statements(policy(region="eu-west-1"))["DeleteThisClustersVPCCNIInterfaces"]
    assert eni["Resource"] == f"arn:aws:ec2:eu-west-1:{ACCOUNT}:network-interface/*"
    assert eni["Condition"] == {
        "StringEquals": {"aws:ResourceTag/cluster.k8s.amazonaws.com/name": "demo"}
    }
    china = statements(policy(region="cn-north-1"))["DeleteThisClustersVPCCNIInterfaces"]
    assert china["Resource"].startswith("arn:aws-cn:ec2:cn-north-1:")


def test_no_wildcard_actions() -> None:
    every = policy(cluster_name="demo", self_manage_instance_profile=True, manage_access_entry=True)
    for statement in every["Statement"]:
        assert statement["Effect"] == "Allow"
        for action in actions(statement):
            assert "*" not in action, statement["Sid"]


def test_the_reference_statements_are_all_there() -> None:
    assert list(statements(policy())) == [
        "LaunchGangInstancesFromATemplate",
        "LaunchGangFleets",
        "LaunchGangVolumesAndInterfacesFromATemplate",
        "LaunchGangFleetVolumes",
        "LaunchIntoTheClustersNetwork",
        "LaunchOnlyImagesOfTheAllowedOwners",
        "LaunchFromThisClustersTemplates",
        "UseOnlyReservationsTaggedForThisCluster",
        "TagOnlyWhatThisClusterCreates",
        "MoveKeepWarmTagOnThisClustersGangs",
        "ReleaseThisClustersGangs",
        "DescribeForReconcile",
        "DeleteThisClustersVPCCNIInterfaces",
        "CreateThisClustersLaunchTemplates",
        "ChangeThisClustersLaunchTemplates",
        "CreateThisClustersPlacementGroups",
        "DeleteThisClustersPlacementGroups",
        "VerifyNodeInstanceProfile",
        "PassNodeRoleToEC2Only",
        "ResolveThisCluster",
        "ReadEKSOptimizedAMIParameters",
    ]


def test_self_managed_instance_profiles_are_scoped_to_their_exact_names() -> None:
    doc = policy(
        node_role_arns=[ROLE, ROLE_B], cluster_name="demo", self_manage_instance_profile=True
    )
    extra = statements(doc)["SelfManageNodeInstanceProfile"]
    assert sorted(actions(extra)) == [
        "iam:AddRoleToInstanceProfile",
        "iam:CreateInstanceProfile",
        "iam:GetInstanceProfile",
        "iam:TagInstanceProfile",
    ]
    assert extra["Resource"] == sorted(
        f"arn:aws:iam::{ACCOUNT}:instance-profile/{instance_profile_name('demo', name)}"
        for name in ("eks-gang-node-role", "second-node-role")
    )
    assert "SelfManageNodeInstanceProfile" not in statements(policy())


def test_managed_access_entry_is_scoped_to_the_cluster() -> None:
    doc = policy(cluster_name="demo", manage_access_entry=True)
    extra = statements(doc)["ManageNodeAccessEntry"]
    assert extra["Action"] == "eks:CreateAccessEntry"
    assert extra["Resource"] == f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/demo"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"account_id": "1234"}, "not 12 digits"),
        ({"region": "mars"}, "not an AWS region"),
        ({"node_role_arns": []}, "at least one node role"),
        ({"node_role_arns": ["arn:aws:iam::1:user/x"]}, "not an IAM role ARN"),
        ({"cluster_name": ""}, "scoped to one cluster"),
        ({"cluster_name": "has spaces"}, "not an EKS cluster name"),
    ],
)
def test_bad_inputs_are_refused(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        policy(**kwargs)


def test_pod_identity_trust() -> None:
    (statement,) = pod_identity_trust_policy()["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert statement["Effect"] == "Allow"
    assert "Condition" not in statement


def test_irsa_trust_names_one_service_account() -> None:
    provider = f"arn:aws:iam::{ACCOUNT}:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC"
    (statement,) = irsa_trust_policy(provider, "atomic-gang-system", "atomic-gang-controller")[
        "Statement"
    ]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"]["StringEquals"] == {
        "oidc.eks.us-east-1.amazonaws.com/id/ABC:sub": (
            "system:serviceaccount:atomic-gang-system:atomic-gang-controller"
        ),
        "oidc.eks.us-east-1.amazonaws.com/id/ABC:aud": "sts.amazonaws.com",
    }


def test_node_role() -> None:
    (statement,) = node_role_trust_policy()["Statement"]
    assert statement["Principal"] == {"Service": "ec2.amazonaws.com"}
    assert node_role_policy_arns("us-east-1") == (
        "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
        "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
        "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
    )
    assert len(node_role_policy_arns("us-gov-west-1", ssm=False)) == 3
    assert partition_of("us-gov-west-1") == "aws-us-gov"


def test_the_cli_prints_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--account", ACCOUNT, "--region", "us-east-1", "--node-role-arn", ROLE]
    argv += ["--cluster-name", "demo"]
    assert main([*argv, "--node-role-arn", ROLE_B]) == 0
    assert json.loads(capsys.readouterr().out) == policy(node_role_arns=[ROLE, ROLE_B])
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "--account",
                "12",
                "--region",
                "us-east-1",
                "--node-role-arn",
                ROLE,
                "--cluster-name",
                "d",
            ]
        )
    assert exit_.value.code == 2
    assert "not 12 digits" in capsys.readouterr().err


# --- the stacks' S3 backend and KMS key ---------------------------------------------------

KEY_ARN = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def test_no_s3_or_kms_without_a_state_store() -> None:
    assert not [s for s in policy()["Statement"] if "s3:" in str(s) or "kms:" in str(s)]


@pytest.mark.parametrize(
    ("prefix", "objects"),
    [
        ("", "arn:aws:s3:::gang-state/.pulumi/*"),
        ("/c/prod/", "arn:aws:s3:::gang-state/c/prod/.pulumi/*"),
    ],
)
def test_state_grants_are_the_clis_calls_on_one_bucket_prefix_and_key(
    prefix: str, objects: str
) -> None:
    by_sid = statements(policy(state=StackState("gang-state", KEY_ARN, prefix)))
    assert list(by_sid)[-3:] == ["ListStackStateBucket", "ReadWriteStackState", "UseStackStateKey"]
    assert by_sid["ListStackStateBucket"]["Resource"] == "arn:aws:s3:::gang-state"
    assert actions(by_sid["ListStackStateBucket"]) == ["s3:ListBucket"]
    assert by_sid["ReadWriteStackState"]["Resource"] == objects
    assert sorted(actions(by_sid["ReadWriteStackState"])) == [
        "s3:DeleteObject",
        "s3:GetObject",
        "s3:PutObject",
    ]
    assert by_sid["UseStackStateKey"]["Resource"] == KEY_ARN
    assert sorted(actions(by_sid["UseStackStateKey"])) == [
        "kms:Decrypt",
        "kms:Encrypt",
        "kms:GenerateDataKey",
    ]
    # Never the bucket's configuration, never the key's administration, never "*".
    granted = {a for s in by_sid.values() for a in actions(s) if a.startswith(("s3:", "kms:"))}
    assert granted == {
        "s3:ListBucket",
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "kms:Encrypt",
        "kms:Decrypt",
        "kms:GenerateDataKey",
    }


@pytest.mark.parametrize(
    ("bucket", "key", "words"),
    [("Bad_Bucket", KEY_ARN, "not an S3 bucket name"), ("ok-bucket", "alias/x", "not a KMS key")],
)
def test_bad_state_stores_are_refused(bucket: str, key: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        StackState(bucket, key)


def test_the_cli_prints_the_state_grants(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--account", ACCOUNT, "--region", "us-east-1", "--node-role-arn", ROLE]
    argv += ["--cluster-name", "demo"]
    assert main([*argv, "--state-bucket", "gang-state", "--state-key-arn", KEY_ARN]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == policy(state=StackState("gang-state", KEY_ARN))


# --- the code's AWS calls are all granted ------------------------------------------------

_SERVICE_OF_PROTOCOL = {"Ec2Api": "ec2", "SsmApi": "ssm", "EksApi": "eks", "IamApi": "iam"}
_CALL = re.compile(
    r"""(?:\b(ec2|iam|eks|ssm)|client\(\s*["'](ec2|iam|eks|ssm)["'][^)]*\))\.([a-z_]+)\("""
)


def _action(service: str, method: str) -> str:
    return f"{service}:{''.join(part.capitalize() for part in method.split('_'))}"


# Modules whose calls run with the operator's credentials (doctor finding the controller's
# role before it assumes it), never the controller's: their calls must not be granted.
_OPERATOR_ONLY = ("access.py",)


def _calls_in(paths: list[Path]) -> set[str]:
    return {
        _action(match[1] or match[2], match[3])
        for path in paths
        for match in _CALL.finditer(path.read_text())
    }


def _code_calls() -> set[str]:
    calls = {
        _action(service, name)
        for protocol, service in _SERVICE_OF_PROTOCOL.items()
        for name in vars(getattr(ec2api, protocol))
        if not name.startswith("_")
    }
    cloud = [
        p for p in (REPO / "provisioner" / "cloud").glob("*.py") if p.name not in _OPERATOR_ONLY
    ]
    return calls | _calls_in([*cloud, *(REPO / "stacks").glob("*.py")])


def test_the_operators_own_lookups_are_not_granted_to_the_controller() -> None:
    operator_calls = _calls_in([REPO / "provisioner" / "cloud" / name for name in _OPERATOR_ONLY])
    assert "eks:ListPodIdentityAssociations" in operator_calls  # the scan works
    everything = policy(
        cluster_name="demo", self_manage_instance_profile=True, manage_access_entry=True
    )
    assert operator_calls & _granted(everything) == set()


def _granted(doc: dict[str, Any]) -> set[str]:
    return {a for s in doc["Statement"] for a in actions(s)}


def test_every_aws_call_in_the_code_is_granted() -> None:
    calls = _code_calls()
    assert {"ec2:RunInstances", "ec2:CreateFleet", "ssm:GetParameter"} <= calls  # the scan works
    everything = policy(
        cluster_name="demo",
        self_manage_instance_profile=True,
        manage_access_entry=True,
        buy_capacity_blocks=True,
    )
    assert calls - _granted(everything) == set()
    # Creating IAM or EKS objects, and buying Capacity Blocks, are granted only when the
    # settings ask for it.
    switched = {
        "iam:CreateInstanceProfile",
        "iam:AddRoleToInstanceProfile",
        "eks:CreateAccessEntry",
        "ec2:PurchaseCapacityBlock",
    }
    assert calls - _granted(policy()) <= switched
