"""`atomic-gang doctor`: preflight checks, in the order a Job's path depends on them.

Called by the CLI. Each check reads one link and says pass or fail, and for a failure the
fix: the LocalQueue exists; its ClusterQueue lists our AdmissionCheck for every flavor (no
`onFlavors`); it covers every resource a pending Workload in the queue requests (a GPU
Job is never admitted by a queue without `nvidia.com/gpu`); the AdmissionCheck exists,
names our controller and is Active; the leader
Lease was renewed within twice its duration; the node role, its instance profile and its
access entry are valid; the AMI resolves; the cluster's subnets exist. `doctor_install`
adds the installation's links (Kueue's waitForPodsReady, cert-manager, the controller's AWS
identity, the Pulumi state), placed before the AWS links. Every check runs even after a
failure, so one run lists everything to fix. `connect` finds the cluster, the installation
(`provisioner.commands.installation`) and the AWS identity the checks run as; explain uses it too.
It only reads, through `provisioner.kube` and `provisioner.cloud`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from provisioner.api import constants as c
from provisioner.api import kueue_objects as ko
from provisioner.api.settings import Settings
from provisioner.cloud.access import AwsAccess
from provisioner.cloud.ami import resolve_ami
from provisioner.cloud.cluster import describe_cluster
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error
from provisioner.cloud.naming import instance_profile_name
from provisioner.cloud.preflight import verify_access_entry, verify_instance_profile
from provisioner.commands.installation import Installation
from provisioner.kube.errors import KubeError, KubeNotFound
from provisioner.kube.resources import ADMISSION_CHECKS, LEASES, WORKLOADS, ResourceRef

LOCAL_QUEUES = ResourceRef(c.KUEUE_GROUP, c.KUEUE_VERSION, "localqueues", True, "LocalQueue")
CLUSTER_QUEUES = ResourceRef(c.KUEUE_GROUP, c.KUEUE_VERSION, "clusterqueues", False, "ClusterQueue")
DEFAULT_INSTANCE_TYPE = "m5.large"
_NO_CLIENTS = "see the 'AWS identity' line: the identity to run the AWS checks as was not had"


class Reader(Protocol):
    """The reads doctor makes; `KubeClient` is one."""

    def get(
        self, ref: ResourceRef, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    def list(self, ref: ResourceRef, *, namespace: str | None = None) -> Any: ...


def requested_resources(workload: Mapping[str, Any]) -> dict[str, set[str]]:
    """Resource names a Workload's pod sets request (requests or limits: an extended
    resource such as a GPU is often given as a limit only), with the pod sets asking."""
    found: dict[str, set[str]] = {}
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        pod = ((pod_set.get("template") or {}).get("spec")) or {}
        for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
            resources = container.get("resources") or {}
            for section in ("requests", "limits"):
                for name in resources.get(section) or {}:
                    found.setdefault(str(name), set()).add(str(pod_set.get("name", "main")))
    return found


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {x["type"]: x for x in (obj.get("status") or {}).get("conditions") or []}


@dataclass(frozen=True)
class Result:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warn: bool = False  # ok, but worth changing: `fix` says why and how

    def render(self) -> str:
        if self.warn:
            return f"WARN  {self.name}: {self.detail}\n      fix: {self.fix}"
        line = f"{'pass' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return line if self.ok else f"{line}\n      fix: {self.fix}"


class Failed(Exception):
    def __init__(self, detail: str, fix: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fix = fix


class Warned(Failed):
    """A link that works but is set up against the gang's interest; does not fail the run."""


def run_checks(checks: list[tuple[str, Callable[[], str]]]) -> list[Result]:
    """Every check, in order, each to a Result, even after a failure: one run lists
    everything to fix."""
    results = []
    for name, check in checks:
        try:
            results.append(Result(name, True, check()))
        except Warned as err:
            results.append(Result(name, True, err.detail, err.fix, warn=True))
        except Failed as err:
            results.append(Result(name, False, err.detail, err.fix))
        except (KubeError, CloudError) as err:
            results.append(Result(name, False, str(err), "see the error above"))
        except Exception as err:  # one unreachable link must not hide the others
            results.append(Result(name, False, f"could not check: {err}", "see the error"))
    return results


