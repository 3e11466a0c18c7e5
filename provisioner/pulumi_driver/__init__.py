"""The stack driver: the only package that imports the Pulumi Automation API (DESIGN §5).

- `driver`: `StackDriver`, one project per cluster and one stack per pool; what it hands
  back (`StackResult`, `RecoveryReport`, `StackSummary`) is in `reports`.
- `stack_backend`: which stacks the backend holds, each pool's stack handle and outputs.
- `recovery`: stale locks and interrupted operations, repaired on becoming leader.
- `errors`: `StackError` and its named reasons.
- `oplog`: `StackOperation`, the marker-and-result record of each operation.
- `pending`, `locks`, `statefile`: crash recovery of pending operations, lock staleness,
  cheap state reads.
- `orphan_locks`: the stale lock of a stack a failed `stack init` left, removed from the
  backend (`pulumi cancel` needs a stack).
- `engine_log`: engine events into the controller's log.
- `cli_env`: where state lives and what each CLI process gets.
- `port`: `PoolStacks`, the one door the controllers use (spec in, outputs and a typed
  error out).

The per-pool program and its typed inputs and outputs live in the top-level `stacks`
package; the names a caller needs are re-exported here. They load on first use: the tool
installer imports this package only to find the launcher in `bin/`, and must not pay for
the Automation API, boto3 and the program to do so.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from provisioner.pulumi_driver.driver import StackDriver
    from provisioner.pulumi_driver.errors import StackError
    from provisioner.pulumi_driver.oplog import StackOperation
    from provisioner.pulumi_driver.reports import RecoveryReport, StackResult, StackSummary
    from stacks.outputs import PoolOutputs
    from stacks.spec import InstanceSetRecord, PoolSpec, pool_spec_for

_HOMES = {
    "RecoveryReport": "provisioner.pulumi_driver.reports",
    "StackDriver": "provisioner.pulumi_driver.driver",
    "StackResult": "provisioner.pulumi_driver.reports",
    "StackSummary": "provisioner.pulumi_driver.reports",
    "StackError": "provisioner.pulumi_driver.errors",
    "StackOperation": "provisioner.pulumi_driver.oplog",
    "PoolOutputs": "stacks.outputs",
    "InstanceSetRecord": "stacks.spec",
    "PoolSpec": "stacks.spec",
    "pool_spec_for": "stacks.spec",
}

__all__ = [
    "InstanceSetRecord",
    "PoolOutputs",
    "PoolSpec",
    "RecoveryReport",
    "StackDriver",
    "StackError",
    "StackOperation",
    "StackResult",
    "StackSummary",
    "pool_spec_for",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
