"""The one place where the versions of the tools the project builds are pinned.

Read by the tool installer (`atomic-gang tools`), the Dockerfile's build stage and the
README. Each tool is built from its Go module because no download site is reachable where
this project is developed and tested; a user with a matching binary on PATH skips the build.

Why these versions:
- Pulumi 3.260.0: the newest release that both PyPI (the Python SDK) and the Go module
  proxy (`github.com/pulumi/pulumi/pkg/v3`) serve; the SDK and CLI must be one release.
- Kubernetes 1.36.3 and etcd 3.6.16: the newest 1.36 and 3.6 patch releases.
- Kueue 0.19.2: the newest 0.19 release; its CRDs and webhook manifests come from the same
  module so the manager and its API always agree.
- Helm 3.22.0: the newest Helm 3 release; the chart is `apiVersion: v2`. Stamped with its
  client-go's Kubernetes version as Helm's release build does (build tag `kube1.37`).
- JobSet 0.12.0, Kubeflow training operator 1.9.3 (PyTorchJob) and Kubeflow Trainer 2.2.1
  (TrainJob): the releases Kueue 0.19.2's go.mod pins, so the CRDs installed are the APIs
  Kueue's JobSet, PyTorchJob and TrainJob integrations were compiled against. Issue #31 named
  older ones (0.10.1, 1.8.1, 2.0.0), but Kueue 0.19's TrainJob integration writes
  `spec.runtimePatches`, a field Trainer 2.0.0's TrainJob CRD does not have, so those would
  refuse every queued TrainJob. Trainer 2.2.1 is itself compiled against JobSet 0.12.0.
- mpi-operator 0.8.2 (MPIJob, kubeflow.org/v2beta1): the release Kueue 0.19.2's go.mod pins,
  for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.toolchain.patches import HEALTH_ADDRESS, LAZY_WORD_LISTS, ModulePatch

GO_MIN_VERSION = (1, 26)


@dataclass(frozen=True)
class GoTool:
    """How to build one binary from a Go module, and how to recognise a matching one."""

    name: str
    version: str
    module: str
    package: str
    binary: str
    # Version for modules the upstream go.mod replaces with a relative path (monorepo
    # siblings such as Kubernetes' staging repos): a build outside the repository must take
    # the published release of each sibling instead.
    sibling_version: str
    ldflags: tuple[str, ...] = ()
    version_args: tuple[str, ...] = ("--version",)
    version_marker: str = ""
    # Directories copied out of the module into the tool's cache directory.
    assets: tuple[str, ...] = ()
    # Whether a binary found on PATH may be used (only when nothing else must match it).
    reuse_from_path: bool = True
    extra_requires: dict[str, str] = field(default_factory=dict)
    # Part of the cache key beside the version: changed whenever the build itself changes
    # (new ldflags, a new patch), so a cache holding the older build of the same release is
    # not reused.
    build_tag: str = ""
    # Dependencies built from a patched copy of their source (`patches`).
    patches: tuple[ModulePatch, ...] = ()
    # The module version to fetch when the proxy serves the release only as a pseudo-version
    # of its commit (a tag in a sub-directory module); empty: `version`.
    module_version: str = ""
    # Package directories (relative to the module) whose `go generate` writes files the
    # build embeds. The tool is then built from a writable copy of its module, generated
    # with VERSION set to the release without its "v" (as the upstream Makefile does).
    generate: tuple[str, ...] = ()


PULUMI = GoTool(
    name="pulumi",
    version="v3.260.0",
    module="github.com/pulumi/pulumi/pkg/v3",
    package="github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",
    binary="pulumi",
    sibling_version="v3.260.0",
    # The Python SDK refuses a CLI whose reported version is older than itself; a plain
    # `go build` reports v0.0.0, so the release is stamped in.
    ldflags=("-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v3.260.0",),
    version_args=("version",),
    version_marker="v3.260.0",
    extra_requires={"github.com/pulumi/pulumi/sdk/v3": "v3.260.0"},
    # Every stack operation starts the CLI; this halves what a start costs (`patches`).
    patches=LAZY_WORD_LISTS,
    build_tag="lazy-wordlists",
)

KUBE_APISERVER = GoTool(
    name="kube-apiserver",
    version="v1.36.3",
    module="k8s.io/kubernetes",
    package="k8s.io/kubernetes/cmd/kube-apiserver",
    binary="kube-apiserver",
    sibling_version="v0.36.3",
    ldflags=(
        "-X k8s.io/component-base/version.gitVersion=v1.36.3",
        "-X k8s.io/component-base/version.gitMajor=1",
        "-X k8s.io/component-base/version.gitMinor=36",
        "-X k8s.io/component-base/version/verflag.programName=kube-apiserver",
    ),
    version_marker="v1.36.3",
)

ETCD = GoTool(
    name="etcd",
    version="v3.6.16",
    module="go.etcd.io/etcd/server/v3",
    package="go.etcd.io/etcd/server/v3",
    binary="etcd",
    sibling_version="v3.6.16",
    version_marker="3.6.16",
)

KUEUE = GoTool(
    name="kueue",
    version="v0.19.2",
    module="sigs.k8s.io/kueue",
    package="sigs.k8s.io/kueue/cmd/kueue",
    binary="kueue-manager",
    sibling_version="v0.19.2",
    ldflags=("-X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.19.2",),
    version_args=(),
    version_marker="",
    assets=("config/components/crd/bases", "config/components/webhook"),
    # The CRDs and webhook manifests must come from the same release as the manager, so a
    # stray binary on PATH is never taken.
    reuse_from_path=False,
)

HELM = GoTool(
    name="helm",
    version="v3.22.0",
    module="helm.sh/helm/v3",
    package="helm.sh/helm/v3/cmd/helm",
    binary="helm",
    sibling_version="v3.22.0",
    # Helm's own release build stamps the Kubernetes version of its client-go (v0.37 in
    # 3.22.0) as the default for `helm template` and `helm lint`; a plain `go build` leaves
    # v1.20.0, which fails the chart's kubeVersion unless --kube-version is passed.
    ldflags=(
        "-X helm.sh/helm/v3/internal/version.version=v3.22.0",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37",
    ),
    version_args=("version", "--short"),
    version_marker="v3.22.0",
    build_tag="kube1.37",
)

# The training-job controllers gang jobs run under (JobSet, PyTorchJob, TrainJob, MPIJob), at the
# versions Kueue 0.19.2's go.mod pins (see the module docstring). Like Kueue, each takes its
# CRDs and webhook manifests from the module that built it, so a binary on PATH is never
# taken. The wrapper module builds them the same way as the others, one code path for all.

JOBSET = GoTool(
    name="jobset",
    version="v0.12.0",
    module="sigs.k8s.io/jobset",
    package="sigs.k8s.io/jobset",  # the manager's main package is the module root
    binary="jobset-manager",
    sibling_version="v0.12.0",
    ldflags=("-X sigs.k8s.io/jobset/pkg/version.GitVersion=v0.12.0",),
    version_args=(),
    assets=("config/components/crd/bases", "config/components/webhook"),
    reuse_from_path=False,
)

TRAINING_OPERATOR = GoTool(
    name="training-operator",
    version="v1.9.3",
    module="github.com/kubeflow/training-operator",
    package="github.com/kubeflow/training-operator/cmd/training-operator.v1",
    binary="training-operator",
    sibling_version="v1.9.3",
    version_args=(),
    assets=("manifests/base/crds", "manifests/base/webhook"),
    reuse_from_path=False,
)

TRAINER = GoTool(
    name="trainer",
    version="v2.2.1",
    module="github.com/kubeflow/trainer/v2",
    package="github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager",
    binary="trainer-controller-manager",
    sibling_version="v2.2.1",
    version_args=(),
    assets=("manifests/base/crds", "manifests/base/webhook"),
    reuse_from_path=False,
)

# mpi-operator v2 (MPIJob: a launcher Job and worker pods). Its CRD sits beside the
# deployment manifests; it serves no webhook.
MPI_OPERATOR = GoTool(
    name="mpi-operator",
    version="v0.8.2",
    module="github.com/kubeflow/mpi-operator",
    package="github.com/kubeflow/mpi-operator/cmd/mpi-operator",
    binary="mpi-operator",
    sibling_version="v0.8.2",
    version_args=(),
    assets=("manifests/base",),
    reuse_from_path=False,
    patches=HEALTH_ADDRESS,
    build_tag="health-address",
)

TRAINING_TOOLS: tuple[GoTool, ...] = (JOBSET, TRAINING_OPERATOR, TRAINER, MPI_OPERATOR)
# The default set (`make tools`): the embedded default always installs the training
# controllers' CRDs before Kueue starts (Kueue's integrations for them are enabled), and the
# e2e tests of JobSet, PyTorchJob, TrainJob and MPIJob gangs run the controllers themselves.
ALL_TOOLS: tuple[GoTool, ...] = (ETCD, KUBE_APISERVER, PULUMI, KUEUE, HELM, *TRAINING_TOOLS)
TOOLS_BY_NAME = {tool.name: tool for tool in ALL_TOOLS}

# kubectl, for the tests that drive the product as a user's kubectl does (`kubectl wait
# --for=condition=Ready gnp/<pool>`): from the same Kubernetes release as the apiserver, so
# the client and the server it talks to are one release. Built only when asked for
# (`atomic-gang tools --only kubectl`, or a test that needs it), like the training tools.
KUBECTL = GoTool(
    name="kubectl",
    version=KUBE_APISERVER.version,
    module="k8s.io/kubernetes",
    package="k8s.io/kubernetes/cmd/kubectl",
    binary="kubectl",
    sibling_version=KUBE_APISERVER.sibling_version,
    ldflags=(
        "-X k8s.io/client-go/pkg/version.gitVersion=v1.36.3",
        "-X k8s.io/client-go/pkg/version.gitMajor=1",
        "-X k8s.io/client-go/pkg/version.gitMinor=36",
        "-X k8s.io/component-base/version.gitVersion=v1.36.3",
        "-X k8s.io/component-base/version.gitMajor=1",
        "-X k8s.io/component-base/version.gitMinor=36",
    ),
    version_args=("version", "--client"),
    version_marker="v1.36.3",
)
TEST_TOOLS: tuple[GoTool, ...] = (KUBECTL,)
TOOLS_BY_NAME[KUBECTL.name] = KUBECTL

# The OCI registry the release test pushes the image and the chart to, and pulls and installs
# them back from: the CNCF Distribution registry (the one most registries are built on), its
# `cmd/registry`, v3.1.2 the newest release the Go module proxy serves. Only the release test
# needs it, so it is built on request like kubectl (`atomic-gang tools --only registry`).
REGISTRY = GoTool(
    name="registry",
    version="v3.1.2",
    module="github.com/distribution/distribution/v3",
    package="github.com/distribution/distribution/v3/cmd/registry",
    binary="registry",
    sibling_version="v3.1.2",
    # A plain `go build` reports "v3.1.2+unknown"; the release's own build stamps the tag.
    ldflags=("-X github.com/distribution/distribution/v3/version.version=v3.1.2",),
    version_marker="github.com/distribution/distribution/v3 v3.1.2",
)
TEST_TOOLS += (REGISTRY,)
TOOLS_BY_NAME[REGISTRY.name] = REGISTRY

# The Kubernetes provider of Pulumi (`pulumi-resource-kubernetes`), for the test that runs the
# bootstrap's Kubernetes half (`infra/`: the Kueue objects and the Helm release) through the
# real CLI and provider (`devenv/bootstrap_kubernetes.py`); the controller never needs it.
# The proxy serves the provider module only at pseudo-versions: this one is the commit of
# the v4.25.0 tag. Its main package embeds a schema that upstream's `generate.go` writes
# (`generate`), its go.mod replaces the Kubernetes SDK module with `../sdk` (the SDK's own
# v4.25.0 release instead), and the Pulumi modules are the v3.215.0 its go.mod asks for (the
# CLI's v3.260.0 does not compile with it). Built on request (`make test` builds it beside
# its slow suites, `late-builds`).
# The pulumi_kubernetes Python SDK is newer (4.34.2, constraints.txt): the engine warns that
# it expected a plugin >= 4.34.2, and the bootstrap's objects and release work with this one
# (tests/e2e/test_bootstrap_kubernetes.py).
# The pulumi-aws provider is not served by the Go module proxy at all: the bootstrap's AWS
# half is tested under Pulumi's mocks only.
PULUMI_KUBERNETES = GoTool(
    name="pulumi-kubernetes",
    version="v4.25.0",
    module_version="v4.0.0-20260115033456-f47bc2d6f199",
    module="github.com/pulumi/pulumi-kubernetes/provider/v4",
    package="github.com/pulumi/pulumi-kubernetes/provider/v4/cmd/pulumi-resource-kubernetes",
    binary="pulumi-resource-kubernetes",
    sibling_version="v4.25.0",
    # Upstream's release build stamps the bare version; the engine reads it back through the
    # plugin's GetPluginInfo.
    ldflags=("-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=4.25.0",),
    version_args=(),
    generate=("cmd/pulumi-resource-kubernetes",),
    # A plugin binary has no version flag to check one found on PATH by.
    reuse_from_path=False,
)
TEST_TOOLS += (PULUMI_KUBERNETES,)
TOOLS_BY_NAME[PULUMI_KUBERNETES.name] = PULUMI_KUBERNETES

# The tools `make late-builds` makes beside the slow suites; the tests that need one
# (`late_tools`) run after that build, never inside it.
LATE_BUILT: tuple[str, ...] = (PULUMI_KUBERNETES.name, REGISTRY.name)