@dataclass
class Doctor:
    kube: Reader
    clouds: CloudClients | None
    iam: Any
    settings: Settings
    queue: str = f"default/{ko.QUEUE_NAME}"
    check: str = ko.CHECK_NAME
    instance_type: str = DEFAULT_INSTANCE_TYPE
    now: Callable[[], datetime] = lambda: datetime.now(UTC)

    def run(self) -> list[Result]:
        checks: list[tuple[str, Callable[[], str]]] = [
            ("LocalQueue", self.local_queue),
            ("ClusterQueue lists our check", self.cluster_queue),
            ("ClusterQueue covers pending requests", self.covered_resources),
            ("AdmissionCheck", self.admission_check),
            ("leader Lease", self.lease),
            ("node role", self.node_role),
            ("instance profile", self.instance_profile),
            ("access entry", self.access_entry),
            ("AMI", self.ami),
            ("subnets", self.subnets),
        ]
        return run_checks(checks)

    # -- Kubernetes links ------------------------------------------------------------------
    def _queue_ref(self) -> tuple[str, str]:
        namespace, _, name = self.queue.rpartition("/")
        return namespace or "default", name

    def _local_queue(self) -> dict[str, Any]:
        namespace, name = self._queue_ref()
        try:
            return self.kube.get(LOCAL_QUEUES, name, namespace=namespace)
        except KubeNotFound as err:
            raise Failed(
                f"LocalQueue {namespace}/{name} does not exist",
                f"create it (the chart's kueue.create.localQueues with {namespace} in "
                f"kueue.localQueueNamespaces), or pass --queue NAMESPACE/NAME of the queue "
                "your Jobs name in kueue.x-k8s.io/queue-name",
            ) from err

    def local_queue(self) -> str:
        lq = self._local_queue()
        return f"{self.queue} -> ClusterQueue {lq['spec'].get('clusterQueue')}"

    def _our_checks(self, cq: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The queue's entries for our check (by name, or by our controllerName)."""
        spec = cq.get("spec") or {}
        listed = [
            dict(x)
            for x in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        ]
        ours = []
        for entry in listed:
            if entry["name"] == self.check:
                ours.append(entry)
                continue
            try:
                ac = self.kube.get(ADMISSION_CHECKS, entry["name"])
            except KubeNotFound:
                continue
            if (ac.get("spec") or {}).get("controllerName") == self.settings.controller_name:
                ours.append(entry)
        return ours

    def cluster_queue(self) -> str:
        lq = self._local_queue()
        name = lq["spec"].get("clusterQueue", "")
        try:
            cq = self.kube.get(CLUSTER_QUEUES, name)
        except KubeNotFound as err:
            raise Failed(
                f"ClusterQueue {name} (named by {self.queue}) does not exist",
                f"create ClusterQueue {name} or point the LocalQueue at one that exists",
            ) from err
        ours = self._our_checks(cq)
        if not ours:
            raise Failed(
                f"ClusterQueue {name} lists no AdmissionCheck of {self.settings.controller_name}",
                f"add spec.admissionChecksStrategy.admissionChecks: [{{name: "
                f"{self.check}}}] to ClusterQueue {name}",
            )
        scoped = [x for x in ours if x.get("onFlavors")]
        if scoped:
            raise Failed(
                f"ClusterQueue {name} limits {scoped[0]['name']} to flavors "
                f"{scoped[0]['onFlavors']}; Kueue then skips the check for other flavors",
                f"remove onFlavors from {scoped[0]['name']} in ClusterQueue {name}",
            )
        return f"{name} lists {ours[0]['name']} for every flavor"

    def covered_resources(self) -> str:
        """Every resource a pending Workload of the queue requests is covered by its
        ClusterQueue: Kueue never reserves quota for an uncovered one, so the gang never
        even reaches our check."""
        namespace, queue = self._queue_ref()
        name = self._local_queue()["spec"].get("clusterQueue", "")
        cq = self.kube.get(CLUSTER_QUEUES, name)
        covered = {
            str(r)
            for group in (cq.get("spec") or {}).get("resourceGroups") or []
            for r in group.get("coveredResources") or []
        }
        pending = [
            wl
            for wl in self.kube.list(WORKLOADS, namespace=namespace).items
            if (wl.get("spec") or {}).get("queueName") == queue
            and _conditions(wl).get(c.WL_QUOTA_RESERVED, {}).get("status") != "True"
            and _conditions(wl).get(c.WL_FINISHED, {}).get("status") != "True"
        ]
        missing: dict[str, list[str]] = {}
        for wl in pending:
            for resource in requested_resources(wl):
                if resource not in covered:
                    missing.setdefault(resource, []).append(wl["metadata"]["name"])
        if missing:
            names = sorted(missing)
            who = "; ".join(f"{r} by {', '.join(sorted(missing[r]))}" for r in names)
            raise Failed(
                f"ClusterQueue {name} does not cover {', '.join(names)}, requested by pending "
                f"Workloads in {namespace} ({who}); Kueue will never admit them",
                f"add {', '.join(names)} to a resourceGroup's coveredResources of ClusterQueue "
                f"{name} with a nominalQuota (the chart's kueue.clusterQueue.acceleratorQuota "
                "and the bootstrap's gpuQuota/efaQuota cover nvidia.com/gpu and "
                "vpc.amazonaws.com/efa by default)",
            )
        return (
            f"{name} covers every resource requested by {len(pending)} pending Workload(s) "
            f"of {self.queue}"
        )

    def admission_check(self) -> str:
        name = self.check
        try:
            ac = self.kube.get(ADMISSION_CHECKS, name)
        except KubeNotFound as err:
            raise Failed(
                f"AdmissionCheck {name} does not exist",
                f"create AdmissionCheck {name} with spec.controllerName "
                f"{self.settings.controller_name} (the chart's kueue.create.admissionCheck)",
            ) from err
        controller = (ac.get("spec") or {}).get("controllerName")
        if controller != self.settings.controller_name:
            raise Failed(
                f"AdmissionCheck {name} names controller {controller}",
                f"set its spec.controllerName to {self.settings.controller_name} (delete and "
                "recreate it: the field is immutable)",
            )
        active = next(
            (
                x
                for x in (ac.get("status") or {}).get("conditions") or []
                if x.get("type") == "Active"
            ),
            None,
        )
        if not active or active.get("status") != "True":
            why = active.get("message") if active else "no Active condition"
            raise Failed(
                f"AdmissionCheck {name} is not Active ({why})",
                "start the controller (kubectl -n <namespace> get pods, logs of "
                "atomic-gang-provisioner); it marks the check Active when it runs",
            )
        return f"{name}: controller {controller}, Active"

    def lease(self) -> str:
        election = self.settings.leader_election
        where = f"{election.lease_namespace}/{election.lease_name}"
        if not election.enabled:
            return f"leader election disabled; no Lease to check ({where})"
        try:
            lease = self.kube.get(LEASES, election.lease_name, namespace=election.lease_namespace)
        except KubeNotFound as err:
            raise Failed(
                f"Lease {where} does not exist: no replica has ever led",
                "start the controller, and check its RBAC on coordination.k8s.io leases in "
                f"{election.lease_namespace}",
            ) from err
        spec = lease.get("spec") or {}
        duration = float(spec.get("leaseDurationSeconds") or 0)
        renewed = _parse_time(spec.get("renewTime"))
        if renewed is None:
            raise Failed(f"Lease {where} was never renewed", "start the controller")
        age = (self.now() - renewed).total_seconds()
        if age > 2 * duration:
            raise Failed(
                f"Lease {where} (holder {spec.get('holderIdentity')}) was last renewed "
                f"{age:.0f}s ago, more than twice its {duration:.0f}s duration",
                "no replica is leading: check the controller pods are running and can "
                "reach the apiserver (their logs name the failure)",
            )
        return f"{where} held by {spec.get('holderIdentity')}, renewed {age:.0f}s ago"

    # -- AWS links -------------------------------------------------------------------------
    def _role(self) -> tuple[str, str]:
        arn = self.settings.defaults.node_role_arn
        if not arn:
            raise Failed(
                "no default node role (defaults.nodeRoleArn is empty)",
                f"set defaults.nodeRoleArn, or annotate each Job with {c.ANN_NODE_ROLE_ARN}",
            )
        return arn, arn.rsplit("/", 1)[-1]

    def _clouds(self) -> CloudClients:
        if self.clouds is None:
            raise Failed("no AWS clients", _NO_CLIENTS)
        return self.clouds

    def node_role(self) -> str:
        arn, name = self._role()
        if self.iam is None:
            raise Failed("no AWS clients", _NO_CLIENTS)
        try:
            self.iam.get_role(RoleName=name)
        except Exception as exc:
            err = to_cloud_error(exc, f"GetRole {name}")
            if err.code == "NoSuchEntity":
                raise Failed(
                    f"node role {arn} does not exist",
                    "create it with the EKS worker managed policies (the bootstrap's "
                    "`pulumi up` does), or fix defaults.nodeRoleArn",
                ) from exc
            raise err from exc
        return arn

    def instance_profile(self) -> str:
        arn, name = self._role()
        profile = instance_profile_name(self.settings.cluster_name, name)
        if self.settings.iam.self_manage_instance_profile:
            return f"{profile} is created by the controller (iam.selfManageInstanceProfile)"
        try:
            verify_instance_profile(self._clouds().iam, profile, arn)
        except CloudError as err:
            if err.code == "NoSuchEntity":
                raise Failed(
                    f"instance profile {profile} does not exist",
                    f"create it holding role {name} (the bootstrap does), or set "
                    "iam.selfManageInstanceProfile",
                ) from err
            raise Failed(err.message, "see above") from err
        return f"{profile} holds {name}"

    def access_entry(self) -> str:
        arn, _ = self._role()
        if self.settings.iam.manage_access_entry:
            return "created by the controller (iam.manageAccessEntry)"
        try:
            verify_access_entry(self._clouds().eks, self.settings.cluster_name, arn)
        except CloudError as err:
            raise Failed(
                err.message,
                f"aws eks create-access-entry --cluster-name {self.settings.cluster_name} "
                f"--principal-arn {arn} --type EC2_LINUX (or set iam.manageAccessEntry)",
            ) from err
        return f"{arn} has an EC2_LINUX entry on {self.settings.cluster_name}"

    def ami(self) -> str:
        clouds = self._clouds()
        cluster = describe_cluster(clouds.eks, self.settings.cluster_name)
        try:
            choice = resolve_ami(
                clouds.ssm,
                clouds.ec2,
                k8s_version=cluster.version,
                instance_type=self.instance_type,
                variant="standard",
            )
        except CloudError as err:
            raise Failed(err.message, f"set {c.ANN_AMI_ID} on the Job, or publish the AMI") from err
        return f"{choice.ami_id} for {self.instance_type} (Kubernetes {cluster.version})"

    def subnets(self) -> str:
        clouds = self._clouds()
        cluster = describe_cluster(clouds.eks, self.settings.cluster_name)
        if not cluster.subnet_ids:
            raise Failed(
                f"cluster {cluster.name} lists no subnets",
                f"annotate Jobs with {c.ANN_SUBNETS}",
            )
        found, missing = [], []
        # One call per subnet: a batch call fails whole and would not say which is gone.
        for subnet in cluster.subnet_ids:
            try:
                found += clouds.ec2.describe_subnets(SubnetIds=[subnet])["Subnets"]
            except Exception as exc:
                err = to_cloud_error(exc, f"DescribeSubnets {subnet}")
                if err.code != "InvalidSubnetID.NotFound":
                    raise err from exc
                missing.append(subnet)
        if missing:
            raise Failed(
                f"subnets {missing} of cluster {cluster.name} do not exist",
                f"update the cluster's subnets or annotate Jobs with {c.ANN_SUBNETS}",
            )
        return ", ".join(f"{s['SubnetId']} ({s['AvailabilityZone']})" for s in found)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def report(results: list[Result]) -> int:
    for result in results:
        print(result.render())
    failed = sum(1 for r in results if not r.ok)
    warned = sum(1 for r in results if r.warn)
    print(f"{len(results) - failed - warned} passed, {warned} warned, {failed} failed")
    return 0 if not failed else 1


@dataclass(frozen=True)
class Where:
    """The command line's answer to "which cluster, which installation, as whom"."""

    kubeconfig: str | None = None
    work_dir: str | None = None  # a local environment (`make dev-up`): its kubeconfig, file
    config: str | None = None  # a local settings file instead of the cluster's ConfigMap
    namespace: str | None = None
    settings_configmap: str | None = None
    service_account: str | None = None
    as_controller: bool = False


@dataclass(frozen=True)
class Target:
    """Where doctor and explain look: a cluster's API, the controller's installation, AWS."""

    kube: Any
    cluster: str  # how the cluster was reached, for the report
    installation: Installation
    operator: AwsAccess | CloudError
    access: AwsAccess | CloudError  # the identity the AWS checks run as

    @property
    def settings(self) -> Settings:
        return self.installation.settings

    def header(self) -> str:
        inst = self.installation
        account = inst.service_account or "unknown (pass --service-account)"
        return (
            f"settings: {inst.source}; cluster: {self.cluster}; controller namespace "
            f"{inst.namespace}, ServiceAccount {account}"
        )


def _access(installation: Installation, operator: AwsAccess, kube: Any) -> AwsAccess:
    """The controller's role, assumed with the operator's credentials."""
    from provisioner.cloud.access import assume, controller_role
    from provisioner.kube.resources import SERVICE_ACCOUNTS

    if not installation.service_account:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "NoServiceAccount",
            "--as-controller needs the controller's ServiceAccount, which was not found; "
            "pass --service-account NAME",
        )
    try:
        account = kube.get(
            SERVICE_ACCOUNTS, installation.service_account, namespace=installation.namespace
        )
    except KubeNotFound as err:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "NoServiceAccount",
            f"--as-controller: ServiceAccount {installation.namespace}/"
            f"{installation.service_account} does not exist",
        ) from err
    role = controller_role(
        operator.client("eks"),
        installation.settings.cluster_name,
        installation.namespace,
        installation.service_account,
        account["metadata"].get("annotations") or {},
    )
    return assume(operator, role)


