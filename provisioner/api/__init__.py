"""Typed models and validation, shared by every other layer; imports no SDK.

- `constants`: every label, annotation, tag, phase, reason and name.
- `durations`: Go-style durations ("10m", "1h30m") to and from timedelta.
- `settings`: the controller's settings tree and its file/env/flag loader.
- `shape`: a Job's gang shape, its parser and the pool-reuse comparison; the per-key
  rules are in `shape_rules`, the one error (`GangShapeError`) in `problems`.
- `gangnodepool`: the GangNodePool resource, its CRD and print columns.
- `workload`: Kueue v1beta2 Workload and AdmissionCheck views, and our check's patch.
- `meta`, `fields`: shared Kubernetes metadata, conditions and field formats.

The names below are the package's public surface; a unit test holds it in place.
"""

from provisioner.api.durations import DurationError, GoDuration, format_duration, parse_duration
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
from provisioner.api.meta import Condition, ObjectMeta, find_condition, set_condition
from provisioner.api.settings import Settings, SettingsError, load_settings, settings_from_argv
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
    check_state_patch,
    gang_pod_set_updates,
)

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
    "check_state_patch",
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
