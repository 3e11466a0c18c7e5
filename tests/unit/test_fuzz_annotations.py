"""Fuzzing: random gang labels, annotations and pod counts through both doors a Job passes.

The same Job is judged twice: by the Job webhook (`provisioner.webhook.review.review`, an
AdmissionReview built the way the apiserver sends it) and by the Workload reconciler's pure
decision (`provisioner.controllers.workload.decision.decide`, with the Workload Kueue would
create for that Job and no pool yet). Each input must be accepted by both or refused by both
with the same sentences, every refusal must name the key it is about, and neither door may
raise. The webhook alone also refuses a gang Job without a Kueue queue; that rule is fuzzed
on its own.

Run by `pytest tests/unit` with `ATOMIC_GANG_FUZZ_EXAMPLES` examples per property (1000 by
default; `make fuzz` sets 10000, see docs/EVIDENCE.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from provisioner.api import constants as c
from provisioner.api.ami_policy import ImageOwnership
from provisioner.api.settings import Settings
from provisioner.api.workload import Workload
from provisioner.controllers.workload.decision import (
    PoolChange,
    WorkloadDecision,
    WorkloadInputs,
    decide,
)
from provisioner.webhook.review import ReviewError, is_gang_job, job_pod_count, review
from tests.support.backends import UNREACHED_BACKEND
from tests.support.jobs import job as job_body
from tests.support.pools import pool_lookup
from tests.support.workloads import check, condition, workload


class _AmazonOwnsEveryImage:
    """EC2 as the webhook asks it: every AMI a generated Job names is Amazon's, so the
    webhook's owner check (which the Workload path leaves to the pool) refuses nothing here."""

    def ownership(self, image_id: str, owners: tuple[str, ...]) -> ImageOwnership | None:
        return ImageOwnership(image_id, "602401143452", "amazon", "amazon")


AMAZON_IMAGES = _AmazonOwnsEveryImage()


class _EveryReservationIsTheClusters:
    """EC2 as the webhook asks it: every capacity reservation a generated Job names is
    tagged for the configs' cluster, so the webhook's tag check (which the Workload path
    leaves to IAM) refuses nothing here."""

    def tags(self, reservation_id: str) -> Mapping[str, str] | None:
        return {c.TAG_CLUSTER: "demo"}


GIVEN_RESERVATIONS = _EveryReservationIsTheClusters()


pytestmark = pytest.mark.unit

EXAMPLES = int(os.environ.get("ATOMIC_GANG_FUZZ_EXAMPLES", "1000"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CHECK = "atomic-gang-check"
UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
ROLE = "arn:aws:iam::123456789012:role/eks-gang-node-role"
OTHER_ROLE = "arn:aws:iam::123456789012:role/other"
# Two controllers: the chart's defaults, and a locked-down one with allowlists and limits,
# so the settings-dependent refusals (NotAllowed, ExceedsLimit, missing role) all occur.
CONFIGS = (
    Settings.model_validate(
        {
            "cluster_name": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "node_role_arn": ROLE},
        }
    ),
    Settings.model_validate(
        {
            "cluster_name": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "mode": "fleet"},
            "limits": {"max_gang_size": 8, "max_keep_warm_ttl": "1h"},
            "allowed_node_role_arns": [ROLE],
            "allowed_instance_types": ["p4d.24xlarge", "g6*"],
        }
    ),
)
REASONS = {getattr(c, name) for name in dir(c) if name.startswith("REASON_")}

# --- strategies ---------------------------------------------------------------------------

# Values each rule accepts and values just past its edge, so inputs get deep into the rules.
plausible = st.sampled_from(
    [
        "4", "0", "1", "8", "9", "65", "+4", "04", "4.0", "1e1", "-1",
        "p4d.24xlarge", "g6e.xlarge", "m5.large", "trn1.32xlarge", "P4D.24XLARGE", "p4d",
        "runinstances", "fleet", "Fleet", "spot",
        "us-east-1", "eu-west-1", "us-east-1a", "us-east-1a,us-east-1b", "us-east-1a,",
        "us-east-1a,us-east-1a", "eu-west-1a", "subnet-0123456789abcdef0",
        "subnet-0123456789abcdef0,subnet-0123456789abcdef1", "subnet-xyz",
        ROLE, OTHER_ROLE, "arn:aws:iam::123:role/x", "role/x",
        "0s", "10m", "1h30m", "-5s", "99999h", "1.5h", "1d", "5", "1h1h",
        "standard", "nvidia", "neuron", "cuda",
        "ami-0123456789abcdef0", "ami-123", "cr-0123456789abcdef0", "cr-",
        "", " ", "\t4\n", "\x00", "é", "🙂", "a" * 300,
    ]
)  # fmt: skip
junk = st.one_of(
    st.text(max_size=24),
    st.text(alphabet="0123456789.+-hmsuµμnx ", max_size=10),
    st.text(alphabet="abcdefus-0123456789, ", max_size=24),
)
values = st.one_of(plausible, plausible, junk)


def _typo(key: str, index: int, char: str) -> str:
    i = len(c.PREFIX) + index % (len(key) - len(c.PREFIX))
    return key[:i] + char + key[i + 1 :]


