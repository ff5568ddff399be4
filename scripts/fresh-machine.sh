#!/usr/bin/env bash
# The README's first commands on a machine that is not ours: a Debian 13 root made by
# debootstrap with README's prerequisites alone (python3 is 3.13, and there is no 3.11; python3-venv, which
# README names for Debian; make; git and ca-certificates to clone), entered as a chroot in its own mount and UTS namespace whose
# /etc/hosts does not name its host (as on many a cloud or container host: no 127.0.1.1 line).
# Inside it, as an ordinary user (useradd -m) and as README says: git clone, make demo, then
# make test (TEST ARGS, if any, are its PYTEST_ARGS: a part of the suite). Prints each step's wall
# time and exit status, the venv's size and the disk the root took at its peak, on stdout
# ("step: <name> <seconds> s (exit <status>)").
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
echo "step: root $(since "$start") s (exit 0)"
root=$(mktemp -d "${TMPDIR:-/tmp}/envkit-fresh.XXXXXX")
cleanup() { [ "${ENVKIT_FRESH_KEEP:-}" = 1 ] || rm -rf --one-file-system "$root"; }
trap cleanup EXIT
tar -xf "$tarball" -C "$root"
# The tarball's "." (a root made in mktemp's 0700 folder) would be the chroot's /, which an ordinary user could
# not enter ("runuser: failed to execute env: Permission denied").
chmod 755 "$root"
git clone --quiet --bare --no-local "$repo" "$root/srv/envkit.git"
mkdir -p "$root/uv-cache" "$root/var/uv-upper" "$root/var/uv-work"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "${ENVKIT_FRESH_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$root/etc/ssl/certs/network-ca.crt"
# Its own name resolves nowhere: a single-host rendezvous must not need it (torchrun on loopback).
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
echo "$hostname" >"$root/etc/hostname"

# What runs inside: the README's commands, each timed, as an ordinary user with a home directory.
cat >"$root/fresh.sh" <<'INSIDE'
set -euo pipefail
user=envkit-user
/usr/sbin/useradd -m "$user"
chown -R "$user:" /srv/envkit.git  # git refuses a repository another user owns ("dubious ownership")
# The host's uv cache, the user's: its directories (a directory's copy-up copies no file) and uv's own markers
# at its top (.lock, each bucket's .git), which uv opens for writing.
# uv on this host may be writing its cache meanwhile (CI runs its suite beside this check): an entry of its that
# vanishes while find walks it, or before chown reaches it, is no failure (CI's run stopped on a .tmp folder).
if [ -d /uv-cache ]; then
    find /uv-cache -ignore_readdir_race -type d -exec chown "$user:" {} + || true
    find /uv-cache -ignore_readdir_race -maxdepth 2 -type f -exec chown "$user:" {} + || true
fi
# A command line run by the user in their home, as they would type it.
as_user() { /usr/sbin/runuser -u "$user" -- env HOME="/home/$user" bash -c "cd && $1"; }
step() {
    local name=$1 start code=0
    start=$(date +%s.%N)
    as_user "$2" || code=$?
    echo "step: $name $(python3 -c "import time; print(round(time.time() - $start, 1))") s (exit $code)"
    return "$code"
}
# The root's disk (this file system only: not the host's uv cache below it), once a minute: its peak, said
# however the steps end.
# The sampler shares the host's PID namespace, where CI's own suite runs beside it: a sleep of its that ends
# early is no reason to stop sampling, and a sampler already gone at the end is no failure of the steps
# (CI's run exited 1 on "kill: (2914) - No such process" after both steps had passed).
(while :; do sleep 60 || true; du -sxk / 2>/dev/null | cut -f1; done) >/var/tmp/disk-samples &
sampler=$!
gigabytes() { awk '{ printf "%.1f GB", $1 / 1048576 }'; }
disk() {
    kill "$sampler" 2>/dev/null || echo "disk: the sampler (PID $sampler) had ended; its samples are kept"
    echo "disk: peak $( (cat /var/tmp/disk-samples; du -sxk /) | sort -n | tail -1 | gigabytes), at the end $(du -sxk / | gigabytes)"
}
trap disk EXIT
echo "python3: $(python3 --version); python3.11: $(command -v python3.11 || echo none)"
step clone "git clone --quiet /srv/envkit.git envkit"
step demo "cd envkit && make demo"
echo "venv: $(du -sh "/home/$user/envkit/.venv" | cut -f1)"
step test "cd envkit && make test${1:+ PYTEST_ARGS=$(printf '%q' "$*")}"
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
    if [ -d "$uv_cache" ]; then
        mount -t overlay overlay -o "lowerdir=$uv_cache,upperdir=$root/var/uv-upper,workdir=$root/var/uv-work" "$root/uv-cache"
    fi
    exec chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        UV_CACHE_DIR=/uv-cache PIP_CERT=/etc/ssl/certs/network-ca.crt SSL_CERT_FILE=/etc/ssl/certs/network-ca.crt \
        bash /fresh.sh "$@"
' fresh "$root" "$uv_cache" "$hostname" "$@"
