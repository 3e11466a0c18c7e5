"""`atomic-gang doctor` against the real parts: healthy, then one broken link per test.

Each test starts the controller over the session's control plane, Kueue manager and EC2
emulator (`gang_local`), breaks one link on purpose the way it breaks in a cluster, and
checks that doctor's line for that link fails and names the fix, while a healthy setup
passes every line. The queues a test breaks are removed after it: they are cluster-scoped
(the ClusterQueue), and a later test's doctor on the same apiserver (the README quick start
runs `atomic-gang doctor` as written) would otherwise meet them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from kubernetes import client as k8s

from devenv import kueue_objects as ko
from devenv.bootstrap import NODE_ROLE_NAME
from devenv.controlplane import SERVICE_CIDR
from devenv.emulator import EmulatorClient
from devenv.environment import LocalEnvironment
from provisioner.api import constants as c
from provisioner.cloud.ec2api import build_clients
from provisioner.cloud.naming import instance_profile_name
from provisioner.commands.checks import Result
from provisioner.commands.doctor import LAUNCH_CHECK, Doctor
from provisioner.commands.doctor_launch import LaunchShape
from provisioner.kube.client import KubeClient
from tests.e2e.conftest import eventually

KUEUE = (c.KUEUE_GROUP, c.KUEUE_VERSION)


def _doctor(env: LocalEnvironment, namespace: str, **options: Any) -> Doctor:
    assert env.emulator is not None and env.settings is not None
    assert env.control_plane is not None
    session = boto3.session.Session(aws_access_key_id="local", aws_secret_access_key="local")
    clouds = build_clients(session, env.region, env.emulator.endpoint_url, max_attempts=1)
    iam = session.client("iam", region_name=env.region, endpoint_url=env.emulator.endpoint_url)
    options.setdefault("queue", f"{namespace}/{ko.QUEUE_NAME}")
    kube = KubeClient.from_kubeconfig(env.control_plane.info.kubeconfig)
    return Doctor(kube, clouds, iam, env.settings, **options)


def _results(doctor: Doctor) -> dict[str, Result]:
    return {r.name: r for r in doctor.run()}


def _only_failure(results: dict[str, Result], name: str, *words: str) -> Result:
    failed = [r.name for r in results.values() if not r.ok]
    assert name in failed, results
    result = results[name]
    assert result.fix
    for word in words:
        assert word in result.detail + result.fix, result
    return result


# What `_private_queue` made in this test: (API client, namespace or None, plural, name).
_MADE: list[tuple[k8s.CustomObjectsApi, str | None, str, str]] = []


@pytest.fixture(autouse=True)
def _remove_private_queues() -> Iterator[None]:
    """Delete each queue a test broke on purpose, and wait until it is gone."""
    yield
    made = list(reversed(_MADE))
    _MADE.clear()
    for custom, namespace, plural, name in made:
        try:
            if namespace:
                custom.delete_namespaced_custom_object(*KUEUE, namespace, plural, name)
            else:
                custom.delete_cluster_custom_object(*KUEUE, plural, name)
        except k8s.ApiException as err:
            if err.status != 404:
                raise
    for entry in made:
        eventually(partial(_gone, *entry), 60, f"{entry[2]} {entry[3]} removed")


def _gone(custom: k8s.CustomObjectsApi, namespace: str | None, plural: str, name: str) -> bool:
    try:
        if namespace:
            custom.get_namespaced_custom_object(*KUEUE, namespace, plural, name)
        else:
            custom.get_cluster_custom_object(*KUEUE, plural, name)
    except k8s.ApiException as err:
        return err.status == 404
    return False


def _private_queue(
    env: LocalEnvironment,
    namespace: str,
    checks: list[dict[str, Any]],
    quotas: dict[str, str] = ko.LOCAL_QUOTAS,
) -> str:
    """A ClusterQueue with `checks` and `quotas`, and a LocalQueue on it in the test's
    namespace."""
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    suffix = uuid.uuid4().hex[:6]
    cq = ko.cluster_queue(f"cq-{suffix}", ko.FLAVOR_NAME, "unused", quotas)
    cq["spec"]["admissionChecksStrategy"] = {"admissionChecks": checks}
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", cq)
    _MADE.append((custom, None, "clusterqueues", f"cq-{suffix}"))
    lq = ko.local_queue(namespace, f"lq-{suffix}", f"cq-{suffix}")
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", lq)
    _MADE.append((custom, namespace, "localqueues", f"lq-{suffix}"))
    return f"{namespace}/lq-{suffix}"


def test_a_healthy_setup_passes_every_check(healthy: LocalEnvironment, namespace: str) -> None:
    results = _doctor(healthy, namespace).run()
    assert [r.name for r in results] == [
        "LocalQueue",
        "ClusterQueue lists our check",
        "ClusterQueue covers pending requests",
        "AdmissionCheck",
        "leader Lease",
        "DaemonSets on gang nodes",
        "node role",
        "instance profile",
        "access entry",
        "AMI",
        "subnets",
        "capacity block purchase",
    ]
    assert all(r.ok for r in results), [r.render() for r in results if not r.ok]


def test_missing_local_queue(healthy: LocalEnvironment, namespace: str) -> None:
    results = _results(_doctor(healthy, namespace, queue=f"{namespace}/no-such-queue"))
    _only_failure(results, "LocalQueue", "no-such-queue", "does not exist")


def test_cluster_queue_without_our_check(healthy: LocalEnvironment, namespace: str) -> None:
    # Kueue requires at least one check in a strategy: the queue lists someone else's.
    other = _foreign_check(healthy)
    queue = _private_queue(healthy, namespace, [{"name": other}])
    results = _results(_doctor(healthy, namespace, queue=queue))
    assert results["LocalQueue"].ok
    _only_failure(results, "ClusterQueue lists our check", "admissionChecksStrategy")


def _foreign_check(env: LocalEnvironment) -> str:
    custom = k8s.CustomObjectsApi(env.control_plane.api_client())  # type: ignore[union-attr]
    name = f"other-{uuid.uuid4().hex[:6]}"
    check = ko.admission_check(name)
    check["spec"]["controllerName"] = "example.com/someone-else"
    custom.create_cluster_custom_object(*KUEUE, "admissionchecks", check)
    return name


def test_cluster_queue_with_our_check_on_some_flavors(
    healthy: LocalEnvironment, namespace: str
) -> None:
    entry = {"name": ko.CHECK_NAME, "onFlavors": [ko.FLAVOR_NAME]}
    queue = _private_queue(healthy, namespace, [entry])
    results = _results(_doctor(healthy, namespace, queue=queue))
    _only_failure(results, "ClusterQueue lists our check", "onFlavors")


def test_missing_admission_check(healthy: LocalEnvironment, namespace: str) -> None:
    name = f"gone-{uuid.uuid4().hex[:6]}"
    queue = _private_queue(healthy, namespace, [{"name": name}])
    results = _results(_doctor(healthy, namespace, queue=queue, check=name))
    assert results["ClusterQueue lists our check"].ok
    _only_failure(results, "AdmissionCheck", "does not exist", c.CONTROLLER_NAME)


def test_admission_check_of_another_controller(healthy: LocalEnvironment, namespace: str) -> None:
    name = _foreign_check(healthy)
    queue = _private_queue(healthy, namespace, [{"name": name}])
    results = _results(_doctor(healthy, namespace, queue=queue, check=name))
    _only_failure(results, "AdmissionCheck", "example.com/someone-else", c.CONTROLLER_NAME)


def test_admission_check_not_active(healthy: LocalEnvironment, namespace: str) -> None:
    # With no controller running nothing marks a new check Active.
    healthy.manager.stop()
    healthy.manager = None
    custom = k8s.CustomObjectsApi(healthy.control_plane.api_client())  # type: ignore[union-attr]
    name = f"idle-{uuid.uuid4().hex[:6]}"
    custom.create_cluster_custom_object(*KUEUE, "admissionchecks", ko.admission_check(name))
    queue = _private_queue(healthy, namespace, [{"name": name}])
    results = _results(_doctor(healthy, namespace, queue=queue, check=name))
    _only_failure(results, "AdmissionCheck", "not Active", "start the controller")


def test_stale_leader_lease(healthy: LocalEnvironment, namespace: str) -> None:
    healthy.manager.stop()
    healthy.manager = None
    election = healthy.settings.leader_election  # type: ignore[union-attr]
    coordination = k8s.CoordinationV1Api(healthy.control_plane.api_client())  # type: ignore[union-attr]
    old = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    coordination.patch_namespaced_lease(
        election.lease_name,
        election.lease_namespace,
        {"spec": {"renewTime": old, "holderIdentity": "crashed-replica"}},
    )
    results = _results(_doctor(healthy, namespace))
    _only_failure(results, "leader Lease", "crashed-replica", "twice")
    assert results["LocalQueue"].ok and results["node role"].ok


def _iam(env: LocalEnvironment) -> Any:
    assert env.emulator is not None
    return boto3.client("iam", region_name=env.region, endpoint_url=env.emulator.endpoint_url)


def test_missing_node_role(healthy: LocalEnvironment, namespace: str) -> None:
    iam = _iam(healthy)
    profile = instance_profile_name(healthy.cluster_name, NODE_ROLE_NAME)
    iam.remove_role_from_instance_profile(InstanceProfileName=profile, RoleName=NODE_ROLE_NAME)
    iam.delete_role(RoleName=NODE_ROLE_NAME)
    results = _results(_doctor(healthy, namespace))
    _only_failure(results, "node role", "does not exist", "defaults.nodeRoleArn")


def test_missing_instance_profile(healthy: LocalEnvironment, namespace: str) -> None:
    iam = _iam(healthy)
    profile = instance_profile_name(healthy.cluster_name, NODE_ROLE_NAME)
    iam.remove_role_from_instance_profile(InstanceProfileName=profile, RoleName=NODE_ROLE_NAME)
    iam.delete_instance_profile(InstanceProfileName=profile)
    results = _results(_doctor(healthy, namespace))
    assert results["node role"].ok
    _only_failure(results, "instance profile", profile, "selfManageInstanceProfile")


def test_missing_access_entry(healthy: LocalEnvironment, namespace: str) -> None:
    assert healthy.emulator is not None and healthy.identity is not None
    eks = boto3.client(
        "eks", region_name=healthy.region, endpoint_url=healthy.emulator.endpoint_url
    )
    eks.delete_access_entry(
        clusterName=healthy.cluster_name, principalArn=healthy.identity.role_arn
    )
    results = _results(_doctor(healthy, namespace))
    assert results["instance profile"].ok
    _only_failure(results, "access entry", "EC2_LINUX", "create-access-entry")


def test_unresolvable_ami(healthy: LocalEnvironment, namespace: str) -> None:
    # The cluster was upgraded to a Kubernetes version no EKS AMI is published for yet.
    assert healthy.emulator is not None and healthy.control_plane is not None
    info = healthy.control_plane.info
    ec2 = healthy.ec2_client()
    EmulatorClient(healthy.emulator.endpoint_url).register_eks_cluster(
        healthy.cluster_name,
        endpoint=info.endpoint,
        certificate_authority_data=info.ca_base64,
        service_ipv4_cidr=SERVICE_CIDR,
        version="1.99",
        subnet_ids=[s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]],
        region=healthy.region,
    )
    results = _results(_doctor(healthy, namespace))
    _only_failure(results, "AMI", "/1.99/", c.ANN_AMI_ID)
    assert results["subnets"].ok


def test_missing_subnet(healthy: LocalEnvironment, namespace: str) -> None:
    ec2 = healthy.ec2_client()
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    ec2.delete_subnet(SubnetId=subnet)
    results = _results(_doctor(healthy, namespace))
    _only_failure(results, "subnets", subnet, c.ANN_SUBNETS)


def test_gpu_job_on_a_queue_without_gpu_coverage(healthy: LocalEnvironment, namespace: str) -> None:
    # The private queue covers cpu and memory only, as the reference's example did (the
    # local default covers GPUs): Kueue never reserves quota for the GPU, and doctor must
    # say which resource is missing.
    cpu_and_memory = {r: ko.LOCAL_QUOTAS[r] for r in ("cpu", "memory")}
    queue = _private_queue(healthy, namespace, [{"name": ko.CHECK_NAME}], cpu_and_memory)
    suffix = uuid.uuid4().hex[:6]
    # On a GPU type: 8 GPUs of an m5.large would be refused at apply.
    gpu_type = {c.ANN_INSTANCE_TYPE: "p4d.24xlarge"}
    job = ko.gang_job(namespace, f"gpu-{suffix}", queue.split("/")[1], f"gpu-{suffix}", 1, gpu_type)
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"] = {c.RESOURCE_GPU: "8"}
    api = healthy.control_plane.api_client()  # type: ignore[union-attr]
    k8s.BatchV1Api(api).create_namespaced_job(namespace, job)
    custom = k8s.CustomObjectsApi(api)
    eventually(
        lambda: any(
            x["type"] == c.WL_QUOTA_RESERVED and x["status"] == "False"
            for wl in custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
            for x in (wl.get("status") or {}).get("conditions") or []
        ),
        what="Kueue refusing quota to the GPU Workload",
    )
    results = _results(_doctor(healthy, namespace, queue=queue))
    _only_failure(results, "ClusterQueue covers pending requests", c.RESOURCE_GPU, f"gpu-{suffix}")
    assert results["ClusterQueue lists our check"].ok


# --- the launch check: EC2's answer to the launch the controller would send ---------------
def _launch_doctor(
    env: LocalEnvironment, namespace: str, launch: Any, keys: tuple[str, str] | None = None
) -> Doctor:
    """A doctor with the launch check, its AWS calls made with `keys` (None: the
    environment's own, the account's root)."""
    assert env.emulator is not None
    doctor = _doctor(env, namespace, launch=launch)
    if keys is not None:
        session = boto3.session.Session(aws_access_key_id=keys[0], aws_secret_access_key=keys[1])
        doctor.clouds = build_clients(
            session, env.region, env.emulator.endpoint_url, max_attempts=1
        )
        doctor.sts = session.client(
            "sts", region_name=env.region, endpoint_url=env.emulator.endpoint_url
        )
    return doctor


def _dry_runs(env: LocalEnvironment, pool: str) -> list[dict[str, Any]]:
    """The launch calls of `pool`'s check as EC2 received them."""
    assert env.emulator is not None
    return [
        r
        for r in EmulatorClient(env.emulator.endpoint_url).launch_requests()
        if pool in json.dumps(r["params"]) and str(r["params"].get("DryRun")).lower() == "true"
    ]


