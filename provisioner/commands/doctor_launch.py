"""`atomic-gang doctor`'s launch check: EC2's own answer to the launch the controller would
send for a Job or a pool shape, asked with `DryRun=True`.

Called by `doctor.Doctor` when a shape is given (`--launch-job FILE` or the `--launch-*`
flags). It reads what a pool pass reads (`pool_facts.gather_launch_facts`), plans the
subnets as the engine does, and builds the requests with the product's own builders: the
stack's CreateLaunchTemplate request (`PoolSpec.launch_template_props`,
`launch_template_request`), the launch (`pool_facts.launch_spec`, `engine.targeted_spec`
for a reservation) and `fleet.request_params` or `runinstances.request_params` (one per
subnet the sweep would try). Each is sent with `DryRun=True`, which EC2 answers after its
permission and parameter checks without launching anything: `DryRunOperation` (it would
succeed), `UnauthorizedOperation` (its encoded message is decoded with STS
`DecodeAuthorizationMessage` to name the action; without that permission the action is
named from the call), or the parameter error. `answer_line` turns each into a line and its
fix.

The launch requests are `launch_request.requests_for`'s, the builders the controller's
launch sends through, so what is checked is what the controller would send, field by field.
The pool's launch template exists only once the controller's first prepare made it. Until
then its creation is dry-run too, and the launch names the template by the name the stack
will give it (EC2 takes a template by name): the controller never launches without its
template, so neither does the check. EC2's DryRun checks the permission; an EC2 that also
checks parameters on a dry run then cannot find the template, which is a warning: the rest
of the request is checked on a later run.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import yaml

from provisioner.api import constants as c
from provisioner.api.clock import Clock, SystemClock
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShape, parse_gang_shape
from provisioner.cloud import naming
from provisioner.cloud.ec2api import CloudClients
from provisioner.cloud.engine import Ec2Engine, targeted_spec
from provisioner.cloud.errors import CloudError, classify_code, describe_code, error_code
from provisioner.cloud.launch_request import LaunchRequest, requests_for
from provisioner.cloud.subnets import plan_subnets
from provisioner.cloud.types import LaunchSpec, LaunchTemplateRef, SubnetRef
from provisioner.commands.checks import Failed, Warned
from provisioner.controllers.pool.facts import (
    LaunchTarget,
    StackNames,
    addresses_needed,
    desired_spec,
    gather_launch_facts,
    launch_spec,
)
from provisioner.pulumi_driver.port import launch_template_request
from provisioner.webhook.review import gang_kind_of, gang_pod_count

__all__ = ["DryRunAnswer", "LaunchCheck", "LaunchShape", "answer_line", "shape_of_job"]

DRY_RUN_OK: Final = "DryRunOperation"
UNAUTHORIZED: Final = "UnauthorizedOperation"
_ENCODED: Final = re.compile(r"Encoded authorization failure message:\s*(\S+)")
_TEMPLATE_MISSING: Final = ("InvalidLaunchTemplateName.", "InvalidLaunchTemplateId.")
_OTHER_NETWORK: Final = "belong to different networks"
# The pool the check's requests are tagged and named for when no Job names one.
CHECK_POOL: Final = "doctor-launch-check"


@dataclass(frozen=True)
class LaunchShape:
    """The `--launch-*` flags: a pool shape, validated as a Job's annotations are."""

    instance_type: str
    count: int
    mode: str = c.MODE_RUNINSTANCES
    zones: tuple[str, ...] = ()
    subnets: tuple[str, ...] = ()
    reservation: str | None = None
    pool: str = CHECK_POOL

    def shape(self, settings: Settings) -> GangShape:
        annotations = {
            c.ANN_INSTANCE_TYPE: self.instance_type,
            c.ANN_COUNT: str(self.count),
            c.ANN_MODE: self.mode,
        }
        if self.zones:
            annotations[c.ANN_AVAILABILITY_ZONES] = ",".join(self.zones)
        if self.subnets:
            annotations[c.ANN_SUBNETS] = ",".join(self.subnets)
        if self.reservation:
            annotations[c.ANN_CAPACITY_RESERVATION_ID] = self.reservation
        return parse_gang_shape({c.POOL_LABEL: self.pool}, annotations, self.count, settings)


