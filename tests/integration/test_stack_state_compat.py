"""Stack state written by an older controller still loads, updates and destroys.

Dynamic providers are pickled by module path (``stacks.<module>.<Provider>``) into every
resource's state, and Pulumi unpickles the *old* provider to update or delete a resource.
So a move or rename under ``stacks/`` can strand every existing pool. This test writes a
pool's stack with the code of commit ``OLD_COMMIT`` (the tree before the stack boundary
was closed, taken with `git archive` and run in a child process, its provider host
included), then drives that stack with the code under test through its port: read the
outputs, replace the recorded gang (which deletes the old InstanceSet with the old
pickled provider), and destroy.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from provisioner.controllers.metrics import ControllerMetrics, StackMetrics
from provisioner.pulumi_driver import StackDriver
from provisioner.pulumi_driver.port import PoolStacks
from tests.integration.test_stack_support import (
    PASSPHRASE,
    AwsWorld,
    make_settings,
    pulumi_root,
    stack_ls,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
OLD_COMMIT = "200e8cb"
POOL = "from-the-old-code"

OLD_WRITER = """
import dataclasses, json, logging, sys
from pathlib import Path
from provisioner.api.settings import Settings
from provisioner.pulumi_driver import StackDriver
from stacks.spec import PoolSpec
import stacks
assert stacks.__file__.startswith(sys.argv[2]), stacks.__file__
config = json.loads(sys.argv[1])
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
driver = StackDriver(
    Settings.model_validate(config["settings"]), Path(config["pulumi_root"]),
    logging.getLogger("old"),
)
# Fields the new code added are unknown to the old one: it gets what it had.
known = {f.name for f in dataclasses.fields(PoolSpec)}
driver.prepare(PoolSpec.from_dict({k: v for k, v in config["spec"].items() if k in known}))
driver.record_instance_set(config["pool"], "gen-0", config["ids"])
"""


def _old_tree(into: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is needed to take the old code")
    archive = into / "old.tar"
    taken = subprocess.run(
        ["git", "archive", "--format=tar", "-o", str(archive), OLD_COMMIT, "provisioner", "stacks"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if taken.returncode != 0:
        pytest.skip(f"commit {OLD_COMMIT} is not in this clone: {taken.stderr.strip()}")
    tree = into / "old"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="tar")
    return tree


def _providers_in(state_file: Path) -> set[str]:
    """The module paths the state's pickled providers name (as text inside the pickle)."""
    latest = json.loads(state_file.read_text())["checkpoint"]["latest"]
    found = set()
    for resource in latest.get("resources") or ():
        blob = (resource.get("inputs") or {}).get("__provider")
        if blob:
            found.add(resource["type"])
    return found


@pytest.fixture
def world(emulator: Any, monkeypatch: pytest.MonkeyPatch) -> AwsWorld:
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", PASSPHRASE)
    return AwsWorld(emulator).ready()


def test_a_stack_written_by_the_old_code_is_updated_and_destroyed_by_the_new(
    world: AwsWorld, tmp_path: Path, pulumi_tool: Any
) -> None:
    old = _old_tree(tmp_path)
    state = tmp_path / "state"
    settings = make_settings(world, state)
    spec = world.spec(POOL)
    new = PoolStacks(
        StackDriver(settings, pulumi_root(pulumi_tool), logging.getLogger("new")),
        StackMetrics(ControllerMetrics()),
    )

    # The gang the old controller launched and recorded, from a template made for it here
    # (the old code makes its own in the child; this one only gives EC2 something to launch).
    scratch = world.spec("scratch")
    template = new.prepare(scratch).outputs.launch_template_id
    first = world.launch(POOL, template, 2)
    new.destroy("scratch")

    config = {
        # Only what the test set: settings added since have defaults the old code rejects.
        "settings": settings.model_dump(mode="json", exclude_unset=True),
        "pulumi_root": str(pulumi_root(pulumi_tool)),
        "spec": spec.to_dict(),
        "pool": POOL,
        "ids": first,
    }
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(old)
    written = subprocess.run(
        [sys.executable, "-c", OLD_WRITER, json.dumps(config), str(old)],
        cwd=old,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert written.returncode == 0, written.stderr[-4000:]
    state_file = state / ".pulumi" / "stacks" / settings.pulumi.project_name / f"{POOL}.json"
    assert "pulumi-python:dynamic/atomicgang:InstanceSet" in _providers_in(state_file)

    # A fresh controller on the new code reads what the old one wrote...
    fresh = PoolStacks(
        StackDriver(settings, pulumi_root(pulumi_tool), logging.getLogger("new")),
        StackMetrics(ControllerMetrics()),
    )
    outputs = fresh.outputs(POOL)
    assert outputs is not None and outputs.instance_ids == tuple(first)
    assert fresh.prepare(spec).outputs.launch_template_id == outputs.launch_template_id

    # ...updates it: a new gang replaces the old record, whose delete (run by the old
    # pickled InstanceSet provider) terminates the first gang.
    second = world.launch(POOL, outputs.launch_template_id, 2, generation=1)
    fresh.remove_instance_set(POOL)
    assert world.live_instances(POOL) == sorted(second)
    fresh.record_instance_set(POOL, "gen-1", second)
    recorded = fresh.outputs(POOL)
    assert recorded is not None and recorded.instance_ids == tuple(second)

    # ...and destroys it: nothing of the pool is left, and no stack is listed.
    fresh.destroy(POOL)
    assert world.live_instances(POOL) == []
    assert world.launch_templates() == []
    assert fresh.outputs(POOL) is None
    home = tmp_path / "operator-home"
    assert stack_ls(fresh.driver.operator_command(), Path(pulumi_tool.binary), home) == []
