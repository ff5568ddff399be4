#!/usr/bin/env bash
# Make a Debian base image without a registry: debootstrap a minimal bookworm with
# Python, then `docker import` it. Prints the image name on stdout (logs go to stderr).
#
#   scripts/base-image.sh            -> e.g. envkit-base:bookworm-3f2a9c1d0b7e
#
# The root filesystem is scripts/rootfs.sh's tarball, cached by every input, so a second
# run on the same machine only re-imports it.
#
# Environment:
#   ENVKIT_BASE_SUITE, ENVKIT_BASE_MIRROR, ENVKIT_BASE_INCLUDE, ENVKIT_CACHE_DIR,
#   ENVKIT_BASE_MAX_AGE_DAYS   as scripts/rootfs.sh reads them
#   DOCKER                 docker client (default: /usr/bin/docker when present)
set -euo pipefail

suite=${ENVKIT_BASE_SUITE:-bookworm}
rootfs="$(dirname "$0")/rootfs.sh"
if [ -z "${DOCKER:-}" ]; then
    if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi

log() { echo "base-image.sh: $*" >&2; }

image="envkit-base:${suite}-$("$rootfs" key)"

if "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
    log "$image already in the engine"
    echo "$image"
    exit 0
fi

tarball=$("$rootfs" tarball)
log "importing $tarball as $image"
"$DOCKER" import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$image" >/dev/null
echo "$image"
