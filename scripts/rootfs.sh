#!/usr/bin/env bash
# A minimal Debian root filesystem made by debootstrap, as a tarball cached by its inputs
# (suite, variant, packages, mirror, architecture): scripts/base-image.sh imports one as
# the images' base, scripts/fresh-machine.sh enters one as a new user's machine.
#
#   scripts/rootfs.sh key        -> the cache key, e.g. 3f2a9c1d0b7e (nothing is made)
#   scripts/rootfs.sh tarball    -> the tarball's path, made first unless the cache has it
#
# The cache is trusted only when its sha256 sidecar matches and it is younger than
# ENVKIT_BASE_MAX_AGE_DAYS: a stale root would silently miss Debian's security updates, a
# truncated one would break everything after it.
#
# Environment:
#   ENVKIT_BASE_SUITE      Debian suite (default: bookworm)
#   ENVKIT_BASE_MIRROR     mirror URL (default: debootstrap's own default mirror)
#   ENVKIT_BASE_INCLUDE    extra packages (default: python3,python3-venv,ca-certificates)
#   ENVKIT_CACHE_DIR       cache directory (default: ${XDG_CACHE_HOME:-~/.cache}/envkit)
#   ENVKIT_BASE_MAX_AGE_DAYS  make it again after this many days (default: 30)
set -euo pipefail

suite=${ENVKIT_BASE_SUITE:-bookworm}
mirror=${ENVKIT_BASE_MIRROR:-}
include=${ENVKIT_BASE_INCLUDE:-python3,python3-venv,ca-certificates}
variant=minbase
cache_dir=${ENVKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/envkit}
max_age_days=${ENVKIT_BASE_MAX_AGE_DAYS:-30}

log() { echo "rootfs.sh: $*" >&2; }
die() { log "$*"; exit 1; }

arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
key=$(printf '%s\n' "$suite" "$variant" "$include" "$mirror" "$arch" | sha256sum | cut -c1-12)
tarball="$cache_dir/base-${suite}-${key}.tar"

case "${1:-}" in
    key) echo "$key"; exit 0 ;;
    tarball) ;;
    *) echo "usage: scripts/rootfs.sh key|tarball" >&2; exit 2 ;;
esac

cache_is_usable() {
    [ -s "$tarball" ] && [ -s "$tarball.sha256" ] || return 1
    [ -n "$(find "$tarball" -mtime -"$max_age_days" 2>/dev/null)" ] || { log "cached root older than ${max_age_days} days; making it again"; return 1; }
    (cd "$cache_dir" && sha256sum --check --status "$(basename "$tarball").sha256") || { log "cached root fails its checksum; making it again"; return 1; }
}

if ! cache_is_usable; then
    command -v debootstrap >/dev/null || die "no debootstrap found: apt-get install -y debootstrap"
    [ "$(id -u)" -eq 0 ] || die "debootstrap needs root: run this script with sudo"
    mkdir -p "$cache_dir"
    rootfs=$(mktemp -d "$cache_dir/rootfs.XXXXXX")
    partial=$(mktemp "$cache_dir/base.XXXXXX.partial")
    # A failed debootstrap can leave proc/sys mounted inside the rootfs: never descend into them.
    trap 'rm -rf --one-file-system "$rootfs" "$partial"' EXIT
    log "debootstrap $variant $suite with $include (a minute or more)"
    # ${mirror:+...}: without a mirror, debootstrap takes its own default.
    debootstrap --variant="$variant" --include="$include" "$suite" "$rootfs" ${mirror:+"$mirror"} >&2
    # apt lists and caches are dead weight in everything made from it.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
    tar --numeric-owner --sort=name -C "$rootfs" -cf "$partial" .
    (cd "$(dirname "$partial")" && sha256sum "$(basename "$partial")" | sed "s/$(basename "$partial")/$(basename "$tarball")/") >"$partial.sha256"
    mv "$partial.sha256" "$tarball.sha256"
    chmod 0644 "$partial"
    mv "$partial" "$tarball"
fi
echo "$tarball"