def shape_of_job(path: Path, settings: Settings) -> GangShape:
    """The gang shape of the gang job (a Job, JobSet, PyTorchJob or TrainJob) in a manifest
    file, exactly as the webhook reads it."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, Mapping)]
    jobs = [(kind, d) for d in docs if (kind := gang_kind_of(d)) is not None]
    if len(jobs) != 1:
        raise ValueError(
            f"{path} must hold exactly one Job, JobSet, PyTorchJob, TrainJob or MPIJob "
            f"(found {len(jobs)})"
        )
    kind, job = jobs[0]
    meta = job.get("metadata") or {}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    return parse_gang_shape(
        dict(meta.get("labels") or {}),
        annotations,
        gang_pod_count(kind, job, annotations),
        settings,
    )


@dataclass(frozen=True)
class DryRunAnswer:
    """EC2's answer to one dry-run call."""

    call: str  # what was sent, for the line: "RunInstances in subnet-1 (us-east-1a)"
    action: str  # the IAM action of the call: "ec2:RunInstances"
    code: str
    message: str = ""
    missing_action: str | None = None  # decoded from UnauthorizedOperation's message
    template_pending: bool = False  # CreateFleet named a template the stack has not made


def answer_line(answer: DryRunAnswer) -> tuple[str, str, str]:
    """("pass" | "warn" | "fail", the line, its fix) for one answer."""
    if answer.code == DRY_RUN_OK:
        return "pass", f"{answer.call}: EC2 would accept it (DryRunOperation)", ""
    if answer.code == UNAUTHORIZED:
        action = answer.missing_action or answer.action
        return (
            "fail",
            f"{answer.call}: UnauthorizedOperation: the identity checked may not call {action}",
            f"allow {action} in the IAM policy of the identity the controller runs as (the "
            "controller policy grants it), then run doctor again",
        )
    if answer.template_pending and answer.code.startswith(_TEMPLATE_MISSING):
        return (
            "warn",
            f"{answer.call}: permitted; the rest of the request is checked once the "
            "pool's launch template exists",
            "run doctor again after the pool's first prepare created the template, or check "
            "the shape with --launch-mode runinstances",
        )
    if answer.code == "InvalidParameter" and _OTHER_NETWORK in answer.message:
        return (
            "fail",
            f"{answer.call}: {answer.code}: {answer.message}",
            "the subnet is in another VPC than the cluster's security groups: name subnets "
            f"of the cluster's VPC in {c.ANN_SUBNETS} (or --launch-subnets)",
        )
    _, fix = describe_code(answer.code, classify_code(answer.code))
    return "fail", f"{answer.call}: {answer.code}: {answer.message}", fix


