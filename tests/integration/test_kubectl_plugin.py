"""`kubectl atomic-gang ...` as kubectl users run it: the real kubectl finds the installed
`kubectl-atomic_gang` script on PATH and hands it kubectl's own flags.

On the real apiserver, with the chart's settings ConfigMap rendered by the pinned helm and
the stacks' state bucket in the AWS emulator. The kubeconfig's current context points at
nothing; only `--context c` reaches the test's apiserver, so a command that ignored
`--context` fails. PATH holds kubectl and the plugin script and nothing else of ours: no
Pulumi CLI, as on a laptop that only reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from devenv import chart_install
from devenv import kueue_objects as ko
from devenv.state_backend import seed_state_backend
from provisioner.api import constants as c
from provisioner.api.settings import Settings
from provisioner.commands.installation import CHART_NAMESPACE
from tests.support.pools import pool, pool_spec

GNP = (c.GROUP, c.VERSION, c.GNP_PLURAL)
BUCKET = "kubectl-plugin-state"
PROJECT = "atomic-gang-demo"
ROLE = "arn:aws:iam::123456789012:role/nodes"


@pytest.fixture
def installed(
    control_plane: Any, kueue_crds: Any, emulator: Any, tools: Any
) -> Iterator[dict[str, Any]]:
    """The chart's settings ConfigMap and ServiceAccount, as `helm install` leaves them, for
    a controller whose stacks live in the emulator's bucket."""
    backend = seed_state_backend(emulator.endpoint_url, "us-east-1", bucket=BUCKET)
    settings = Settings.model_validate(
        {
            "clusterName": "demo",
            "defaults": {"region": "us-east-1", "nodeRoleArn": ROLE},
            "pulumi": {**backend.pulumi_settings(), "projectName": PROJECT},
            "aws": {"endpointUrl": emulator.endpoint_url},
        }
    )
    api = control_plane.api_client()
    core = k8s.CoreV1Api(api)
    try:
        core.create_namespace({"metadata": {"name": CHART_NAMESPACE}})
    except k8s.ApiException as err:
        if err.status != 409:
            raise
    chart_install.install(api, Path(tools["helm"].binary), settings, CHART_NAMESPACE)
    yield {"backend": backend}
    for cm in core.list_namespaced_config_map(CHART_NAMESPACE).items:
        if cm.metadata.name.startswith(chart_install.RELEASE):
            core.delete_namespaced_config_map(cm.metadata.name, CHART_NAMESPACE)


