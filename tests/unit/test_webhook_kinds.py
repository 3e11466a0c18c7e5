"""The webhook on JobSets, PyTorchJobs and TrainJobs: Kueue's pod count for each kind, the
Job rules' messages, and the child objects their controllers make left alone."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devenv.pki import CertificateAuthority
from devenv.processes import free_port
from provisioner.api import constants as c
from provisioner.api.owners import OwnerKind
from provisioner.api.settings import Settings
from provisioner.api.shape import GangShapeError, parse_gang_shape
from provisioner.webhook.review import (
    JOB,
    ReviewError,
    jobset_pod_count,
    mpijob_pod_count,
    pytorchjob_pod_count,
    review,
)
from provisioner.webhook.server import GANG_JOB_WEBHOOK_PATH, JOB_WEBHOOK_PATH, WebhookServer
from tests.support.backends import UNREACHED_BACKEND
from tests.support.jobs import job as job_body
from tests.support.pools import pool_lookup

pytestmark = pytest.mark.unit

SETTINGS = Settings.model_validate(
    {
        "cluster_name": "demo",
        "pulumi": UNREACHED_BACKEND,
        "defaults": {
            "region": "us-east-1",
            "node_role_arn": "arn:aws:iam::123456789012:role/eks-gang-node-role",
        },
    }
)
LABELS = {c.POOL_LABEL: "pretrain-p4d", c.QUEUE_NAME_LABEL: "atomic-gang-queue"}
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
KINDS = {
    "Job": ("batch", "v1"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2"),
    "PyTorchJob": ("kubeflow.org", "v1"),
    "TrainJob": ("trainer.kubeflow.org", "v1alpha1"),
    "MPIJob": ("kubeflow.org", "v2beta1"),
}


def gang(count: str | None = "4", **extra: str) -> dict[str, str]:
    out = {c.ANN_INSTANCE_TYPE: "p4d.24xlarge", **extra}
    if count is not None:
        out[c.ANN_COUNT] = count
    return out


def _meta(labels: dict[str, str] | None, annotations: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "pretrain", "namespace": "default"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return meta


def _job_template(parallelism: int | None, completions: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"spec": spec}


def jobset(
    labels: dict[str, str] | None = LABELS,
    annotations: dict[str, str] | None = None,
    replicated: tuple[tuple[str, int | None, int | None, int | None], ...] = (
        ("leader", 1, 1, 1),
        ("workers", 1, 3, 3),
    ),
    template_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A JobSet of (name, replicas, parallelism, completions) replicated jobs; None leaves
    the field out."""
    replicated_jobs = []
    for name, replicas, parallelism, completions in replicated:
        entry: dict[str, Any] = {"name": name, "template": _job_template(parallelism, completions)}
        if template_labels is not None:
            entry["template"]["metadata"] = {"labels": template_labels}
        if replicas is not None:
            entry["replicas"] = replicas
        replicated_jobs.append(entry)
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _meta(labels, annotations if annotations is not None else gang()),
        "spec": {"suspend": True, "replicatedJobs": replicated_jobs},
    }


def pytorchjob(
    annotations: dict[str, str] | None = None,
    replicas: dict[str, int | None] | None = None,
    labels: dict[str, str] | None = LABELS,
) -> dict[str, Any]:
    specs: dict[str, Any] = {}
    for replica_type, count in (replicas or {"Master": 1, "Worker": 3}).items():
        specs[replica_type] = {
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [{"name": "pytorch"}]}},
        }
        if count is not None:
            specs[replica_type]["replicas"] = count
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _meta(labels, annotations if annotations is not None else gang()),
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": specs},
    }


def mpijob(
    annotations: dict[str, str] | None = None,
    replicas: dict[str, int | None] | None = None,
    labels: dict[str, str] | None = LABELS,
    run_launcher_as_worker: bool = False,
) -> dict[str, Any]:
    specs: dict[str, Any] = {}
    for replica_type, count in (replicas or {"Launcher": 1, "Worker": 3}).items():
        specs[replica_type] = {"template": {"spec": {"containers": [{"name": "mpi"}]}}}
        if count is not None:
            specs[replica_type]["replicas"] = count
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": _meta(labels, annotations if annotations is not None else gang()),
        "spec": {
            "runPolicy": {"suspend": True},
            "runLauncherAsWorker": run_launcher_as_worker,
            "mpiReplicaSpecs": specs,
        },
    }


def trainjob(
    annotations: dict[str, str] | None = None, labels: dict[str, str] | None = LABELS
) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _meta(labels, annotations if annotations is not None else gang()),
        "spec": {
            "runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"},
            "trainer": {"numNodes": 4},
            "suspend": True,
        },
    }


