#!/usr/bin/env bash
# make test: the whole suite as two pytest runs at once. The integration tests (marked slow: image builds,
# clusters, notebooks) wait on the disk, the Docker engine and each other for about a third of their time; the
# other tests, about 6 minutes of one core, run in that time at a lower priority (nice 10) instead of after them.
# The integration tests' output comes as they run, the other tests' once both are done. The exit status is the
# integration run's where it failed, else the other run's (pytest's own: 1 a test failed, 2 interrupted, ...).
#
#   scripts/test-suite.sh PYTEST    e.g. scripts/test-suite.sh .venv/bin/pytest
set -uo pipefail
pytest=${1:?usage: scripts/test-suite.sh PYTEST}

log=$(mktemp "${TMPDIR:-/tmp}/envkit-tests-log.XXXXXX") || exit 1
# In a subshell: bash makes a background command ignore SIGINT and SIGQUIT, and so every test it would run (the
# tests of interrupted runs among them), and Ctrl-C would not reach it.
(exec nice -n 10 "$pytest" -m "not slow" --durations=10 >"$log" 2>&1) &
others=$!
# Interrupted (Ctrl-C reaches both runs; a kill, once the integration run has ended): end the other run too, and
# show what it had done.
trap 'kill "$others" 2>/dev/null; wait "$others"; cat "$log"; rm -f "$log"; exit 130' INT TERM

# --durations: what each image build and cluster costs, in every CI log.
"$pytest" --slow -m slow --durations=30
slow=$?
wait "$others"
rest=$?
trap - INT TERM
cat "$log"
rm -f "$log"
if [ "$slow" -ne 0 ]; then
    exit "$slow"
fi
exit "$rest"
