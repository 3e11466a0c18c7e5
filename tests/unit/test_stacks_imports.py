"""What the pool program and its providers import. The CLI starts a fresh Python provider
host for every engine run, and the host imports the provider modules by name: each module
they pull in is paid again on every `up` and `destroy`. Before issue #14 they pulled in all
of ``provisioner.api`` and ``provisioner.cloud`` through the package ``__init__``s
(pydantic, the settings loader, every model, the whole EC2 engine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

PROVIDERS = (
    "stacks.launch_template",
    "stacks.instance_profile",
    "stacks.access_entry",
    "stacks.placement_group",
    "stacks.instance_set",
)
# Heavy, and never needed by a provider or the program.
HEAVY = (
    "pydantic",
    "pydantic_settings",
    "provisioner.api.settings",
    "provisioner.api.settings_sources",
    "provisioner.api.shape",
    "provisioner.api.gangnodepool",
    "provisioner.api.workload",
    "provisioner.api.meta",
    "provisioner.cloud.engine",
    "provisioner.cloud.fleet",
    "provisioner.cloud.runinstances",
    "provisioner.cloud.nodeadm",
    "provisioner.pulumi_driver",
    "kubernetes",
)


def _imported(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "statement",
    [
        f"import {', '.join(PROVIDERS)}",
        "import stacks.pool_program",
        # The shared host (stackOperations.providerHost: shared) loads the SDK's servicer
        # once, then the providers as the engines send them.
        f"import stacks.provider_server as s; s.load_sdk_servicer(); import {', '.join(PROVIDERS)}",
    ],
    ids=["provider host", "program", "shared provider host"],
)
def test_the_program_and_its_providers_import_nothing_heavy(statement: str) -> None:
    loaded = _imported(statement)
    assert set(PROVIDERS) <= loaded or "pool_program" in statement
    heavy = sorted(m for m in loaded if m in HEAVY)
    assert heavy == [], (
        f"{statement!r} now imports {heavy}; find who with "
        f"`python -X importtime -c {statement!r}` and import the exact submodule instead "
        "(or move an annotation-only import under TYPE_CHECKING)"
    )


def test_the_check_can_fail() -> None:
    # Fed what the providers imported before: a name from the package, not its submodule.
    loaded = _imported("import stacks.spec; from provisioner.api import Settings")
    assert {"pydantic", "provisioner.api.settings"} <= {m for m in loaded if m in HEAVY}
