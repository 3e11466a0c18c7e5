"""`atomic-gang doctor` as an operator runs it, with only --kubeconfig, on the real parts.

The embedded default installs what a cluster has: the chart's settings ConfigMap and
ServiceAccount (rendered by helm), the controller's role with its Pod Identity association,
Kueue's `kueue-manager-config`, the S3 state bucket and KMS key in the emulator. Each test
runs the command line, healthy first (every line passes, and the header names the
ConfigMap found), then with one thing broken the way it breaks in a cluster, and checks
that its line fails (or warns) with the fix.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kubernetes import client as k8s

from devenv import chart_install
from devenv import kueue_objects as ko
from devenv.environment import CONTROLLER_NAMESPACE, LocalEnvironment
from devenv.kueue_manager import CONFIG_KEY, CONFIG_MAP, KUEUE_NAMESPACE
from devenv.state_backend import DEFAULT_ALIAS, DEFAULT_BUCKET
from devenv.webhook import CONFIG_NAME as WEBHOOK_CONFIG
from provisioner.api.constants import Phase
from provisioner.cloud.iam_policy import pod_identity_trust_policy
from provisioner.commands import cli
from tests.e2e.conftest import eventually, phase, submit

LINE = re.compile(r"^(pass|FAIL|WARN)  ([^:]+): (.*)$")
SETTINGS_CM = "atomic-gang-provisioner-settings"
NEW_CHECKS = (
    "Kueue waitForPodsReady",
    "cert-manager",
    "controller AWS identity",
    "AWS identity",
    "state backend",
    "secrets provider",
)


def doctor(
    env: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int, str, dict[str, tuple[str, str]]]:
    """Exit code, the header, and {check: (pass|FAIL|WARN, detail + fix)}."""
    kubeconfig = str(env.kubeconfig_path())
    argv = ["doctor", "--kubeconfig", kubeconfig, "--queue", f"{namespace}/{ko.QUEUE_NAME}"]
    code = cli.main([*argv, *flags])
    out = capsys.readouterr().out.splitlines()
    lines: dict[str, tuple[str, str]] = {}
    last = ""
    for line in out[1:]:
        match = LINE.match(line)
        if match:
            last = match[2]
            lines[last] = (match[1], match[3])
        elif last and line.strip().startswith("fix:"):
            lines[last] = (lines[last][0], f"{lines[last][1]} {line.strip()}")
    return code, out[0], lines


def _aws(env: LocalEnvironment, service: str) -> Any:
    assert env.emulator is not None
    return boto3.client(
        service,
        region_name=env.region,
        endpoint_url=env.emulator.endpoint_url,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def test_only_a_kubeconfig_finds_the_settings_configmap_and_passes(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, header, lines = doctor(healthy, namespace, capsys)
    assert header.startswith(f"settings: ConfigMap {CONTROLLER_NAMESPACE}/{SETTINGS_CM};")
    assert f"ServiceAccount {chart_install.SERVICE_ACCOUNT}" in header
    assert all(name in lines for name in NEW_CHECKS), lines
    assert {k: v for k, v in lines.items() if v[0] != "pass"} == {}
    assert code == 0
    assert "the operator's credentials" in lines["AWS identity"][1]
    assert "--as-controller" in lines["AWS identity"][1]
    assert f"s3://{DEFAULT_BUCKET}/" in lines["state backend"][1]
    assert DEFAULT_ALIAS in lines["secrets provider"][1]
    assert "Pod Identity association" in lines["controller AWS identity"][1]


def test_as_controller_runs_the_aws_checks_as_the_controllers_role(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, lines = doctor(healthy, namespace, capsys, "--as-controller")
    assert code == 0, lines
    status, text = lines["AWS identity"]
    assert status == "pass"
    assert "assumed-role/atomic-gang-controller/" in text and "Pod Identity association" in text
    assert "assumed-role/atomic-gang-controller/" in lines["state backend"][1]


def test_deleted_state_bucket(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    s3 = _aws(healthy, "s3")
    versions = s3.list_object_versions(Bucket=DEFAULT_BUCKET)
    for v in versions.get("Versions", []) + versions.get("DeleteMarkers", []):
        s3.delete_object(Bucket=DEFAULT_BUCKET, Key=v["Key"], VersionId=v["VersionId"])
    s3.delete_bucket(Bucket=DEFAULT_BUCKET)
    code, _, lines = doctor(healthy, namespace, capsys)
    status, text = lines["state backend"]
    assert status == "FAIL" and "NoSuchBucket" in text and f"create bucket {DEFAULT_BUCKET}" in text
    assert lines["secrets provider"][0] == "pass"
    assert code == 1


def test_disabled_state_key(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kms = _aws(healthy, "kms")
    kms.disable_key(KeyId=kms.describe_key(KeyId=DEFAULT_ALIAS)["KeyMetadata"]["KeyId"])
    _, _, lines = doctor(healthy, namespace, capsys)
    status, text = lines["secrets provider"]
    assert status == "FAIL" and "DisabledException" in text and "enable-key" in text
    assert lines["state backend"][0] == "pass"


def test_missing_pod_identity_association(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert healthy.controller_identity is not None
    _aws(healthy, "eks").delete_pod_identity_association(
        clusterName=healthy.cluster_name,
        associationId=healthy.controller_identity.association_id,
    )
    _, _, lines = doctor(healthy, namespace, capsys)
    status, text = lines["controller AWS identity"]
    assert status == "FAIL" and "create-pod-identity-association" in text
    assert lines["AWS identity"][0] == "pass"  # as the operator, nothing else changed
    _, _, lines = doctor(healthy, namespace, capsys, "--as-controller")
    assert lines["AWS identity"][0] == "FAIL"
    assert lines["state backend"][0] == "FAIL"  # no identity to run it as, and it says so


def test_controller_role_that_does_not_trust_the_operator(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bootstrap's own trust: Pod Identity only. AWS refuses the operator's AssumeRole.
    _aws(healthy, "iam").update_assume_role_policy(
        RoleName="atomic-gang-controller",
        PolicyDocument=json.dumps(pod_identity_trust_policy()),
    )
    _, _, lines = doctor(healthy, namespace, capsys, "--as-controller")
    status, text = lines["AWS identity"]
    assert status == "FAIL" and "AccessDenied" in text and "trust policy" in text
    assert lines["controller AWS identity"][0] == "pass"


@pytest.fixture
def kueue_config(healthy: LocalEnvironment) -> Iterator[k8s.CoreV1Api]:
    """Kueue's ConfigMap, restored after the test (it belongs to the session's Kueue)."""
    core = k8s.CoreV1Api(healthy.control_plane.api_client())  # type: ignore[union-attr]
    saved = core.read_namespaced_config_map(CONFIG_MAP, KUEUE_NAMESPACE).data
    yield core
    core.patch_namespaced_config_map(CONFIG_MAP, KUEUE_NAMESPACE, {"data": saved})


def test_wait_for_pods_ready_off(
    healthy: LocalEnvironment,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
    kueue_config: k8s.CoreV1Api,
) -> None:
    import yaml

    text = kueue_config.read_namespaced_config_map(CONFIG_MAP, KUEUE_NAMESPACE).data[CONFIG_KEY]
    config = yaml.safe_load(text)
    config["featureGates"] = {"DisableWaitForPodsReady": True}
    kueue_config.patch_namespaced_config_map(
        CONFIG_MAP, KUEUE_NAMESPACE, {"data": {CONFIG_KEY: yaml.safe_dump(config)}}
    )
    code, _, lines = doctor(healthy, namespace, capsys)
    status, text = lines["Kueue waitForPodsReady"]
    assert status == "WARN" and "DisableWaitForPodsReady" in text and "gang" in text
    assert code == 0  # a warning, not a failure


def test_kueue_config_not_found(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, lines = doctor(healthy, namespace, capsys, "--kueue-config", "kueue-system/nope")
    status, text = lines["Kueue waitForPodsReady"]
    assert status == "FAIL" and "--kueue-config" in text
    assert code == 1


def test_webhook_asking_for_cert_manager_without_cert_manager(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    admission = k8s.AdmissionregistrationV1Api(healthy.control_plane.api_client())  # type: ignore[union-attr]
    annotation = {"cert-manager.io/inject-ca-from": f"{CONTROLLER_NAMESPACE}/atomic-gang-webhook"}
    admission.patch_validating_webhook_configuration(
        WEBHOOK_CONFIG, {"metadata": {"annotations": annotation}}
    )
    _, _, lines = doctor(healthy, namespace, capsys)
    status, text = lines["cert-manager"]
    assert status == "FAIL" and "not installed" in text and "certMode" in text


def test_settings_configmap_absent_is_an_error_naming_the_flags(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    core = k8s.CoreV1Api(healthy.control_plane.api_client())  # type: ignore[union-attr]
    core.delete_namespaced_config_map(SETTINGS_CM, CONTROLLER_NAMESPACE)
    with pytest.raises(SystemExit) as exit_:
        doctor(healthy, namespace, capsys)
    message = str(exit_.value)
    assert "no settings ConfigMap" in message and "any other namespace" in message
    assert "--controller-namespace" in message and "--settings-configmap" in message


def test_explain_with_only_a_kubeconfig_names_the_configmap_and_our_check(
    healthy: LocalEnvironment, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = str(healthy.kubeconfig_path())
    # Not found is exit code 1, as `kubectl get` answers it.
    assert cli.main(["explain", f"{namespace}/absent", "--kubeconfig", kubeconfig]) == 1
    header, verdict = capsys.readouterr().out.splitlines()
    assert header.startswith(f"settings: ConfigMap {CONTROLLER_NAMESPACE}/{SETTINGS_CM};")
    assert header.endswith(f"check {ko.CHECK_NAME}")
    assert (
        verdict == f"Job, JobSet, PyTorchJob, TrainJob or MPIJob {namespace}/absent does not exist."
    )


def test_pools_from_a_laptop_needs_only_the_kubeconfig(
    healthy: LocalEnvironment, namespace: str, tmp_path: Path
) -> None:
    pool = "inventory"
    submit(healthy, namespace, "inventory", pool)
    eventually(lambda: phase(healthy, pool) == Phase.SATISFIED, 120, "pool Satisfied")
    # A laptop: the installed command, your AWS credentials, a PATH with no Pulumi CLI.
    command = Path(sys.executable).parent / "atomic-gang"
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    env |= {"PATH": os.pathsep.join(["/usr/bin", "/bin"]), "HOME": str(tmp_path)}
    argv = [str(command), "pools", "--kubeconfig", str(healthy.kubeconfig_path()), "-o", "json"]

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 0, done.stderr
    # The state backend came from the ConfigMap, not from a file on this machine.
    assert f"settings: ConfigMap {CONTROLLER_NAMESPACE}/{SETTINGS_CM}" in done.stderr
    rows = {row["pool"]: row for row in json.loads(done.stdout)}
    # The Job runs for 2 s: on a busy machine it may have finished before `pools` read the
    # pool, which then holds the same whole set warm.
    assert rows[pool]["phase"] in (Phase.SATISFIED, Phase.KEEP_WARM), rows
    # Read from the stack the controller's Pulumi wrote in the bucket, without a CLI.
    assert rows[pool]["stack"].startswith("ok"), rows
    assert len(rows[pool]["instances"]) == 2, rows