def _user_without(env: LocalEnvironment, action: str) -> tuple[str, str]:
    """An IAM user allowed every call of the launch check but `action`."""
    iam = _iam(env)
    name = f"platform-{uuid.uuid4().hex[:6]}"
    iam.create_user(UserName=name)
    allowed = [
        "ec2:Describe*",
        "ec2:RunInstances",
        "ec2:CreateFleet",
        "ec2:CreateLaunchTemplate",
        "ec2:CreateTags",
        "ssm:GetParameter",
        "eks:DescribeCluster",
        "sts:DecodeAuthorizationMessage",
    ]
    statement = {"Effect": "Allow", "Action": [a for a in allowed if a != action], "Resource": "*"}
    iam.put_user_policy(
        UserName=name,
        PolicyName="launch",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
    )
    made = iam.create_access_key(UserName=name)["AccessKey"]
    return str(made["AccessKeyId"]), str(made["SecretAccessKey"])


def test_launch_check_of_a_valid_job_would_launch_and_launches_nothing(
    healthy: LocalEnvironment, namespace: str, tmp_path: Path
) -> None:
    pool = f"dry-{uuid.uuid4().hex[:6]}"
    job = ko.gang_job(namespace, pool, ko.QUEUE_NAME, pool, 2)
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    before = len(healthy.ec2_client().describe_instances()["Reservations"])
    results = _results(_launch_doctor(healthy, namespace, manifest))
    line = results[LAUNCH_CHECK]
    assert line.ok and not line.warn, line.render()
    assert line.detail.startswith("would launch") and "DryRunOperation" in line.detail
    sent = _dry_runs(healthy, pool)
    assert sent and all(r["error"] == "DryRunOperation" for r in sent), sent
    assert all(r["instance_ids"] == [] for r in sent)
    assert len(healthy.ec2_client().describe_instances()["Reservations"]) == before


