"""nodeadm user data for gang nodes: a MIME multipart document holding one NodeConfig.

Called by the GangNodePool reconciler (through ``Ec2Engine.render_user_data``) when it builds
the pool's launch template or launch spec, and by the node simulator (``parse_user_data``),
which registers a Node with the labels and taints a real node would get from this document.
Because the simulator believes what it parses, the parser refuses anything that nodeadm
would not accept as a NodeConfig, with a sentence saying what is wrong.

The boundary is derived from the content, so the same inputs always render the same bytes
and the launch template does not churn between updates.
"""

from __future__ import annotations

import base64
import binascii
import email
import email.policy
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from email.mime.multipart import MIMEMultipart
from typing import Any, Final

import yaml  # type: ignore[import-untyped,unused-ignore]

from provisioner.api import constants as c
from provisioner.cloud.errors import InvalidUserDataError

NODECONFIG_CONTENT_TYPE: Final = "application/node.eks.aws"
NODECONFIG_API_VERSIONS: Final = ("node.eks.aws/v1alpha1", "node.eks.aws/v1beta1")
NODECONFIG_KIND: Final = "NodeConfig"
TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeConfigView:
    """What a node learns from its user data."""

    cluster_name: str
    api_server_endpoint: str
    certificate_authority: str
    service_cidr: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    kubelet_flags: tuple[str, ...]


def gang_labels(pool: str, group: str | None) -> dict[str, str]:
    # A pool's launch template outlives its generations, so it carries no group; the
    # controller labels the joined nodes of the active set with their group instead.
    return {c.POOL_LABEL: pool, **({c.GROUP_LABEL: group} if group else {})}


def gang_taint(pool: str) -> Taint:
    return Taint(key=c.GANG_TAINT_KEY, value=pool, effect="NoSchedule")


def render_user_data(
    *,
    cluster_name: str,
    api_server_endpoint: str,
    certificate_authority: str,
    service_cidr: str,
    pool: str,
    group: str | None,
    extra_labels: Mapping[str, str] | None = None,
    extra_kubelet_flags: Sequence[str] = (),
) -> str:
    labels = {**(extra_labels or {}), **gang_labels(pool, group)}
    taint = gang_taint(pool)
    node_config: dict[str, Any] = {
        "apiVersion": NODECONFIG_API_VERSIONS[0],
        "kind": NODECONFIG_KIND,
        "spec": {
            "cluster": {
                "name": cluster_name,
                "apiServerEndpoint": api_server_endpoint,
                "certificateAuthority": certificate_authority,
                "cidr": service_cidr,
            },
            "kubelet": {
                "flags": [
                    "--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
                    f"--register-with-taints={taint.key}={taint.value}:{taint.effect}",
                    *extra_kubelet_flags,
                ]
            },
        },
    }
    document = "---\n" + yaml.safe_dump(node_config, sort_keys=False, width=1 << 16)
    boundary = "//atomic-gang-" + hashlib.sha256(document.encode()).hexdigest()[:16]
    outer = MIMEMultipart("mixed", boundary=boundary)
    part = Message()
    part["Content-Type"] = NODECONFIG_CONTENT_TYPE
    part.set_payload(document)
    outer.attach(part)
    return outer.as_string()


def _bad(why: str) -> InvalidUserDataError:
    return InvalidUserDataError(f"user data is not a valid nodeadm NodeConfig: {why}")


def _as_text(data: str | bytes) -> str:
    if isinstance(data, bytes):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _bad("it is not UTF-8 text") from exc
    return data


def _looks_like_mime(text: str) -> bool:
    head = text.lstrip()[:4096].lower()
    return head.startswith(("mime-version:", "content-type:")) or "\ncontent-type:" in head


def _unwrap(data: str | bytes) -> str:
    """Plain MIME text, taking off one layer of base64 (EC2 returns user data that way)."""
    text = _as_text(data)
    if not text.strip():
        raise _bad("it is empty")
    if _looks_like_mime(text):
        return text
    compact = "".join(text.split())
    try:
        decoded = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad("it is neither a MIME document nor base64 of one") from exc
    text = _as_text(decoded)
    if not _looks_like_mime(text):
        raise _bad("it is not a MIME multipart document (no Content-Type header)")
    return text


