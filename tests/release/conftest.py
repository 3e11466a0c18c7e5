"""The release, made as `make release` makes it, and a local OCI registry to serve it.

`release` runs `release.build.make_release` on the image `image/build.sh` builds (the image
tests' session fixture: built once, or found up to date). `registry` is the Distribution
registry built from Go modules by the toolchain (`REGISTRY` in versions.py), on a free port
of 127.0.0.1 over plain HTTP, its storage in the test's temporary directory: podman reaches
it with `--tls-verify=false`, helm with `--plain-http`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devenv.processes import Supervised, free_port
from release.build import Release, make_release
from tests.image.conftest import PODMAN
from tests.image.conftest import image as image  # the same session fixture: one build

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(__file__).parent in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.release)


def podman(*args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(PODMAN), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"podman {' '.join(args[:2])} failed: {done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="session")
def release(image: str, tools: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    out = tmp_path_factory.mktemp("dist")
    made = make_release(REPO, out, image=image, helm=tools["helm"].binary, podman=PODMAN)
    sizes = ", ".join(
        f"{p.name} {p.stat().st_size / 1024 / 1024:.1f} MiB"
        for p in (made.chart, made.archive, made.sbom)
    )
    print(f"\n[release] {sizes}; seconds {made.seconds}", file=sys.stderr)
    yield made
    # The archive is the image's size: pytest keeps its last runs' directories.
    made.archive.unlink(missing_ok=True)


class Registry:
    def __init__(self, address: str, log: Path) -> None:
        self.address = address
        self.log = log

    def get(self, path: str, accept: str = "") -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(f"http://{self.address}{path}", method="GET")
        if accept:
            request.add_header("Accept", accept)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers.items()), answer.read()


@pytest.fixture(scope="session")
def registry(tools: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    work = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{free_port()}"
    config = work / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: info\n  formatter: text\n"
        f"storage:\n  filesystem:\n    rootdirectory: {work / 'storage'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: {address}\n  secret: {secrets.token_hex(16)}\n"
    )
    process = Supervised(
        "registry",
        [str(tools["registry"].binary), "serve", str(config)],
        work / "registry.log",
        env=dict(os.environ),
    )
    served = Registry(address, work / "registry.log")

    def answers() -> bool:
        return served.get("/v2/")[0] == 200

    started = time.monotonic()
    process.wait_ready(answers, 30, "GET /v2/ answers 200")
    print(f"\n[registry] {address} ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
    yield served
    process.stop()
    shutil.rmtree(work / "storage", ignore_errors=True)
