"""`KubeClient`: every request the product makes to the Kubernetes API.

Built once per process (from a kubeconfig or the in-cluster service account) around one
`kubernetes.client.ApiClient`, and handed to the informers, the leader elector, the status
writer and the event recorder. It speaks to any resource named by a `ResourceRef`, core or
custom, through the client's own `call_api` (the request path is the only thing
`CustomObjectsApi` fixes, to `/apis/{group}`; building it here lets the core group share
the code) and returns plain dicts, which controllers turn into models at their edge.

Writes are guarded by design: `patch`, `json_patch`, `patch_status`, `replace` and
`replace_status` require the resourceVersion the caller read and send it in the body, so
the apiserver answers 409 (`KubeConflict`) if anyone wrote since; `apply` is a server-side
apply under our field manager with `force` spelled out; `delete` takes the precondition
as a required keyword (None only when the caller means "whatever is there").
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from provisioner.api.constants import FIELD_MANAGER, JSON_PATCH_CONTENT_TYPE
from provisioner.kube.errors import KubeNotFound, translated
from provisioner.kube.resources import ResourceRef

__all__ = [
    "ApiTransport",
    "KubeClient",
    "ObjectList",
    "ResourceListWatch",
    "WatchStream",
    "preconditioned",
]

Obj = dict[str, Any]
# Query parameters in order (the type is spelled once: `KubeClient.list` shadows `list`).
Query = list[tuple[str, str]]
MERGE_PATCH = "application/merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
_OBJECT = {200: "object", 201: "object", 202: "object"}


class ApiTransport(Protocol):
    """What `KubeClient` uses of `kubernetes.client.ApiClient` (unit tests hand a fake)."""

    def call_api(self, resource_path: str, method: str, **kwargs: Any) -> Any: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ObjectList:
    """A consistent snapshot: the items and the resourceVersion to watch from."""

    items: list[Obj]
    resource_version: str


def preconditioned(patch: Mapping[str, Any], resource_version: str) -> Obj:
    """A copy of a merge patch that the apiserver applies only at `resource_version`."""
    if not resource_version:
        raise ValueError("a precondition needs the resourceVersion that was read")
    body = copy.deepcopy(dict(patch))
    body["metadata"] = {**(body.get("metadata") or {}), "resourceVersion": resource_version}
    return body


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


class WatchStream:
    """One watch request: iterate for `{"type", "object"}` events; `stop()` from any thread.

    Expiry arrives as `KubeGone` (raised) or, from injected streams, as an ERROR event; the
    informer handles both. The client's `Watch` does the line framing; retries are ours.
    """

    def __init__(self, opener: Callable[..., Any], **kwargs: Any) -> None:
        self._watch = k8s_watch.Watch(return_type="object")
        self._opener = opener
        self._kwargs = kwargs

    def __iter__(self) -> Iterator[Obj]:
        with translated():
            for event in self._watch.stream(self._opener, **self._kwargs):
                yield {"type": event["type"], "object": event["raw_object"]}

    def stop(self) -> None:
        self._watch.stop()


@dataclass(frozen=True)
class ResourceListWatch:
    """The list and watch an informer runs for one resource and selector."""

    client: KubeClient
    ref: ResourceRef
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None

    def list(self) -> ObjectList:
        return self.client.list(
            self.ref,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )

    def watch(self, resource_version: str, timeout_seconds: int) -> WatchStream:
        return self.client.watch(
            self.ref,
            resource_version=resource_version,
            namespace=self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=timeout_seconds,
        )


class KubeClient:
    """Typed calls on any `ResourceRef`; results and bodies are plain dicts."""

    def __init__(
        self, api: ApiTransport, *, field_manager: str = FIELD_MANAGER, timeout: float = 30.0
    ) -> None:
        self._api = api
        self.field_manager = field_manager
        self.timeout = timeout

    @classmethod
    def from_kubeconfig(cls, path: Path | str, *, context: str | None = None) -> KubeClient:
        return cls(k8s_config.new_client_from_config(config_file=str(path), context=context))

    @classmethod
    def in_cluster(cls) -> KubeClient:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
        return cls(k8s.ApiClient(configuration))

    @classmethod
    def from_environment(cls, *, context: str | None = None) -> tuple[KubeClient, str]:
        """As kubectl finds a cluster: $KUBECONFIG or ~/.kube/config's current context (or
        ``context``), else the pod's in-cluster account. Returns the client and where it
        came from."""
        try:
            _, current = k8s_config.list_kube_config_contexts()
        except k8s_config.ConfigException:
            if context:
                raise  # kubectl too: a named context needs a kubeconfig that holds it
            return cls.in_cluster(), "the in-cluster service account"
        name = context or current["name"]
        return cls(k8s_config.new_client_from_config(context=context)), f"context {name}"

    def with_timeout(self, seconds: float) -> KubeClient:
        """The same connection pool with a different per-request timeout."""
        clone = copy.copy(self)
        clone.timeout = seconds
        return clone

    @property
    def api_client(self) -> ApiTransport:
        return self._api

    def close(self) -> None:
        self._api.close()

    # -- reads ------------------------------------------------------------------------------
    def server_version(self) -> Obj:
        """The API server's /version: the cheapest call that proves it answers."""
        return self._call("GET", "/version")

    def get(self, ref: ResourceRef, name: str, *, namespace: str | None = None) -> Obj:
        return self._call("GET", ref.path(namespace, name))

    def serves(self, ref: ResourceRef) -> bool:
        """Whether the apiserver serves `ref` (its group-version's discovery document lists
        the plural): False for a CustomResourceDefinition that is not installed. Discovery
        is readable by every authenticated user (the system:discovery role)."""
        prefix = f"/apis/{ref.group}/{ref.version}" if ref.group else f"/api/{ref.version}"
        try:
            document = self._call("GET", prefix)
        except KubeNotFound:
            return False
        return any(r.get("name") == ref.plural for r in document.get("resources") or [])

    def list(
        self,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        page_size: int = 500,
    ) -> ObjectList:
        """All matching objects, page by page, as one snapshot (each item gets kind/apiVersion)."""
        query = _query(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            resourceVersion=resource_version,
            limit=page_size,
        )
        items: list[Obj] = []
        list_rv = ""
        token = ""
        while True:
            page = self._call("GET", ref.path(namespace), query + _query(**{"continue": token}))
            list_rv = list_rv or (page.get("metadata") or {}).get("resourceVersion", "")
            for item in page.get("items") or []:
                item.setdefault("apiVersion", ref.api_version)
                item.setdefault("kind", ref.kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return ObjectList(items, list_rv)

    def watch(
        self,
        ref: ResourceRef,
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> WatchStream:
        """A watch from `resource_version`, with bookmarks; the server ends it after the timeout."""
        path = ref.path(namespace)

        def open_watch(**kwargs: Any) -> Any:
            """Open the streaming GET (called by the client's Watch, which frames the lines)."""
            query = _query(
                watch="true",
                resourceVersion=kwargs.get("resource_version"),
                allowWatchBookmarks="true",
                labelSelector=kwargs.get("label_selector"),
                fieldSelector=kwargs.get("field_selector"),
                timeoutSeconds=kwargs.get("timeout_seconds"),
            )
            return self._api.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                response_types_map={},
                _return_http_data_only=True,
                _preload_content=False,
                # Ended by the server after timeout_seconds; the margin catches a dead peer.
                _request_timeout=(self.timeout, timeout_seconds + 30),
            )

        return WatchStream(
            open_watch,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
        )

    def list_watch(
        self,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> ResourceListWatch:
        """What an `Informer` needs to follow `ref`."""
        return ResourceListWatch(self, ref, namespace, label_selector, field_selector)

    # -- writes -----------------------------------------------------------------------------
    def create(self, ref: ResourceRef, body: Mapping[str, Any]) -> Obj:
        """Create; `KubeAlreadyExists` when the name is taken (usually an earlier pass)."""
        path = ref.path(_meta(body).get("namespace"))
        return self._call("POST", path, self._manager(), body=_typed(ref, body))

    def replace(self, ref: ResourceRef, body: Mapping[str, Any]) -> Obj:
        """PUT the whole object; its metadata.resourceVersion is the precondition."""
        return self._put(ref, body, "")

    def replace_status(self, ref: ResourceRef, body: Mapping[str, Any]) -> Obj:
        """PUT the status subresource; its metadata.resourceVersion is the precondition."""
        return self._put(ref, body, "status")

    def patch(
        self,
        ref: ResourceRef,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        resource_version: str,
        field_manager: str | None = None,
    ) -> Obj:
        """JSON merge patch of spec/metadata, applied only at `resource_version`."""
        return self._patch(
            ref,
            name,
            namespace,
            "",
            preconditioned(patch, resource_version),
            MERGE_PATCH,
            field_manager,
        )

    def patch_status(
        self,
        ref: ResourceRef,
        name: str,
        patch: Mapping[str, Any],
        *,
        namespace: str | None = None,
        resource_version: str,
        field_manager: str | None = None,
    ) -> Obj:
        """JSON merge patch of the status subresource, applied only at `resource_version`."""
        return self._patch(
            ref,
            name,
            namespace,
            "status",
            preconditioned(patch, resource_version),
            MERGE_PATCH,
            field_manager,
        )

    def json_patch(
        self,
        ref: ResourceRef,
        name: str,
        operations: Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        resource_version: str,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> Obj:
        """RFC 6902 patch; a trailing op pins resourceVersion, so a stale read gets 409."""
        if not resource_version:
            raise ValueError("a precondition needs the resourceVersion that was read")
        ops = [dict(op) for op in operations]
        ops.append(
            {"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version}
        )
        return self._patch(
            ref, name, namespace, subresource, ops, JSON_PATCH_CONTENT_TYPE, field_manager
        )

    def apply(
        self,
        ref: ResourceRef,
        body: Mapping[str, Any],
        *,
        force: bool,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> Obj:
        """Server-side apply of the fields in `body`, owned by our field manager."""
        meta = _meta(body)
        path = ref.path(meta.get("namespace"), meta["name"], subresource)
        query = self._manager(field_manager) + _query(force="true" if force else "false")
        return self._call("PATCH", path, query, body=_typed(ref, body), content_type=APPLY_PATCH)

    def delete(
        self,
        ref: ResourceRef,
        name: str,
        *,
        namespace: str | None = None,
        resource_version: str | None,
        propagation: str = "Background",
    ) -> None:
        """Delete; with `resource_version`, only if nobody wrote since it was read."""
        options: Obj = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        if resource_version is not None:
            options["preconditions"] = {"resourceVersion": resource_version}
        self._call("DELETE", ref.path(namespace, name), body=options)

    # -- plumbing ---------------------------------------------------------------------------
    def _put(self, ref: ResourceRef, body: Mapping[str, Any], subresource: str) -> Obj:
        meta = _meta(body)
        if not meta.get("resourceVersion"):
            raise ValueError(
                f"{ref.kind} {meta.get('name')!r}: a replace needs the "
                "resourceVersion that was read"
            )
        path = ref.path(meta.get("namespace"), meta["name"], subresource)
        return self._call("PUT", path, self._manager(), body=_typed(ref, body))

    def _patch(
        self,
        ref: ResourceRef,
        name: str,
        namespace: str | None,
        subresource: str,
        body: Any,
        content_type: str,
        field_manager: str | None,
    ) -> Obj:
        path = ref.path(namespace, name, subresource)
        return self._call(
            "PATCH", path, self._manager(field_manager), body=body, content_type=content_type
        )

    def _manager(self, field_manager: str | None = None) -> Query:
        return _query(fieldManager=field_manager or self.field_manager)

    def _call(
        self,
        method: str,
        path: str,
        query: Query | None = None,
        *,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        with translated():
            result = self._api.call_api(
                path,
                method,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                response_types_map=_OBJECT,
                _return_http_data_only=True,
                _preload_content=True,
                _request_timeout=self.timeout,
            )
        return result if isinstance(result, dict) else {}


def _typed(ref: ResourceRef, body: Mapping[str, Any]) -> Obj:
    """The body with apiVersion and kind filled in from the ref (the apiserver needs both)."""
    return {"apiVersion": ref.api_version, "kind": ref.kind, **body}


def _query(**params: Any) -> Query:
    return [(key, str(value)) for key, value in params.items() if value not in (None, "")]
