#!/usr/bin/env bash
# Makes the Debian bookworm base image the Dockerfile builds on when no registry base is
# configured: a minbase root filesystem with Python 3.11 (bookworm's, the project's minimum)
# from `mmdebstrap`, turned into an image by `podman import`. Prints the image's name.
# Idempotent: the tag carries a hash of what goes in, so an existing base is reused and a
# change to the package list makes a new one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
podman_() { "$here/podman" "$@"; }

SUITE=bookworm
MIRROR="${ATOMIC_GANG_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3-venv: the build stage makes the virtualenv; ca-certificates: TLS to AWS and PyPI.
PACKAGES=python3,python3-venv,ca-certificates
# Docs (but their copyright files: the licences of what ships), man pages, translations and
# apt's caches are dead weight in a controller image; removed once everything is installed
# (dpkg's path-exclude breaks packages that create directories below an excluded one).
TRIM='find "$1"/usr/share/doc -type f ! -name copyright -delete; find "$1"/usr/share/doc -type l -delete; rm -rf "$1"/usr/share/man "$1"/usr/share/info "$1"/usr/share/locale/* "$1"/usr/share/lintian "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*'

key="$(printf '%s\n' "$SUITE" "$PACKAGES" "$TRIM" | sha256sum | cut -c1-12)"
name="localhost/atomic-gang-base:${SUITE}-${key}"
if podman_ image exists "$name"; then
    echo "$name"
    exit 0
fi

echo "[image] making $name with mmdebstrap ($MIRROR)" >&2
start=$(date +%s)
# Through a file, not a pipe: a failed mmdebstrap must not leave a half-made image behind.
tarball="$(mktemp --suffix=.tar)"
trap 'rm -f "$tarball"' EXIT
mmdebstrap --variant=minbase --include="$PACKAGES" --customize-hook="$TRIM" \
    "$SUITE" "$tarball" "$MIRROR" >&2
podman_ import --change 'CMD ["/bin/bash"]' "$tarball" "$name" >/dev/null
echo "[image] $name made in $(( $(date +%s) - start )) s" >&2
echo "$name"
