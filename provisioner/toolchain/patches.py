"""Source patches applied to a tool's dependencies before it is compiled.

Two patches. mpi-operator (`HEALTH_ADDRESS`) binds its health endpoint to :8080, fixed in
its source; two local environments on one machine would collide there, so the address is
read from `MPI_OPERATOR_HEALTH_ADDRESS` when set (upstream's port otherwise).

On the Pulumi CLI: the CLI links two copies of zxcvbn-go, a password
strength estimator (`github.com/nbutton23/zxcvbn-go` for `pulumi config set`'s "this looks
like a secret" warning, `github.com/ccojocar/zxcvbn-go` for `esc env set`). Each parses its
embedded word lists into dictionaries in a package `init`, so every CLI process spends
about 170 ms of CPU there before doing anything: half of what `pulumi version` costs, and
the controller starts one CLI process per stack operation. `LAZY_WORD_LISTS` moves that
parse to the first strength check (a `sync.Once` in front of `Omnimatch`, the library's one
entry point); nothing else changes. `tests/integration/test_pulumi_toolchain.py` shows the
warning still works on the built CLI.

A patch edits exact upstream text and raises `PatchError` when it is not found, so a version
bump that changes the patched files fails the build loudly instead of shipping unpatched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class PatchError(RuntimeError):
    """The upstream text a patch edits was not found: re-check the patch for this version."""


@dataclass(frozen=True)
class ModulePatch:
    """An edit to the source of one Go module the tool depends on (at whatever version the
    tool's go.mod resolves), built in place of the original through a `replace`."""

    module: str
    why: str
    apply: Callable[[Path], None]


def _edit(path: Path, pattern: str, replacement: str) -> None:
    text = path.read_text()
    edited, count = re.subn(pattern, replacement, text, count=1)
    if count != 1:
        raise PatchError(f"{path}: the text this patch edits is gone ({pattern!r})")
    path.write_text(edited)


def lazy_word_lists(root: Path) -> None:
    """zxcvbn-go: parse the word lists on the first `Omnimatch`, not at process start."""
    frequency = root / "frequency" / "frequency.go"
    _edit(frequency, r"import \(\n", 'import (\n\t"sync"\n')
    _edit(
        frequency,
        r"\nfunc init\(\) \{\n",
        "\nvar loadOnce sync.Once\n\n"
        "// Load fills Lists on first use (atomic-gang patch: upstream parses them in init).\n"
        "func Load() { loadOnce.Do(load) }\n\nfunc load() {\n",
    )
    matching = root / "matching" / "matching.go"
    _edit(matching, r"import \(\n", 'import (\n\t"sync"\n')
    _edit(matching, r"func init\(\) \{\n\tloadFrequencyList\(\)\n\}\n", "var loadOnce sync.Once\n")
    _edit(
        matching,
        r"\tif dictionaryMatchers == nil \|\| adjacencyGraphs == nil \{\n"
        r"\t\tloadFrequencyList\(\)\n\t\}\n",
        "\tloadOnce.Do(loadFrequencyList)\n",
    )
    _edit(
        matching,
        r"func loadFrequencyList\(\) \{\n",
        "func loadFrequencyList() {\n\tfrequency.Load()\n",
    )


_WHY_LAZY = "parse zxcvbn's word lists on first use, not in every CLI process's init (~170 ms)"

LAZY_WORD_LISTS: tuple[ModulePatch, ...] = (
    ModulePatch("github.com/nbutton23/zxcvbn-go", _WHY_LAZY, lazy_word_lists),
    ModulePatch("github.com/ccojocar/zxcvbn-go", _WHY_LAZY, lazy_word_lists),
)


def health_address(root: Path) -> None:
    """mpi-operator: the health endpoint's address from MPI_OPERATOR_HEALTH_ADDRESS."""
    server = root / "cmd" / "mpi-operator" / "app" / "server.go"
    _edit(
        server,
        r'Addr: +fmt\.Sprintf\(":%d", healthCheckPort\),',
        "Addr:    healthCheckAddress(),",
    )
    with server.open("a") as out:
        out.write(
            "\n// healthCheckAddress (atomic-gang patch): upstream always binds :8080.\n"
            "func healthCheckAddress() string {\n"
            '\tif address := os.Getenv("MPI_OPERATOR_HEALTH_ADDRESS"); address != "" {\n'
            "\t\treturn address\n\t}\n"
            '\treturn fmt.Sprintf(":%d", healthCheckPort)\n}\n'
        )


HEALTH_ADDRESS: tuple[ModulePatch, ...] = (
    ModulePatch(
        "github.com/kubeflow/mpi-operator",
        "its health endpoint's address from MPI_OPERATOR_HEALTH_ADDRESS, not a fixed :8080",
        health_address,
    ),
)
