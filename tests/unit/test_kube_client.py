"""What `KubeClient` puts on the wire (paths, content types, preconditions, field manager)
and how the API's failures are translated, against a fake `ApiClient`."""

from __future__ import annotations

import json
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes.client.rest import ApiException

from provisioner.api.constants import FIELD_MANAGER
from provisioner.kube import errors
from provisioner.kube.client import KubeClient, preconditioned
from provisioner.kube.resources import CONFIG_MAPS, GANG_NODE_POOLS, LEASES, NODES, ResourceRef


class FakeApi:
    """Stands in for `kubernetes.client.ApiClient`: records `call_api`, replays answers."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answers: list[Any] = []

    def reset(self) -> None:
        self.calls.clear()
        self.answers.clear()

    def call_api(self, resource_path: str, method: str, **kwargs: Any) -> Any:
        self.calls.append({"path": resource_path, "method": method, **kwargs})
        answer = self.answers.pop(0) if self.answers else {"metadata": {}}
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def close(self) -> None:
        pass

    @property
    def last(self) -> dict[str, Any]:
        return self.calls[-1]


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def client(api: FakeApi) -> KubeClient:
    return KubeClient(api)


def query(call: dict[str, Any]) -> dict[str, str]:
    return dict(call["query_params"])


@pytest.mark.parametrize(
    ("ref", "args", "path"),
    [
        (CONFIG_MAPS, ("ns", "cm", ""), "/api/v1/namespaces/ns/configmaps/cm"),
        (CONFIG_MAPS, (None, None, ""), "/api/v1/configmaps"),
        (NODES, (None, "n1", "status"), "/api/v1/nodes/n1/status"),
        (
            LEASES,
            ("kube-system", "l", ""),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
        ),
        (
            GANG_NODE_POOLS,
            (None, "p", "status"),
            "/apis/atomic-gang.k8s.aws/v1alpha1/gangnodepools/p/status",
        ),
    ],
)
def test_paths(ref: ResourceRef, args: tuple[Any, Any, str], path: str) -> None:
    assert ref.path(*args) == path


def test_a_namespaced_object_needs_its_namespace() -> None:
    with pytest.raises(ValueError, match="namespace"):
        CONFIG_MAPS.path(None, "cm")


def test_patch_status_sends_the_read_resource_version_in_a_merge_patch(
    api: FakeApi, client: KubeClient
) -> None:
    patch = {"status": {"phase": "Joining"}}
    client.patch_status(GANG_NODE_POOLS, "p", patch, resource_version="17")
    call = api.last
    assert call["method"] == "PATCH"
    assert call["path"].endswith("/gangnodepools/p/status")
    assert call["header_params"]["Content-Type"] == "application/merge-patch+json"
    assert call["body"] == {"status": {"phase": "Joining"}, "metadata": {"resourceVersion": "17"}}
    assert query(call)["fieldManager"] == FIELD_MANAGER
    assert patch == {"status": {"phase": "Joining"}}  # the caller's dict is untouched


def test_patch_keeps_other_metadata_and_uses_a_given_field_manager(
    api: FakeApi, client: KubeClient
) -> None:
    client.patch(
        CONFIG_MAPS,
        "cm",
        {"metadata": {"labels": {"a": "b"}}},
        namespace="ns",
        resource_version="5",
        field_manager="someone",
    )
    assert api.last["body"] == {"metadata": {"labels": {"a": "b"}, "resourceVersion": "5"}}
    assert query(api.last)["fieldManager"] == "someone"


def test_a_precondition_needs_a_version() -> None:
    with pytest.raises(ValueError):
        preconditioned({}, "")


def test_json_patch_pins_the_resource_version(api: FakeApi, client: KubeClient) -> None:
    ops = [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]
    client.json_patch(NODES, "n1", ops, resource_version="9")
    assert api.last["header_params"]["Content-Type"] == "application/json-patch+json"
    assert api.last["body"] == [
        *ops,
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "9"},
    ]


def test_apply_is_server_side_apply_with_explicit_force(api: FakeApi, client: KubeClient) -> None:
    client.apply(CONFIG_MAPS, {"metadata": {"name": "cm", "namespace": "ns"}}, force=False)
    assert api.last["path"] == "/api/v1/namespaces/ns/configmaps/cm"
    assert api.last["header_params"]["Content-Type"] == "application/apply-patch+yaml"
    assert query(api.last) == {"fieldManager": FIELD_MANAGER, "force": "false"}
    assert api.last["body"]["kind"] == "ConfigMap" and api.last["body"]["apiVersion"] == "v1"


def test_replace_requires_the_read_resource_version(api: FakeApi, client: KubeClient) -> None:
    with pytest.raises(ValueError, match="resourceVersion"):
        client.replace_status(GANG_NODE_POOLS, {"metadata": {"name": "p"}})
    client.replace_status(GANG_NODE_POOLS, {"metadata": {"name": "p", "resourceVersion": "3"}})
    assert api.last["method"] == "PUT" and api.last["path"].endswith("/p/status")


def test_delete_carries_the_precondition_when_given(api: FakeApi, client: KubeClient) -> None:
    client.delete(CONFIG_MAPS, "cm", namespace="ns", resource_version="4")
    assert api.last["body"]["preconditions"] == {"resourceVersion": "4"}
    client.delete(CONFIG_MAPS, "cm", namespace="ns", resource_version=None)
    assert "preconditions" not in api.last["body"]


def test_list_follows_continue_tokens_and_keeps_the_first_pages_version(
    api: FakeApi, client: KubeClient
) -> None:
    api.answers = [
        {
            "metadata": {"resourceVersion": "100", "continue": "t1"},
            "items": [{"metadata": {"name": "a"}}],
        },
        {"metadata": {"resourceVersion": "100"}, "items": [{"metadata": {"name": "b"}}]},
    ]
    listed = client.list(CONFIG_MAPS, namespace="ns", label_selector="x=y", page_size=1)
    assert [item["metadata"]["name"] for item in listed.items] == ["a", "b"]
    assert listed.resource_version == "100"
    assert listed.items[0]["kind"] == "ConfigMap" and listed.items[0]["apiVersion"] == "v1"
    assert query(api.calls[0]) == {"labelSelector": "x=y", "limit": "1"}
    assert query(api.calls[1])["continue"] == "t1"


def api_error(status: int, reason: str = "", message: str = "") -> ApiException:
    err = ApiException(status=status, reason=reason)
    err.body = json.dumps(
        {"kind": "Status", "code": status, "reason": reason, "message": message}
    ).encode()
    return err


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (api_error(409, "Conflict", "the object has been modified"), errors.KubeConflict),
        (api_error(409, "AlreadyExists", "exists"), errors.KubeAlreadyExists),
        (api_error(404, "NotFound"), errors.KubeNotFound),
        (api_error(410, "Expired"), errors.KubeGone),
        (
            ApiException(status=410, reason="Expired: too old resource version: 1 (9)"),
            errors.KubeGone,
        ),
        (api_error(403, "Forbidden"), errors.KubeForbidden),
        (api_error(401, "Unauthorized"), errors.KubeForbidden),
        (api_error(422, "Invalid"), errors.KubeInvalid),
        (api_error(400, "BadRequest"), errors.KubeInvalid),
        (api_error(429, "TooManyRequests"), errors.KubeUnavailable),
        (api_error(503, "ServiceUnavailable"), errors.KubeUnavailable),
        (ApiException(status=0, reason="SSLError"), errors.KubeUnavailable),
        (urllib3.exceptions.MaxRetryError(None, "/", "refused"), errors.KubeUnavailable),  # type: ignore[arg-type]
        (ConnectionRefusedError(111, "refused"), errors.KubeUnavailable),
        (api_error(418, "Teapot"), errors.KubeError),
    ],
)
def test_translate(err: BaseException, expected: type[errors.KubeError]) -> None:
    translated = errors.translate(err)
    assert type(translated) is expected


def test_translated_errors_carry_status_reason_and_message(
    api: FakeApi, client: KubeClient
) -> None:
    api.answers = [api_error(409, "Conflict", "the object has been modified")]
    with pytest.raises(errors.KubeConflict) as caught:
        client.get(CONFIG_MAPS, "cm", namespace="ns")
    assert (caught.value.status, caught.value.reason) == (409, "Conflict")
    assert "modified" in str(caught.value)


def test_a_watch_error_event_becomes_the_matching_exception() -> None:
    gone = errors.from_status(
        {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    )
    assert isinstance(gone, errors.KubeGone) and gone.status == 410


def test_with_timeout_shares_the_connection(api: FakeApi, client: KubeClient) -> None:
    short = client.with_timeout(2)
    short.get(NODES, "n1")
    assert api.last["_request_timeout"] == 2 and client.timeout == 30


class FakeStreamResponse:
    """A urllib3 response carrying watch lines, as `call_api(_preload_content=False)` gives."""

    def __init__(self, *events: dict[str, Any]) -> None:
        self.body = b"".join(json.dumps(event).encode() + b"\n" for event in events)
        self.closed = False

    def stream(self, amt: Any = None, decode_content: bool = False) -> Any:
        yield self.body

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        pass


def test_watch_yields_events_and_bookmarks_with_a_resumable_request(
    api: FakeApi, client: KubeClient
) -> None:
    cm = {"kind": "ConfigMap", "metadata": {"name": "a", "resourceVersion": "6"}}
    mark = {"kind": "ConfigMap", "metadata": {"resourceVersion": "9"}}
    api.answers = [
        FakeStreamResponse({"type": "ADDED", "object": cm}, {"type": "BOOKMARK", "object": mark})
    ]
    stream = client.watch(CONFIG_MAPS, resource_version="5", namespace="ns", timeout_seconds=60)
    assert list(stream) == [{"type": "ADDED", "object": cm}, {"type": "BOOKMARK", "object": mark}]
    assert query(api.last) == {
        "watch": "true",
        "resourceVersion": "5",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "60",
    }
    assert api.last["_preload_content"] is False
    assert len(api.calls) == 1  # the server ended the watch; resuming is the informer's job


def test_a_watch_error_event_from_the_server_raises_kube_gone(
    api: FakeApi, client: KubeClient
) -> None:
    status = {
        "kind": "Status",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version: 1 (180)",
    }
    api.answers = [FakeStreamResponse({"type": "ERROR", "object": status})]
    with pytest.raises(errors.KubeGone) as caught:
        list(client.watch(CONFIG_MAPS, resource_version="1"))
    assert caught.value.reason == "Expired"
