"""Who an operator command's AWS checks run as: the operator, or the controller's role.

Called by `doctor.connect` (`atomic-gang doctor`, `explain`). `operator_access` uses the
default credential chain (or, when the settings point at an endpoint, the emulator's fixed
keys, so real credentials never reach it). `controller_role` finds the role the controller
runs as: its ServiceAccount's IRSA annotation, else its EKS Pod Identity association.
`assume` turns the operator's access into the role's through STS AssumeRole. Every
`AwsAccess` carries the ARN STS says it is, so a report can name who ran each check.

Assuming a Pod Identity role from outside a pod needs the role's trust policy to allow the
operator's principal as well as `pods.eks.amazonaws.com`; AWS refuses otherwise, and the
error says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from provisioner.cloud.ec2api import (
    CloudClients,
    build_clients,
    client_config,
    make_client,
    new_session,
    operator_session,
)
from provisioner.cloud.errors import CloudError, ErrorKind, to_cloud_error

__all__ = [
    "IRSA_ANNOTATION",
    "AwsAccess",
    "ControllerRole",
    "PodIdentityApi",
    "assume",
    "controller_role",
    "operator_access",
]

IRSA_ANNOTATION: Final = "eks.amazonaws.com/role-arn"
SESSION_NAME: Final = "atomic-gang-doctor"
_OPERATOR_ATTEMPTS: Final = 2


class PodIdentityApi(Protocol):
    def list_pod_identity_associations(self, **kwargs: Any) -> dict[str, Any]: ...

    def describe_pod_identity_association(self, **kwargs: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class AwsAccess:
    """A session and the identity STS reports for it."""

    session: Any
    region: str
    endpoint_url: str | None
    identity: str
    as_controller: bool
    how: str  # how this identity was obtained, for the report

    def clients(self) -> CloudClients:
        return build_clients(
            self.session, self.region, self.endpoint_url, max_attempts=_OPERATOR_ATTEMPTS
        )

    def client(self, service: str, region: str | None = None) -> Any:
        """One more client (s3, kms, eks, iam…) for this identity, in `region` if given."""
        config = client_config(max_attempts=_OPERATOR_ATTEMPTS)
        return make_client(self.session, service, region or self.region, self.endpoint_url, config)


def _whoami(session: Any, region: str, endpoint_url: str | None) -> str:
    sts = make_client(session, "sts", region, endpoint_url, client_config(max_attempts=2))
    try:
        return str(sts.get_caller_identity()["Arn"])
    except Exception as exc:
        raise to_cloud_error(exc, "GetCallerIdentity") from exc


def operator_access(region: str, endpoint_url: str | None = None) -> AwsAccess:
    """The operator's own credentials (the default chain: profile, env, SSO, instance role;
    in a pod, the pod's identity)."""
    session = operator_session(endpoint_url)
    identity = _whoami(session, region, endpoint_url)
    return AwsAccess(session, region, endpoint_url, identity, False, "the operator's credentials")


@dataclass(frozen=True)
class ControllerRole:
    role_arn: str
    source: str  # e.g. "Pod Identity association a-123 of NAMESPACE/SERVICEACCOUNT"


def controller_role(
    eks: PodIdentityApi,
    cluster: str,
    namespace: str,
    service_account: str,
    annotations: Mapping[str, str],
) -> ControllerRole:
    """The role the controller's pods get: IRSA's annotation, else the Pod Identity
    association for the ServiceAccount. CONFIG when there is neither."""
    who = f"{namespace}/{service_account}"
    if annotations.get(IRSA_ANNOTATION):
        return ControllerRole(annotations[IRSA_ANNOTATION], f"IRSA annotation on {who}")
    try:
        found = (
            eks.list_pod_identity_associations(
                clusterName=cluster, namespace=namespace, serviceAccount=service_account
            ).get("associations")
            or []
        )
    except Exception as exc:
        raise to_cloud_error(exc, f"ListPodIdentityAssociations {cluster} {who}") from exc
    if not found:
        raise CloudError(
            ErrorKind.CONFIG,
            None,
            "NoControllerIdentity",
            f"ServiceAccount {who} has no {IRSA_ANNOTATION} annotation and no Pod Identity "
            f"association on cluster {cluster}: the controller's pods get no AWS role.",
        )
    association_id = str(found[0]["associationId"])
    try:
        association = eks.describe_pod_identity_association(
            clusterName=cluster, associationId=association_id
        )["association"]
    except Exception as exc:
        raise to_cloud_error(exc, f"DescribePodIdentityAssociation {association_id}") from exc
    return ControllerRole(
        str(association["roleArn"]), f"Pod Identity association {association_id} of {who}"
    )


def assume(operator: AwsAccess, role: ControllerRole) -> AwsAccess:
    """The controller role's access, through STS AssumeRole with the operator's session."""
    sts = operator.client("sts")
    try:
        answer = sts.assume_role(RoleArn=role.role_arn, RoleSessionName=SESSION_NAME)
    except Exception as exc:
        err = to_cloud_error(exc, f"AssumeRole {role.role_arn}")
        raise CloudError(
            err.kind,
            err.code,
            err.reason,
            f"{operator.identity} could not assume {role.role_arn} ({role.source}): "
            f"{err.message}. The role's trust policy must allow your principal "
            "sts:AssumeRole (a Pod Identity trust allows only pods.eks.amazonaws.com), or run "
            "doctor in a pod with the controller's ServiceAccount.",
        ) from exc
    creds = answer["Credentials"]
    session = new_session(
        aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"],
        aws_session_token=creds["SessionToken"],
    )
    identity = _whoami(session, operator.region, operator.endpoint_url)
    how = f"the controller's role {role.role_arn} ({role.source}), assumed by {operator.identity}"
    return AwsAccess(session, operator.region, operator.endpoint_url, identity, True, how)