def admission(
    obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None
) -> dict[str, Any]:
    group, version = KINDS[obj["kind"]]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "namespace": "default",
            "operation": operation,
            "object": obj,
            "oldObject": old,
        },
    }


# The parents that exist in namespace "default" (kind, name) -> uid: what the webhook's
# owner reads find there.
PARENTS = {("JobSet", "pretrain"): "u", ("TrainJob", "pretrain"): "u"}


def parents(kind: OwnerKind, namespace: str, name: str) -> str | None:
    return PARENTS.get((kind.kind, name)) if namespace == "default" else None


def answer(obj: dict[str, Any], operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    body = admission(obj, operation, old)
    out = review(body, SETTINGS, pools=pool_lookup(), owners=parents)
    return dict(out["response"])


def shape_message(annotations: dict[str, str], pods: int, kind: str = "Job") -> str:
    """What the admission check says for a Workload of `pods` pods with these annotations,
    owned by an object of `kind`."""
    with pytest.raises(GangShapeError) as err:
        parse_gang_shape(LABELS, annotations, pods, SETTINGS, kind)
    return str(err.value)


# --- Kueue's pod count per kind ------------------------------------------------------------
@pytest.mark.parametrize(
    ("replicated", "pods"),
    [
        ((("leader", 1, 1, 1), ("workers", 1, 3, 3)), 4),
        ((("workers", 2, 4, None),), 8),  # replicas x parallelism
        ((("workers", 2, 4, 2),), 4),  # completions below parallelism: Kueue counts those
        ((("workers", 2, 2, 6),), 4),  # completions above: parallelism
        ((("workers", None, None, None),), 1),  # replicas and parallelism default to 1
        ((("a", 3, 1, 1), ("b", 1, 2, 2), ("c", 2, 2, 2)), 9),
    ],
)
def test_a_jobsets_pods_are_replicas_times_each_jobs_pods_summed(
    replicated: tuple[tuple[str, int | None, int | None, int | None], ...], pods: int
) -> None:
    assert jobset_pod_count(jobset(replicated=replicated)["spec"]) == pods


@pytest.mark.parametrize(
    ("replicas", "pods"),
    [
        ({"Master": 1, "Worker": 3}, 4),
        ({"Master": None, "Worker": 7}, 8),  # replicas default to 1
        ({"Worker": 2}, 2),
        ({"Master": 1, "Worker": 3, "Launcher": 5}, 4),  # Kueue makes pod sets of these two only
    ],
)
def test_a_pytorchjobs_pods_are_the_master_and_worker_replicas(
    replicas: dict[str, int | None], pods: int
) -> None:
    assert pytorchjob_pod_count(pytorchjob(replicas=replicas)["spec"]) == pods


# --- the same rules and messages as for a Job ----------------------------------------------
def test_a_jobset_whose_count_is_not_its_pods_is_refused_with_the_number_to_use() -> None:
    response = answer(jobset(annotations=gang("3")))
    assert response["allowed"] is False
    status = response["status"]
    assert status["message"] == shape_message(gang("3"), 4, "JobSet")
    assert "the JobSet runs 4 pods" in status["message"]
    assert "Use 4 (the JobSet's pod count)" in status["message"]
    assert status["details"]["kind"] == "JobSet"
    assert status["details"]["group"] == "jobset.x-k8s.io"
    assert status["details"]["causes"][0]["field"] == f"metadata.annotations[{c.ANN_COUNT}]"


def test_a_jobset_whose_count_is_its_pods_is_allowed() -> None:
    assert answer(jobset())["allowed"] is True
    spread = jobset(annotations=gang("8"), replicated=(("leader", 2, 1, 1), ("workers", 2, 3, 3)))
    assert answer(spread)["allowed"] is True


def test_a_pytorchjob_is_judged_on_master_plus_workers() -> None:
    assert answer(pytorchjob())["allowed"] is True
    response = answer(pytorchjob(annotations=gang("3")))
    assert response["allowed"] is False
    assert response["status"]["message"] == shape_message(gang("3"), 4, "PyTorchJob")
    assert response["status"]["details"]["kind"] == "PyTorchJob"


@pytest.mark.parametrize(
    ("replicas", "pods"),
    [
        ({"Launcher": 1, "Worker": 3}, 4),
        ({"Launcher": 1, "Worker": 8}, 9),
        ({"Launcher": None, "Worker": None}, 2),  # each defaults to 1
        ({"Launcher": 1}, 1),  # no workers: the launcher alone
        ({"Launcher": 1, "Worker": 0}, 1),
    ],
)
def test_an_mpijobs_pods_are_the_launcher_and_worker_replicas(
    replicas: dict[str, int | None], pods: int
) -> None:
    assert mpijob_pod_count(mpijob(replicas=replicas)["spec"]) == pods


@pytest.mark.parametrize("as_worker", [False, True])
def test_an_mpijobs_launcher_is_counted_whether_or_not_it_also_runs_as_a_worker(
    as_worker: bool,
) -> None:
    """Kueue makes a pod set of the Launcher either way: it is a Pod, so it holds a gang node."""
    body = mpijob(replicas={"Launcher": 1, "Worker": 3}, run_launcher_as_worker=as_worker)
    assert mpijob_pod_count(body["spec"]) == 4
    assert answer(body)["allowed"] is True


def test_a_miscounted_mpijob_is_refused_naming_the_mpijob() -> None:
    response = answer(mpijob(annotations=gang("4"), replicas={"Launcher": 1, "Worker": 4}))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message == shape_message(gang("4"), 5, "MPIJob")
    assert "the MPIJob runs 5 pods" in message
    assert "Use 5 (the MPIJob's pod count), or make the MPIJob run 4 pods" in message
    assert "the Job runs" not in message
    assert response["status"]["details"]["kind"] == "MPIJob"
    assert response["status"]["details"]["group"] == "kubeflow.org"


@pytest.mark.parametrize("make", [jobset, pytorchjob, trainjob, mpijob])
def test_each_kind_gets_the_job_rules_and_their_messages(make: Any) -> None:
    # A gang without a queue would run ungated; an unknown annotation is refused by name.
    no_queue = answer(make(labels={c.POOL_LABEL: "pretrain-p4d"}))
    assert no_queue["allowed"] is False
    as_job = answer_as_job(labels={c.POOL_LABEL: "pretrain-p4d"}, annotations=gang())
    assert no_queue["status"]["message"] == as_job["status"]["message"]
    typo = answer(make(annotations=gang(**{f"{c.PREFIX}instance-typ": "p5.48xlarge"})))
    assert typo["allowed"] is False
    assert f"{c.PREFIX}instance-typ" in typo["status"]["message"]


def answer_as_job(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    body = job_body("pretrain", namespace="default", uid=None, labels=labels,
                    annotations=annotations, parallelism=4, completions=4)  # fmt: skip
    return answer(body)


def test_a_trainjob_count_is_checked_for_form_and_limit_and_left_to_the_check_for_pods() -> None:
    # The runtime decides a TrainJob's pods; the webhook does not read it.
    assert answer(trainjob(annotations=gang("4")))["allowed"] is True
    assert answer(trainjob(annotations=gang("16")))["allowed"] is True
    for bad in (None, "four", "0", str(SETTINGS.limits.max_gang_size + 1)):
        response = answer(trainjob(annotations=gang(bad)))
        assert response["allowed"] is False, bad
        message = response["status"]["message"]
        assert c.ANN_COUNT in message
        assert "which its training runtime decides" in message
        assert "the Job's pod count" not in message


def test_a_gang_update_that_leaves_its_inputs_alone_is_not_judged_again() -> None:
    # Kueue unsuspends an admitted JobSet and pins its pod sets; a settings change since
    # it was created must not strand it (here: its count no longer fits a smaller limit).
    old = jobset(annotations=gang("3"))
    new = jobset(annotations=gang("3"))
    new["spec"]["suspend"] = False
    assert answer(new, "UPDATE", old)["allowed"] is True
    grown = jobset(annotations=gang("3"), replicated=(("workers", 1, 5, 5),))
    assert answer(grown, "UPDATE", old)["allowed"] is False


# --- objects another controller makes from a judged one ------------------------------------
def _owned_by(obj: dict[str, Any], api_version: str, kind: str, controller: bool) -> None:
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "pretrain", "uid": "u",
         "controller": controller, "blockOwnerDeletion": True}
    ]  # fmt: skip


