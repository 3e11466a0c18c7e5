"""Shared pytest wiring: markers by directory, and the real parts as session fixtures.

Unit tests start nothing. Integration and e2e tests share one control plane (etcd +
kube-apiserver) and one EC2 emulator per session, because starting them costs seconds; each
test gets clean state instead (its own namespace, an emulator reset, no leftover pools or
nodes). The Kueue manager is started only when an e2e test first asks for it. Every process
is stopped at session end, and by an atexit hook if the session dies.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.toolchain.versions import LATE_BUILT, TOOLS_BY_NAME

# Shared fixture modules, registered here once so pytest rewrites their asserts.
pytest_plugins = [
    "tests.integration.conftest_emulator",
    "tests.integration.conftest_kube",
    "tests.integration.controller_harness",
    "tests.support.informer_fixtures",
]

_MARKER_BY_DIR = {"unit": "unit", "integration": "integration", "e2e": "e2e"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).parts
        for directory, marker in _MARKER_BY_DIR.items():
            if directory in parts and not item.get_closest_marker(marker):
                item.add_marker(getattr(pytest.mark, marker))
    # The Kueue manager, once an e2e test starts it, acts on every queued Job in the shared
    # control plane, including those of suites that play Kueue's part themselves. So e2e
    # runs last; the sort is stable, so order within each suite is kept. Under pytest-xdist
    # (`make test`) each worker has its own control plane and takes whole files in this
    # order (`--dist loadfile --no-loadscope-reorder`; xdist's default reorder would send
    # the largest files, e2e ones among them, first).
    items.sort(key=lambda item: "e2e" in Path(str(item.fspath)).parts)


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("devenv")


class _Tools:
    """Resolves each pinned tool on first use, so a test resolves only what it needs.

    Building is the installer's job (`make tools`); a test run normally only finds the
    builds, but builds a missing one rather than fail.
    """

    def __init__(self) -> None:
        self._found: dict[str, object] = {}

    def __getitem__(self, name: str) -> object:
        if name not in self._found:
            from provisioner.toolchain import installer as toolchain

            if name in LATE_BUILT:
                # Built by `make late-builds` before the tests that need it run (their
                # marker, `late_tools`): a test never builds one, nor waits for another
                # process's build inside its own timeout.
                self._found[name] = toolchain.resolve(TOOLS_BY_NAME[name], build=False)
            else:
                self._found[name] = toolchain.ensure_all([name])[name]
        return self._found[name]


@pytest.fixture(scope="session")
def tools() -> _Tools:
    return _Tools()


@pytest.fixture(scope="session")
def control_plane(tools: _Tools, session_dir: Path) -> Iterator[object]:
    from devenv.controlplane import ControlPlane
    from provisioner.api.gang_class import load_class_crd
    from provisioner.api.gangnodepool import load_crd

    cp = ControlPlane(session_dir / "control-plane", tools["etcd"], tools["kube-apiserver"])  # type: ignore[arg-type]
    cp.start()
    cp.install_crds([load_crd(), load_class_crd()])
    yield cp
    cp.stop()


@pytest.fixture(scope="session")
def kube_api(control_plane: object) -> object:
    return control_plane.api_client()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def kueue(control_plane: object, tools: _Tools) -> Iterator[object]:
    from devenv.kueue_manager import KueueManager
    from devenv.training_crds import training_crds

    # As the embedded default: the training controllers' CRDs before Kueue, whose
    # integrations for JobSet, PyTorchJob and TrainJob then find their APIs at start.
    names = ("jobset", "training-operator", "trainer")
    control_plane.install_crds(training_crds({n: tools[n] for n in names}))  # type: ignore[attr-defined,misc]
    manager = KueueManager(control_plane, tools["kueue"])  # type: ignore[arg-type]
    manager.install_crds()
    manager.start()
    yield manager
    manager.stop()


@pytest.fixture(scope="session")
def training_controllers(control_plane: object, kueue: object, tools: _Tools) -> Iterator[object]:
    """The JobSet controller, the training operator, Trainer (with the ClusterTrainingRuntime
    `devenv.training_crds.TORCH_RUNTIME`) and mpi-operator, started once a test first asks
    for them."""
    from devenv.training_controllers import TrainingControllers

    names = ("jobset", "training-operator", "trainer", "mpi-operator")
    controllers = TrainingControllers(control_plane, {n: tools[n] for n in names})  # type: ignore[arg-type,misc]
    controllers.start()
    yield controllers
    controllers.stop()


@pytest.fixture(scope="session")
def kueue_crds(control_plane: object, tools: _Tools) -> list[str]:
    """Kueue's CRDs without its manager (integration tests that only read and write them)."""
    from devenv.kueue_manager import kueue_crds

    return control_plane.install_crds(kueue_crds(tools["kueue"]))  # type: ignore[attr-defined,arg-type,no-any-return]


@pytest.fixture
def namespace(kube_api: object) -> Iterator[str]:
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(kube_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def emulator_process(session_dir: Path) -> Iterator[object]:
    from devenv.emulator import EmulatorProcess

    process = EmulatorProcess(log_dir=session_dir / "emulator")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def emulator(emulator_process: object) -> object:
    """The session's EC2 emulator, reset to its seeded state for this test."""
    emulator_process.client.reset()  # type: ignore[attr-defined]
    return emulator_process


@pytest.fixture(scope="session")
def pulumi_tool(tools: _Tools) -> object:
    return tools["pulumi"]


@pytest.fixture(autouse=True)
def _aws_test_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # No test may ever reach a real AWS account.
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
