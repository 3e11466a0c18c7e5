"""The bootstrap program under Pulumi's mocks: what each resource is given, and how the
resources are wired together. (Provider plugins cannot be downloaded here, and a unit test
should not need them: the mocks record every registration instead.)"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pulumi
import pytest

from infra.config import BootstrapConfig, ConfigError
from infra.kueue import DELETE_IN_BACKGROUND
from infra.program import build
from infra.release import CHART_PATH
from infra.state import bucket_name
from provisioner.api import constants as c
from provisioner.cloud.iam_policy import StackState, controller_policy, node_role_policy_arns
from provisioner.cloud.naming import instance_profile_name

pytestmark = pytest.mark.unit

ACCOUNT = "210987654321"
KEY_ID = "1234abcd-12ab-34cd-56ef-1234567890ab"
KEY_ARN = f"arn:aws:kms:us-west-2:{ACCOUNT}:key/{KEY_ID}"
BUCKET = f"atomic-gang-state-prod-gpu-{ACCOUNT}-us-west-2"
CFG = BootstrapConfig(
    cluster_name="prod-gpu",
    region="us-west-2",
    cpu_quota="256",
    memory_quota="1Ti",
    gpu_quota="32",
    local_queue_namespaces=("default", "ml-team"),
    image_repository="123456789012.dkr.ecr.us-west-2.amazonaws.com/atomic-gang-provisioner",
)


@dataclass(frozen=True)
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]
    provider: str


class Recorder(pulumi.runtime.Mocks):
    """Records every registration; answers with its inputs plus the ARNs AWS would add."""

    def __init__(self) -> None:
        self.resources: list[Registered] = []
        self.calls: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        state = dict(args.inputs)
        if args.typ == "aws:iam/role:Role":
            state["arn"] = f"arn:aws:iam::{ACCOUNT}:role/{args.inputs['name']}"
        if args.typ == "aws:iam/instanceProfile:InstanceProfile":
            state["arn"] = f"arn:aws:iam::{ACCOUNT}:instance-profile/{args.inputs['name']}"
        if args.typ == "aws:kms/key:Key":
            state.update(keyId=KEY_ID, arn=KEY_ARN)
        if args.typ == "aws:s3/bucket:Bucket":
            state["arn"] = f"arn:aws:s3:::{args.inputs['bucket']}"
        self.resources.append(
            Registered(args.typ, args.name, dict(args.inputs), args.provider or "")
        )
        return f"{args.name}-id", state

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        self.calls.append(args.token)
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            identity = {
                "accountId": ACCOUNT,
                "arn": f"arn:aws:iam::{ACCOUNT}:user/ops",
                "userId": "U",
            }
            return identity, []
        return {}, []

    def one(self, type_: str) -> dict[str, Any]:
        found = [r.inputs for r in self.resources if r.type == type_]
        assert len(found) == 1, f"{type_}: {len(found)} registered"
        return found[0]

    def all(self, type_: str) -> list[dict[str, Any]]:
        return [r.inputs for r in self.resources if r.type == type_]

    def kube(self, kind: str) -> list[dict[str, Any]]:
        return self.all(f"kubernetes:{c.KUEUE_GROUP}/{c.KUEUE_VERSION}:{kind}")


def run(cfg: BootstrapConfig) -> Recorder:
    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="atomic-gang-bootstrap", stack="test", preview=False)

    @pulumi.runtime.test  # type: ignore[untyped-decorator]  # waits for every registration
    def program() -> pulumi.Output[Any]:
        made = build(cfg)
        if made.aws is None:
            return made.release.id
        return pulumi.Output.all(made.release.id, made.aws.controller.policy_document)

    program()
    return recorder


@pytest.fixture(scope="module")
def recorded() -> Recorder:
    return run(CFG)


def node_role_arn() -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/{CFG.node_role}"


def roles(recorded: Recorder) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in recorded.all("aws:iam/role:Role")}


def test_the_controller_policy_is_the_one_source_with_the_callers_account(
    recorded: Recorder,
) -> None:
    document = json.loads(recorded.one("aws:iam/rolePolicy:RolePolicy")["policy"])
    assert document == controller_policy(
        account_id=ACCOUNT,
        region="us-west-2",
        node_role_arns=[node_role_arn()],
        cluster_name="prod-gpu",
        state=StackState(BUCKET, KEY_ARN),
    )
    assert "aws:index/getCallerIdentity:getCallerIdentity" in recorded.calls
    assert recorded.one("aws:iam/rolePolicy:RolePolicy")["role"] == "controller-role-id"


def test_the_policy_keeps_its_tag_conditions_and_pass_role_scope(recorded: Recorder) -> None:
    document = json.loads(recorded.one("aws:iam/rolePolicy:RolePolicy")["policy"])
    by_sid = {s["Sid"]: s for s in document["Statement"]}
    # The bootstrap's cluster is the one the tag conditions name.
    launch = by_sid["LaunchGangInstancesFromATemplate"]
    assert launch["Condition"]["StringEquals"] == {
        f"aws:RequestTag/{c.TAG_MANAGED}": "true",
        f"aws:RequestTag/{c.TAG_CLUSTER}": "prod-gpu",
    }
    assert launch["Action"] == "ec2:RunInstances"
    assert by_sid["UseOnlyReservationsTaggedForThisCluster"]["Condition"] == {
        "StringEquals": {f"aws:ResourceTag/{c.TAG_CLUSTER}": "prod-gpu"}
    }
    assert by_sid["ReleaseThisClustersGangs"]["Condition"]["StringEquals"] == {
        f"aws:ResourceTag/{c.TAG_MANAGED}": "true",
        f"aws:ResourceTag/{c.TAG_CLUSTER}": "prod-gpu",
    }
    assert "ec2:TerminateInstances" in by_sid["ReleaseThisClustersGangs"]["Action"]
    assert by_sid["PassNodeRoleToEC2Only"]["Resource"] == [node_role_arn()]
    assert by_sid["PassNodeRoleToEC2Only"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}
    }
    assert by_sid["DeleteThisClustersVPCCNIInterfaces"]["Resource"] == (
        f"arn:aws:ec2:us-west-2:{ACCOUNT}:network-interface/*"
    )


def test_the_controller_role_trusts_pod_identity(recorded: Recorder) -> None:
    trust = json.loads(roles(recorded)[CFG.controller_role]["assumeRolePolicy"])
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]


def test_the_node_role_has_the_worker_policies_and_its_profile(recorded: Recorder) -> None:
    node = roles(recorded)[CFG.node_role]
    assert json.loads(node["assumeRolePolicy"])["Statement"][0]["Principal"] == {
        "Service": "ec2.amazonaws.com"
    }
    attachments = recorded.all("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert {a["role"] for a in attachments} == {CFG.node_role}
    assert sorted(a["policyArn"] for a in attachments) == sorted(node_role_policy_arns("us-west-2"))
    profile = recorded.one("aws:iam/instanceProfile:InstanceProfile")
    assert profile["name"] == instance_profile_name("prod-gpu", CFG.node_role)
    assert profile["name"] == "atomic-gang-instance-profile-prod-gpu-atomic-gang-node-prod-gpu"
    assert profile["role"] == CFG.node_role


def test_the_node_role_gets_an_ec2_linux_access_entry(recorded: Recorder) -> None:
    entry = recorded.one("aws:eks/accessEntry:AccessEntry")
    assert entry == {
        **entry,
        "type": "EC2_LINUX",
        "principalArn": node_role_arn(),
        "clusterName": "prod-gpu",
    }


def test_the_controller_service_account_is_associated_with_its_role(recorded: Recorder) -> None:
    association = recorded.one("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert association == {
        **association,
        "clusterName": "prod-gpu",
        "namespace": "atomic-gang-system",
        "serviceAccount": "atomic-gang-controller",
        "roleArn": f"arn:aws:iam::{ACCOUNT}:role/{CFG.controller_role}",
    }


def test_aws_resources_use_the_clusters_region(recorded: Recorder) -> None:
    provider = recorded.one("pulumi:providers:aws")
    assert provider["region"] == "us-west-2"
    on_aws = [r for r in recorded.resources if r.type.startswith("aws:")]
    # 2 roles, policy, 4 attachments, profile, entry, association; key, alias, bucket,
    # versioning, encryption, public access block, bucket policy
    assert len(on_aws) == 17
    assert all("$pulumi:providers:aws::aws::" in r.provider for r in on_aws)


def test_kueue_objects_are_wired_together(recorded: Recorder) -> None:
    (check,) = recorded.kube("AdmissionCheck")
    (flavor,) = recorded.kube("ResourceFlavor")
    (queue,) = recorded.kube("ClusterQueue")
    # It names the GangClass the Helm release creates (the chart's kueue.gangClass).
    assert check["spec"] == {
        "controllerName": c.CONTROLLER_NAME,
        "parameters": {"apiGroup": c.GROUP, "kind": c.GANG_CLASS_KIND, "name": "default"},
    }
    strategy = queue["spec"]["admissionChecksStrategy"]
    assert strategy == {"admissionChecks": [{"name": check["metadata"]["name"]}]}
    (group,) = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"]
    (flavor_quota,) = group["flavors"]
    assert flavor_quota["name"] == flavor["metadata"]["name"]
    assert flavor_quota["resources"] == [
        {"name": "cpu", "nominalQuota": "256"},
        {"name": "memory", "nominalQuota": "1Ti"},
        {"name": "nvidia.com/gpu", "nominalQuota": "32"},
        {"name": "vpc.amazonaws.com/efa", "nominalQuota": "2048"},
    ]
    local = sorted(recorded.kube("LocalQueue"), key=lambda q: q["metadata"]["namespace"])
    assert [(q["metadata"]["namespace"], q["metadata"]["name"]) for q in local] == [
        ("default", "atomic-gang-queue"),
        ("ml-team", "atomic-gang-queue"),
    ]
    assert {q["spec"]["clusterQueue"] for q in local} == {queue["metadata"]["name"]}


def test_the_helm_release_installs_the_chart_wired_to_the_bootstrap(recorded: Recorder) -> None:
    release = recorded.one("kubernetes:helm.sh/v3:Release")
    association = recorded.one("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert Path(release["chart"]) == CHART_PATH
    assert (CHART_PATH / "Chart.yaml").is_file()
    assert release["namespace"] == association["namespace"]
    values = release["values"]
    assert values["image"]["repository"] == CFG.image_repository
    assert values["clusterName"] == "prod-gpu"
    assert values["defaults"] == {"region": "us-west-2", "nodeRoleArn": node_role_arn()}
    assert values["allowedNodeRoleArns"] == [node_role_arn()]
    assert values["auth"] == {"mode": "podIdentity"}
    assert values["serviceAccount"]["name"] == association["serviceAccount"]
    # The bootstrap makes the Kueue objects; the chart must not make them a second time.
    assert set(values["kueue"]["create"].values()) == {False}
    (check,) = recorded.kube("AdmissionCheck")
    assert values["kueue"]["admissionCheckName"] == check["metadata"]["name"]
    assert values["kueue"]["gangClassName"] == check["spec"]["parameters"]["name"]


def test_extra_node_roles_widen_pass_role_and_the_allowlist_together() -> None:
    extra = f"arn:aws:iam::{ACCOUNT}:role/legacy-gpu-nodes"
    recorded = run(replace(CFG, extra_node_role_arns=(extra,), account_id="111122223333"))
    document = json.loads(recorded.one("aws:iam/rolePolicy:RolePolicy")["policy"])
    pass_role = next(s for s in document["Statement"] if s["Sid"] == "PassNodeRoleToEC2Only")
    assert pass_role["Resource"] == sorted([node_role_arn(), extra])
    values = recorded.one("kubernetes:helm.sh/v3:Release")["values"]
    assert values["allowedNodeRoleArns"] == [node_role_arn(), extra]
    # An account given in the configuration is used as is.
    assert "aws:index/getCallerIdentity:getCallerIdentity" not in recorded.calls
    assert ":111122223333:network-interface/" in json.dumps(document)


def test_self_managed_profiles_add_their_grant() -> None:
    recorded = run(replace(CFG, self_manage_instance_profile=True, manage_access_entry=True))
    document = json.loads(recorded.one("aws:iam/rolePolicy:RolePolicy")["policy"])
    sids = [s["Sid"] for s in document["Statement"]]
    assert sids[-5:-3] == ["SelfManageNodeInstanceProfile", "ManageNodeAccessEntry"]
    values = recorded.one("kubernetes:helm.sh/v3:Release")["values"]
    assert values["iam"] == {"selfManageInstanceProfile": True, "manageAccessEntry": True}


# --- the pools' stack state ---------------------------------------------------------------


def test_the_state_bucket_is_versioned_kms_encrypted_private_and_tls_only(
    recorded: Recorder,
) -> None:
    bucket = recorded.one("aws:s3/bucket:Bucket")
    assert bucket["bucket"] == BUCKET == bucket_name(CFG, ACCOUNT)
    versioning = recorded.one("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning["bucket"] == "stack-state-id"
    assert versioning["versioningConfiguration"] == {"status": "Enabled"}
    (rule,) = recorded.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )["rules"]
    assert rule["applyServerSideEncryptionByDefault"] == {
        "sseAlgorithm": "aws:kms",
        "kmsMasterKeyId": KEY_ARN,
    }
    assert rule["bucketKeyEnabled"] is True
    block = recorded.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert block == {
        "bucket": "stack-state-id",
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
    }
    policy = json.loads(recorded.one("aws:s3/bucketPolicy:BucketPolicy")["policy"])
    (deny,) = policy["Statement"]
    assert deny["Effect"] == "Deny" and deny["Action"] == "s3:*" and deny["Principal"] == "*"
    assert deny["Resource"] == [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_the_stacks_key_rotates_and_has_the_alias_the_controller_names(
    recorded: Recorder,
) -> None:
    key = recorded.one("aws:kms/key:Key")
    assert key["enableKeyRotation"] is True and key["deletionWindowInDays"] == 30
    alias = recorded.one("aws:kms/alias:Alias")
    assert alias == {"name": "alias/atomic-gang-state-prod-gpu", "targetKeyId": KEY_ID}


def test_the_policy_reaches_the_state_bucket_prefix_and_key_and_nothing_wider(
    recorded: Recorder,
) -> None:
    document = json.loads(recorded.one("aws:iam/rolePolicy:RolePolicy")["policy"])
    by_sid = {s["Sid"]: s for s in document["Statement"]}
    assert by_sid["ListStackStateBucket"]["Resource"] == f"arn:aws:s3:::{BUCKET}"
    assert by_sid["ListStackStateBucket"]["Action"] == "s3:ListBucket"
    objects = by_sid["ReadWriteStackState"]
    assert objects["Resource"] == f"arn:aws:s3:::{BUCKET}/.pulumi/*"
    assert sorted(objects["Action"]) == ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    key = by_sid["UseStackStateKey"]
    assert key["Resource"] == KEY_ARN
    assert sorted(key["Action"]) == ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"]
    touching = [s for s in document["Statement"] if "s3:" in json.dumps(s["Action"])]
    touching += [s for s in document["Statement"] if "kms:" in json.dumps(s["Action"])]
    assert {s["Sid"] for s in touching} == set(by_sid) & {
        "ListStackStateBucket",
        "ReadWriteStackState",
        "UseStackStateKey",
    }


def test_the_release_gets_the_s3_backend_and_kms_secrets(recorded: Recorder) -> None:
    values = recorded.one("kubernetes:helm.sh/v3:Release")["values"]
    assert values["pulumi"] == {
        "backendUrl": f"s3://{BUCKET}?region=us-west-2",
        "secretsProvider": "awskms://alias/atomic-gang-state-prod-gpu?region=us-west-2",
    }


def test_a_long_cluster_name_still_makes_a_valid_unique_bucket_name() -> None:
    long_a = replace(CFG, cluster_name="A_" + "x" * 60)
    long_b = replace(CFG, cluster_name="A_" + "x" * 59 + "y")
    a, b = bucket_name(long_a, ACCOUNT), bucket_name(long_b, ACCOUNT)
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert a == a.lower() and "_" not in a
    assert bucket_name(replace(CFG, state_bucket_name="mine"), ACCOUNT) == "mine"


def retained_on_delete(cfg: BootstrapConfig) -> dict[tuple[str, str], bool]:
    """Each registration's `retain_on_delete`, as a stack transformation sees its options
    (the mocks' registrations carry inputs only)."""
    options: dict[tuple[str, str], bool] = {}

    def see(args: pulumi.ResourceTransformationArgs) -> None:
        options[(args.type_, args.name)] = bool(args.opts.retain_on_delete)

    pulumi.runtime.set_mocks(Recorder(), project="atomic-gang-bootstrap", stack="t", preview=False)

    @pulumi.runtime.test  # type: ignore[untyped-decorator]  # waits for every registration
    def program() -> pulumi.Output[Any]:
        pulumi.runtime.register_stack_transformation(see)
        return build(cfg).release.id

    program()
    return options


def test_destroy_keeps_the_state_key_and_its_alias_as_long_as_the_bucket() -> None:
    # The kept checkpoints are encrypted under the key and their secrets name its alias: a
    # key scheduled for deletion while the bucket stays makes every kept stack unreadable.
    kept = retained_on_delete(CFG)
    assert kept[("aws:s3/bucket:Bucket", "stack-state")]
    assert kept[("aws:kms/key:Key", "stack-state-key")]
    assert kept[("aws:kms/alias:Alias", "stack-state-key-alias")]
    # The controller's role is not kept: a destroy removes what only serves a running install.
    assert not kept[("aws:iam/role:Role", "controller-role")]


# --- the switches: the Kubernetes half alone, not waiting for the controller ----------------

NO_AWS = replace(
    CFG,
    create_aws_resources=False,
    wait_for_controller=False,
    node_role_arn=f"arn:aws:iam::{ACCOUNT}:role/gang-nodes",
    stack_backend_url="s3://stacks?region=us-west-2",
    stack_secrets_provider="awskms://alias/stacks?region=us-west-2",
)


def test_by_default_the_release_waits_for_the_controller(recorded: Recorder) -> None:
    assert recorded.one("kubernetes:helm.sh/v3:Release")["skipAwait"] is False


def test_without_the_aws_half_nothing_on_aws_is_registered_or_called() -> None:
    recorded = run(NO_AWS)
    aws = ("aws:", "pulumi:providers:aws")
    on_aws = [r.type for r in recorded.resources if r.type.startswith(aws)]
    assert on_aws == []
    assert recorded.calls == []
    # The Kubernetes half is whole: four Kueue kinds (a LocalQueue per namespace), the release.
    kinds = sorted(r.type.rsplit(":", 1)[-1] for r in recorded.resources)
    assert kinds == sorted(
        ["AdmissionCheck", "ResourceFlavor", "ClusterQueue", "LocalQueue", "LocalQueue", "Release"]
    )


def test_without_the_aws_half_the_release_is_wired_to_the_given_role_and_backend() -> None:
    release = run(NO_AWS).one("kubernetes:helm.sh/v3:Release")
    values = release["values"]
    assert values["defaults"]["nodeRoleArn"] == NO_AWS.node_role_arn
    assert values["allowedNodeRoleArns"] == [NO_AWS.node_role_arn]
    assert values["pulumi"] == {
        "backendUrl": NO_AWS.stack_backend_url,
        "secretsProvider": NO_AWS.stack_secrets_provider,
    }
    # waitForController=false: a cluster with no nodes cannot make the Deployment Ready.
    assert release["skipAwait"] is True


def test_every_kueue_object_is_deleted_in_the_background(recorded: Recorder) -> None:
    kueue = [r for r in recorded.resources if r.type.startswith(f"kubernetes:{c.KUEUE_GROUP}/")]
    assert len(kueue) == 5
    for resource in kueue:
        assert resource.inputs["metadata"]["annotations"] == DELETE_IN_BACKGROUND, resource.name


def test_chart_values_add_to_what_the_bootstrap_sets() -> None:
    extra = {"replicaCount": 1, "webhook": {"namespaceSelector": {"matchLabels": {"a": "b"}}}}
    values = run(replace(CFG, chart_values=extra)).one("kubernetes:helm.sh/v3:Release")["values"]
    assert values["replicaCount"] == 1
    assert values["webhook"] == {
        "certMode": CFG.webhook_cert_mode,
        "namespaceSelector": {"matchLabels": {"a": "b"}},
    }
    assert values["kueue"]["queueName"] == CFG.queue_name


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"kueue": {"queueName": "other"}}, "chartValues.kueue.queueName"),
        ({"defaults": {"nodeRoleArn": "arn:aws:iam::1:role/x"}}, "defaults.nodeRoleArn"),
        ({"pulumi": "s3://elsewhere"}, "chartValues.pulumi"),
    ],
)
def test_chart_values_may_not_change_what_the_bootstrap_sets(
    extra: dict[str, Any], named: str
) -> None:
    from infra.release import chart_values

    cfg = replace(CFG, chart_values=extra)
    with pytest.raises(ConfigError, match=named):
        chart_values(cfg, "arn:aws:iam::1:role/n", ["arn:aws:iam::1:role/n"], "s3://b", "k")