def _child_job() -> dict[str, Any]:
    # What JobSet v0.12.0 makes of a replicated job whose template carries the pool label:
    # the template's labels and annotations, no queue (Kueue admits it through the JobSet).
    return job_body(
        "pretrain-workers-0",
        namespace="default",
        uid=None,
        labels={c.POOL_LABEL: "pretrain-p4d", "jobset.sigs.k8s.io/jobset-name": "pretrain"},
        annotations={"jobset.sigs.k8s.io/jobset-name": "pretrain"},
        parallelism=3,
        completions=3,
    )


def test_a_job_a_jobset_makes_is_not_refused_by_the_job_rules() -> None:
    child = _child_job()
    refused = answer(child)
    assert refused["allowed"] is False  # the same Job on its own: a gang Job with no queue
    _owned_by(child, "jobset.x-k8s.io/v1alpha2", "JobSet", controller=True)
    assert answer(child)["allowed"] is True


def test_only_a_controlling_jobset_exempts_a_job() -> None:
    child = _child_job()
    _owned_by(child, "jobset.x-k8s.io/v1alpha2", "JobSet", controller=False)
    assert answer(child)["allowed"] is False
    _owned_by(child, "example.com/v1", "JobSet", controller=True)
    assert answer(child)["allowed"] is False
    pytorch = pytorchjob(annotations=gang("3"))
    _owned_by(pytorch, "jobset.x-k8s.io/v1alpha2", "JobSet", controller=True)
    assert answer(pytorch)["allowed"] is False  # a JobSet makes Jobs, not PyTorchJobs


