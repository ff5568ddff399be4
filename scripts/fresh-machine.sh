#!/usr/bin/env bash
# The README's first commands on a machine that is not ours: a Debian 13 root made by
# debootstrap (python3 is 3.13, and there is no 3.11), entered as a chroot in its own mount
# and UTS namespace whose /etc/hosts does not name its host (as on many a cloud or container
# host: no 127.0.1.1 line). Inside it, as README says: git clone, make demo, then the fast
# suite (every test that runs without --slow; TEST ARGS narrow or add to it). Prints each
# step's wall time, and the venv's size, on stdout ("step: <name> <seconds> s").
#
#   scripts/fresh-machine.sh REPO [TEST ARGS...]    e.g. scripts/fresh-machine.sh . tests/host/test_venv.py
#
# REPO's committed HEAD is what is cloned. The root is scripts/rootfs.sh's tarball, cached by
# its inputs; each run unpacks a new copy and removes it after. uv's cache on this host
# (UV_CACHE_DIR, else ~/.cache/uv) is the lower layer of an overlay inside, so the venv takes
# the wheels this host already has and downloads only the rest (torch for Python 3.13).
#
# Environment: ENVKIT_BASE_MIRROR (Debian mirror, default debootstrap's own), ENVKIT_CACHE_DIR,
# ENVKIT_FRESH_SUITE (default trixie), ENVKIT_FRESH_KEEP=1 keeps the root for a look,
# ENVKIT_FRESH_CA_BUNDLE (default this host's /etc/ssl/certs/ca-certificates.crt): the CAs the
# network needs (a proxy's own, say), which pip (PIP_CERT) and uv (SSL_CERT_FILE) trust inside.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: scripts/fresh-machine.sh REPO [TEST ARGS...]" >&2; exit 2; }
repo=$(cd "$1" && pwd)
shift
[ "$(id -u)" -eq 0 ] || { echo "fresh-machine.sh: chroot and namespaces need root" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
uv_cache=${UV_CACHE_DIR:-$HOME/.cache/uv}
hostname=envkit-fresh

since() { awk -v start="$1" -v now="$(date +%s.%N)" 'BEGIN { printf "%.1f", now - start }'; }

start=$(date +%s.%N)
tarball=$(ENVKIT_BASE_SUITE="${ENVKIT_FRESH_SUITE:-trixie}" ENVKIT_BASE_INCLUDE=python3,python3-venv,make,git,ca-certificates \
    "$here/rootfs.sh" tarball)
echo "step: root $(since "$start") s"
root=$(mktemp -d "${TMPDIR:-/tmp}/envkit-fresh.XXXXXX")
cleanup() { [ "${ENVKIT_FRESH_KEEP:-}" = 1 ] || rm -rf --one-file-system "$root"; }
trap cleanup EXIT
tar -xf "$tarball" -C "$root"
git clone --quiet --bare --no-local "$repo" "$root/srv/envkit.git"
mkdir -p "$root/uv-cache" "$root/var/uv-upper" "$root/var/uv-work"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "${ENVKIT_FRESH_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$root/etc/ssl/certs/network-ca.crt"
# Its own name resolves nowhere: a single-host rendezvous must not need it (torchrun on loopback).
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
echo "$hostname" >"$root/etc/hostname"

# What runs inside: the README's commands, each timed, as a user with a home directory.
cat >"$root/fresh.sh" <<'INSIDE'
set -euo pipefail
step() { local name=$1 start; shift; start=$(date +%s.%N); "$@"; echo "step: $name $(python3 -c "import time; print(round(time.time() - $start, 1))") s"; }
cd /root
echo "python3: $(python3 --version); python3.11: $(command -v python3.11 || echo none)"
step clone git clone --quiet /srv/envkit.git envkit
cd envkit
step demo make demo
echo "venv: $(du -sh .venv | cut -f1)"
step test .venv/bin/pytest -p no:cacheprovider --durations=10 "$@"
INSIDE

# Its own mount and UTS namespaces: the mounts and the host name vanish with it.
# shellcheck disable=SC2016  # the inner script expands its own arguments, not this shell
unshare --mount --uts --fork -- bash -euo pipefail -c '
    root=$1 uv_cache=$2 hostname=$3
    shift 3
    hostname "$hostname"
    mount --make-rprivate /
    mount --rbind /dev "$root/dev"
    mount -t proc proc "$root/proc"
    mount -t sysfs sysfs "$root/sys"
    mount -t tmpfs tmpfs "$root/tmp"
    if [ -d "$uv_cache" ]; then
        mount -t overlay overlay -o "lowerdir=$uv_cache,upperdir=$root/var/uv-upper,workdir=$root/var/uv-work" "$root/uv-cache"
    fi
    exec chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        UV_CACHE_DIR=/uv-cache PIP_CERT=/etc/ssl/certs/network-ca.crt SSL_CERT_FILE=/etc/ssl/certs/network-ca.crt \
        bash /fresh.sh "$@"
' fresh "$root" "$uv_cache" "$hostname" "$@"
