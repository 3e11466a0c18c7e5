"""Where `atomic-gang doctor` and `explain` look: the cluster, the installation, AWS.

The command line gives a `Where` (its --kubeconfig, --context, --work-dir, --config,
--controller-namespace, --settings-configmap, --service-account and --as-controller);
`connect` turns it into a `Target`: the Kubernetes client, the installation found from the cluster
(`provisioner.commands.installation`) and the AWS identity the checks run as. Called by
`doctor.main`, `explain.main` and the CLI (which builds the `Where`). It only reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.api.settings import Settings
from provisioner.cloud.access import AwsAccess
from provisioner.cloud.errors import CloudError, ErrorKind
from provisioner.commands.installation import Installation
from provisioner.kube.errors import KubeNotFound

__all__ = ["Target", "Where", "connect"]


@dataclass(frozen=True)
class Where:
    """The command line's answer to "which cluster, which installation, as whom"."""

    kubeconfig: str | None = None
    context: str | None = None  # the kubeconfig context (kubectl's --context)
    work_dir: str | None = None  # a local environment (`make dev-up`): its kubeconfig, file
    config: str | None = None  # a local settings file instead of the cluster's ConfigMap
    # The controller's release namespace (--controller-namespace); -n is the user's objects'.
    controller_namespace: str | None = None
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
    """The cluster from --kubeconfig and --context (else kubectl's current context, else
    in-cluster), the
    installation from its settings ConfigMap (or an explicit --config / --work-dir file),
    and AWS as the operator or, with --as-controller, as the controller's role."""
    import json

    from provisioner.cloud.access import operator_access
    from provisioner.commands.installation import (
        DiscoveryError,
        find_installation,
        from_settings_file,
    )
    from provisioner.kube.connect import open_cluster

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
    # A missing kubeconfig or a silent API server is `ClusterUnreachable`: one line from
    # the command line, not a traceback.
    kube, cluster = open_cluster(str(kubeconfig) if kubeconfig else None, context=where.context)
    try:
        if config:
            installation = from_settings_file(
                kube,
                str(config),
                namespace=where.controller_namespace,
                service_account=where.service_account,
            )
        else:
            installation = find_installation(
                kube,
                namespace=where.controller_namespace,
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