@dataclass
class LaunchCheck:
    """The `launch (dry run)` line for `shape` (already validated), read with `clouds`;
    `sts` decodes an UnauthorizedOperation's message (None: name the call's action)."""

    clouds: CloudClients
    sts: Any
    settings: Settings
    shape: GangShape
    clock: Clock = field(default_factory=SystemClock)

    def run(self) -> str:
        engine = Ec2Engine(self.clouds, self.clock)
        try:
            facts = gather_launch_facts(engine, self.settings, self.shape)
        except CloudError as err:
            raise Failed(f"the launch's inputs could not be read: {err}", "see above") from err
        notes: list[tuple[str, str]] = []  # the controller's own refusals, and their fixes
        subnets = self._subnets(
            engine,
            facts.cluster.subnet_ids,
            facts.cluster.vpc_id,
            addresses_needed(self.shape, facts.instance_type),
            notes,
        )
        stack = desired_spec(self.settings, self.shape.pool, self.shape, facts)
        template_name = stack.launch_template_name
        template_id = self._template_id(template_name)
        pending = template_id is None
        answers: list[DryRunAnswer] = []
        if template_id is None:
            account = self.shape.node_role_arn.split(":")[4]
            partition = self.shape.node_role_arn.split(":")[1]
            profile_arn = (
                f"arn:{partition}:iam::{account}:instance-profile/{stack.instance_profile_name}"
            )
            request = launch_template_request(stack.launch_template_props(profile_arn))
            answers.append(
                self._send(
                    "ec2:CreateLaunchTemplate",
                    f"CreateLaunchTemplate {stack.launch_template_name}",
                    self.clouds.ec2.create_launch_template,
                    request,
                )
            )
        generation = 0
        spec = launch_spec(
            self.settings,
            target=LaunchTarget(
                pool_name=self.shape.pool,
                pool_uid=f"doctor-{uuid.uuid4().hex[:12]}",
                generation=generation,
                group=naming.group_name(generation),
            ),
            shape=self.shape,
            facts=facts,
            subnets=subnets,
            stack=StackNames(
                template_id=template_id,
                instance_profile_name=stack.instance_profile_name,
                placement_group_name=stack.placement_group_name,
            ),
        )
        if facts.reservation is not None:
            try:
                spec = targeted_spec(spec, facts.reservation, self.clock.now())
            except CloudError as err:
                raise Failed(f"the controller would not launch: {err}", "see above") from err
        answers += self.launch_answers(spec, template_name if pending else None)
        return self._verdict(answers, notes)

    def launch_answers(self, spec: LaunchSpec, pending_template: str | None) -> list[DryRunAnswer]:
        """EC2's answers to the controller's own launch requests for `spec` (already
        targeted), each sent with DryRun. Before the stack made the template
        (`pending_template`, its name) the launch names it as the stack will: the controller
        never launches without it."""
        if pending_template is not None:
            spec = replace(spec, launch_template=LaunchTemplateRef(None, name=pending_template))
        answers = []
        for request in requests_for(spec, spec.instance_type_info):
            action, call, method = _described(request, spec)
            answer = self._send(action, call, getattr(self.clouds.ec2, method), request.params)
            answers.append(replace(answer, template_pending=pending_template is not None))
        return answers

    def _subnets(
        self,
        engine: Ec2Engine,
        cluster_subnets: tuple[str, ...],
        vpc_id: str | None,
        needed: int,
        notes: list[tuple[str, str]],
    ) -> tuple[SubnetRef, ...]:
        shape = self.shape
        try:
            return plan_subnets(
                self.clouds.ec2,
                mode=shape.mode,
                cluster_subnet_ids=cluster_subnets,
                explicit_subnet_ids=shape.subnets,
                availability_zones=shape.availability_zones,
                vpc_id=vpc_id,
                addresses_needed=needed,
            )
        except CloudError as err:
            if err.reason != "SubnetOutsideClusterVpc":
                raise Failed(f"the controller would not launch: {err}", "see above") from err
            # The controller refuses these subnets itself; EC2's verdict on the same request
            # is asked too, so the line says what AWS would answer.
            notes.append(
                (
                    "the controller refuses these subnets itself, before calling EC2",
                    err.message,
                )
            )
            return plan_subnets(
                self.clouds.ec2,
                mode=shape.mode,
                cluster_subnet_ids=cluster_subnets,
                explicit_subnet_ids=shape.subnets,
                addresses_needed=needed,
            )

    def _template_id(self, name: str) -> str | None:
        try:
            found = self.clouds.ec2.describe_launch_templates(LaunchTemplateNames=[name])
        except Exception as exc:
            if (error_code(exc) or "").startswith(_TEMPLATE_MISSING):
                return None
            raise
        templates = found.get("LaunchTemplates") or []
        return str(templates[0]["LaunchTemplateId"]) if templates else None

    def _send(self, action: str, call: str, method: Any, params: dict[str, Any]) -> DryRunAnswer:
        try:
            method(**params, DryRun=True)
        except Exception as exc:
            code = error_code(exc)
            if code is None:
                raise
            message = str(getattr(exc, "response", {}).get("Error", {}).get("Message") or "")
            missing = self._decoded_action(message) if code == UNAUTHORIZED else None
            return DryRunAnswer(call, action, code, message, missing)
        # EC2 never answers a dry run with success; a 200 means DryRun was not honoured.
        return DryRunAnswer(call, action, "NoDryRunAnswer", "the call succeeded without DryRun")

    def _decoded_action(self, message: str) -> str | None:
        found = _ENCODED.search(message)
        if found is None or self.sts is None:
            return None
        try:
            decoded = self.sts.decode_authorization_message(EncodedMessage=found.group(1))
            action = json.loads(decoded["DecodedMessage"])["context"]["action"]
        except Exception:  # not allowed to decode: the call's own action names it
            return None
        return str(action)

    def _verdict(self, answers: list[DryRunAnswer], notes: list[tuple[str, str]]) -> str:
        lines = [answer_line(a) for a in answers]
        failed = notes + [(line, fix) for verdict, line, fix in lines if verdict == "fail"]
        warned = [(line, fix) for verdict, line, fix in lines if verdict == "warn"]
        passed = [line for verdict, line, _ in lines if verdict == "pass"]
        detail = "; ".join([note for note, _ in notes] + [line for _, line, _ in lines])
        if failed:
            raise Failed(detail, "; ".join(dict.fromkeys(fix for _, fix in failed)))
        if warned:
            raise Warned(detail, "; ".join(dict.fromkeys(fix for _, fix in warned)))
        return f"would launch: {'; '.join(passed)}"


def _described(request: LaunchRequest, spec: LaunchSpec) -> tuple[str, str, str]:
    """The IAM action, the line's words and the client method for one launch request."""
    subnet = request.subnet
    if subnet is None:
        zones = ", ".join(sorted({s.availability_zone for s in spec.subnets}))
        return (
            "ec2:CreateFleet",
            f"CreateFleet of {spec.count} x {spec.instance_type} over {zones}",
            "create_fleet",
        )
    return (
        "ec2:RunInstances",
        f"RunInstances of {spec.count} x {spec.instance_type} in "
        f"{subnet.subnet_id} ({subnet.availability_zone})",
        "run_instances",
    )
