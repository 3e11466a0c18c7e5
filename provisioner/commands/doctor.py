"""`atomic-gang doctor`: preflight checks, in the order a Job's path depends on them.

Called by the CLI. Each check reads one link and says pass or fail, and for a failure the
fix. The Kubernetes links first (`doctor_kube`: the queues, our AdmissionCheck, the leader
Lease; the queue links of `--queue`, or, without it, of every LocalQueue a gang waits on,
each line named by its queue, `doctor_queues`; then the DaemonSets every gang node needs,
`doctor_daemonsets`), then the installation's (`doctor_install`:
Kueue's waitForPodsReady, cert-manager, the controller's AWS identity and the one the checks
run as), then the AWS links (`doctor_aws`: node role, instance profile, access entry, AMI,
subnets), then the Pulumi state (`doctor_install`), and, for a Job or pool shape given on
the command line, the launch check (`doctor_launch`: the launch the controller would send,
dry-run on EC2). Every check runs even after a failure, so one run lists everything to fix
(`checks`). `target.connect` finds the cluster, the installation and the AWS identity the
checks run as. It only reads, through `provisioner.kube` and `provisioner.cloud`, apart from
the state backend's one probe object and the launch check's dry-run calls (which EC2 answers
without acting).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner.api import kueue_objects as ko
from provisioner.api.settings import Settings
from provisioner.cloud.access import AwsAccess
from provisioner.cloud.ec2api import CloudClients
from provisioner.commands.checks import Check, Failed, Result, report, report_json, run_checks
from provisioner.commands.doctor_aws import DEFAULT_INSTANCE_TYPE, NO_CLIENTS, AwsLinks
from provisioner.commands.doctor_daemonsets import DaemonSetCheck
from provisioner.commands.doctor_install import InstallChecks
from provisioner.commands.doctor_kube import KubeLinks, Reader
from provisioner.commands.doctor_launch import LaunchCheck, LaunchShape, shape_of_job
from provisioner.commands.doctor_queues import find_queues
from provisioner.commands.target import Target, Where, connect
from provisioner.kube.errors import KubeError

__all__ = ["DAEMONSETS_CHECK", "LAUNCH_CHECK", "QUEUES_CHECK", "Doctor", "main"]

LAUNCH_CHECK = "launch (dry run)"
QUEUES_CHECK = "LocalQueues"
DAEMONSETS_CHECK = "DaemonSets on gang nodes"


@dataclass
class Doctor:
    """The queue and AWS links (the installation's are `InstallChecks`)."""

    kube: Reader
    clouds: CloudClients | None
    iam: Any
    settings: Settings
    # One LocalQueue ("NAMESPACE/NAME", --queue), or None: every queue a gang waits on
    # (`doctor_queues`).
    queue: str | None = None
    # -n without --queue: only that namespace's LocalQueues (None: every namespace's).
    namespace: str | None = None
    check: str = ko.CHECK_NAME
    instance_type: str = DEFAULT_INSTANCE_TYPE
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    # The launch check's shape: a Job manifest, or the --launch-* flags (None: no check).
    launch: Path | LaunchShape | None = None
    sts: Any = None  # decodes an UnauthorizedOperation's message for the launch check

    def run(self) -> list[Result]:
        aws = AwsLinks(self.clouds, self.iam, self.settings, self.instance_type)
        daemonsets = (DAEMONSETS_CHECK, DaemonSetCheck(self.kube).check)
        return run_checks([*self._kube_checks(), daemonsets, *aws.checks(), *self._launch_checks()])

    def _links(self, queue: str) -> KubeLinks:
        return KubeLinks(self.kube, self.settings, queue, self.check, self.now)

    def _kube_checks(self) -> list[Check]:
        """--queue's links; else each queue's links, named by queue, for every queue a
        gang waits on (`doctor_queues`), then the links all queues share."""
        if self.queue is not None:
            return self._links(self.queue).checks()
        shared = self._links(f"default/{ko.QUEUE_NAME}").controller_checks()
        try:
            choice = find_queues(self.kube, self.settings.controller_name, self.check)
            if self.namespace is not None:
                mine = tuple(q for q in choice.queues if q.partition("/")[0] == self.namespace)
                choice = replace(choice, queues=mine)
        except KubeError as err:
            failure = _fails(f"could not list the queues: {err}", "see the error above")
            return [(QUEUES_CHECK, failure), *shared]
        if not choice.queues:
            where = f" in namespace {self.namespace}" if self.namespace else ""
            return [
                (
                    QUEUES_CHECK,
                    _fails(
                        f"no gang Workload is pending and no LocalQueue{where} leads to a "
                        f"ClusterQueue listing AdmissionCheck {self.check}",
                        "create the queues (the chart's kueue.create.* values), or list "
                        f"{self.check} in spec.admissionChecksStrategy of the ClusterQueue "
                        "your Jobs' LocalQueue points at",
                    ),
                ),
                *shared,
            ]
        per_queue = [
            (f"{name} ({queue})", check)
            for queue in choice.queues
            for name, check in self._links(queue).queue_checks()
        ]
        return per_queue + shared

    def _launch_checks(self) -> list[Check]:
        launch = self.launch
        if launch is None:
            return []
        clouds = self.clouds

        def check() -> str:
            if clouds is None:
                raise Failed("no AWS clients", NO_CLIENTS)
            try:
                shape = (
                    shape_of_job(launch, self.settings)
                    if isinstance(launch, Path)
                    else launch.shape(self.settings)
                )
            except (ValueError, OSError) as err:  # a GangShapeError names every bad key
                raise Failed(f"the shape is not valid: {err}", "fix the Job or the flags") from err
            return LaunchCheck(clouds, self.sts, self.settings, shape).run()

        return [(LAUNCH_CHECK, check)]


def _fails(detail: str, fix: str) -> Callable[[], str]:
    def check() -> str:
        raise Failed(detail, fix)

    return check


def main(
    where: Where,
    queue: str | None,
    check: str,
    kueue_config: str,
    launch: Path | LaunchShape | None = None,
    *,
    output: str = "text",
    namespace: str | None = None,
) -> int:
    """Exit code 0 when every check passed (warnings included), 1 when one failed."""
    target = connect(where)
    documents = output in ("json", "yaml")
    if not documents:
        print(target.header(), flush=True)
    try:
        results = _run(target, queue, check, kueue_config, launch, namespace)
    finally:
        target.kube.close()
    return report_json(results, target.header(), output) if documents else report(results)


def _run(
    target: Target,
    queue: str | None,
    check: str,
    kueue_config: str,
    launch: Path | LaunchShape | None = None,
    namespace: str | None = None,
) -> list[Result]:
    access = target.access
    clouds = access.clients() if isinstance(access, AwsAccess) else None
    iam = access.client("iam") if isinstance(access, AwsAccess) else None
    sts = access.client("sts") if isinstance(access, AwsAccess) else None
    doctor = Doctor(
        target.kube,
        clouds,
        iam,
        target.settings,
        queue=queue,
        namespace=namespace,
        check=check,
        launch=launch,
        sts=sts,
    )
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
    return results
