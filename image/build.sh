#!/usr/bin/env bash
# `make image`: builds the controller image with podman from this checkout.
#
#   1. installs podman, runc and mmdebstrap if missing (setup-host.sh);
#   2. takes the base from ATOMIC_GANG_PYTHON_BASE (a registry image, e.g.
#      python:3.11-slim-bookworm) or, when unset, makes a Debian bookworm base (base.sh);
#   3. hands the Pulumi CLI the tool installer built (the same one the tests run) to the
#      Dockerfile as the build context `pulumi-cli`, so no Go image is needed;
#   4. builds ATOMIC_GANG_IMAGE (default localhost/atomic-gang-provisioner:dev) and prints
#      its size and the build's wall time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
podman_() { "$here/podman" "$@"; }

IMAGE="${ATOMIC_GANG_IMAGE:-localhost/atomic-gang-provisioner:dev}"
PYTHON="${PYTHON:-python3}"
start=$(date +%s)

"$here/setup-host.sh"
base="${ATOMIC_GANG_PYTHON_BASE:-}"
[ -n "$base" ] || base="$("$here/base.sh")"
pulumi_dir="$(cd "$repo" && "$PYTHON" -m provisioner.toolchain --only pulumi --print-path)"

extra=()
# A TLS-inspecting egress proxy's CA, when pip is told about one, reaches the pip step only.
if [ -n "${PIP_CERT:-}" ] && [ -f "$PIP_CERT" ]; then
    extra+=(--volume "$PIP_CERT:/run/atomic-gang-build/ca.crt:ro" --build-arg PIP_CERT=/run/atomic-gang-build/ca.crt)
fi

# What the image is made of. An image already labelled with the same inputs is up to date:
# with the vfs driver even an all-cached build re-copies every stage's root filesystem
# (minutes), so the unchanged case is answered here, in a second.
inputs="$(
    cd "$repo"
    {
        echo "$base"
        sha256sum "$pulumi_dir/pulumi" "$pulumi_dir/pulumi-resource-pulumi-python" | cut -d' ' -f1
        find Dockerfile .dockerignore pyproject.toml constraints.txt README.md provisioner stacks \
            -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
)"
if [ "$(podman_ image inspect --format '{{index .Labels "io.atomic-gang.inputs"}}' "$IMAGE" 2>/dev/null)" = "$inputs" ]; then
    echo "[image] $IMAGE is up to date (inputs $inputs)" >&2
    exit 0
fi

echo "[image] building $IMAGE on $base" >&2
podman_ build --layers --label "io.atomic-gang.inputs=$inputs" \
    --build-arg PYTHON_BASE="$base" \
    --build-arg PULUMI_STAGE=pulumi-context \
    --build-context pulumi-cli="$pulumi_dir" \
    "${extra[@]}" \
    --tag "$IMAGE" "$repo"

# The image this build replaced, and the stage images of earlier builds, are left untagged;
# with the vfs driver each is a whole copy (about 1.3 GiB a build), and a machine that builds
# every commit filled its disk with them. Only untagged images nothing uses go.
podman_ image prune --force >/dev/null || echo "[image] could not prune untagged images" >&2

size=$(podman_ image inspect --format '{{.Size}}' "$IMAGE")
echo "[image] $IMAGE: $((size / 1024 / 1024)) MiB, built in $(( $(date +%s) - start )) s" >&2