def test_launch_check_with_a_policy_without_create_fleet(
    healthy: LocalEnvironment, namespace: str
) -> None:
    pool = f"dry-{uuid.uuid4().hex[:6]}"
    ec2 = healthy.ec2_client()
    # The pool's template as its stack made it, so CreateFleet is checked whole.
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName=f"atomic-gang-{healthy.cluster_name}-{pool}",
        LaunchTemplateData={"ImageId": ami, "InstanceType": "m5.large"},
    )
    shape = LaunchShape("m5.large", 2, mode=c.MODE_FLEET, pool=pool)
    keys = _user_without(healthy, "ec2:CreateFleet")
    results = _results(_launch_doctor(healthy, namespace, shape, keys))
    _only_failure(results, LAUNCH_CHECK, "UnauthorizedOperation", "ec2:CreateFleet", "allow")
    assert [r["error"] for r in _dry_runs(healthy, pool)] == ["UnauthorizedOperation"]


def test_launch_check_with_a_subnet_of_another_vpc(
    healthy: LocalEnvironment, namespace: str
) -> None:
    pool = f"dry-{uuid.uuid4().hex[:6]}"
    ec2 = healthy.ec2_client()
    vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
    zone = ec2.describe_subnets()["Subnets"][0]["AvailabilityZone"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.1.0/24", AvailabilityZone=zone)
    subnet_id = subnet["Subnet"]["SubnetId"]
    # The pool's template as its stack made it, so the launch is checked whole, by an EC2
    # that checks parameters on a dry run too (its documented DryRun checks permissions).
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.create_launch_template(
        LaunchTemplateName=f"atomic-gang-{healthy.cluster_name}-{pool}",
        LaunchTemplateData={"ImageId": ami, "InstanceType": "m5.large"},
    )
    shape = LaunchShape("m5.large", 2, subnets=(subnet_id,), pool=pool)
    assert healthy.emulator is not None
    emulator = EmulatorClient(healthy.emulator.endpoint_url)
    emulator.set_dry_run_validation(True)
    try:
        results = _results(_launch_doctor(healthy, namespace, shape))
    finally:
        emulator.set_dry_run_validation(False)
    _only_failure(results, LAUNCH_CHECK, "InvalidParameter", "belong to different networks", "VPC")
    assert [r["error"] for r in _dry_runs(healthy, pool)] == ["InvalidParameter"]
