"""kubectl is pinned to the apiserver's release and built only on request."""

from __future__ import annotations

from provisioner.toolchain.installer import wrapper_go_mod
from provisioner.toolchain.versions import ALL_TOOLS, KUBE_APISERVER, KUBECTL, TOOLS_BY_NAME


def test_kubectl_is_the_apiservers_release_from_the_same_module() -> None:
    assert (KUBECTL.module, KUBECTL.version) == (KUBE_APISERVER.module, KUBE_APISERVER.version)
    assert KUBECTL.sibling_version == KUBE_APISERVER.sibling_version
    assert KUBECTL.version_marker == KUBE_APISERVER.version
    assert all(KUBE_APISERVER.version in flag for flag in KUBECTL.ldflags if "gitVersion" in flag)
    # Kubernetes' staging repos are replaced by their published release of the same version.
    go_mod = wrapper_go_mod(KUBECTL, "replace k8s.io/kubectl => ./staging/src/k8s.io/kubectl\n")
    assert f"k8s.io/kubectl => k8s.io/kubectl {KUBE_APISERVER.sibling_version}" in go_mod


def test_kubectl_is_built_on_request_only() -> None:
    assert TOOLS_BY_NAME["kubectl"] is KUBECTL
    assert KUBECTL not in ALL_TOOLS
