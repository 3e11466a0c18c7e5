"""Which state-bucket and KMS requests a stack operation made, read from the emulator's
access log (`EmulatorProcess(access_log=True)`, `devenv.emulator.access_log`).

The emulator's own counts (`/_emulator/requests`) say how many S3 and KMS requests there
were; cutting them needs to know which: a LIST of the stack's checkpoint name (the CLI finds
which compression variant exists before each read and write), a HEAD and a COPY of the
checkpoint to `.json.bak` before each save, the lock's LIST/PUT/LIST/DELETE, the history
entry, `meta.yaml`. Each request is named by its kind (GET, HEAD, PUT, COPY, DELETE, LIST;
a KMS call by its action) and what it touched, with the project, stack, lock id and time
stamp left out so that every pool's operation reads the same:

    PUT    stacks/P/S.json           the checkpoint
    COPY   stacks/P/S.json.bak       the CLI's copy of it before each save
    LIST   locks/P/S/                who holds the stack's lock
    PUT    history/P/S/S-T.history.json

A LIST is named by its prefix. Requests outside the state bucket (EC2, IAM, EKS, the
control API) are not counted.
"""

from __future__ import annotations

import re
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Final

__all__ = ["BackendRequests", "classify", "where"]

Request = tuple[str, str]  # (kind, what): ("PUT", "stacks/P/S.json"), ("kms", "Decrypt")

_LINE: Final = re.compile(
    r'"(?P<method>[A-Z]+) (?P<path>[^"?]*)(?:\?(?P<query>[^"]*))?" \d+(?P<extra>.*)$'
)


def where(key: str) -> str:
    """The key under the backend's ``.pulumi/`` with its names replaced by letters: P the
    project, S the stack, T a time stamp, ID a lock's id."""
    rest = key.split(".pulumi/", 1)[1] if ".pulumi/" in key else key
    area, _, tail = rest.partition("/")
    if not tail:
        return rest
    parts = tail.split("/")
    name = parts[-1]
    folders = "/".join(["P", "S"][: len(parts) - 1])
    prefix = f"{area}/{folders}/" if folders else f"{area}/"
    if not name:
        return prefix
    if area == "stacks":
        return prefix + "S" + name[name.index(".") :] if "." in name else prefix + "S*"
    if area == "locks":
        return prefix + "ID.json"
    if area in ("history", "backups"):
        # <stack>-<unix ns>.history.json, <stack>-<unix ns>.checkpoint.json, <stack>.<ns>.json
        return prefix + "S-T" + name[name.index(".") :] if "." in name else prefix + "S-T"
    return prefix + name


def classify(line: str, bucket: str) -> Request | None:
    """One access-log line as a request of the state bucket or KMS, or None."""
    match = _LINE.search(line)
    if match is None:
        return None
    method, path = match["method"], match["path"]
    query = urllib.parse.parse_qs(match["query"] or "", keep_blank_values=True)
    extra = match["extra"]
    if "target=TrentService." in extra:
        return ("kms", extra.split("target=TrentService.", 1)[1].split()[0])
    segments = path.lstrip("/").split("/", 1)
    if segments[0] != bucket:
        return None
    key = urllib.parse.unquote(segments[1]) if len(segments) > 1 else ""
    if method == "GET" and "list-type" in query:
        return ("LIST", where(query.get("prefix", [""])[0]))
    if method == "PUT" and "copy=" in extra:
        return ("COPY", where(key))
    if method == "POST" and "delete" in query:
        return ("DELETE (batch)", where(key))
    return (method, where(key))


class BackendRequests:
    """The requests logged since the last `take()`, counted."""

    def __init__(self, log: Path, bucket: str) -> None:
        self._log = log
        self._bucket = bucket
        self._offset = log.stat().st_size if log.exists() else 0

    def take(self) -> Counter[Request]:
        with self._log.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        # A line still being written is left for the next call.
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        counts: Counter[Request] = Counter()
        for line in complete.decode(errors="replace").splitlines():
            request = classify(line, self._bucket)
            if request is not None:
                counts[request] += 1
        return counts