@pytest.mark.parametrize(
    ("name", "uid", "namespace"),
    [("not-there", "u", "default"), ("pretrain", "u", "team-b"), ("pretrain", "u2", "default")],
    ids=["no-such-jobset", "jobset-of-another-namespace", "another-jobset-uid"],
)
def test_a_job_naming_a_foreign_jobset_is_judged_like_any_job(
    name: str, uid: str, namespace: str
) -> None:
    child = _child_job()
    alone = answer(child)
    assert alone["allowed"] is False  # a gang Job with no queue
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name, "uid": uid,
         "controller": True}
    ]  # fmt: skip
    body = admission(child)
    body["request"]["namespace"] = namespace
    child["metadata"]["namespace"] = namespace
    out = review(body, SETTINGS, pools=pool_lookup(), owners=parents)["response"]
    assert out["allowed"] is False
    assert out["status"]["message"] == alone["status"]["message"]


def test_without_an_owner_reader_no_reference_is_proven() -> None:
    child = _child_job()
    _owned_by(child, "jobset.x-k8s.io/v1alpha2", "JobSet", controller=True)
    out = review(admission(child), SETTINGS, pools=pool_lookup())["response"]
    assert out["allowed"] is False


def test_a_jobset_a_trainjob_makes_is_left_to_the_trainjob() -> None:
    child = jobset(annotations=gang("3"))
    _owned_by(child, "trainer.kubeflow.org/v1alpha1", "TrainJob", controller=True)
    assert answer(child)["allowed"] is True


def test_a_jobset_that_copies_the_pool_label_onto_its_jobs_is_judged_on_itself() -> None:
    body = jobset(template_labels={c.POOL_LABEL: "pretrain-p4d"})
    assert answer(body)["allowed"] is True


# --- routing -------------------------------------------------------------------------------
def test_a_kind_the_path_does_not_serve_is_a_bad_request_naming_it() -> None:
    with pytest.raises(ReviewError, match="judges Job \\(batch\\), not JobSet"):
        review(admission(jobset()), SETTINGS, pools=pool_lookup(), kinds=(JOB,))
    body = admission(jobset())
    body["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    with pytest.raises(ReviewError, match="not Deployment \\(apps\\)"):
        review(body, SETTINGS, pools=pool_lookup())


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, CertificateAuthority]]:
    ca = CertificateAuthority()
    cert, key = ca.serving("127.0.0.1").write(tmp_path, "tls.crt", "tls.key")
    port = free_port()
    server = WebhookServer(SETTINGS, cert, key, pools=pool_lookup(), host="127.0.0.1", port=port)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    yield port, ca
    server.stop()
    thread.join(timeout=10)


def _post(served: tuple[int, CertificateAuthority], path: str, body: Any) -> tuple[int, Any]:
    port, ca = served
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_gang_path_judges_every_kind_and_the_old_job_path_only_jobs(
    served: tuple[int, CertificateAuthority],
) -> None:
    for body in (
        jobset(annotations=gang("3")),
        pytorchjob(annotations=gang("3")),
        mpijob(annotations=gang("3")),
    ):
        status, out = _post(served, GANG_JOB_WEBHOOK_PATH, admission(body))
        assert status == 200
        assert out["response"]["allowed"] is False
        assert f"Use 4 (the {body['kind']}'s pod count)" in out["response"]["status"]["message"]
    status, text = _post(served, JOB_WEBHOOK_PATH, admission(jobset()))
    assert status == 400
    assert "not JobSet" in text
    for path in (GANG_JOB_WEBHOOK_PATH, JOB_WEBHOOK_PATH):
        status, out = _post(served, path, admission(job_body_of_count("3")))
        assert status == 200
        assert out["response"]["allowed"] is False


def job_body_of_count(count: str) -> dict[str, Any]:
    return job_body(
        "pretrain", namespace="default", uid=None, labels=LABELS, annotations=gang(count)
    )
