"""P6: EKS access entries and Pod Identity associations, which moto lacks."""

from __future__ import annotations

import re
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from moto.core.responses import ActionResult, EmptyResult
from moto.core.utils import utcnow
from moto.eks import urls as eks_urls
from moto.eks.exceptions import (
    InvalidParameterException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.models import Cluster
from moto.eks.responses import EKSResponse

from devenv.emulator.patching import patch


# --- P6: EKS access entries and Pod Identity associations --------------------------------
@dataclass
class _ClusterExtras:
    access_entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    associations: dict[str, dict[str, Any]] = field(default_factory=dict)


# Keyed by moto's Cluster object, so deleting the cluster or resetting moto drops them.
_CLUSTER_EXTRAS: weakref.WeakKeyDictionary[Cluster, _ClusterExtras] = weakref.WeakKeyDictionary()

_EKS_ROUTES: Final = {
    "{0}/clusters/(?P<name>[^/]+)/access-entries$": EKSResponse.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$": EKSResponse.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/pod-identity-associations$": EKSResponse.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/pod-identity-associations/(?P<associationId>[^/]+)$": (
        EKSResponse.dispatch
    ),
}
_ACCESS_ENTRY_TYPES: Final = frozenset(
    {
        "STANDARD",
        "EC2_LINUX",
        "EC2_WINDOWS",
        "FARGATE_LINUX",
        "EC2",
        "HYBRID_LINUX",
        "HYPERPOD_LINUX",
    }
)
_NODE_USERNAME: Final = "system:node:{{EC2PrivateDNSName}}"


def install_eks() -> None:
    eks_urls.url_paths.update(_EKS_ROUTES)
    handlers: dict[str, Callable[..., Any]] = {
        "create_access_entry": _create_access_entry,
        "describe_access_entry": _describe_access_entry,
        "list_access_entries": _list_access_entries,
        "update_access_entry": _update_access_entry,
        "delete_access_entry": _delete_access_entry,
        "create_pod_identity_association": _create_association,
        "describe_pod_identity_association": _describe_association,
        "list_pod_identity_associations": _list_associations,
        "update_pod_identity_association": _update_association,
        "delete_pod_identity_association": _delete_association,
    }
    for name, handler in handlers.items():
        patch(EKSResponse, name, handler)


def _extras(response: Any) -> tuple[Cluster, _ClusterExtras]:
    name = response._get_param("name")
    cluster: Cluster = response.eks_backend.describe_cluster(name=name)
    extras = _CLUSTER_EXTRAS.get(cluster)
    if extras is None:
        extras = _CLUSTER_EXTRAS[cluster] = _ClusterExtras()
    return cluster, extras


def _create_access_entry(self: Any) -> ActionResult:
    cluster, extras = _extras(self)
    principal = str(self._get_param("principalArn") or "")
    _check_principal(principal)
    if principal in extras.access_entries:
        raise ResourceInUseException(
            clusterName=cluster.name,
            message="The specified access entry resource is already in use on this cluster.",
        )
    entry_type = str(self._get_param("type") or "STANDARD")
    if entry_type not in _ACCESS_ENTRY_TYPES:
        raise InvalidParameterException(
            clusterName=cluster.name,
            message=f"The type {entry_type} is not a valid access entry type.",
        )
    now = utcnow()
    entry = {
        "clusterName": cluster.name,
        "principalArn": principal,
        "kubernetesGroups": list(self._get_param("kubernetesGroups") or []),
        "accessEntryArn": _access_entry_arn(self, cluster.name, principal),
        "createdAt": now,
        "modifiedAt": now,
        "tags": dict(self._get_param("tags") or {}),
        "username": self._get_param("username") or _default_username(entry_type, principal),
        "type": entry_type,
    }
    extras.access_entries[principal] = entry
    return ActionResult({"accessEntry": entry})


def _describe_access_entry(self: Any) -> ActionResult:
    return ActionResult({"accessEntry": _access_entry(self)})


def _update_access_entry(self: Any) -> ActionResult:
    entry = _access_entry(self)
    groups = self._get_param("kubernetesGroups")
    if groups is not None:
        entry["kubernetesGroups"] = list(groups)
    if self._get_param("username"):
        entry["username"] = self._get_param("username")
    entry["modifiedAt"] = utcnow()
    return ActionResult({"accessEntry": entry})


def _delete_access_entry(self: Any) -> ActionResult:
    entry = _access_entry(self)
    _extras(self)[1].access_entries.pop(entry["principalArn"])
    return EmptyResult()


def _list_access_entries(self: Any) -> ActionResult:
    _, extras = _extras(self)
    page, token = _page(self, list(extras.access_entries))
    return ActionResult({"accessEntries": page, "nextToken": token})


