"""`atomic-gang explain [-n NS] [KIND/]NAME`: why this gang job is not running yet.

Called by the CLI. The object is the one the user submitted: a Job, JobSet, PyTorchJob, MPIJob or
TrainJob, named as kubectl names it (`job/x -n team-a`, `jobset x`, `x`; the namespace is
-n's, else the kubeconfig context's), or as the first releases did (`NAMESPACE/NAME`,
`NAMESPACE/KIND/NAME`); `parse_target` reads every form. Without a kind the one object of
that name is taken. Walks its path and stops describing at the first link that holds it,
while still listing what it knows further on: the object, its Kueue Workload
(the one Kueue owns by it; none yet means Kueue has not seen it: label or LocalQueue),
quota (Kueue's own message when none is reserved), our check's state and message, the
GangNodePool's phase, counts and last error, the GangClass its shape was read through and
who decided each field (the class, the Job's annotations, the defaults, the pods), and the
capacity shortfalls so far (the pool's count and its CapacityShortfall events). An object
another gang kind controls (a JobSet's Job, a TrainJob's JobSet) has no Workload of its own:
explain follows it to that parent. It only reads, through `provisioner.kube`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from provisioner.api import constants as c
from provisioner.api import kueue_objects as ko
from provisioner.commands.doctor_kube import requested_resources
from provisioner.commands.kubectl_flags import UsageError, dump
from provisioner.commands.kueue_reads import condition_true
from provisioner.commands.target import Where, connect
from provisioner.kube.errors import KubeNotFound
from provisioner.kube.resources import (
    ADMISSION_CHECKS,
    CORE_EVENTS,
    GANG_NODE_POOLS,
    JOBS,
    JOBSETS,
    MPI_JOBS,
    PYTORCH_JOBS,
    TRAIN_JOBS,
    WORKLOADS,
    ResourceRef,
)

CHECK_NAME = ko.CHECK_NAME
EXIT_OK, EXIT_NOT_FOUND = 0, 1


@dataclass(frozen=True)
class _Kind:
    """A kind a gang is submitted as, as explain reads it."""

    ref: ResourceRef
    done: tuple[tuple[str, str], ...]  # (condition type, what it means) when True
    suspend_path: tuple[str, ...]  # where in spec its suspend flag lives


# The order a bare NAMESPACE/NAME is looked up in; every kind is read, and two hits ask
# for the kind.
_KINDS: tuple[_Kind, ...] = (
    _Kind(JOBS, (("Complete", "completed"), ("Failed", "failed")), ("suspend",)),
    _Kind(JOBSETS, (("Completed", "completed"), ("Failed", "failed")), ("suspend",)),
    _Kind(
        PYTORCH_JOBS, (("Succeeded", "completed"), ("Failed", "failed")), ("runPolicy", "suspend")
    ),
    _Kind(TRAIN_JOBS, (("Complete", "completed"), ("Failed", "failed")), ("suspend",)),
    _Kind(MPI_JOBS, (("Succeeded", "completed"), ("Failed", "failed")), ("runPolicy", "suspend")),
)


_KIND_NAMES = ", ".join(k.ref.kind for k in _KINDS)


def _kind_named(word: str) -> _Kind | None:
    """The kind a command-line word names, as kubectl reads a resource type: its kind or
    plural, any case, bare or with its group ("jobset", "jobs.batch")."""
    word, _, group = word.lower().partition(".")
    return next(
        (
            k
            for k in _KINDS
            if word in (k.ref.kind.lower(), k.ref.plural) and group in ("", k.ref.group)
        ),
        None,
    )


class TargetError(UsageError):
    """The words do not name one object; the message says how to name it (a usage error)."""


def parse_target(words: Sequence[str], namespace: str | None) -> tuple[str | None, str | None, str]:
    """The object the command line names, as (namespace or None for the default, kind or
    None, name). kubectl's forms: `KIND/NAME`, `KIND NAME`, `NAME`, each in -n's
    ``namespace``; and the first releases' `NAMESPACE/NAME` and `NAMESPACE/KIND/NAME`. A
    first segment that names a kind is a kind (as in kubectl); a namespace in the words
    that -n contradicts is a `TargetError`."""
    if len(words) == 2:
        kind, name = words
        if _kind_named(kind) is None:
            raise TargetError(
                f"{kind!r} is not a kind explain follows ({_KIND_NAMES}): name "
                "the object as KIND/NAME or NAME, with -n NAMESPACE"
            )
        if "/" in name:
            raise TargetError(f"{kind} {name}: a NAME after a KIND holds no '/'")
        return namespace, kind, name
    if len(words) != 1:
        raise TargetError(
            "explain takes one object: KIND/NAME, KIND NAME or NAME (with -n NAMESPACE), or "
            "NAMESPACE/NAME"
        )
    parts = words[0].split("/")
    if any(not p for p in parts) or len(parts) > 3:
        raise TargetError(f"{words[0]!r} names no object: use KIND/NAME, NAME or NAMESPACE/NAME")
    if len(parts) == 1:
        return namespace, None, parts[0]
    if len(parts) == 2 and _kind_named(parts[0]) is not None:
        return namespace, parts[0], parts[1]
    written = parts[0]
    if namespace is not None and namespace != written:
        raise TargetError(
            f"{words[0]} is in namespace {written} but -n says {namespace}: drop one (with -n, "
            f"name the object as KIND/NAME, e.g. job/{parts[-1]})"
        )
    return written, (parts[1] if len(parts) == 3 else None), parts[-1]


def _find(
    kube: Reader, namespace: str, name: str, kind: _Kind | None
) -> tuple[_Kind, dict[str, Any]] | str:
    """The object and its kind, or the line saying why there is none to explain."""
    found: list[tuple[_Kind, dict[str, Any]]] = []
    for candidate in (kind,) if kind is not None else _KINDS:
        try:
            found.append((candidate, kube.get(candidate.ref, name, namespace=namespace)))
        except KubeNotFound:
            continue
        # A cluster without a kind's CRD answers 404 for it too: not found, as it should be.
    if not found:
        what = kind.ref.kind if kind is not None else "Job, JobSet, PyTorchJob, TrainJob or MPIJob"
        return f"{what} {namespace}/{name} does not exist."
    if len(found) > 1:
        kinds = ", ".join(k.ref.kind for k, _ in found)
        first = found[0][0].ref.kind.lower()
        return (
            f"{namespace}/{name} names a {kinds}: say which, e.g. "
            f"`atomic-gang explain -n {namespace} {first}/{name}`."
        )
    return found[0]


def _controlling_gang(obj: Mapping[str, Any]) -> tuple[_Kind, str] | None:
    """The gang kind and name of the object's controller, when it is one of ours."""
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if not owner.get("controller"):
            continue
        group = str(owner.get("apiVersion", "")).rpartition("/")[0]
        for kind in _KINDS:
            if (kind.ref.group, kind.ref.kind) == (group, owner.get("kind")):
                return kind, str(owner.get("name"))
    return None