annotation_keys = st.one_of(
    st.sampled_from(c.GANG_ANNOTATIONS),
    st.sampled_from(c.GANG_ANNOTATIONS),
    st.builds(_typo, st.sampled_from(c.GANG_ANNOTATIONS), st.integers(0, 40), st.characters()),
    st.text(max_size=12).map(lambda s: c.PREFIX + s),
    st.sampled_from([c.POOL_LABEL, c.QUEUE_NAME_LABEL, "example.com/note", c.PREFIX]),
    st.text(max_size=20),
)
VALID = {c.ANN_COUNT: "4", c.ANN_INSTANCE_TYPE: "p4d.24xlarge", c.ANN_NODE_ROLE_ARN: ROLE}
# Half the maps are a valid gang with at most two keys changed, so acceptance and
# single-key refusals are common; the rest are anything.
annotation_maps = st.one_of(
    st.builds(
        lambda extra: {**VALID, **extra},
        st.dictionaries(annotation_keys, st.one_of(plausible, junk), max_size=2),
    ),
    st.dictionaries(annotation_keys, values, max_size=7),
)
pool_names = st.one_of(
    st.sampled_from(["pretrain-p4d", "a" * 63, "a" * 64, "Bad_Name", " x ", "", "-x", "x-"]),
    st.text(max_size=70),
)
# Gang Jobs as users write them: a queue (the webhook's own rule is fuzzed separately) and
# usually a pool label, sometimes with stray keys that belong in annotations.
label_maps = st.builds(
    lambda pool, extra: {
        c.QUEUE_NAME_LABEL: "atomic-gang-queue",
        **({} if pool is None else {c.POOL_LABEL: pool}),
        **extra,
    },
    st.one_of(st.none(), pool_names, st.just("pretrain-p4d"), st.just("pretrain-p4d")),
    st.dictionaries(st.sampled_from([c.ANN_COUNT, c.ANN_INSTANCE_TYPE, "app"]), values, max_size=2),
)
# parallelism/completions as the apiserver stores them: absent or a non-negative integer.
counts = st.one_of(st.none(), st.just(4), st.just(4), st.just(4), st.integers(0, 100))


# --- the two doors ------------------------------------------------------------------------


def job(labels: dict[str, str], annotations: dict[str, str], par: int | None, comp: int | None):
    return job_body(
        "trainer",
        uid=None,
        labels=labels,
        annotations=annotations,
        parallelism=par,
        completions=comp,
    )


def webhook(obj: dict[str, Any], config: Settings) -> dict[str, Any]:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "operation": "CREATE",
            "object": obj,
        },
    }
    out = review(
        body, config, pools=pool_lookup(), images=AMAZON_IMAGES, reservations=GIVEN_RESERVATIONS
    )
    assert out["response"]["uid"] == UID
    return dict(out["response"])


def workload_path(
    labels: dict[str, str], annotations: dict[str, str], pods: int, config: Settings
) -> WorkloadDecision:
    """The decision for the Workload Kueue creates for this Job, quota reserved, check
    Pending, no pool yet."""
    wl = Workload.model_validate(
        workload(
            "job-trainer-1a2b3",
            uid="wl-1",
            count=pods,
            owner=job_body(name="trainer"),
            conditions=[condition(c.WL_QUOTA_RESERVED, reason="QuotaReserved")],
            checks=[check(CHECK, c.CheckState.PENDING)],
        )
    )
    assert wl.total_pod_count == pods
    return decide(
        WorkloadInputs(
            workload=wl,
            check_name=CHECK,
            owner_labels=labels,
            owner_annotations=annotations,
            pool=None,
            claimant_exists=False,
            settings=config,
            now=NOW,
        )
    )