def _access_entry(response: Any) -> dict[str, Any]:
    cluster, extras = _extras(response)
    principal = str(response._get_param("principalArn") or "")
    entry = extras.access_entries.get(principal)
    if entry is None:
        raise ResourceNotFoundException(
            clusterName=cluster.name,
            message=(
                "The specified principalArn could not be found. You can view your available "
                "access entries with 'list-access-entries'."
            ),
        )
    return entry


def _check_principal(principal: str) -> None:
    if not re.match(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:(role|user|assumed-role)/.+$", principal):
        raise InvalidParameterException(
            message=f"The principalArn parameter format is not valid: {principal!r}."
        )


def _default_username(entry_type: str, principal: str) -> str:
    if entry_type in ("EC2_LINUX", "EC2_WINDOWS", "HYBRID_LINUX", "HYPERPOD_LINUX"):
        return _NODE_USERNAME
    if ":role/" in principal:
        account = principal.split(":")[4]
        role_name = principal.rsplit("/", 1)[-1]
        return f"arn:aws:sts::{account}:assumed-role/{role_name}/{{{{SessionName}}}}"
    return principal


def _access_entry_arn(response: Any, cluster_name: str, principal: str) -> str:
    account = principal.split(":")[4]
    kind, _, path = principal.split(":", 5)[5].partition("/")
    name = path.rsplit("/", 1)[-1]
    return (
        f"arn:{response.partition}:eks:{response.region}:{response.current_account}:"
        f"access-entry/{cluster_name}/{kind}/{account}/{name}/{uuid.uuid4()}"
    )


def _create_association(self: Any) -> ActionResult:
    cluster, extras = _extras(self)
    namespace = str(self._get_param("namespace") or "")
    service_account = str(self._get_param("serviceAccount") or "")
    role_arn = str(self._get_param("roleArn") or "")
    if not (namespace and service_account and role_arn):
        raise InvalidParameterException(
            clusterName=cluster.name, message="namespace, serviceAccount and roleArn are required."
        )
    for existing in extras.associations.values():
        if (existing["namespace"], existing["serviceAccount"]) == (namespace, service_account):
            raise ResourceInUseException(
                clusterName=cluster.name,
                message=f"Association already exists: {existing['associationId']}",
            )
    association_id = "a-" + uuid.uuid4().hex[:17]
    now = utcnow()
    association = {
        "clusterName": cluster.name,
        "namespace": namespace,
        "serviceAccount": service_account,
        "roleArn": role_arn,
        "associationArn": (
            f"arn:{self.partition}:eks:{self.region}:{self.current_account}:"
            f"podidentityassociation/{cluster.name}/{association_id}"
        ),
        "associationId": association_id,
        "tags": dict(self._get_param("tags") or {}),
        "createdAt": now,
        "modifiedAt": now,
        "disableSessionTags": bool(self._get_param("disableSessionTags") or False),
    }
    extras.associations[association_id] = association
    return ActionResult({"association": association})


def _describe_association(self: Any) -> ActionResult:
    return ActionResult({"association": _association(self)})


def _update_association(self: Any) -> ActionResult:
    association = _association(self)
    if self._get_param("roleArn"):
        association["roleArn"] = self._get_param("roleArn")
    association["modifiedAt"] = utcnow()
    return ActionResult({"association": association})


def _delete_association(self: Any) -> ActionResult:
    association = _association(self)
    _extras(self)[1].associations.pop(association["associationId"])
    return ActionResult({"association": association})


def _list_associations(self: Any) -> ActionResult:
    _, extras = _extras(self)
    namespace = self._get_param("namespace")
    service_account = self._get_param("serviceAccount")
    summaries = [
        {
            k: a[k]
            for k in (
                "clusterName",
                "namespace",
                "serviceAccount",
                "associationArn",
                "associationId",
            )
        }
        for a in extras.associations.values()
        if (namespace is None or a["namespace"] == namespace)
        and (service_account is None or a["serviceAccount"] == service_account)
    ]
    page, token = _page(self, summaries)
    return ActionResult({"associations": page, "nextToken": token})


def _association(response: Any) -> dict[str, Any]:
    cluster, extras = _extras(response)
    association_id = str(response._get_param("associationId") or "")
    association = extras.associations.get(association_id)
    if association is None:
        raise ResourceNotFoundException(
            clusterName=cluster.name,
            message=f"No Pod Identity association found for id: {association_id}.",
        )
    return association


def _page(response: Any, items: list[Any]) -> tuple[list[Any], str | None]:
    start = int(response._get_param("nextToken") or 0)
    size = int(response._get_param("maxResults") or 100)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else None)