def _suspended(kind: _Kind, obj: Mapping[str, Any]) -> bool:
    node: Any = obj.get("spec") or {}
    for key in kind.suspend_path:
        node = (node or {}).get(key) if isinstance(node, Mapping) else None
    return bool(node)


class Reader(Protocol):
    """The reads explain makes; `KubeClient` is one."""

    def get(
        self, ref: ResourceRef, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]: ...

    def list(
        self,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Any: ...


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {x["type"]: x for x in (obj.get("status") or {}).get("conditions") or []}


@dataclass(frozen=True)
class Explanation:
    """explain's answer: the lines (the first is the verdict), and the object's kind (None
    when no one object was found: the command exits 1)."""

    lines: list[str]
    kind: str | None = None


def explain(
    kube: Reader,
    namespace: str,
    name: str,
    check: str = CHECK_NAME,
    kind: str | None = None,
    depth: int = 0,
) -> list[str]:
    """Lines, most decisive first; the first says the verdict. `kind` names the object's
    kind ("JobSet", "jobsets"); None finds it among the four."""
    return explanation(kube, namespace, name, check, kind, depth).lines


def explanation(
    kube: Reader,
    namespace: str,
    name: str,
    check: str = CHECK_NAME,
    kind: str | None = None,
    depth: int = 0,
) -> Explanation:
    chosen = _kind_named(kind) if kind else None
    if kind and chosen is None:
        return Explanation([f"explain follows {_KIND_NAMES}; {kind!r} is none of them."])
    found = _find(kube, namespace, name, chosen)
    if isinstance(found, str):
        return Explanation([found])
    gang_kind, job = found
    lines = _lines(kube, namespace, name, check, gang_kind, job, depth)
    return Explanation(lines, gang_kind.ref.kind)


def _lines(
    kube: Reader,
    namespace: str,
    name: str,
    check: str,
    gang_kind: _Kind,
    job: dict[str, Any],
    depth: int,
) -> list[str]:
    noun = gang_kind.ref.kind
    parent = _controlling_gang(job)
    if parent is not None and depth < len(_KINDS):
        parent_kind, parent_name = parent
        return [
            f"{noun} {namespace}/{name} is run by {parent_kind.ref.kind} "
            f"{namespace}/{parent_name}, which Kueue admits as one gang; explaining that:",
            *explain(kube, namespace, parent_name, check, parent_kind.ref.kind, depth + 1),
        ]
    for condition, state in gang_kind.done:
        if condition_true(job, condition):
            return [f"{noun} {namespace}/{name} has {state}; it is not waiting on anything."]
    labels = (job.get("metadata") or {}).get("labels") or {}
    queue, pool_name = labels.get(c.QUEUE_NAME_LABEL), labels.get(c.POOL_LABEL)
    lines: list[str] = []
    if not queue:
        return [
            f"{noun} {namespace}/{name} has no {c.QUEUE_NAME_LABEL} label: Kueue does not "
            "manage it and this controller never sees it; add the label with your "
            "LocalQueue's name."
        ]
    gang_class = _class_of(kube, check)
    if not pool_name and gang_class is None:
        lines.append(
            f"{noun} has no {c.POOL_LABEL} label: our check will reject its Workload; add it."
        )
    running = not _suspended(gang_kind, job)
    workload = _workload_of(kube, namespace, gang_kind, job)
    if workload is None:
        verdict = (
            "it runs without Kueue (no Workload)"
            if running
            else f"no Workload yet: Kueue has not picked it up. Check that LocalQueue "
            f"{namespace}/{queue} exists (`atomic-gang doctor --queue {namespace}/{queue}`) "
            "and that the Kueue manager is running."
        )
        return [f"{noun} {namespace}/{name}: {verdict}", *lines]
    wl_name = workload["metadata"]["name"]
    quota = _conditions(workload).get("QuotaReserved")
    admitted = condition_true(workload, "Admitted")
    ours = next(
        (
            x
            for x in (workload.get("status") or {}).get("admissionChecks") or []
            if x.get("name") == check
        ),
        None,
    )
    if running and admitted:
        lines.insert(0, f"{noun} {namespace}/{name} is admitted and running (Workload {wl_name}).")
    elif not quota or quota.get("status") != "True":
        # Kueue's own words (QuotaReserved=False): they name an uncovered or exhausted
        # resource such as nvidia.com/gpu.
        why = (quota or {}).get("message") or "Kueue has not evaluated it yet"
        reason = (quota or {}).get("reason")
        lines.insert(
            0,
            f"{noun} {namespace}/{name} waits for quota in its ClusterQueue "
            f"(Workload {wl_name}): Kueue says{f' ({reason})' if reason else ''}: {why}",
        )
        extended = sorted(r for r in requested_resources(workload) if "/" in r)
        if extended:
            lines.insert(
                1,
                f"Workload {wl_name} requests {', '.join(extended)}: its ClusterQueue must "
                "cover each with a nominalQuota (`atomic-gang doctor` checks this).",
            )
    elif ours is None:
        lines.insert(
            0,
            f"{noun} {namespace}/{name} has quota but Workload {wl_name} carries no {check} "
            "check: its ClusterQueue does not list it (run `atomic-gang doctor`).",
        )
    else:
        lines.insert(
            0,
            f"{noun} {namespace}/{name} has quota and waits on our check: {ours.get('state')}"
            f" — {ours.get('message') or 'no message yet'}",
        )
    reserved = "reserved" if quota and quota.get("status") == "True" else "not reserved"
    lines.append(
        f"Workload {wl_name}: quota {reserved}, {'admitted' if admitted else 'not admitted'}."
    )
    if ours is not None:
        lines.append(f"Check {check}: {ours.get('state')}: {ours.get('message') or '-'}")
    pool_name = pool_name or _pool_of(kube, namespace, wl_name)
    if pool_name:
        lines += _pool_lines(kube, pool_name)
    elif gang_class is not None:
        lines.append(
            f"Pool: none yet; our check derives it from namespace {namespace}, GangClass "
            f"{gang_class} (named by AdmissionCheck {check}) and the gang's shape."
        )
    return lines


def _class_of(kube: Reader, check: str) -> str | None:
    """The GangClass our check names in spec.parameters, None when it names none."""
    try:
        params = (kube.get(ADMISSION_CHECKS, check).get("spec") or {}).get("parameters") or {}
    except KubeNotFound:
        return None
    if (params.get("apiGroup"), params.get("kind")) != (c.GROUP, c.GANG_CLASS_KIND):
        return None
    return str(params.get("name") or "") or None


def _pool_of(kube: Reader, namespace: str, workload: str) -> str | None:
    """The pool Workload `namespace/workload` claims (a class's derived pool), else the one
    marked for it while it waits for quota (`spec.queued`)."""

    def names_it(mark: Mapping[str, Any] | None) -> bool:
        return ((mark or {}).get("namespace"), (mark or {}).get("name")) == (namespace, workload)

    queued_for = None
    for pool in kube.list(GANG_NODE_POOLS).items:
        spec, name = pool.get("spec") or {}, str(pool["metadata"]["name"])
        if names_it(spec.get("claim")):
            return name
        if names_it(spec.get("queued")):
            queued_for = name
    return queued_for


def _decided_by(spec: Mapping[str, Any]) -> list[str]:
    """Who decided each field of the pool's shape, grouped by source."""
    sources = spec.get("fieldSources") or {}
    if not sources:
        return []
    by: dict[str, list[str]] = {}
    for name, source in sources.items():
        by.setdefault(str(source), []).append(name)
    where = spec.get("gangClass")
    named = {"class": f"GangClass {where}" if where else "class", "annotation": "the Job"}
    parts = [f"{named.get(s, s)}: {', '.join(sorted(by[s]))}" for s in sorted(by)]
    head = f"Shape read through GangClass {where}" if where else "Shape read from the Job alone"
    return [f"{head}; decided by {'; '.join(parts)}."]


def _workload_of(
    kube: Reader, namespace: str, kind: _Kind, job: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The Workload Kueue made for the object: the one owned by it (kind and uid)."""
    uid = job["metadata"].get("uid")
    for wl in kube.list(WORKLOADS, namespace=namespace).items:
        owners = (wl.get("metadata") or {}).get("ownerReferences") or []
        if any(o.get("kind") == kind.ref.kind and o.get("uid") == uid for o in owners):
            return dict(wl)
    return None


def _pool_lines(kube: Reader, name: str) -> list[str]:
    try:
        pool = kube.get(GANG_NODE_POOLS, name)
    except KubeNotFound:
        return [
            f"Pool {name}: no GangNodePool yet (created when our check first sees the Workload)."
        ]
    spec, status = pool.get("spec") or {}, pool.get("status") or {}
    lines = [
        f"Pool {name}: phase {status.get('phase', 'Idle')}, "
        f"{len(status.get('instanceIds') or [])} of {spec.get('count', '?')} instances, "
        f"{status.get('readyNodes', 0)} Ready nodes, type {spec.get('instanceType', '?')}."
    ]
    lines += _decided_by(spec)
    queued = spec.get("queued") or {}
    if queued and not spec.get("claim"):
        lines.append(
            f"Pool {name} is marked for Workload {queued.get('namespace')}/{queued.get('name')}, "
            f"waiting for quota since {queued.get('queuedAt', '?')}: its stack is prepared "
            "ahead, so once Kueue reserves quota only EC2's launch and the nodes' join remain."
        )
    for unusable in status.get("unusableNodes") or ():
        lacks = ", ".join(unusable.get("missing") or ())
        lines.append(
            f"Node {unusable.get('node')} ({unusable.get('instanceId')}) is Ready but not "
            f"usable yet: {lacks}."
        )
    error = status.get("lastError")
    if error:
        lines.append(f"Pool {name} last error: {error.get('reason')}: {error.get('message')}")
    shortfalls = int(status.get("consecutiveShortfalls") or 0)
    events = [
        e
        for e in kube.list(
            CORE_EVENTS, field_selector=f"involvedObject.name={name},reason=CapacityShortfall"
        ).items
        if (e.get("involvedObject") or {}).get("kind") == c.GNP_KIND
    ]
    if shortfalls or events:
        total = sum(int(e.get("count") or 1) for e in events)
        last = events[-1].get("message") if events else ""
        lines.append(
            f"Capacity shortfalls so far: {shortfalls} in a row"
            + (f", {total} recorded as events; last: {last}" if events else "")
            + ". Nothing is running while short ($0); the whole gang is retried."
        )
    else:
        lines.append("Capacity shortfalls so far: none.")
    return lines


def our_check(kube: Reader, controller_name: str) -> str:
    """The AdmissionCheck that names our controller (the installation's controllerName);
    the chart's default name when none does yet."""
    for ac in kube.list(ADMISSION_CHECKS).items:
        if (ac.get("spec") or {}).get("controllerName") == controller_name:
            return str(ac["metadata"]["name"])
    return CHECK_NAME


def main(
    words: Sequence[str],
    where: Where,
    check: str | None,
    *,
    namespace: str | None = None,
    output: str = "text",
) -> int:
    """`atomic-gang explain`: 0 when the object was found and explained, 1 when not. A
    `TargetError` (the words name no one object) is the caller's usage error."""
    from provisioner.kube.connect import default_namespace

    namespace, kind, name = parse_target(words, namespace)
    target = connect(where, aws=False)
    namespace = namespace or default_namespace(where.kubeconfig, where.context)
    try:
        check = check or our_check(target.kube, target.settings.controller_name)
        found = explanation(target.kube, namespace, name, check, kind=kind)
    finally:
        target.kube.close()
    header = target.header()
    print(render(f"{namespace}/{name}", check, header, found.lines, output, kind=found.kind))
    return EXIT_OK if found.kind is not None else EXIT_NOT_FOUND


def render(
    job: str, check: str, header: str, lines: list[str], output: str, *, kind: str | None = None
) -> str:
    """Text (`wide` is the same: explain has no columns to widen): the header, then the
    lines. JSON or YAML (`-o json|yaml`), one object: ``job`` ("NAMESPACE/NAME"), ``kind``
    (the object's, null when none was found), ``check``, ``target`` (the header),
    ``verdict`` (the first, decisive line) and ``details`` (the rest, in order)."""
    if output in ("json", "yaml"):
        document = {
            "job": job,
            "kind": kind,
            "check": check,
            "target": header,
            "verdict": lines[0] if lines else "",
            "details": lines[1:],
        }
        return dump(document, output)
    return "\n".join([f"{header}; check {check}", *lines])
