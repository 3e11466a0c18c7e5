#!/usr/bin/env bash
# Installs what `make image` and `make test-image` need on a Debian/Ubuntu host: podman with
# runc (the vfs storage driver and the cgroupfs manager need no kernel extras), and mmdebstrap
# to make the base image when no registry is configured. Idempotent: a host that already has
# every command installs nothing and makes no network call. Run as root, or with sudo present.
set -euo pipefail

needed=()
command -v podman >/dev/null 2>&1 || needed+=(podman)
command -v runc >/dev/null 2>&1 || needed+=(runc)
command -v mmdebstrap >/dev/null 2>&1 || needed+=(mmdebstrap)
# mmdebstrap verifies the archive with Debian's keys and unpacks with these.
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || needed+=(debian-archive-keyring)
command -v newuidmap >/dev/null 2>&1 || needed+=(uidmap)

if [ ${#needed[@]} -eq 0 ]; then
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
        echo "image/setup-host.sh: need root (or sudo) to install: ${needed[*]}" >&2
        exit 1
    }
    sudo=(sudo)
fi
command -v apt-get >/dev/null 2>&1 || {
    echo "image/setup-host.sh: no apt-get here; install ${needed[*]} with this system's package manager" >&2
    exit 1
}
echo "[image] installing ${needed[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${needed[@]}" >/dev/null
