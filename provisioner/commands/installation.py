"""Where the installed controller lives, found from the cluster: its settings, Lease and
ServiceAccount.

Called by `target.connect` for `atomic-gang doctor` and `explain`. The chart labels all it
renders `app.kubernetes.io/part-of=atomic-gang-provisioner`; its settings ConfigMap is the
one of those holding `settings.yaml` (the dashboard ConfigMap carries the same labels). It
is looked for in `--controller-namespace` (default: the chart's documented
`atomic-gang-system`), and, when that namespace was not given and holds none, in every
namespace. None, or more than one, is an error naming the flag that picks one. The file is
parsed by the product's own loader; the Lease is where the chart puts it (the release
namespace, the release's full name) unless the release's Deployment passes other
`--leader-election.*` flags; the ServiceAccount is the Deployment's, else the release's
labelled one, else `--service-account`. It only reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from provisioner.api.settings import Settings
from provisioner.api.settings_sources import (
    SettingsError,
    load_settings,
    overrides_from_argv,
    settings_from_document,
)
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import CONFIG_MAPS, DEPLOYMENTS, SERVICE_ACCOUNTS, ResourceRef

__all__ = [
    "CHART_NAMESPACE",
    "DiscoveryError",
    "Installation",
    "choose_settings_configmap",
    "find_installation",
    "from_settings_file",
]

CHART_NAMESPACE: Final = "atomic-gang-system"
PART_OF: Final = "app.kubernetes.io/part-of"
INSTANCE: Final = "app.kubernetes.io/instance"
CHART_SELECTOR: Final = f"{PART_OF}=atomic-gang-provisioner"
SETTINGS_KEY: Final = "settings.yaml"
SETTINGS_SUFFIX: Final = "-settings"
CONTROLLER_CONTAINER: Final = "controller"


class DiscoveryError(Exception):
    """The installation could not be found or read; the message names the flag to pass."""


class Reader(Protocol):
    """The reads discovery makes; `KubeClient` is one."""

    def get(
        self, ref: ResourceRef, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    def list(
        self, ref: ResourceRef, *, namespace: str | None = None, label_selector: str | None = None
    ) -> Any: ...


@dataclass(frozen=True)
class Installation:
    """The controller's settings as installed, and where they came from."""

    settings: Settings
    source: str  # e.g. "ConfigMap atomic-gang-system/atomic-gang-provisioner-settings"
    namespace: str  # the release namespace: the controller's pods and ServiceAccount
    service_account: str | None  # None: not found, and --service-account not passed
    release: str = ""


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def choose_settings_configmap(found: Sequence[Mapping[str, Any]], where: str) -> Mapping[str, Any]:
    """The one chart-labelled ConfigMap holding `settings.yaml` among `found` (listed in
    `where`, e.g. "namespace atomic-gang-system"); else `DiscoveryError` naming the flag."""
    settings = [cm for cm in found if SETTINGS_KEY in (cm.get("data") or {})]
    if not settings:
        raise DiscoveryError(
            f"no settings ConfigMap of the atomic-gang-provisioner chart ({CHART_SELECTOR}, "
            f"key {SETTINGS_KEY}) in {where}; pass --controller-namespace with the release's "
            "namespace, --settings-configmap NAMESPACE/NAME, or --config FILE with a local copy"
        )
    if len(settings) > 1:
        names = ", ".join(sorted(_name(cm) for cm in settings))
        raise DiscoveryError(
            f"{len(settings)} settings ConfigMaps of the chart in {where} ({names}); pass "
            "--settings-configmap NAMESPACE/NAME (or --controller-namespace) to pick one"
        )
    return settings[0]


