"""Where the controller's `Settings` come from: a file, the environment, the command line.

`atomic-gang controller` (`provisioner.commands.controller`) and `atomic-gang pools` call
`settings_from_argv` once at start-up; the webhook's own command calls `load_settings`;
`doctor` and `explain` read another process's settings with `settings_from_document` and
`overrides_from_argv` (`provisioner.commands.installation`). The layers, highest first:
command-line flags (one per setting, from `build_arg_parser`), environment variables
(`ATOMIC_GANG_` prefix, nested with `__`, e.g. `ATOMIC_GANG_DEFAULTS__KEEP_WARM_TTL=15m`), a
YAML or JSON file, then the defaults the models in `settings` write. The file may use the
chart's camelCase spelling or the Python field names. Every failure is a `SettingsError`
naming each bad value and its source.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource

from provisioner.api import constants as c
from provisioner.api.settings import Settings, snake_keys

__all__ = [
    "SettingsError",
    "build_arg_parser",
    "load_settings",
    "overrides_from_argv",
    "settings_from_argv",
    "settings_from_document",
]


class SettingsError(ValueError):
    """The settings could not be loaded; the message names each bad value and source."""


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"defaults.region": x} -> {"defaults": {"region": x}}; nested input passes through."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        for part in reversed(key.split(".")):
            value = {part: value}
        out = _deep_merge(out, value)
    return out


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"cannot read settings file {path}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"settings file {path} must hold a mapping, not {type(data).__name__}")
    return cast(dict[str, Any], snake_keys(data))


# Variables under the prefix that are not settings: the dynamic-provider launcher's
# interpreter, the log format (both set by the image), the tool cache, and the repository's
# build and test knobs (image/, the chaos and fuzzing suites) -- a shell that sets one to
# build an image or replay a chaos run must not stop the controller or a CLI from starting.
_NOT_SETTINGS = frozenset(
    {
        "ATOMIC_GANG_PYTHON",
        "ATOMIC_GANG_LOG_FORMAT",
        "ATOMIC_GANG_CACHE",
        "ATOMIC_GANG_IMAGE",
        "ATOMIC_GANG_PYTHON_BASE",
        "ATOMIC_GANG_PODMAN_FLAGS",
        "ATOMIC_GANG_SKIP_DISK_CHECK",
        "ATOMIC_GANG_DEBIAN_MIRROR",
        "ATOMIC_GANG_FUZZ_EXAMPLES",
        "ATOMIC_GANG_CHAOS_KILLS",
        "ATOMIC_GANG_CHAOS_SEED",
        "ATOMIC_GANG_CHAOS_REPORT",
    }
)


def _read_env() -> dict[str, Any]:
    unknown = sorted(
        name
        for name in os.environ
        if name.upper().startswith(c.ENV_PREFIX)
        and name.upper() not in _NOT_SETTINGS
        and name[len(c.ENV_PREFIX) :].split("__")[0].lower() not in _keys(Settings)
    )
    if unknown:
        raise SettingsError(
            f"unknown environment variables {unknown}; settings variables are "
            f"{c.ENV_PREFIX}<FIELD>, nested with __, e.g. {c.ENV_PREFIX}DEFAULTS__REGION"
        )
    source = EnvSettingsSource(
        cast(type[BaseSettings], Settings),
        case_sensitive=False,
        env_prefix=c.ENV_PREFIX,
        env_nested_delimiter="__",
        # A field read under a key of its own (`join_deadline_seconds`) takes the prefix too.
        env_prefix_target="all",
    )
    return source()


def _describe(exc: ValidationError, label: str) -> str:
    lines = [f"invalid settings ({label}):"]
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {where}: {err['msg']} (got {err.get('input')!r})")
    return "\n".join(lines)


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build `Settings` from a file, the environment and overrides (flags), in that order.

    `overrides` may be nested or use dotted keys ("defaults.region"); it wins over all.
    Raises `SettingsError` with every problem listed.
    """
    merged: dict[str, Any] = _read_file(Path(config_file)) if config_file else {}
    merged = _deep_merge(merged, _read_env())
    merged = _deep_merge(merged, snake_keys(_nest(overrides or {})))
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, "flags > environment > file > defaults")) from exc


def settings_from_document(
    text: str, source: str, overrides: Mapping[str, Any] | None = None
) -> Settings:
    """Build `Settings` from a settings file's text read elsewhere (the chart's ConfigMap,
    as `atomic-gang doctor` finds it in a cluster) and overrides, without this process's
    environment: the settings described are another process's, not the caller's.

    `source` names where the text came from in every error. Raises `SettingsError`.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"cannot parse settings from {source}: {exc}") from exc
    if data is not None and not isinstance(data, dict):
        raise SettingsError(f"settings in {source} must be a mapping, not {type(data).__name__}")
    merged = _deep_merge(snake_keys(data or {}), snake_keys(_nest(overrides or {})))
    try:
        return Settings.model_validate(merged)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, source)) from exc


# --- command line ----------------------------------------------------------------------

_FLAG_PREFIX: Final = "set:"


def _keys(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields by the key a file, a variable or a flag names them with: the field's
    alias where it has one (`join_deadline_seconds` for `join_deadline`), else its name."""
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _leaf_fields(model: type[BaseModel], path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    leaves: list[tuple[str, ...]] = []
    for key, field in _keys(model).items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            leaves.extend(_leaf_fields(ann, (*path, key)))
        else:
            leaves.append((*path, key))
    return leaves


def _field_at(path: tuple[str, ...]) -> Any:
    model: Any = Settings
    for key in path[:-1]:
        model = _keys(model)[key].annotation
    return _keys(model)[path[-1]]


def build_arg_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """A parser with `--config FILE` and one flag per setting, e.g. `--defaults.region`.

    Flags are the field path in kebab case; lists take comma-separated values.
    """
    parser = argparse.ArgumentParser(prog=prog, description="atomic-gang-provisioner")
    parser.add_argument("--config", metavar="FILE", help="YAML or JSON settings file")
    for path in _leaf_fields(Settings):
        field = _field_at(path)
        flag = "--" + ".".join(p.replace("_", "-") for p in path)
        is_list = get_origin(field.annotation) is tuple
        parser.add_argument(
            flag,
            dest=_FLAG_PREFIX + ".".join(path),
            default=argparse.SUPPRESS,
            metavar="A,B" if is_list else "VALUE",
            help=field.description,
        )
    return parser


def _flag_overrides(ns: Mapping[str, Any]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for dest, value in ns.items():
        if not dest.startswith(_FLAG_PREFIX):
            continue
        path = tuple(dest[len(_FLAG_PREFIX) :].split("."))
        if get_origin(_field_at(path).annotation) is tuple:
            value = [v.strip() for v in value.split(",") if v.strip()]
        overrides[".".join(path)] = value
    return overrides


def settings_from_argv(argv: Sequence[str] | None = None) -> Settings:
    """Parse the command line (None means sys.argv) and load the settings it points at."""
    ns = vars(build_arg_parser().parse_args(argv))
    return load_settings(ns.get("config"), _flag_overrides(ns))


def overrides_from_argv(argv: Sequence[str]) -> dict[str, Any]:
    """The settings flags in another process's command line (a Deployment's container
    args), as dotted overrides; `--config` and flags that are not settings are left out."""
    ns, _ = build_arg_parser().parse_known_args(list(argv))
    return _flag_overrides(vars(ns))