def assert_causes_name_their_keys(verdict: dict[str, Any], annotations: dict[str, str]) -> None:
    status = verdict["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid"
    causes = status["details"]["causes"]
    assert causes
    for cause in causes:
        # field is metadata.labels[KEY] or metadata.annotations[KEY]
        key = cause["field"].split("[", 1)[1][:-1]
        assert cause["field"] in (f"metadata.labels[{key}]", f"metadata.annotations[{key}]")
        assert key in cause["message"], cause
        assert (
            key in c.GANG_ANNOTATIONS
            or key in (c.POOL_LABEL, c.QUEUE_NAME_LABEL)
            or (key in annotations)
        ), cause
        assert cause["message"].rstrip().endswith("."), cause
    assert " ".join(cause["message"] for cause in causes) == status["message"]


# --- properties ---------------------------------------------------------------------------


@FUZZ
@given(
    labels=label_maps,
    annotations=annotation_maps,
    par=counts,
    comp=counts,
    config=st.sampled_from(CONFIGS),
)
def test_webhook_and_workload_path_agree_and_name_the_key(
    labels: dict[str, str],
    annotations: dict[str, str],
    par: int | None,
    comp: int | None,
    config: Settings,
) -> None:
    obj = job(labels, annotations, par, comp)
    pods = job_pod_count(obj["spec"])
    verdict = webhook(obj, config)
    if not is_gang_job(obj["metadata"]):
        # Not ours: the webhook lets it through untouched and the Workload path never
        # sees it with a pool to provision.
        event("not a gang Job")
        assert verdict == {"uid": UID, "allowed": True}
        return
    decision = workload_path(labels, annotations, pods, config)
    assert decision.check is not None
    if verdict["allowed"]:
        event("accepted")
        assert set(verdict) == {"uid", "allowed"}
        assert decision.pool_change is PoolChange.CREATE
        assert decision.check.state == c.CheckState.PENDING
        assert decision.shape is not None
        assert decision.shape.count == pods
        assert decision.pool_name == labels[c.POOL_LABEL].strip()
        return
    event(f"refused: {decision.check.reason}")
    assert_causes_name_their_keys(verdict, annotations)
    # The Workload path refuses the same Job with the same sentences, and touches no pool.
    assert decision.pool_change is PoolChange.NONE
    assert decision.check.state == c.CheckState.REJECTED
    assert decision.check.reason in REASONS
    assert decision.check.message == verdict["status"]["message"]


@FUZZ
@given(
    labels=label_maps,
    annotations=annotation_maps,
    par=counts,
    config=st.sampled_from(CONFIGS),
    queue=st.sampled_from([None, "", "  "]),
)
def test_a_gang_job_without_a_queue_is_refused_first_then_as_the_workload_path_would(
    labels: dict[str, str],
    annotations: dict[str, str],
    par: int | None,
    config: Settings,
    queue: str | None,
) -> None:
    labels = {k: v for k, v in labels.items() if k != c.QUEUE_NAME_LABEL}
    if queue is not None:
        labels[c.QUEUE_NAME_LABEL] = queue
    # Without the pool label and without our annotations a Job is not a gang Job at all.
    annotations = {**annotations, c.ANN_COUNT: annotations.get(c.ANN_COUNT, "4")}
    obj = job(labels, annotations, par, par)
    verdict = webhook(obj, config)
    assert verdict["allowed"] is False
    assert_causes_name_their_keys(verdict, annotations)
    first = verdict["status"]["details"]["causes"][0]
    assert first["field"] == f"metadata.labels[{c.QUEUE_NAME_LABEL}]"
    rest = verdict["status"]["message"].removeprefix(first["message"]).strip()
    decision = workload_path(labels, annotations, job_pod_count(obj["spec"]), config)
    assert decision.check is not None
    if rest:
        assert decision.check.state == c.CheckState.REJECTED
        assert decision.check.message == rest
    else:
        assert decision.check.state == c.CheckState.PENDING


json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=8), values
)
json_values = st.recursive(
    json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
string_maps = st.dictionaries(st.one_of(annotation_keys, st.text(max_size=8)), values, max_size=5)


@FUZZ
@given(
    labels=st.one_of(st.none(), string_maps, label_maps),
    annotations=st.one_of(st.none(), string_maps, annotation_maps),
    spec=st.dictionaries(
        st.sampled_from(["parallelism", "completions", "suspend", "template"]),
        st.one_of(st.none(), st.integers(-5, 2**31), json_values),
        max_size=3,
    ),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", None, "create"]),
    old=st.one_of(st.none(), json_values),
    config=st.sampled_from(CONFIGS),
)
def test_the_webhook_answers_or_says_the_request_is_malformed_and_never_crashes(
    labels: dict[str, str] | None,
    annotations: dict[str, str] | None,
    spec: dict[str, Any],
    operation: str | None,
    old: Any,
    config: Settings,
) -> None:
    meta: dict[str, Any] = {"name": "trainer"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": UID, "operation": operation, "object": {"metadata": meta, "spec": spec},
                    "oldObject": old},
    }  # fmt: skip
    try:
        out = review(
            body, config, pools=pool_lookup(), images=AMAZON_IMAGES, reservations=GIVEN_RESERVATIONS
        )
    except ReviewError as err:
        # The server turns this into an HTTP 400 carrying the reason.
        event("malformed")
        assert str(err)
        return
    verdict = out["response"]
    event(f"allowed={verdict['allowed']}")
    if not verdict["allowed"]:
        assert_causes_name_their_keys(verdict, annotations or {})


# Objects the apiserver's schema validation refuses before any validating webhook runs, so
# they cannot reach `review` from a real apiserver; a direct POST still can, and must get a
# ReviewError (HTTP 400), not an unexpected exception (HTTP 500).
@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": "trainer", "spec": {}},
        {"metadata": {"labels": {c.POOL_LABEL: "p"}}, "spec": {"parallelism": float("inf")}},
        {"metadata": {"labels": {c.POOL_LABEL: "p"}}, "spec": "parallelism"},
    ],
)
def test_schema_violating_jobs_are_malformed_requests(obj: dict[str, Any]) -> None:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": UID, "operation": "CREATE", "object": obj},
    }
    with pytest.raises(ReviewError):
        review(
            body,
            CONFIGS[0],
            pools=pool_lookup(),
            images=AMAZON_IMAGES,
            reservations=GIVEN_RESERVATIONS,
        )