def _find_configmap(
    kube: Reader, namespace: str | None, configmap: str | None
) -> Mapping[str, Any]:
    if configmap:
        ns, _, name = configmap.rpartition("/")
        ns = ns or namespace or CHART_NAMESPACE
        try:
            cm = kube.get(CONFIG_MAPS, name, namespace=ns)
        except KubeNotFound as err:
            raise DiscoveryError(
                f"ConfigMap {ns}/{name} (--settings-configmap) does not exist"
            ) from err
        if SETTINGS_KEY not in (cm.get("data") or {}):
            raise DiscoveryError(f"ConfigMap {ns}/{name} holds no {SETTINGS_KEY}")
        return cm
    here = namespace or CHART_NAMESPACE
    found = kube.list(CONFIG_MAPS, namespace=here, label_selector=CHART_SELECTOR).items
    if namespace or any(SETTINGS_KEY in (cm.get("data") or {}) for cm in found):
        return choose_settings_configmap(found, f"namespace {here}")
    everywhere = kube.list(CONFIG_MAPS, label_selector=CHART_SELECTOR).items
    return choose_settings_configmap(everywhere, f"namespace {here} or any other namespace")


def _release_objects(
    kube: Reader, ref: ResourceRef, namespace: str, release: str
) -> list[dict[str, Any]]:
    selector = f"{CHART_SELECTOR},{INSTANCE}={release}" if release else CHART_SELECTOR
    return list(kube.list(ref, namespace=namespace, label_selector=selector).items)


def _controller_args(deployment: Mapping[str, Any]) -> tuple[list[str], str | None]:
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    args: list[str] = []
    for container in pod.get("containers") or []:
        if container.get("name") == CONTROLLER_CONTAINER:
            args = [str(a) for a in container.get("args") or []]
    return args, pod.get("serviceAccountName")


def _service_account(
    kube: Reader, namespace: str, release: str, from_deployment: str | None
) -> str | None:
    if from_deployment:
        return from_deployment
    accounts = _release_objects(kube, SERVICE_ACCOUNTS, namespace, release)
    if len(accounts) == 1:
        return str(accounts[0]["metadata"]["name"])
    return None


def find_installation(
    kube: Reader,
    *,
    namespace: str | None = None,
    configmap: str | None = None,
    service_account: str | None = None,
) -> Installation:
    """The installation whose settings ConfigMap is found as the module docstring says."""
    cm = _find_configmap(kube, namespace, configmap)
    meta = cm.get("metadata") or {}
    cm_namespace, cm_name = str(meta.get("namespace")), str(meta.get("name"))
    release = str((meta.get("labels") or {}).get(INSTANCE) or "")
    fullname = cm_name.removesuffix(SETTINGS_SUFFIX)
    # Where the chart's Deployment points the Lease; its own flags, when found, win.
    overrides: dict[str, Any] = {
        "leader_election.lease_namespace": cm_namespace,
        "leader_election.lease_name": fullname,
    }
    deployments = [
        d
        for d in _release_objects(kube, DEPLOYMENTS, cm_namespace, release)
        if d["metadata"].get("name") == fullname
    ]
    args, deployment_account = _controller_args(deployments[0]) if deployments else ([], None)
    overrides.update(overrides_from_argv(args))
    source = f"ConfigMap {cm_namespace}/{cm_name}"
    try:
        settings = settings_from_document(cm["data"][SETTINGS_KEY], source, overrides)
    except SettingsError as err:
        raise DiscoveryError(str(err)) from err
    account = service_account or _service_account(kube, cm_namespace, release, deployment_account)
    return Installation(settings, source, cm_namespace, account, release)


def from_settings_file(
    kube: Reader, path: str, *, namespace: str | None, service_account: str | None
) -> Installation:
    """An explicit local settings file (`--config`): the installation's namespace is
    `--controller-namespace` (default the chart's), its ServiceAccount found there as above."""
    try:
        settings = load_settings(path)
    except SettingsError as err:
        raise DiscoveryError(str(err)) from err
    here = namespace or CHART_NAMESPACE
    account = service_account or _service_account(kube, here, "", None)
    return Installation(settings, f"file {path} (--config)", here, account)