def _documents(text: str) -> list[dict[str, Any]]:
    message = email.message_from_string(text, policy=email.policy.compat32)
    if message.get_content_type() != "multipart/mixed" or not message.is_multipart():
        raise _bad(f"its Content-Type is {message.get_content_type()}, not multipart/mixed")
    docs: list[dict[str, Any]] = []
    for part in message.walk():
        if part.get_content_type() != NODECONFIG_CONTENT_TYPE:
            continue
        payload = part.get_payload(decode=True)
        if not isinstance(payload, bytes):
            raise _bad("a NodeConfig part has no content")
        try:
            loaded = list(yaml.safe_load_all(_as_text(payload)))
        except yaml.YAMLError as exc:
            raise _bad(f"a NodeConfig part is not YAML ({exc})") from exc
        for doc in loaded:
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise _bad("a NodeConfig part holds something other than a mapping")
            if doc.get("apiVersion") not in NODECONFIG_API_VERSIONS:
                raise _bad(f"apiVersion {doc.get('apiVersion')!r} is not node.eks.aws")
            if doc.get("kind") != NODECONFIG_KIND:
                raise _bad(f"kind {doc.get('kind')!r} is not {NODECONFIG_KIND}")
            docs.append(doc)
    if not docs:
        raise _bad(f"no part of type {NODECONFIG_CONTENT_TYPE} holds a NodeConfig")
    return docs


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(f"{where} must be a mapping")
    return value


def _parse_labels(value: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in filter(None, value.split(",")):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise _bad(f"node label {item!r} is not key=value")
        labels[key] = val
    return labels


def _parse_taints(value: str) -> list[Taint]:
    taints: list[Taint] = []
    for item in filter(None, value.split(",")):
        key_value, sep, effect = item.rpartition(":")
        if not sep or effect not in TAINT_EFFECTS:
            raise _bad(f"taint {item!r} is not key[=value]:{'|'.join(TAINT_EFFECTS)}")
        key, _, val = key_value.partition("=")
        if not key:
            raise _bad(f"taint {item!r} has no key")
        taints.append(Taint(key=key, value=val, effect=effect))
    return taints


def parse_user_data(data: str | bytes) -> NodeConfigView:
    """The NodeConfig in ``data`` (MIME text, or base64 of it), merged as nodeadm merges."""
    cluster: dict[str, Any] = {}
    flags: list[str] = []
    for doc in _documents(_unwrap(data)):
        spec = _mapping(doc.get("spec"), "spec")
        for key, val in _mapping(spec.get("cluster"), "spec.cluster").items():
            if val not in (None, ""):
                cluster[key] = val
        doc_flags = _mapping(spec.get("kubelet"), "spec.kubelet").get("flags") or []
        if not isinstance(doc_flags, list) or not all(isinstance(f, str) for f in doc_flags):
            raise _bad("spec.kubelet.flags must be a list of strings")
        flags.extend(doc_flags)
    required = ("name", "apiServerEndpoint", "certificateAuthority", "cidr")
    missing = [f"spec.cluster.{k}" for k in required if not isinstance(cluster.get(k), str)]
    if missing:
        raise _bad(f"{', '.join(missing)} missing")
    if not str(cluster["apiServerEndpoint"]).startswith("https://"):
        raise _bad("spec.cluster.apiServerEndpoint must be an https:// URL")
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    for flag in flags:
        name, _, value = flag.partition("=")
        if name == "--node-labels":
            labels.update(_parse_labels(value))
        elif name == "--register-with-taints":
            taints.extend(_parse_taints(value))
    return NodeConfigView(
        cluster_name=cluster["name"],
        api_server_endpoint=cluster["apiServerEndpoint"],
        certificate_authority=cluster["certificateAuthority"],
        service_cidr=cluster["cidr"],
        labels=labels,
        taints=tuple(taints),
        kubelet_flags=tuple(flags),
    )
