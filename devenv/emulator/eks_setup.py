"""P6b: the EKS calls a new cluster's set-up makes, which moto lacks: add-ons and the
cluster's access configuration.

As the EKS API Reference documents them (CreateAddon, DescribeAddon, ListAddons,
DeleteAddon; CreateCluster's and UpdateClusterConfig's `accessConfig`):

- An add-on is created `CREATING` and answers `ACTIVE` from then on (what it runs on the
  nodes, e.g. the Pod Identity agent's DaemonSet, is not modelled); a second CreateAddon of
  the same name is ResourceInUseException; an unknown one, ResourceNotFoundException.
- A cluster made through the API without `accessConfig` has `authenticationMode`
  CONFIG_MAP ("CreateAccessConfigRequest"); UpdateClusterConfig moves it only forward,
  CONFIG_MAP -> API_AND_CONFIG_MAP -> API ("Change authentication mode", EKS User Guide);
  any other change is InvalidParameterException. The update answers an `update` object
  (type AccessConfigUpdate) and the cluster stays ACTIVE here (no rollout is modelled).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable
from typing import Any, Final

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.eks import urls as eks_urls
from moto.eks.exceptions import (
    InvalidParameterException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.models import Cluster
from moto.eks.responses import EKSResponse

from devenv.emulator.patching import original, patch

_ROUTES: Final = {
    "{0}/clusters/(?P<name>[^/]+)/addons$": EKSResponse.dispatch,
    "{0}/clusters/(?P<name>[^/]+)/addons/(?P<addonName>[^/]+)$": EKSResponse.dispatch,
}
# The order a cluster may move in; no step back ("Change authentication mode").
_MODES: Final = ("CONFIG_MAP", "API_AND_CONFIG_MAP", "API")
# The add-ons' own versions are not modelled; DescribeAddon answers this one.
_ADDON_VERSION: Final = "v1.3.10-eksbuild.1"

_ADDONS: weakref.WeakKeyDictionary[Cluster, dict[str, dict[str, Any]]] = weakref.WeakKeyDictionary()


def install_eks_setup() -> None:
    eks_urls.url_paths.update(_ROUTES)
    handlers: dict[str, Callable[..., Any]] = {
        "create_addon": _create_addon,
        "describe_addon": _describe_addon,
        "list_addons": _list_addons,
        "delete_addon": _delete_addon,
        "create_cluster": _create_cluster,
        "update_cluster_config": _update_cluster_config,
    }
    for name, handler in handlers.items():
        patch(EKSResponse, name, handler)


def _cluster(response: Any) -> Cluster:
    cluster: Cluster = response.eks_backend.describe_cluster(name=response._get_param("name"))
    return cluster


def _addons(cluster: Cluster) -> dict[str, dict[str, Any]]:
    found = _ADDONS.get(cluster)
    if found is None:
        found = _ADDONS[cluster] = {}
    return found


def _create_addon(self: Any) -> ActionResult:
    cluster = _cluster(self)
    name = str(self._get_param("addonName") or "")
    if not name:
        raise InvalidParameterException(clusterName=cluster.name, message="addonName is required.")
    addons = _addons(cluster)
    if name in addons:
        raise ResourceInUseException(
            clusterName=cluster.name, addonName=name, message=f"Addon already exists: {name}"
        )
    now = utcnow()
    addon: dict[str, Any] = {
        "addonName": name,
        "clusterName": cluster.name,
        "status": "CREATING",
        "addonVersion": self._get_param("addonVersion") or _ADDON_VERSION,
        "health": {"issues": []},
        "addonArn": (
            f"arn:{self.partition}:eks:{self.region}:{self.current_account}:"
            f"addon/{cluster.name}/{name}/{uuid.uuid4()}"
        ),
        "createdAt": now,
        "modifiedAt": now,
        "tags": dict(self._get_param("tags") or {}),
    }
    for key in ("serviceAccountRoleArn", "configurationValues"):
        if self._get_param(key):
            addon[key] = self._get_param(key)
    addons[name] = addon
    answer = dict(addon)
    addon["status"] = "ACTIVE"  # what the next DescribeAddon finds
    return ActionResult({"addon": answer})


def _addon(response: Any) -> dict[str, Any]:
    cluster = _cluster(response)
    name = str(response._get_param("addonName") or "")
    addon = _addons(cluster).get(name)
    if addon is None:
        raise ResourceNotFoundException(
            clusterName=cluster.name,
            addonName=name,
            message=f"No addon: {name} found in cluster: {cluster.name}",
        )
    return addon


def _describe_addon(self: Any) -> ActionResult:
    return ActionResult({"addon": _addon(self)})


def _list_addons(self: Any) -> ActionResult:
    return ActionResult({"addons": sorted(_addons(_cluster(self)))})


def _delete_addon(self: Any) -> ActionResult:
    addon = _addon(self)
    _addons(_cluster(self)).pop(addon["addonName"])
    return ActionResult({"addon": {**addon, "status": "DELETING"}})


def _create_cluster(self: Any) -> ActionResult:
    answer: ActionResult = original(EKSResponse, "create_cluster")(self)
    access = dict(self._get_param("accessConfig") or {})
    mode = str(access.get("authenticationMode") or "CONFIG_MAP")
    if mode not in _MODES:
        raise InvalidParameterException(message=f"Unsupported authentication mode: {mode}")
    cluster = _cluster(self)
    vars(cluster)["access_config"] = {"authenticationMode": mode}
    return answer


def _update_cluster_config(self: Any) -> ActionResult:
    access = self._get_param("accessConfig")
    if not access:
        answer: ActionResult = original(EKSResponse, "update_cluster_config")(self)
        return answer
    cluster = _cluster(self)
    current = str(
        (vars(cluster).get("access_config") or {}).get("authenticationMode") or "CONFIG_MAP"
    )
    wanted = str(access.get("authenticationMode") or "")
    if wanted not in _MODES or _MODES.index(wanted) <= _MODES.index(current):
        raise InvalidParameterException(
            clusterName=cluster.name,
            message=f"Unsupported authentication mode update from {current} to {wanted}",
        )
    vars(cluster)["access_config"] = {
        **(vars(cluster).get("access_config") or {}),
        "authenticationMode": wanted,
    }
    update = {
        "id": str(uuid.uuid4()),
        "status": "InProgress",
        "type": "AccessConfigUpdate",
        "params": [{"type": "AuthenticationMode", "value": wanted}],
        "createdAt": utcnow(),
        "errors": [],
    }
    return ActionResult({"update": update})
