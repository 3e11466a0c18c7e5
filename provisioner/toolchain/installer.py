"""Builds (or finds) the real tools the local environment and the tests run.

Called by `atomic-gang tools`, by `make tools`, and by the pytest session fixtures. Without
names it resolves the default set (`ALL_TOOLS`, the training-job controllers included). For
each tool pinned in `versions.py` it takes, in order:
1. a binary already built into the cache directory for this exact version;
2. a binary on PATH that reports the pinned version (skipped for tools whose data files must
   come from the same release, such as Kueue's CRDs);
3. a fresh build from the tool's Go module through a generated wrapper module, with the
   tool's patched dependencies (`patches`) replaced by edited copies of their source, and
   for a tool whose main package embeds generated files (`generate`), from a writable copy
   of its module in which upstream's `go generate` has run.

The wrapper module exists because the upstream go.mod files carry `replace` directives with
relative paths (Kubernetes' staging repos, etcd's sibling modules, Pulumi's SDK), which
`go install module@version` refuses. The wrapper requires the tool's module and maps every
relative replacement onto the published release of that sibling.

The cache lives outside any checkout, so clones and CI runs on one machine share it:
`${ATOMIC_GANG_CACHE:-${XDG_CACHE_HOME:-~/.cache}/atomic-gang}/tools/<name>-<version>/`.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from provisioner.toolchain.patches import PatchError
from provisioner.toolchain.versions import ALL_TOOLS, GO_MIN_VERSION, TOOLS_BY_NAME, GoTool

_REPLACE_LINE = re.compile(r"^\s*(\S+)(?:\s+\S+)?\s*=>\s*(\S+)(?:\s+(\S+))?\s*$")
_STAMP = ".built"


class ToolError(RuntimeError):
    """A tool could not be found or built; the message names the tool, step and retry."""


def cache_root() -> Path:
    """The directory shared by every checkout on this machine."""
    explicit = os.environ.get("ATOMIC_GANG_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "atomic-gang"


def tool_dir(tool: GoTool) -> Path:
    tag = f"+{tool.build_tag}" if tool.build_tag else ""
    return cache_root() / "tools" / f"{tool.name}-{tool.version}{tag}"


@dataclass(frozen=True)
class ResolvedTool:
    """Where a tool's binary (and, for Kueue, its manifests) were found."""

    tool: GoTool
    binary: Path
    home: Path | None  # the cache directory holding the tool's assets, when it has any
    source: str  # "cache", "path" or "built"

    def asset(self, relative: str) -> Path:
        if self.home is None:
            raise ToolError(f"{self.tool.name}: no asset directory for {relative}")
        return self.home / "assets" / relative


def _say(message: str) -> None:
    print(f"[tools] {message}", file=sys.stderr, flush=True)


