"""Typed models and validation, shared by every other layer; imports no SDK.

- `constants`: every label, annotation, tag, phase, reason and name.
- `durations`: Go-style durations ("10m", "1h30m") to and from timedelta.
- `settings`: the controller's settings tree; `settings_sources`: its file/env/flag loader.
- `shape`: a Job's gang shape, its parser and the pool-reuse comparison; the per-key
  rules are in `shape_rules`, the one error (`GangShapeError`) in `problems`.
- `gangnodepool`: the GangNodePool resource, its CRD and print columns.
- `gang_class`: the GangClass resource (a queue's shape defaults, named by our
  AdmissionCheck's parameters), its CRD, and the overlay a gang's shape is read through.
- `class_purchase`: a GangClass's `blockPurchase`, which replaces the settings' Capacity
  Block purchase policy for its gangs, and whether the installation grants it.
- `workload`: Kueue v1beta2 Workload and AdmissionCheck views; `owners`: the job that
  owns a gang's Workload; `nodes`: the Node view the pool reconciler reads.
- `meta`, `fields`: shared Kubernetes metadata, conditions and field formats.
- `tenancy`: which namespace a pool belongs to, and the refusal for a Job of another.
- `pod_requests`: what one pod of a gang requests; `pod_fit`: what one node of an instance
  type offers it (EC2's figures less the EKS AMI's kubelet reservations), and the refusal.
- `pod_reach`: which pools' nodes a Pod can run on (the pod webhook's rule).
- `reservation_policy`: which capacity reservations a Job may name (their EC2 tags), and
  the refusal.
- `tolerations`: whether tolerations tolerate a taint, by Kubernetes' rules (doctor, the
  simulators).
- `fencing`: `NotLeader`, what a mutating AWS call refused by the leadership fence raises.

The names below are the package's public surface; a unit test holds it in place.

The names load on first use (PEP 562): the stack's provider host imports
``provisioner.api.constants`` on every engine run, and must not pay for pydantic, the
settings loader and every model to do so (issue #14). Import a submodule for what you need.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:
    from provisioner.api.durations import (
        DurationError,
        format_duration,
        parse_duration,
    )
    from provisioner.api.fields import (
        GoDuration,
    )
    from provisioner.api.gangnodepool import (
        PRINTER_COLUMNS,
        Claim,
        GangNodePool,
        GangNodePoolSpec,
        GangNodePoolStatus,
        LastError,
        LaunchInProgress,
        ReleaseInProgress,
        load_crd,
    )
    from provisioner.api.meta import (
        Condition,
        ObjectMeta,
        find_condition,
        set_condition,
    )
    from provisioner.api.settings import Settings
    from provisioner.api.settings_sources import (
        SettingsError,
        load_settings,
        settings_from_argv,
    )
    from provisioner.api.shape import (
        GangShape,
        GangShapeError,
        Problem,
        default_ami_variant,
        describe_shape_conflict,
        parse_gang_shape,
        shape_differences,
    )
    from provisioner.api.workload import (
        AdmissionCheck,
        AdmissionCheckState,
        PodSetUpdate,
        Workload,
        gang_pod_set_updates,
    )

_HOMES = {
    "PRINTER_COLUMNS": "provisioner.api.gangnodepool",
    "AdmissionCheck": "provisioner.api.workload",
    "AdmissionCheckState": "provisioner.api.workload",
    "Claim": "provisioner.api.gangnodepool",
    "Condition": "provisioner.api.meta",
    "DurationError": "provisioner.api.durations",
    "GangNodePool": "provisioner.api.gangnodepool",
    "GangNodePoolSpec": "provisioner.api.gangnodepool",
    "GangNodePoolStatus": "provisioner.api.gangnodepool",
    "GangShape": "provisioner.api.shape",
    "GangShapeError": "provisioner.api.shape",
    "GoDuration": "provisioner.api.fields",
    "LastError": "provisioner.api.gangnodepool",
    "LaunchInProgress": "provisioner.api.gangnodepool",
    "ObjectMeta": "provisioner.api.meta",
    "PodSetUpdate": "provisioner.api.workload",
    "Problem": "provisioner.api.shape",
    "ReleaseInProgress": "provisioner.api.gangnodepool",
    "Settings": "provisioner.api.settings",
    "SettingsError": "provisioner.api.settings_sources",
    "Workload": "provisioner.api.workload",
    "default_ami_variant": "provisioner.api.shape",
    "describe_shape_conflict": "provisioner.api.shape",
    "find_condition": "provisioner.api.meta",
    "format_duration": "provisioner.api.durations",
    "gang_pod_set_updates": "provisioner.api.workload",
    "load_crd": "provisioner.api.gangnodepool",
    "load_settings": "provisioner.api.settings_sources",
    "parse_duration": "provisioner.api.durations",
    "parse_gang_shape": "provisioner.api.shape",
    "set_condition": "provisioner.api.meta",
    "settings_from_argv": "provisioner.api.settings_sources",
    "shape_differences": "provisioner.api.shape",
}

__all__ = [
    "PRINTER_COLUMNS",
    "AdmissionCheck",
    "AdmissionCheckState",
    "Claim",
    "Condition",
    "DurationError",
    "GangNodePool",
    "GangNodePoolSpec",
    "GangNodePoolStatus",
    "GangShape",
    "GangShapeError",
    "GoDuration",
    "LastError",
    "LaunchInProgress",
    "ObjectMeta",
    "PodSetUpdate",
    "Problem",
    "ReleaseInProgress",
    "Settings",
    "SettingsError",
    "Workload",
    "default_ami_variant",
    "describe_shape_conflict",
    "find_condition",
    "format_duration",
    "gang_pod_set_updates",
    "load_crd",
    "load_settings",
    "parse_duration",
    "parse_gang_shape",
    "set_condition",
    "settings_from_argv",
    "shape_differences",
]


def __getattr__(name: str) -> _Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # once found, an ordinary module attribute
    return value
