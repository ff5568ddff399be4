#!/usr/bin/env bash
# Rendered by envkit from envkit.yaml, target "cpu" (cpu). Do not edit:
# change envkit.yaml and run `envkit render`.
#
# usage: run.sh COMMAND [ARGS...]        e.g. run.sh python train.py, run.sh python recipes/mnist.py --epochs 1
# Runs COMMAND in the image, from the project's root there, through envkit_run.py (its results file:
# exit status, wall time, metrics, environment) with ./data and ./results mounted. Nothing is added
# to its arguments: the locations and the device reach it as ENVKIT_DATA_DIR, ENVKIT_RESULTS_DIR and
# ENVKIT_DEVICE=cpu (the recipes' defaults for --data-dir, --results-dir, --device), and the target
# as ENVKIT_TARGET=cpu (its results file names it).
# Environment: IMAGE (default envkit-cpu:latest), DATA_DIR (./data), RESULTS_DIR (./results),
# SHM_SIZE (2g), DOCKER (docker),
# NNODES, NODE_RANK, RDZV_ENDPOINT, RDZV_ID, NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME (multi-node
# torchrun: passed into the container when set; NNODES above 1 runs on the host network),
# ENVKIT_EXPERIMENT (the experiment its results file names), ENVKIT_ENV (names of variables passed into the
# container as they are set here, each of which must be: an experiment's env, envkit launch's --env),
# ENVKIT_DRY_RUN=1 (print the docker command instead of running it),
# ENVKIT_IMAGE_DIGEST (the image's manifest digest for the results; found for name@sha256: and buildah's images).
set -euo pipefail

fail() {
  echo "run.sh: error: $*" >&2
  exit 2
}

# shlex.quote's rules, so that a dry run prints one line a shell reads back exactly.
quote() {
  local single="'\"'\"'"
  if [[ -n $1 && $1 != *[!A-Za-z0-9_@%+=:,./-]* ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/$single}"
  fi
}

# docker -v needs absolute host paths.
absolute() {
  if [[ $1 == /* ]]; then
    printf '%s' "$1"
  else
    printf '%s/%s' "$PWD" "${1#./}"
  fi
}

[[ $# -ge 1 && -n $1 ]] || fail "missing COMMAND; usage: run.sh COMMAND [ARGS...], e.g. run.sh python train.py"

image=${IMAGE:-envkit-cpu:latest}
data_dir=$(absolute "${DATA_DIR:-./data}")
results_dir=$(absolute "${RESULTS_DIR:-./results}")
# DOCKER may be several words, such as "sudo docker".
read -r -a docker <<<"${DOCKER:-docker}"
owner="$(id -u):$(id -g)"

# DataLoader workers and NCCL need more than Docker's 64 MB /dev/shm; an empty size
# shares the host's IPC namespace instead.
shm_size=${SHM_SIZE:-2g}
if [[ -z $shm_size ]]; then
  ipc_args=(--ipc=host)
elif [[ $shm_size =~ ^[0-9]+[bkmgBKMG]?$ ]]; then
  ipc_args=(--shm-size "$shm_size")
else
  fail "SHM_SIZE must be a size such as 2g (digits and an optional unit b, k, m, g); got '$shm_size'"
fi

# Multi-node torchrun (the same command on every host): the rendezvous settings reach the
# program, and NCCL and gloo need the host network to reach the other hosts.
multinode_args=()
for name in NNODES NODE_RANK RDZV_ENDPOINT RDZV_ID NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME; do
  [[ -z ${!name:-} ]] || multinode_args+=(-e "$name")
done
# An experiment's env (envkit experiment names them): each reaches the command as it is set here.
env_args=()
for name in ${ENVKIT_ENV:-}; do
  [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || fail "ENVKIT_ENV must be variable names; got '$name'"
  # envkit launch --on hosts prints no --env value: each host exports it, and one it forgot is named here.
  [[ -n ${!name+set} ]] || fail "ENVKIT_ENV names $name, which is not set here; export it first"
  env_args+=(-e "$name")
done
[[ ${NNODES:-1} =~ ^[1-9][0-9]*$ ]] || fail "NNODES must be a number of hosts, 1 or more; got '$NNODES'"
if ((${NNODES:-1} > 1)); then
  multinode_args+=(--net=host)
fi

command=(
  "${docker[@]}" run --rm --init
  --user "$owner" -e HOME=/tmp
  "${ipc_args[@]}"
  -e "ENVKIT_IMAGE=$image" -e ENVKIT_IMAGE_ID -e ENVKIT_IMAGE_DIGEST -e "ENVKIT_RESULTS_OWNER=$owner" -e ENVKIT_EXPERIMENT -e ENVKIT_METRIC_PATTERNS
  ${multinode_args[@]+"${multinode_args[@]}"} ${env_args[@]+"${env_args[@]}"}
  -e ENVKIT_DATA_DIR=/workspace/data -e ENVKIT_RESULTS_DIR=/workspace/results -e ENVKIT_DEVICE=cpu
  -e ENVKIT_TARGET=cpu
  -v "$data_dir:/workspace/data" -v "$results_dir:/workspace/results"
  "$image" python /opt/envkit/envkit_run.py "$@"
)

if [[ ${ENVKIT_DRY_RUN:-} == 1 ]]; then
  line=""
  for word in "${command[@]}"; do
    line+="${line:+ }$(quote "$word")"
  done
  printf '%s\n' "$line"
  exit 0
fi

# Created by the caller, not by dockerd as root.
mkdir -p -- "$data_dir" "$results_dir"
# The results record the image's id: a tag moves to the next build, an id does not.
if image_id=$("${docker[@]}" image inspect --format '{{.Id}}' "$image" 2>/dev/null) && [[ -n $image_id ]]; then
  export ENVKIT_IMAGE_ID=$image_id
else
  unset ENVKIT_IMAGE_ID
fi
# ... and its manifest digest where one is known: the caller's (a registry's), the one in
# IMAGE=name@sha256:..., or buildah's for an image it built (the engine's copy has its ID).
if [[ -z ${ENVKIT_IMAGE_DIGEST:-} ]]; then
  if [[ $image == *@sha256:* ]]; then
    export ENVKIT_IMAGE_DIGEST=${image##*@}
  elif [[ -n ${ENVKIT_IMAGE_ID:-} ]] && command -v buildah >/dev/null \
    && digest=$(buildah inspect --type image --format '{{.FromImageDigest}}' "$ENVKIT_IMAGE_ID" 2>/dev/null); then
    export ENVKIT_IMAGE_DIGEST=$digest
  fi
fi
exec "${command[@]}"