@pytest.fixture
def kubectl_env(control_plane: Any, tools: Any, tmp_path: Path) -> dict[str, str]:
    """A shell as a kubectl user has it: PATH with kubectl and the installed plugin script
    only (and the system's directories), a kubeconfig whose context `c` is the test's
    apiserver and whose current context is a dead address."""
    plugin = Path(sys.executable).parent / "kubectl-atomic_gang"
    assert plugin.is_file(), f"{plugin} is not installed: `make venv` installs the package"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").symlink_to(Path(tools["kubectl"].binary))
    (bin_dir / "kubectl-atomic_gang").symlink_to(plugin)
    config = yaml.safe_load(control_plane.info.kubeconfig.read_text())
    real = config["contexts"][0]["context"]
    config["clusters"].append({"name": "dead", "cluster": {"server": "https://127.0.0.1:1"}})
    config["contexts"] = [
        {"name": "c", "context": real},
        {"name": "elsewhere", "context": {**real, "cluster": "dead"}},
    ]
    config["current-context"] = "elsewhere"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]),
        "HOME": str(home),
        "KUBECONFIG": str(kubeconfig),
    }
    env |= {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    return env


def kubectl(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", *argv], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def plugin(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """`kubectl atomic-gang ARGV...`."""
    return kubectl(env, "atomic-gang", *argv)


def test_the_path_has_no_pulumi_cli(kubectl_env: dict[str, str]) -> None:
    done = subprocess.run(["sh", "-c", "command -v pulumi"], env=kubectl_env, check=False)
    assert done.returncode != 0


def test_explain_takes_kubectls_flags_through_kubectl(
    installed: dict[str, Any], kubectl_env: dict[str, str], kube_api: Any, namespace: str
) -> None:
    job = ko.gang_job(namespace, "x", ko.QUEUE_NAME, "pool-x", 2, {})
    job["spec"]["suspend"] = True  # as Kueue's webhook leaves a queued Job
    k8s.BatchV1Api(kube_api).create_namespaced_job(namespace, job)

    done = plugin(kubectl_env, "explain", "-n", namespace, "job/x", "--context", "c", "-o", "yaml")

    assert done.returncode == 0, done.stderr
    document = yaml.safe_load(done.stdout)
    assert document["job"] == f"{namespace}/x" and document["kind"] == "Job"
    assert document["check"] == ko.CHECK_NAME
    assert document["verdict"].startswith(f"Job {namespace}/x: no Workload yet"), document
    assert f"ConfigMap {CHART_NAMESPACE}/" in document["target"]

    # The flags after the object, JSON, and the first releases' NAMESPACE/NAME: the same.
    after = plugin(kubectl_env, "explain", "job/x", "-n", namespace, "--context=c", "-o", "json")
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout)["verdict"] == document["verdict"]
    old = plugin(kubectl_env, "explain", f"{namespace}/x", "--context", "c")
    assert old.returncode == 0, old.stderr
    assert document["verdict"] in old.stdout.splitlines()

    # Exit codes: 1 for an object that is not there, 2 for words that contradict -n.
    missing = plugin(kubectl_env, "explain", "-n", namespace, "job/y", "--context", "c")
    assert missing.returncode == 1 and "does not exist" in missing.stdout
    contradicting = plugin(kubectl_env, "explain", "default/x", "-n", namespace)
    assert contradicting.returncode == 2 and "-n says" in contradicting.stderr
    # Without --context, the current context's dead address: one line, exit 1.
    dead = plugin(kubectl_env, "explain", "-n", namespace, "job/x")
    assert dead.returncode == 1 and "Traceback" not in dead.stderr, dead.stderr


@pytest.fixture
def gang_pools(kube_api: Any) -> Iterator[list[str]]:
    custom = k8s.CustomObjectsApi(kube_api)
    made: list[str] = []
    yield made
    for name in made:
        custom.delete_cluster_custom_object(*GNP, name)


def test_pools_reads_the_stacks_from_the_bucket_without_a_pulumi_cli(
    installed: dict[str, Any],
    kubectl_env: dict[str, str],
    kube_api: Any,
    namespace: str,
    gang_pools: list[str],
) -> None:
    custom = k8s.CustomObjectsApi(kube_api)
    names = [f"inv-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    mine, bare, theirs = names
    for name, owner in ((mine, namespace), (bare, namespace), (theirs, "someone-else")):
        custom.create_cluster_custom_object(
            *GNP, pool(name, spec=pool_spec(pool=name, owner_namespace=owner))
        )
        gang_pools.append(name)
    # `mine` has a stack in the bucket, in the layout the Pulumi CLI writes; `bare` none.
    latest = {"resources": [{"type": "pulumi:pulumi:Stack"}, {"type": "aws:ec2/x:X"}]}
    installed["backend"].client("s3").put_object(
        Bucket=BUCKET,
        Key=f".pulumi/stacks/{PROJECT}/{mine}.json",
        Body=json.dumps({"version": 3, "checkpoint": {"latest": latest}}).encode(),
    )

    done = plugin(kubectl_env, "pools", "-n", namespace, "--context", "c", "-o", "json")

    assert done.returncode == 0, done.stderr
    rows = {row["pool"]: row for row in json.loads(done.stdout)}
    assert sorted(rows) == sorted([mine, bare])  # -n: the namespace's pools only
    assert rows[mine]["stack"] == "ok, 2 resources"
    assert rows[bare]["stack"] == "none"  # the bucket was read: no stack, not "unknown"
    assert rows[mine]["namespace"] == namespace and rows[mine]["phase"] == "Idle"

    wide = plugin(kubectl_env, "pools", "--context", "c", "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    header, *lines = wide.stdout.splitlines()
    assert header.split()[-4:] == ["NAMESPACE", "TYPE", "COUNT", "READY"]
    assert any(line.split()[0] == theirs for line in lines)
    assert "pulumi stack ls" in wide.stdout  # the footer names the CLI's own command
