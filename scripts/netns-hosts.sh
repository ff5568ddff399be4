#!/usr/bin/env bash
# N hosts on one machine: a hub network namespace holding a bridge, and one
# namespace per node joined to it by a veth pair. Every host has its own host
# name and an /etc/hosts naming all of them (c10d fails on names that do not
# resolve), so torchrun and Slurm see a small cluster.
#
#   netns-hosts.sh up STATE_DIR [NODES]         create hub, node1 .. nodeNODES (default 2)
#   netns-hosts.sh exec STATE_DIR HOST CMD...   run CMD as HOST (hub, node1, ...)
#   netns-hosts.sh down STATE_DIR               end what runs in them, delete them
#
# Namespace names carry a run id (ENVKIT_NETNS_RUN, default PID + random), so
# runs never collide; `down` deletes only the namespaces recorded in STATE_DIR.
# Addresses are private to the hub's bridge: the root namespace is never touched.
set -euo pipefail

SUBNET=10.213.0  # hub .1, node K .(10+K); only visible inside this run's namespaces
HUB_IP=$SUBNET.1

usage() {
    echo "usage: $0 up STATE_DIR [NODES] | exec STATE_DIR HOST COMMAND... | down STATE_DIR" >&2
    exit 2
}

state_file() { # the state file NAME in STATE_DIR, or one line and exit 2
    [ -f "$1/$2" ] || { echo "$0: $1 holds no hosts (no $2); run '$0 up $1' first" >&2; exit 2; }
    echo "$1/$2"
}

up() {
    local state=$1 nodes=${2:-2}
    case $nodes in ''|*[!0-9]*|0) echo "$0: NODES must be a whole number from 1 to 200, not '$nodes'" >&2; exit 2 ;; esac
    [ "$nodes" -le 200 ] || { echo "$0: NODES must be a whole number from 1 to 200, not '$nodes'" >&2; exit 2; }
    mkdir -p "$state"
    [ ! -e "$state/namespaces" ] || { echo "$0: $state already holds hosts; run '$0 down $state' first" >&2; exit 2; }
    local run=${ENVKIT_NETNS_RUN:-$$r$RANDOM}
    local prefix="envkit-$run"
    : >"$state/namespaces"
    # A failure half way leaves what was made recorded: undo it before reporting.
    trap 'down "$state"' ERR

    local hub="$prefix-hub"
    ip netns add "$hub"
    echo "hub $hub" >>"$state/namespaces"
    ip -n "$hub" link set lo up
    ip -n "$hub" link add br0 type bridge
    ip -n "$hub" addr add "$HUB_IP/24" dev br0
    ip -n "$hub" link set br0 up
    {
        echo "127.0.0.1 localhost"
        echo "$HUB_IP hub"
    } >"$state/hosts.new"

    local k ns
    for k in $(seq 1 "$nodes"); do
        ns="$prefix-node$k"
        ip netns add "$ns"
        echo "node$k $ns" >>"$state/namespaces"
        ip -n "$ns" link set lo up
        # Both ends are created inside this run's namespaces, so their names cannot clash with anyone's.
        ip -n "$hub" link add "n$k" type veth peer name eth0 netns "$ns"
        ip -n "$hub" link set "n$k" master br0 up
        ip -n "$ns" addr add "$SUBNET.$((10 + k))/24" dev eth0
        ip -n "$ns" link set eth0 up
        echo "$SUBNET.$((10 + k)) node$k" >>"$state/hosts.new"
    done
    mv "$state/hosts.new" "$state/hosts"
    trap - ERR
}

run_as() {
    local state=$1 host=$2
    shift 2
    [ $# -gt 0 ] || usage
    local namespaces hosts ns
    namespaces=$(state_file "$state" namespaces) || exit 2
    hosts=$(state_file "$state" hosts) || exit 2
    ns=$(awk -v host="$host" '$1 == host { print $2 }' "$namespaces")
    [ -n "$ns" ] || { echo "$0: no host '$host' in $state; hosts: $(cut -d' ' -f1 "$namespaces" | tr '\n' ' ')" >&2; exit 2; }
    # nsenter, not `ip netns exec`: that remounts /sys and hides the cgroup mounts slurmd needs.
    # The new UTS and mount namespaces give the host its name and hosts file without changing ours.
    # shellcheck disable=SC2016 # $1, $2 and $@ are the inner shell's
    exec nsenter --net="/run/netns/$ns" unshare --uts --mount \
        sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"' \
        sh "$host" "$hosts" "$@"
}

end_processes_in() { # TERM, then KILL, every process inside namespace $1 (all started by this run)
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] || return 0
    # shellcheck disable=SC2086 # one PID per word
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 50); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [ -n "$pids" ] || return 0
        sleep 0.1
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
}

down() {
    local state=$1 host ns
    [ -f "$state/namespaces" ] || return 0
    # Nodes first, the hub last, reversed from how they were made.
    tac "$state/namespaces" | while read -r host ns; do
        end_processes_in "$ns"
        if [ -e "/run/netns/$ns" ]; then
            ip netns delete "$ns"
        fi
    done
    rm -f "$state/namespaces" "$state/hosts" "$state/hosts.new"
}

[ $# -ge 2 ] || usage
command=$1
shift
case $command in
    up) [ $# -le 2 ] || usage; up "$@" ;;
    exec) [ $# -ge 3 ] || usage; run_as "$@" ;;
    down) [ $# -eq 1 ] || usage; down "$1" ;;
    *) usage ;;
esac
