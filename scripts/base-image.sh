#!/usr/bin/env bash
# Make a Debian base image without a registry: debootstrap a minimal bookworm with
# Python, then `docker import` it. Prints the image name on stdout (logs go to stderr).
#
#   scripts/base-image.sh            -> e.g. envkit-base:bookworm-3f2a9c1d0b7e
#
# The root filesystem tarball is cached under $ENVKIT_CACHE_DIR keyed by every input
# (suite, variant, packages, mirror, architecture), so a second run on the same machine
# only re-imports it. The cache is trusted only when its sha256 sidecar matches and it
# is younger than ENVKIT_BASE_MAX_AGE_DAYS: a stale base would silently miss Debian's
# security updates, a truncated one would break every build after it.
#
# Environment:
#   ENVKIT_BASE_SUITE      Debian suite (default: bookworm)
#   ENVKIT_BASE_MIRROR     mirror URL (default: debootstrap's own default mirror)
#   ENVKIT_BASE_INCLUDE    extra packages (default: python3,python3-venv,ca-certificates)
#   ENVKIT_CACHE_DIR       cache directory (default: ${XDG_CACHE_HOME:-~/.cache}/envkit)
#   ENVKIT_BASE_MAX_AGE_DAYS  rebuild the cached tarball after this many days (default: 30)
#   DOCKER                 docker client (default: /usr/bin/docker when present)
set -euo pipefail

suite=${ENVKIT_BASE_SUITE:-bookworm}
mirror=${ENVKIT_BASE_MIRROR:-}
include=${ENVKIT_BASE_INCLUDE:-python3,python3-venv,ca-certificates}
variant=minbase
cache_dir=${ENVKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/envkit}
max_age_days=${ENVKIT_BASE_MAX_AGE_DAYS:-30}
if [ -z "${DOCKER:-}" ]; then
    if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi

log() { echo "base-image.sh: $*" >&2; }
die() { log "$*"; exit 1; }

arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
key=$(printf '%s\n' "$suite" "$variant" "$include" "$mirror" "$arch" | sha256sum | cut -c1-12)
image="envkit-base:${suite}-${key}"
tarball="$cache_dir/base-${suite}-${key}.tar"

if "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
    log "$image already in the engine"
    echo "$image"
    exit 0
fi

cache_is_usable() {
    [ -s "$tarball" ] && [ -s "$tarball.sha256" ] || return 1
    [ -n "$(find "$tarball" -mtime -"$max_age_days" 2>/dev/null)" ] || { log "cached base older than ${max_age_days} days; rebuilding"; return 1; }
    (cd "$cache_dir" && sha256sum --check --status "$(basename "$tarball").sha256") || { log "cached base fails its checksum; rebuilding"; return 1; }
}

if ! cache_is_usable; then
    command -v debootstrap >/dev/null || die "no debootstrap found: apt-get install -y debootstrap"
    [ "$(id -u)" -eq 0 ] || die "debootstrap needs root: run this script with sudo"
    mkdir -p "$cache_dir"
    rootfs=$(mktemp -d "$cache_dir/rootfs.XXXXXX")
    partial=$(mktemp "$cache_dir/base.XXXXXX.partial")
    # A failed debootstrap can leave proc/sys mounted inside the rootfs: never descend into them.
    trap 'rm -rf --one-file-system "$rootfs" "$partial"' EXIT
    log "debootstrap $variant $suite with $include (about a minute)"
    # ${mirror:+...}: without a mirror, debootstrap takes its own default.
    debootstrap --variant="$variant" --include="$include" "$suite" "$rootfs" ${mirror:+"$mirror"} >&2
    # apt lists and caches are dead weight in every image built on top.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
    tar --numeric-owner --sort=name -C "$rootfs" -cf "$partial" .
    (cd "$(dirname "$partial")" && sha256sum "$(basename "$partial")" | sed "s/$(basename "$partial")/$(basename "$tarball")/") >"$partial.sha256"
    mv "$partial.sha256" "$tarball.sha256"
    chmod 0644 "$partial"
    mv "$partial" "$tarball"
fi

log "importing $tarball as $image"
"$DOCKER" import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$image" >/dev/null
echo "$image"
