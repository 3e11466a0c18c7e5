"""`atomic-gang doctor`'s checks of the installation around the controller.

Called by `doctor.main`: its identity checks go before the AWS links, its state checks
last. Each reads one thing and says pass, WARN or FAIL with the fix: Kueue's
waitForPodsReady (from Kueue's config ConfigMap and its manager's flags); cert-manager, when
the chart's webhook configuration asks cert-manager to inject its CA; the controller
ServiceAccount's AWS identity (IRSA annotation or Pod Identity association, looked up with
the operator's credentials); which identity the AWS checks ran as; the Pulumi state backend
(S3 list/write/read/delete, or a file:// directory) and the secrets provider's KMS key
(DescribeKey, Encrypt/Decrypt), both with that identity.
It only reads, apart from the one probe object it writes and deletes in the state bucket.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from provisioner.api.settings import Settings
from provisioner.cloud.access import AwsAccess, controller_role
from provisioner.cloud.errors import CloudError, to_cloud_error
from provisioner.cloud.state_access import (
    check_kms_key,
    check_s3_backend,
    kms_key_of,
    s3_backend_of,
)
from provisioner.commands.checks import Check, Failed, Result, Warned, run_checks
from provisioner.commands.installation import CHART_SELECTOR, INSTANCE, Installation, Reader
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import (
    CONFIG_MAPS,
    CRDS,
    DEPLOYMENTS,
    SERVICE_ACCOUNTS,
    VALIDATING_WEBHOOKS,
    ResourceRef,
)

__all__ = ["KUEUE_CONFIG", "InstallChecks", "wait_for_pods_ready"]

KUEUE_CONFIG: Final = "kueue-system/kueue-manager-config"
KUEUE_CONFIG_KEY: Final = "controller_manager_config.yaml"
KUEUE_DEPLOYMENT: Final = "kueue-controller-manager"
DISABLE_GATE: Final = "DisableWaitForPodsReady"
CERT_MANAGER_ANNOTATION: Final = "cert-manager.io/inject-ca-from"
CERT_MANAGER_CRD: Final = "certificates.cert-manager.io"
CERTIFICATES = ResourceRef("cert-manager.io", "v1", "certificates", True, "Certificate")
WHY_WAIT_FOR_PODS_READY: Final = (
    "a gang needs all N pods running at once; without waitForPodsReady Kueue admits the "
    "next Workload while this one's pods are still starting, so two gangs can each hold part "
    "of the quota and wait on each other"
)


def _gates(args: Sequence[str]) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for arg in args:
        if arg.startswith("--feature-gates="):
            for pair in arg.split("=", 1)[1].split(","):
                name, _, value = pair.partition("=")
                gates[name.strip()] = value.strip().lower() == "true"
    return gates


def wait_for_pods_ready(config: Mapping[str, Any], manager_args: Sequence[str]) -> tuple[bool, str]:
    """(on, why) for a Kueue manager Configuration and the manager's command line.

    config.kueue.x-k8s.io/v1beta1 needs `waitForPodsReady.enable: true`. From v1beta2 (the
    Kueue 0.19 pinned here) the manager defaults it on and only the DisableWaitForPodsReady
    feature gate (config `featureGates` or `--feature-gates`) turns it off.
    """
    gates = {str(k): bool(v) for k, v in (config.get("featureGates") or {}).items()}
    gates.update(_gates(manager_args))
    if gates.get(DISABLE_GATE):
        return False, f"the {DISABLE_GATE} feature gate is set"
    wfpr = config.get("waitForPodsReady") or {}
    version = str(config.get("apiVersion") or "")
    if version.endswith("/v1beta1"):
        if not wfpr.get("enable"):
            return False, "waitForPodsReady.enable is not true (config v1beta1)"
        return True, f"waitForPodsReady.enable: true, timeout {wfpr.get('timeout', '5m')}"
    timeout = wfpr.get("timeout", "30m (default)")
    block = wfpr.get("blockAdmission", False)
    return True, f"on (config {version or 'v1beta2'}), timeout {timeout}, blockAdmission {block}"


@dataclass
class InstallChecks:
    kube: Reader
    settings: Settings
    installation: Installation
    operator: AwsAccess | CloudError  # the operator's AWS access, or why there is none
    access: AwsAccess | CloudError  # the identity the AWS checks run as
    kueue_config: str = KUEUE_CONFIG

    def checks(self) -> list[Check]:
        return [
            ("Kueue waitForPodsReady", self.kueue_wait_for_pods_ready),
            ("cert-manager", self.cert_manager),
            ("controller AWS identity", self.controller_identity),
            ("AWS identity", self.aws_identity),
        ]

    def state_checks(self) -> list[Check]:
        return [
            ("state backend", self.state_backend),
            ("secrets provider", self.secrets_provider),
        ]

    def run(self) -> list[Result]:
        return run_checks(self.checks() + self.state_checks())

    # -- Kueue -----------------------------------------------------------------------------
    def kueue_wait_for_pods_ready(self) -> str:
        namespace, _, name = self.kueue_config.rpartition("/")
        namespace = namespace or "kueue-system"
        try:
            cm = self.kube.get(CONFIG_MAPS, name, namespace=namespace)
        except KubeNotFound as err:
            raise Failed(
                f"Kueue's config ConfigMap {namespace}/{name} does not exist, so whether "
                "waitForPodsReady is on cannot be read",
                "pass --kueue-config NAMESPACE/NAME of the ConfigMap your Kueue manager reads "
                f"(its install names it kueue-manager-config, key {KUEUE_CONFIG_KEY})",
            ) from err
        text = (cm.get("data") or {}).get(KUEUE_CONFIG_KEY)
        if text is None:
            raise Failed(
                f"ConfigMap {namespace}/{name} holds no {KUEUE_CONFIG_KEY}",
                "pass --kueue-config NAMESPACE/NAME of the ConfigMap your Kueue manager reads",
            )
        config = yaml.safe_load(text) or {}
        args: list[str] = []
        try:
            manager = self.kube.get(DEPLOYMENTS, KUEUE_DEPLOYMENT, namespace=namespace)
            for container in manager["spec"]["template"]["spec"].get("containers") or []:
                args += [str(a) for a in container.get("args") or []]
        except KubeNotFound:
            pass  # the manager runs elsewhere (here: as a local process); its config decides
        on, why = wait_for_pods_ready(config, args)
        where = f"{namespace}/{name}"
        if not on:
            raise Warned(
                f"off in {where}: {why}",
                f"turn it on ({WHY_WAIT_FOR_PODS_READY}): set waitForPodsReady "
                "{timeout: 10m} in Kueue's config (and drop the DisableWaitForPodsReady "
                "gate), then restart the Kueue manager",
            )
        return f"{where}: {why}"

    # -- cert-manager ----------------------------------------------------------------------
    def cert_manager(self) -> str:
        selector = CHART_SELECTOR
        if self.installation.release:
            selector += f",{INSTANCE}={self.installation.release}"
        configs = self.kube.list(VALIDATING_WEBHOOKS, label_selector=selector).items
        if not configs:
            return (
                "no ValidatingWebhookConfiguration of the chart (webhook.enabled=false): "
                "nothing needs cert-manager"
            )
        lines = []
        for config in configs:
            name = config["metadata"]["name"]
            annotations = config["metadata"].get("annotations") or {}
            inject = annotations.get(CERT_MANAGER_ANNOTATION)
            if not inject:
                lines.append(
                    f"{name} carries its own caBundle (certMode selfSigned or provided): "
                    "cert-manager not needed"
                )
                continue
            lines.append(self._certificate_ready(name, inject, config))
        return "; ".join(lines)

    def _certificate_ready(self, config_name: str, inject: str, config: Mapping[str, Any]) -> str:
        fix_install = (
            "install cert-manager (https://cert-manager.io/docs/installation/), or set the "
            "chart's webhook.certMode to selfSigned"
        )
        try:
            self.kube.get(CRDS, CERT_MANAGER_CRD)
        except KubeNotFound as err:
            raise Failed(
                f"{config_name} asks cert-manager to inject its CA ({CERT_MANAGER_ANNOTATION}: "
                f"{inject}, webhook.certMode=certManager) but cert-manager is not installed "
                f"(no CRD {CERT_MANAGER_CRD}); the apiserver cannot call the webhook and, "
                "failing closed, refuses every gang Job",
                fix_install,
            ) from err
        namespace, _, name = inject.partition("/")
        try:
            cert = self.kube.get(CERTIFICATES, name, namespace=namespace)
        except KubeNotFound as err:
            raise Failed(
                f"Certificate {inject} named by {config_name} does not exist",
                "reinstall the chart with webhook.certMode=certManager (it renders the "
                "Certificate)",
            ) from err
        ready: Mapping[str, Any] = next(
            (
                x
                for x in (cert.get("status") or {}).get("conditions") or []
                if x.get("type") == "Ready"
            ),
            {},
        )
        if ready.get("status") != "True":
            raise Failed(
                f"Certificate {inject} is not Ready: {ready.get('message') or 'no status yet'}",
                "check cert-manager's logs and the Certificate's issuer "
                "(webhook.certManager.issuerRef)",
            )
        if not all((h.get("clientConfig") or {}).get("caBundle") for h in config["webhooks"]):
            raise Failed(
                f"Certificate {inject} is Ready but {config_name} has no caBundle yet",
                "check that cert-manager's cainjector is running",
            )
        return f"{config_name}: cert-manager's Certificate {inject} is Ready and injected"

    # -- AWS identities --------------------------------------------------------------------
    def controller_identity(self) -> str:
        inst = self.installation
        if not inst.service_account:
            raise Failed(
                f"the controller's ServiceAccount in {inst.namespace} is unknown (no "
                "Deployment or labelled ServiceAccount of the release found)",
                "pass --service-account NAME (the chart's serviceAccount.name)",
            )
        who = f"{inst.namespace}/{inst.service_account}"
        try:
            account = self.kube.get(
                SERVICE_ACCOUNTS, inst.service_account, namespace=inst.namespace
            )
        except KubeNotFound as err:
            raise Failed(
                f"ServiceAccount {who} does not exist",
                "install the chart with serviceAccount.create, or pass --service-account",
            ) from err
        if isinstance(self.operator, CloudError):
            raise Failed(self.operator.message, "fix the operator's AWS credentials")
        cluster = self.settings.cluster_name
        try:
            role = controller_role(
                self.operator.client("eks"),
                cluster,
                inst.namespace,
                inst.service_account,
                account["metadata"].get("annotations") or {},
            )
        except CloudError as err:
            if err.reason != "NoControllerIdentity":
                raise
            raise Failed(
                err.message,
                f"aws eks create-pod-identity-association --cluster-name {cluster} "
                f"--namespace {inst.namespace} --service-account {inst.service_account} "
                "--role-arn <the controller role's ARN> (the bootstrap's `pulumi up` makes "
                "it), or with the chart's auth.mode=irsa set serviceAccount.roleArn; "
                "auth.mode static or node need neither",
            ) from err
        name = role.role_arn.rsplit("/", 1)[-1]
        try:
            self.operator.client("iam").get_role(RoleName=name)
        except Exception as exc:
            gone = to_cloud_error(exc, f"GetRole {name}")
            if gone.code == "NoSuchEntity":
                raise Failed(
                    f"{role.source} names role {role.role_arn}, which does not exist",
                    "create the controller role (the bootstrap does) or point the association "
                    "or annotation at the right one",
                ) from exc
            raise gone from exc
        return f"{role.source} -> {role.role_arn}"

    def aws_identity(self) -> str:
        if isinstance(self.access, CloudError):
            raise Failed(
                self.access.message,
                "fix the above, or run without --as-controller to check as yourself",
            )
        if self.access.as_controller:
            return f"AWS checks ran as {self.access.identity}: {self.access.how}"
        return (
            f"AWS checks ran as {self.access.identity}, the operator's credentials, not the "
            "controller's role; pass --as-controller to run them as the controller"
        )

    def _access(self) -> AwsAccess:
        if isinstance(self.access, CloudError):
            raise Failed("no AWS access", "see the 'AWS identity' line")
        return self.access

    # -- Pulumi state ----------------------------------------------------------------------
    def state_backend(self) -> str:
        url = self.settings.pulumi.backend_url
        if url.startswith("s3://"):
            access = self._access()
            backend = s3_backend_of(url)
            s3 = access.client("s3", backend.region)
            try:
                return check_s3_backend(s3, backend, access.identity)
            except CloudError as err:
                raise Failed(f"{url}: {err.message}", "see the line above") from err
        if url.startswith("file://"):
            return _check_directory(Path(url.removeprefix("file://")))
        raise Warned(
            f"backend {url} is not s3:// or file://; not checked",
            "check it with `pulumi login` and `pulumi stack ls` as the controller",
        )

    def secrets_provider(self) -> str:
        provider = self.settings.pulumi.secrets_provider
        if provider == "passphrase":
            return (
                "passphrase: the controller reads PULUMI_CONFIG_PASSPHRASE (the chart's "
                "pulumi.passphraseSecret); no KMS key to check"
            )
        if not provider.startswith("awskms://"):
            raise Warned(f"secrets provider {provider} is not awskms://; not checked", "-")
        access = self._access()
        key, region = kms_key_of(provider)
        try:
            return check_kms_key(access.client("kms", region), key, access.identity)
        except CloudError as err:
            raise Failed(f"{provider}: {err.message}", "see the line above") from err


def _check_directory(path: Path) -> str:
    """A file:// backend's directory, as this machine sees it (the controller's own disk
    only when doctor runs in the controller's pod)."""
    if not path.is_dir():
        raise Warned(
            f"file:// backend {path} is not a directory on this machine: it is the "
            "controller pod's disk, lost with the pod",
            "use an s3:// backend (pulumi.backendUrl) so stacks outlive the pod, or run "
            "doctor in the controller's pod to check the directory",
        )
    probe = path / f".atomic-gang-doctor-{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"probe")
        probe.unlink()
    except OSError as err:
        raise Failed(
            f"file:// backend {path} is not writable by uid {os.getuid()}: {err}",
            f"make {path} writable by the controller's user, or use an s3:// backend",
        ) from err
    return f"file://{path} is a writable directory on this machine"