def _reports_version(binary: Path, tool: GoTool) -> bool:
    if not tool.version_marker:
        return binary.is_file() and os.access(binary, os.X_OK)
    try:
        done = subprocess.run(
            [str(binary), *tool.version_args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return tool.version_marker in (done.stdout + done.stderr)


def _cached(tool: GoTool) -> ResolvedTool | None:
    home = tool_dir(tool)
    binary = home / "bin" / tool.binary
    stamp = home / _STAMP
    if stamp.is_file() and stamp.read_text().strip() == tool.version and binary.is_file():
        return ResolvedTool(tool, binary, home, "cache")
    return None


def _on_path(tool: GoTool) -> ResolvedTool | None:
    if not tool.reuse_from_path:
        return None
    found = shutil.which(tool.binary)
    if found and _reports_version(Path(found), tool):
        return ResolvedTool(tool, Path(found), None, "path")
    return None


def resolve(tool: GoTool, *, build: bool = True) -> ResolvedTool:
    """Find the pinned tool, building it when allowed and nothing matching exists."""
    found = _cached(tool) or _on_path(tool)
    if found:
        return found
    if not build:
        how = f"`atomic-gang tools --only {tool.name}`"
        # `make tools` builds the default set and kubectl; the others only on request.
        if tool in ALL_TOOLS or tool.name == "kubectl":
            how = f"`make tools` (or {how})"
        raise ToolError(f"{tool.name} {tool.version} is not installed. Run {how} to build it.")
    # Two processes (a test run and `make tools`, or two checkouts) must not build into the
    # same directory at once: the second waits, then finds the first one's build.
    lock_path = cache_root() / "tools" / f".{tool.name}-{tool.version}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        if not _try_lock(lock):
            _say(f"{tool.name}: another process is building it; waiting")
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _cached(tool) or _build(tool)


def _try_lock(lock: object) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
    except BlockingIOError:
        return False
    return True


def _go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolError(
            "The Go toolchain is not on PATH. Install Go "
            f"{GO_MIN_VERSION[0]}.{GO_MIN_VERSION[1]} or newer; the tools are built from Go "
            "modules because their release downloads are not used."
        )
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True)
    match = re.match(r"go(\d+)\.(\d+)", out.stdout.strip())
    if not match or (int(match[1]), int(match[2])) < GO_MIN_VERSION:
        raise ToolError(
            f"Go {out.stdout.strip()} is too old; the pinned tools need Go "
            f"{GO_MIN_VERSION[0]}.{GO_MIN_VERSION[1]} or newer."
        )
    return go


def _go_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # Static binaries, no toolchain switch mid-build, module mode even inside a checkout.
    env.setdefault("CGO_ENABLED", "0")
    env["GOTOOLCHAIN"] = "local"
    env["GOFLAGS"] = "-mod=mod"
    env["GOWORK"] = "off"
    env.update(extra or {})
    return env


def _run_step(
    tool: GoTool,
    step: str,
    argv: list[str],
    cwd: Path,
    log: Path,
    env: dict[str, str] | None = None,
) -> str:
    started = time.monotonic()
    with log.open("a") as sink:
        sink.write(f"$ {' '.join(argv)}\n")
        sink.flush()
        done = subprocess.run(
            argv, cwd=cwd, env=_go_env(env), stdout=subprocess.PIPE, stderr=sink, text=True
        )
    if done.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise ToolError(
            f"{tool.name} {tool.version}: step '{step}' failed (exit {done.returncode}).\n"
            f"Command: (cd {cwd} && {' '.join(argv)})\nLog: {log}\n{tail}\n"
            f"Retry with: atomic-gang tools --only {tool.name}"
        )
    _say(f"{tool.name}: {step} done in {time.monotonic() - started:.0f}s")
    return done.stdout


def upstream_replacements(go_mod_text: str) -> list[tuple[str, str, str | None]]:
    """The (module, target, target version) triples of a go.mod's replace directives."""
    found: list[tuple[str, str, str | None]] = []
    in_block = False
    for raw in go_mod_text.splitlines():
        line = raw.split("//", 1)[0].strip()
        if line.startswith("replace ("):
            in_block = True
            continue
        if in_block and line == ")":
            in_block = False
            continue
        if line.startswith("replace "):
            line = line[len("replace ") :]
        elif not in_block:
            continue
        match = _REPLACE_LINE.match(line)
        if match:
            found.append((match[1], match[2], match[3]))
    return found


def _mapped_replacements(tool: GoTool, upstream_go_mod: str) -> list[tuple[str, str, str]]:
    """Upstream's replacements as (module, target, version), each relative one (a sibling in
    the same repository) mapped onto the sibling's published release."""
    mapped: list[tuple[str, str, str]] = []
    for module, target, target_version in upstream_replacements(upstream_go_mod):
        if "FORBIDDEN" in target:
            continue  # a guard against a dependency, not a real module
        if target.startswith(("./", "../")):
            mapped.append((module, module, tool.sibling_version))
        elif target_version:
            mapped.append((module, target, target_version))
    return mapped


def module_version(tool: GoTool) -> str:
    """The version of `tool.module` fetched from the proxy."""
    return tool.module_version or tool.version


# Where a tool with generated files is built from, relative to its wrapper module.
GENERATED_SOURCE = "../source"


def wrapper_go_mod(tool: GoTool, upstream_go_mod: str) -> str:
    """The go.mod of the wrapper module that builds `tool` outside its repository."""
    replaces = [
        f"\t{module} => {target} {version}"
        for module, target, version in _mapped_replacements(tool, upstream_go_mod)
    ]
    if tool.generate:
        # The main package embeds files `go generate` writes: build the module from the
        # copy they were written into.
        replaces.append(f"\t{tool.module} => {GENERATED_SOURCE}")
    requires = {tool.module: module_version(tool), **tool.extra_requires}
    lines = [f"module atomic-gang.local/build/{tool.name}", "", "go 1.26.0", "", "require ("]
    lines += [f"\t{module} {version}" for module, version in sorted(requires.items())]
    lines.append(")")
    if replaces:
        lines += ["", "replace (", *replaces, ")"]
    return "\n".join(lines) + "\n"


def _build(tool: GoTool) -> ResolvedTool:
    go = _go_binary()
    home = tool_dir(tool)
    work = home / "wrapper"
    if home.exists():
        shutil.rmtree(home)
    work.mkdir(parents=True)
    log = home / "build.log"
    _say(f"{tool.name} {tool.version}: building from {tool.module} (log: {log})")

    fetched = f"{tool.module}@{module_version(tool)}"
    info = json.loads(
        _run_step(tool, "download module", [go, "mod", "download", "-json", fetched], work, log)
    )
    if info.get("Error"):
        raise ToolError(
            f"{tool.name}: the Go module proxy refused {fetched}: "
            f"{info['Error']}\nRetry with: atomic-gang tools --only {tool.name}"
        )
    upstream_go_mod = Path(info["GoMod"]).read_text()
    if tool.generate:
        _generate(tool, go, Path(info["Dir"]), upstream_go_mod, home, log)
    (work / "go.mod").write_text(wrapper_go_mod(tool, upstream_go_mod))
    (work / "tools.go").write_text(
        f'//go:build tools\n\npackage tools\n\nimport _ "{tool.package}"\n'
    )
    _run_step(tool, "resolve dependencies (go mod tidy)", [go, "mod", "tidy"], work, log)
    if tool.patches:
        _patch_dependencies(tool, go, home, log)
    binary = home / "bin" / tool.binary
    ldflags = " ".join(("-s", "-w", *tool.ldflags))
    _say(f"{tool.name}: compiling (several minutes on a small machine)")
    _run_step(
        tool,
        "compile",
        [go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(binary), tool.package],
        work,
        log,
    )
    for relative in tool.assets:
        source = Path(info["Dir"]) / relative
        target = home / "assets" / relative
        _writable_copy(source, target)
    if not _reports_version(binary, tool):
        raise ToolError(
            f"{tool.name}: the built binary does not report {tool.version_marker}; "
            f"see {log}. Retry with: atomic-gang tools --only {tool.name}"
        )
    (home / _STAMP).write_text(tool.version + "\n")
    return ResolvedTool(tool, binary, home, "built")


def _writable_copy(source: Path, target: Path) -> None:
    """Copy `source` out of the Go module cache, whose files are read-only, as files this
    process may edit or delete."""
    shutil.copytree(source, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _generate(
    tool: GoTool, go: str, module_dir: Path, upstream_go_mod: str, home: Path, log: Path
) -> None:
    """Copy the module out of the read-only module cache and run upstream's `go generate`
    in each of `tool.generate`, with VERSION set as the upstream Makefile sets it."""
    source = home / "source"
    _writable_copy(module_dir, source)
    mapped = _mapped_replacements(tool, upstream_go_mod)
    if mapped:
        # The generator runs inside the copy, whose relative replacements point at siblings
        # that are not there: the same published releases as the wrapper's.
        flags = [f"-replace={module}={target}@{version}" for module, target, version in mapped]
        _run_step(tool, "map the copy's replacements", [go, "mod", "edit", *flags], source, log)
    # -trimpath as in the compile below, so the packages both build come from one cache entry.
    env = {"VERSION": tool.version.removeprefix("v"), "GOFLAGS": "-mod=mod -trimpath"}
    for package in tool.generate:
        _run_step(tool, f"go generate {package}", [go, "generate", "."], source / package, log, env)


def _patch_dependencies(tool: GoTool, go: str, home: Path, log: Path) -> None:
    """Build each patched dependency from an edited copy of the version go.mod resolved."""
    work = home / "wrapper"
    for index, patch in enumerate(tool.patches):
        listed = json.loads(
            _run_step(
                tool, f"locate {patch.module}", [go, "list", "-m", "-json", patch.module], work, log
            )
        )
        source = listed.get("Dir")
        if not source:
            raise ToolError(
                f"{tool.name}: {patch.module} is not in the build (no source to patch); "
                f"the patch '{patch.why}' must be re-checked for {tool.version}."
            )
        copy = home / "patched" / str(index)
        _writable_copy(Path(source), copy)
        if not (copy / "go.mod").is_file():  # a pre-modules library: a replace needs one
            (copy / "go.mod").write_text(f"module {patch.module}\n\ngo 1.12\n")
        try:
            patch.apply(copy)
        except PatchError as err:
            raise ToolError(f"{tool.name} {tool.version}: patch '{patch.why}': {err}") from err
        replace = f"-replace={patch.module}=../patched/{index}"
        _run_step(tool, f"patch {patch.module}", [go, "mod", "edit", replace], work, log)
        with log.open("a") as sink:
            sink.write(f"patched {patch.module} {listed.get('Version')}: {patch.why}\n")


PULUMI_PYTHON_LAUNCHER = "pulumi-resource-pulumi-python"


def launcher_source() -> Path:
    """The dynamic-provider launcher shipped inside the package."""
    import provisioner.pulumi_driver as driver

    return Path(driver.__file__).parent / "bin" / PULUMI_PYTHON_LAUNCHER


def install_pulumi_launcher(pulumi: ResolvedTool) -> Path | None:
    """Put the launcher next to a CLI we own, where the CLI looks for bundled plugins.

    A CLI found on PATH is not ours to add files beside; the stack driver then puts the
    launcher's own directory on PATH instead.
    """
    if pulumi.source == "path":
        return None
    target = pulumi.binary.parent / PULUMI_PYTHON_LAUNCHER
    source = launcher_source()
    if not target.is_file() or target.read_bytes() != source.read_bytes():
        shutil.copyfile(source, target)
        target.chmod(0o755)
    return target


def ensure_all(names: list[str] | None = None) -> dict[str, ResolvedTool]:
    """Resolve (building what is missing) every pinned tool, or the named ones."""
    chosen = [TOOLS_BY_NAME[n] for n in names] if names else list(ALL_TOOLS)
    resolved: dict[str, ResolvedTool] = {}
    for index, tool in enumerate(chosen, start=1):
        started = time.monotonic()
        found = resolve(tool)
        took = time.monotonic() - started
        _say(f"[{index}/{len(chosen)}] {tool.name} {tool.version}: {found.source} {found.binary}")
        if found.source == "built":
            _say(f"{tool.name}: built in {took:.0f}s")
        if tool.name == "pulumi":
            install_pulumi_launcher(found)
        resolved[tool.name] = found
    return resolved


def bin_dirs(resolved: dict[str, ResolvedTool]) -> list[str]:
    """PATH entries that make every resolved tool callable by its plain name."""
    return sorted({str(r.binary.parent) for r in resolved.values()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="atomic-gang tools",
        description=(
            "Build or find the pinned Pulumi CLI, kube-apiserver, etcd, Kueue, helm and the "
            "training-job controllers (jobset, training-operator, trainer)."
        ),
    )
    parser.add_argument(
        "--only", action="append", choices=sorted(TOOLS_BY_NAME), help="limit to these tools"
    )
    parser.add_argument("--print-path", action="store_true", help="print a PATH prefix")
    args = parser.parse_args(argv)
    try:
        resolved = ensure_all(args.only)
    except ToolError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.print_path:
        print(os.pathsep.join(bin_dirs(resolved)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
