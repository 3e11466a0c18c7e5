"""Cheap reads of a `file://` backend: stack names, outputs, pending operations, locks;
and the repair of a metadata sidecar a killed CLI left empty.

Called by the stack driver where starting the CLI would cost a process and a second for an
answer sitting in a file: the warm path's `outputs()`, `recover()`'s scan of every stack for
locks and pending operations, and `list_stacks()`. Only reads; every write goes through the
CLI, but for one repair (`remove_unreadable_sidecars`). The CLI replaces the state files
whole (write, then rename), so a read sees one version or the other; a file that does not
parse is reported as unknown and the caller asks the CLI.

Layout (the CLI's project-scoped layout)::

    <root>/.pulumi/stacks/<project>/<stack>.json[.gz]
    <root>/.pulumi/locks/organization/<project>/<stack>/<lock-id>.json
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from provisioner.pulumi_driver.locks import LockHolder, holders_from_files

__all__ = ["FileBackend", "file_backend_root"]

_ROOT_TYPE = "pulumi:pulumi:Stack"


def file_backend_root(backend_url: str) -> Path | None:
    """The directory of a `file://` backend URL; None for any other backend."""
    parsed = urlparse(backend_url)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.netloc + parsed.path) if parsed.netloc == "~" else unquote(parsed.path)
    return Path(path).expanduser()


class FileBackend:
    def __init__(self, root: Path, project: str) -> None:
        self.root = root
        self.project = project

    @property
    def stacks_dir(self) -> Path:
        return self.root / ".pulumi" / "stacks" / self.project

    def lock_dir(self, stack: str) -> Path:
        return self.root / ".pulumi" / "locks" / "organization" / self.project / stack

    def _file(self, stack: str) -> Path | None:
        for name in (f"{stack}.json", f"{stack}.json.gz"):
            path = self.stacks_dir / name
            if path.is_file():
                return path
        return None

    def stack_names(self) -> list[str]:
        if not self.stacks_dir.is_dir():
            return []
        names = {
            p.name.removesuffix(".gz").removesuffix(".json")
            for p in self.stacks_dir.iterdir()
            if p.name.endswith((".json", ".json.gz"))
        }
        return sorted(names)

    def exists(self, stack: str) -> bool:
        return self._file(stack) is not None

    def checkpoint(self, stack: str) -> dict[str, Any] | None:
        """The stack's latest deployment, or None when absent or unreadable."""
        path = self._file(stack)
        if path is None:
            return None
        try:
            raw = path.read_bytes()
            if path.suffix == ".gz":
                raw = gzip.decompress(raw)
            latest = json.loads(raw)["checkpoint"].get("latest")
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return latest if isinstance(latest, dict) else {}

    def outputs(self, stack: str) -> dict[str, Any] | None:
        """The root stack resource's outputs, or None when unknown."""
        latest = self.checkpoint(stack)
        if latest is None:
            return None
        for resource in latest.get("resources") or ():
            if resource.get("type") == _ROOT_TYPE:
                outs = resource.get("outputs") or {}
                return outs if isinstance(outs, dict) else None
        return {}

    def pending_operations(self, stack: str) -> list[dict[str, Any]] | None:
        latest = self.checkpoint(stack)
        if latest is None:
            return None
        return list(latest.get("pending_operations") or ())

    def resource_count(self, stack: str) -> int | None:
        latest = self.checkpoint(stack)
        return None if latest is None else len(latest.get("resources") or ())

    def remove_unreadable_sidecars(self) -> list[Path]:
        """Remove every blob-metadata sidecar (`*.attrs`) under `.pulumi/` that does not
        parse, and return them. The CLI is now told not to write them (`cli_env.
        cli_backend_url`), but one an earlier CLI left empty, killed mid-write, makes every
        read of its stack fail ("failed to load checkpoint: EOF") until it is gone; Pulumi
        needs nothing in it. The one write this module makes, done before any CLI runs."""
        removed = []
        for sidecar in sorted((self.root / ".pulumi").rglob("*.attrs")):
            try:
                json.loads(sidecar.read_bytes())
            except ValueError:
                sidecar.unlink(missing_ok=True)
                removed.append(sidecar)
            except OSError:
                continue
        return removed

    def lock_holders(self, stack: str) -> list[LockHolder]:
        directory = self.lock_dir(stack)
        if not directory.is_dir():
            return []
        return holders_from_files(sorted(directory.glob("*.json")))
