"""The pod webhook (`webhook.pods`): a pod that would run on a pool's nodes is refused
unless its namespace may use the pool; DaemonSet pods whose DaemonSet exists, and a
node's own mirror pods, pass; reads that fail are errors for the failurePolicy."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devenv.pki import CertificateAuthority
from devenv.processes import free_port
from provisioner.api import constants as c
from provisioner.api.owners import DAEMON_SET, OwnerKind
from provisioner.api.settings import Settings
from provisioner.api.tenancy import ClusterReadError
from provisioner.webhook.pods import review_pod
from provisioner.webhook.review import ReviewError
from provisioner.webhook.server import GANG_POD_WEBHOOK_PATH, WebhookServer
from tests.support.backends import UNREACHED_BACKEND
from tests.support.fake_images import FakeImageOwners
from tests.support.pools import NODE_ROLE, pool, pool_lookup, pool_spec
from tests.unit.test_webhook_server import Running

pytestmark = pytest.mark.unit

EVERYTHING = {"operator": "Exists"}
OWNED_BY_A = pool("pretrain", spec=pool_spec(pool="pretrain", owner_namespace="team-a"))
NODES = {"ip-10-0-0-1": "pretrain", "ip-10-0-0-9": None}
DS_UID = "ds-uid-1"


def settings(shared: list[dict[str, Any]] | None = None) -> Settings:
    return Settings.model_validate(
        {
            "clusterName": "demo",
            "pulumi": UNREACHED_BACKEND,
            "defaults": {"region": "us-east-1", "nodeRoleArn": NODE_ROLE},
            **({"tenancy": {"sharedPools": shared}} if shared else {}),
        }
    )


def nodes(name: str) -> str | None:
    return NODES.get(name)


class Owners:
    """Owner lookup over a fixed world; records what was asked."""

    def __init__(self, *present: tuple[OwnerKind, str, str, str]) -> None:
        self.present = {(k, ns, name): uid for k, ns, name, uid in present}
        self.asked: list[tuple[str, str, str]] = []

    def __call__(self, kind: OwnerKind, namespace: str, name: str) -> str | None:
        self.asked.append((kind.kind, namespace, name))
        return self.present.get((kind, namespace, name))


AGENT_DS = Owners((DAEMON_SET, "monitoring", "node-agent", DS_UID))


def pod(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    base = {"name": "intruder", "namespace": "team-b", **meta}
    containers = [{"name": "c", "image": "busybox"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": base,
            "spec": {"containers": containers, **spec}}  # fmt: skip


def admission(
    obj: dict[str, Any],
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    user: str = "alice",
) -> dict[str, Any]:
    request = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "namespace": obj["metadata"]["namespace"],
        "operation": operation,
        "userInfo": {"username": user},
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def answer(body: dict[str, Any], cfg: Settings | None = None, owners: Any = AGENT_DS) -> Any:
    out = review_pod(
        body, cfg or settings(), pools=pool_lookup(OWNED_BY_A), nodes=nodes, owners=owners
    )
    return out["response"]


ON_POOL_NODE = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["ip-10-0-0-1"]}]}]}}}  # fmt: skip
BY_LABEL_AFFINITY = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": c.POOL_LABEL, "operator": "In", "values": ["pretrain"]}]}]}}}  # fmt: skip
GANG_A_ONLY = {"key": c.GANG_TAINT_KEY, "operator": "Equal", "value": "pretrain"}
# The ways a pod reaches pool pretrain's nodes (spec fields), one row each.
SELECTS_THE_POOL: dict[str, dict[str, Any]] = {
    "nodeSelector": {"tolerations": [EVERYTHING], "nodeSelector": {c.POOL_LABEL: "pretrain"}},
    "group-label": {"tolerations": [GANG_A_ONLY], "nodeSelector": {c.GROUP_LABEL: "gen-1"}},
    "affinity": {"tolerations": [EVERYTHING], "affinity": BY_LABEL_AFFINITY},
    "field-selector": {"tolerations": [EVERYTHING], "affinity": ON_POOL_NODE},
    "nodeName": {"nodeName": "ip-10-0-0-1"},
}


@pytest.mark.parametrize("how", sorted(SELECTS_THE_POOL))
def test_a_pod_of_another_namespace_that_would_reach_the_pool_is_refused(how: str) -> None:
    out = answer(admission(pod(SELECTS_THE_POOL[how])))
    assert out["allowed"] is False
    status = out["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    message = status["message"]
    assert "Pod intruder in namespace team-b would run on the nodes of pool pretrain" in message
    assert "belongs to namespace team-a" in message
    assert "tenancy.sharedPools" in message
    (cause,) = status["details"]["causes"]
    assert cause["field"].startswith("spec.")


@pytest.mark.parametrize("how", sorted(SELECTS_THE_POOL))
def test_a_pod_of_the_pools_own_namespace_is_allowed(how: str) -> None:
    body = pod(SELECTS_THE_POOL[how], namespace="team-a")
    assert answer(admission(body)) == {"uid": "u-1", "allowed": True}


def test_a_namespace_the_installer_shares_the_pool_with_is_allowed() -> None:
    body = admission(pod(SELECTS_THE_POOL["nodeSelector"]))
    shared = settings([{"pool": "pretrain", "namespaces": ["team-b"]}])
    assert answer(body, shared)["allowed"] is True


def test_a_daemonset_pod_whose_daemonset_exists_is_allowed_on_any_gang_node() -> None:
    ref = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "node-agent", "uid": DS_UID,
           "controller": True}  # fmt: skip
    spec = {"tolerations": [EVERYTHING], "affinity": ON_POOL_NODE}
    body = pod(spec, namespace="monitoring", name="node-agent-x7k2p", ownerReferences=[ref])
    owners = Owners((DAEMON_SET, "monitoring", "node-agent", DS_UID))
    assert answer(admission(body), owners=owners)["allowed"] is True
    assert owners.asked == [("DaemonSet", "monitoring", "node-agent")]


@pytest.mark.parametrize(
    "ref",
    [
        {"name": "node-agent", "uid": "another-uid"},  # same name, not that DaemonSet
        {"name": "no-such-agent", "uid": DS_UID},
        {"name": "node-agent", "uid": DS_UID, "controller": False},
        {"name": "node-agent", "uid": DS_UID, "kind": "ReplicaSet"},
    ],
    ids=["other-uid", "missing", "not-controller", "not-a-daemonset"],
)
def test_a_daemonset_reference_that_proves_nothing_is_judged_like_any_pod(
    ref: dict[str, Any],
) -> None:
    full = {"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": True, **ref}
    spec = {"tolerations": [EVERYTHING], "affinity": ON_POOL_NODE}
    body = pod(spec, namespace="monitoring", ownerReferences=[full])
    assert answer(admission(body))["allowed"] is False


def test_a_pod_that_tolerates_everything_but_selects_no_gang_node_is_not_read_for() -> None:
    asked: list[str] = []

    def pools(name: str) -> Any:
        asked.append(name)
        return None

    for spec in (
        {"tolerations": [EVERYTHING]},
        {"tolerations": [EVERYTHING], "nodeSelector": {"kubernetes.io/os": "linux"}},
        {"tolerations": [EVERYTHING], "nodeName": "ip-10-0-0-9"},
    ):
        out = review_pod(admission(pod(spec)), settings(), pools=pools, nodes=nodes)
        assert out["response"]["allowed"] is True, spec
    assert asked == []


def test_a_pod_aimed_at_a_pool_that_does_not_exist_is_refused() -> None:
    spec = {"tolerations": [EVERYTHING], "nodeSelector": {c.POOL_LABEL: "future"}}
    out = answer(admission(pod(spec, namespace="team-a")))
    assert out["allowed"] is False
    assert "pool future" in out["status"]["message"]
    assert "does not exist" in out["status"]["message"]


def test_a_pod_that_could_reach_every_pool_needs_every_pool_shared() -> None:
    spec = {"tolerations": [EVERYTHING], "nodeSelector": {c.GROUP_LABEL: "gen-1"}}
    out = answer(admission(pod(spec, namespace="team-a")))
    assert out["allowed"] is False
    assert "could run on the nodes of any gang pool" in out["status"]["message"]
    everything = settings([{"pool": "*", "namespaces": ["team-a"]}])
    assert answer(admission(pod(spec, namespace="team-a")), everything)["allowed"] is True
    some = settings([{"pool": "pre*", "namespaces": ["team-a"]}])
    assert answer(admission(pod(spec, namespace="team-a")), some)["allowed"] is False


def test_a_mirror_pod_is_allowed_only_from_its_own_node() -> None:
    annotations = {"kubernetes.io/config.mirror": "abc"}
    body = pod({"nodeName": "ip-10-0-0-1"}, annotations=annotations)
    assert answer(admission(body, user="system:node:ip-10-0-0-1"))["allowed"] is True
    assert answer(admission(body, user="system:node:ip-10-0-0-2"))["allowed"] is False
    assert answer(admission(body))["allowed"] is False


def test_an_update_is_judged_only_when_it_changes_where_the_pod_may_run() -> None:
    old = pod({"nodeSelector": {c.POOL_LABEL: "pretrain"}})
    relabelled = pod({"nodeSelector": {c.POOL_LABEL: "pretrain"}}, labels={"x": "y"})
    assert answer(admission(relabelled, "UPDATE", old))["allowed"] is True
    tolerating = pod({"nodeSelector": {c.POOL_LABEL: "pretrain"}, "tolerations": [EVERYTHING]})
    assert answer(admission(tolerating, "UPDATE", old))["allowed"] is False
    assert answer(admission(tolerating, "DELETE"))["allowed"] is True


def test_reads_that_fail_are_errors_not_verdicts() -> None:
    def broken(name: str) -> str | None:
        raise ClusterReadError(f"could not read Node {name}")

    body = admission(pod(SELECTS_THE_POOL["field-selector"]))
    with pytest.raises(ClusterReadError):
        review_pod(body, settings(), pools=pool_lookup(OWNED_BY_A), nodes=broken)
    # Without a node reader, a pod naming a node cannot be judged either.
    with pytest.raises(ClusterReadError):
        review_pod(body, settings(), pools=pool_lookup(OWNED_BY_A))


def test_a_request_for_another_kind_is_a_bad_request() -> None:
    body = admission(pod({}))
    body["request"]["kind"] = {"group": "batch", "version": "v1", "kind": "Job"}
    with pytest.raises(ReviewError, match="judges Pods, not Job"):
        review_pod(body, settings(), pools=pool_lookup())
    body = admission(pod({"tolerations": "everything"}))
    with pytest.raises(ReviewError, match="malformed"):
        review_pod(body, settings(), pools=pool_lookup())


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Running]:
    def unreadable(name: str) -> str | None:
        raise ClusterReadError(f"could not read Node {name}: forbidden")

    ca = CertificateAuthority()
    cert, key = ca.serving("127.0.0.1").write(tmp_path, "tls.crt", "tls.key")
    port = free_port()
    server = WebhookServer(
        settings(), cert, key, pools=pool_lookup(OWNED_BY_A), nodes=unreadable,
        host="127.0.0.1", port=port, images=FakeImageOwners(),
    )  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    yield Running(server, port, ca)
    server.stop()
    thread.join(timeout=10)


def test_the_server_judges_pods_on_their_path_and_answers_a_failed_read_with_503(
    served: Running,
) -> None:
    body = admission(pod(SELECTS_THE_POOL["nodeSelector"]))
    status, raw = served.call(GANG_POD_WEBHOOK_PATH, json.dumps(body).encode())
    assert status == 200
    assert json.loads(raw)["response"]["allowed"] is False
    body = admission(pod(SELECTS_THE_POOL["nodeName"]))
    status, raw = served.call(GANG_POD_WEBHOOK_PATH, json.dumps(body).encode())
    assert status == 503
    assert b"could not read Node ip-10-0-0-1" in raw
