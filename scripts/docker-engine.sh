#!/usr/bin/env bash
# Start or stop a Docker engine (dockerd) that this script owns.
#
#   scripts/docker-engine.sh start    start dockerd in the background, wait until it answers
#   scripts/docker-engine.sh stop     stop the dockerd started above, by its recorded PID
#   scripts/docker-engine.sh status   exit 0 when an engine answers on the socket
#
# CI machines have no init system to run dockerd for us, and a shared machine must
# never have its engines killed by name: the PID we started is the only one we stop.
#
# Environment:
#   DOCKERD            dockerd binary (default: dockerd on PATH)
#   DOCKER             docker client used to probe readiness (default: /usr/bin/docker when present)
#   ENVKIT_DOCKERD_PIDFILE  where the PID is recorded (default: /tmp/envkit-dockerd.pid)
#   ENVKIT_DOCKERD_LOG      dockerd's log (default: /tmp/envkit-dockerd.log)
#   ENVKIT_DOCKERD_WAIT     seconds to wait for readiness (default: 60)
set -euo pipefail

pidfile=${ENVKIT_DOCKERD_PIDFILE:-/tmp/envkit-dockerd.pid}
logfile=${ENVKIT_DOCKERD_LOG:-/tmp/envkit-dockerd.log}
wait_s=${ENVKIT_DOCKERD_WAIT:-60}
dockerd_bin=${DOCKERD:-dockerd}
if [ -z "${DOCKER:-}" ]; then
    if [ -x /usr/bin/docker ]; then DOCKER=/usr/bin/docker; else DOCKER=docker; fi
fi

die() { echo "docker-engine.sh: $*" >&2; exit 1; }

engine_answers() { "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

recorded_pid_alive() {
    [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

start() {
    if engine_answers; then
        echo "docker-engine.sh: an engine already answers; not starting another"
        return 0
    fi
    command -v "$dockerd_bin" >/dev/null || die "no dockerd found: apt-get install -y docker.io"
    [ "$(id -u)" -eq 0 ] || die "dockerd needs root: run this script with sudo"
    if recorded_pid_alive; then
        die "dockerd $(cat "$pidfile") from $pidfile is running but does not answer; see $logfile"
    fi
    "$dockerd_bin" >"$logfile" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq "$wait_s"); do
        if engine_answers; then
            echo "docker-engine.sh: dockerd $(cat "$pidfile") ready ($("$DOCKER" version --format '{{.Server.Version}}'))"
            return 0
        fi
        recorded_pid_alive || die "dockerd exited during start-up; last log lines: $(tail -n 3 "$logfile" | tr '\n' ' ')"
        sleep 1
    done
    die "dockerd $(cat "$pidfile") did not answer within ${wait_s}s; see $logfile"
}

stop() {
    if ! recorded_pid_alive; then
        echo "docker-engine.sh: no dockerd recorded in $pidfile; nothing to stop"
        rm -f "$pidfile"
        return 0
    fi
    pid=$(cat "$pidfile")
    kill "$pid"
    # dockerd stops its containers first; give it the time it asks for.
    for _ in $(seq 30); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; echo "docker-engine.sh: dockerd $pid stopped"; return 0; }
        sleep 1
    done
    die "dockerd $pid still running 30 s after SIGTERM"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) engine_answers ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