def connect(where: Where, *, aws: bool = True) -> Target:
    """The cluster from --kubeconfig (else kubectl's current context, else in-cluster), the
    installation from its settings ConfigMap (or an explicit --config / --work-dir file),
    and AWS as the operator or, with --as-controller, as the controller's role."""
    import json

    from provisioner.cloud.access import operator_access
    from provisioner.commands.installation import (
        DiscoveryError,
        find_installation,
        from_settings_file,
    )
    from provisioner.kube.client import KubeClient

    kubeconfig, config = where.kubeconfig, where.config
    if where.work_dir:
        state_file = Path(where.work_dir) / "state.json"
        try:
            state = json.loads(state_file.read_text())
        except FileNotFoundError:
            raise SystemExit(
                f"error: no {state_file}; start the local environment (`make dev-up`) "
                "or leave out --work-dir"
            ) from None
        kubeconfig = kubeconfig or state["kubeconfig"]
        config = config or state["settings"]
    if kubeconfig:
        kube, cluster = KubeClient.from_kubeconfig(str(kubeconfig)), f"kubeconfig {kubeconfig}"
    else:
        kube, cluster = KubeClient.from_environment()
    try:
        if config:
            installation = from_settings_file(
                kube, str(config), namespace=where.namespace, service_account=where.service_account
            )
        else:
            installation = find_installation(
                kube,
                namespace=where.namespace,
                configmap=where.settings_configmap,
                service_account=where.service_account,
            )
    except DiscoveryError as err:
        raise SystemExit(f"error: {err}") from None
    operator: AwsAccess | CloudError
    access: AwsAccess | CloudError
    if not aws:
        none = CloudError(ErrorKind.CONFIG, None, "NotAsked", "AWS not used")
        return Target(kube, cluster, installation, none, none)
    settings = installation.settings
    try:
        operator = operator_access(settings.defaults.region, settings.aws.endpoint_url)
    except CloudError as err:
        operator = err
    access = operator
    if where.as_controller and isinstance(operator, AwsAccess):
        try:
            access = _access(installation, operator, kube)
        except CloudError as err:
            access = err
    return Target(kube, cluster, installation, operator, access)


def main(where: Where, queue: str, check: str, kueue_config: str) -> int:
    target = connect(where)
    try:
        return _run(target, queue, check, kueue_config)
    finally:
        target.kube.close()


def _run(target: Target, queue: str, check: str, kueue_config: str) -> int:
    from provisioner.commands.doctor_install import InstallChecks

    print(target.header())
    access = target.access
    clouds = access.clients() if isinstance(access, AwsAccess) else None
    iam = access.client("iam") if isinstance(access, AwsAccess) else None
    doctor = Doctor(target.kube, clouds, iam, target.settings, queue=queue, check=check)
    install = InstallChecks(
        target.kube,
        target.settings,
        target.installation,
        target.operator,
        access,
        kueue_config=kueue_config,
    )
    results = doctor.run()
    # Kubernetes links, the installation and identities, then the AWS links, then the state.
    aws_from = next(i for i, r in enumerate(results) if r.name == "node role")
    results[aws_from:aws_from] = run_checks(install.checks())
    results += run_checks(install.state_checks())
    return report(results)
