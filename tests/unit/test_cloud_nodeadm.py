"""nodeadm user data: rendering, the round trip, and refusals the node simulator relies on."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from provisioner.api import constants as c
from provisioner.cloud.errors import InvalidUserDataError
from provisioner.cloud.nodeadm import Taint, parse_user_data, render_user_data

pytestmark = pytest.mark.unit

ARGS: dict[str, Any] = {
    "cluster_name": "gang-cluster",
    "api_server_endpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
    "certificate_authority": "LS0tLS1CRUdJTg==",
    "service_cidr": "172.20.0.0/16",
    "pool": "pretrain",
    "group": "gen-4",
}


def test_round_trip() -> None:
    text = render_user_data(**ARGS)
    view = parse_user_data(text)
    assert view.cluster_name == "gang-cluster"
    assert view.api_server_endpoint == ARGS["api_server_endpoint"]
    assert view.certificate_authority == ARGS["certificate_authority"]
    assert view.service_cidr == "172.20.0.0/16"
    assert dict(view.labels) == {c.POOL_LABEL: "pretrain", c.GROUP_LABEL: "gen-4"}
    assert view.taints == (Taint(c.GANG_TAINT_KEY, "pretrain", "NoSchedule"),)
    # What EC2 hands back (base64) and bytes parse the same.
    assert parse_user_data(base64.b64encode(text.encode())) == view
    assert parse_user_data(base64.b64encode(text.encode()).decode()) == view


def test_rendered_document_is_mime_multipart_with_a_nodeconfig_part() -> None:
    text = render_user_data(**ARGS)
    assert "Content-Type: multipart/mixed; boundary=" in text
    assert "Content-Type: application/node.eks.aws" in text
    assert "apiVersion: node.eks.aws/v1alpha1" in text and "kind: NodeConfig" in text
    assert "--node-labels=atomic-gang.k8s.aws/pool=pretrain,atomic-gang.k8s.aws/group=gen-4" in text
    assert "--register-with-taints=atomic-gang.k8s.aws/gang=pretrain:NoSchedule" in text
    # Same input, same bytes: the launch template does not churn.
    assert text == render_user_data(**ARGS)
    assert text != render_user_data(**{**ARGS, "group": "gen-5"})


def test_extra_labels_and_flags_keep_the_gang_labels_on_top() -> None:
    text = render_user_data(
        **ARGS,
        extra_labels={"team": "ml", c.POOL_LABEL: "spoofed"},
        extra_kubelet_flags=["--max-pods=110"],
    )
    view = parse_user_data(text)
    assert view.labels == {"team": "ml", c.POOL_LABEL: "pretrain", c.GROUP_LABEL: "gen-4"}
    assert "--max-pods=110" in view.kubelet_flags


def mime(part: str, content_type: str = "application/node.eks.aws") -> str:
    return (
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n'
        f"--B\nContent-Type: {content_type}\n\n{part}\n--B--\n"
    )


GOOD_SPEC = """
spec:
  cluster:
    name: c
    apiServerEndpoint: https://x
    certificateAuthority: Q0E=
    cidr: 10.0.0.0/16
"""


def test_two_nodeconfig_documents_merge_as_nodeadm_merges() -> None:
    part = (
        "---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig"
        + GOOD_SPEC
        + "---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n"
        "    flags: ['--node-labels=a=b']\n"
    )
    view = parse_user_data(mime(part))
    assert view.cluster_name == "c" and view.labels == {"a": "b"} and view.taints == ()


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        ("#!/bin/bash\necho hi\n", "neither a MIME document"),
        ("", "it is empty"),
        (base64.b64encode(b"just text").decode(), "not a MIME multipart document"),
        (b"\xff\xfe", "not UTF-8"),
        ("Content-Type: text/plain\n\nhello\n", "not multipart/mixed"),
        (mime("echo hi", "text/x-shellscript"), "no part of type application/node.eks.aws"),
        (mime("key: [unclosed"), "not YAML"),
        (mime("- a list"), "other than a mapping"),
        (mime("apiVersion: v1\nkind: NodeConfig" + GOOD_SPEC), "is not node.eks.aws"),
        (mime("apiVersion: node.eks.aws/v1alpha1\nkind: Pod" + GOOD_SPEC), "kind 'Pod'"),
        (
            mime("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}"),
            "spec.cluster.name, spec.cluster.apiServerEndpoint",
        ),
        (
            mime(
                "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig"
                + GOOD_SPEC.replace("https://x", "http://x")
            ),
            "https://",
        ),
        (
            mime(
                "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig"
                + GOOD_SPEC
                + "  kubelet:\n    flags: ['--register-with-taints=k=v:Sometimes']\n"
            ),
            "taint",
        ),
        (
            mime(
                "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig"
                + GOOD_SPEC
                + "  kubelet:\n    flags: ['--node-labels=novalue']\n"
            ),
            "not key=value",
        ),
        (
            mime(
                "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig"
                + GOOD_SPEC
                + "  kubelet:\n    flags: 'not-a-list'\n"
            ),
            "list of strings",
        ),
    ],
)
def test_parser_refuses_anything_that_is_not_a_nodeconfig(
    data: str | bytes, complaint: str
) -> None:
    with pytest.raises(InvalidUserDataError, match="not a valid nodeadm NodeConfig") as caught:
        parse_user_data(data)
    assert complaint in str(caught.value)
