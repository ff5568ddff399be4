#!/usr/bin/env bash
# The GPU check envkit owns (issue 32's tests), sized for a lent GPU machine: one NVIDIA GPU, Python with torch and
# torchvision installed, no Docker, no network, 15 minutes of device time in all.
#
# usage: benchmarks/gpu_check.sh            from the checkout's root, on the GPU machine
#        GPU_CHECK_DRY_RUN=1 benchmarks/gpu_check.sh   the same commands on a CPU host, tiny sizes, --allow-cpu
#
# Through `envkit experiment ... --python $PYTHON` on this host, it runs:
#   1. tests/example_project's train.py on its cuda target (a user's script, after `envkit init`), and prints the
#      record's device block: the GPU the program really initialised;
#   2. this repository's gpu-mnist at its published settings (E1: 10 epochs, batch 128) on generated MNIST of the
#      published size (60,000 + 10,000 images, MNIST's own files), and gpu-single-cifar (E2: mobilenet_v2 at 112 px,
#      global batch 256) on generated CIFAR-10 of the published size (50,000 + 10,000, CIFAR's own files), capped at
#      GPU_CHECK_CIFAR_EPOCHS epochs (default 3 of the published 10: its figure is per epoch);
#   3. `envkit report --reference`: the rows beside the seed's 54.4 s (10 epochs) and 25.6 s per epoch.
# Nothing is downloaded: the data are written by the tests' writers (tests/mnist_files.py, tests/cifar_files.py).
#
# Environment: PYTHON (python3: the interpreter with torch that runs the experiments and writes the data),
# ENVKIT (the envkit command; default: envkit on PATH, else $PYTHON -m envkit from this checkout),
# GPU_CHECK_WORK (the folder it writes into; default: a new temporary one), GPU_CHECK_CIFAR_EPOCHS (3),
# GPU_CHECK_STEP_TIMEOUT (seconds each experiment may take; default 300), GPU_CHECK_DRY_RUN=1 (see above).
set -euo pipefail

fail() {
  echo "gpu_check: error: $*" >&2
  exit 2
}

say() {
  echo "gpu_check: $*"
}

absolute() {  # a command named by a relative path keeps working from the other folders the check runs in
  if [[ $1 == */* && $1 != /* ]]; then printf '%s/%s' "$PWD" "$1"; else printf '%s' "$1"; fi
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=$(absolute "${PYTHON:-python3}")
dry=${GPU_CHECK_DRY_RUN:-0}
cifar_epochs=${GPU_CHECK_CIFAR_EPOCHS:-3}
step_timeout=${GPU_CHECK_STEP_TIMEOUT:-300}
[[ $dry == 0 || $dry == 1 ]] || fail "GPU_CHECK_DRY_RUN must be 0 or 1; got '$dry'"
[[ $cifar_epochs =~ ^[1-9][0-9]*$ ]] || fail "GPU_CHECK_CIFAR_EPOCHS must be a positive integer; got '$cifar_epochs'"
[[ $step_timeout =~ ^[1-9][0-9]*$ ]] || fail "GPU_CHECK_STEP_TIMEOUT must be seconds; got '$step_timeout'"
command -v "$python" >/dev/null || fail "no $python here: set PYTHON to the interpreter with torch and torchvision"

if [[ -n ${ENVKIT:-} ]]; then
  read -r -a envkit <<<"$ENVKIT"
  envkit[0]=$(absolute "${envkit[0]}")
elif command -v envkit >/dev/null; then
  envkit=(envkit)
else
  envkit=("$python" -m envkit)
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
fi
"${envkit[@]}" --help >/dev/null 2>&1 \
  || fail "envkit does not run here (${envkit[*]} --help failed): install it and its dependencies, or set ENVKIT"
missing=$("$python" -c '
import importlib.util
print(" ".join(name for name in ("torch", "torchvision", "jsonschema", "pytest") if importlib.util.find_spec(name) is None))')
[[ -z $missing ]] || fail "$python lacks $missing (torch and torchvision run the recipes; the data writers need the rest)"

# No GPU: one line, before anything is written (the dry run is this check's CPU form).
allow=()
if [[ $dry == 1 ]]; then
  allow=(--allow-cpu)
  say "dry run: the same commands on the CPU at tiny sizes (--allow-cpu: each run is recorded as a CPU run)"
elif ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  fail "no CUDA GPU here (torch.cuda.is_available() is false in $python); GPU_CHECK_DRY_RUN=1 runs its commands on the CPU"
fi

work=${GPU_CHECK_WORK:-$(mktemp -d -t envkit-gpu-check.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
results=$work/results data=$work/data
# The report reads every record there: an earlier check's would join this one's rows.
if compgen -G "$results/*.json" >/dev/null; then
  fail "$results holds an earlier check's records, which the report would pool with this one's: give another GPU_CHECK_WORK"
fi
mkdir -p "$results" "$data"
say "writing into $work"

# The published sizes (or tiny ones for the dry run), written in the datasets' own formats.
mnist=gpu-mnist cifar=gpu-single-cifar
if [[ $dry == 1 ]]; then
  sizes=(256 128 64 16)  # CIFAR: 320 training images, one batch of the published 256
  mnist_size=(--epochs 1)
  cifar_size=(--epochs 1 --image-size 32)
  # The recipes' experiments say --device cuda themselves (envkit.yaml): on a CPU, their cpu twins run the same
  # recipe with the same arguments but the device.
  mnist=cpu-mnist cifar=cpu-single-cifar
  say "dry run: $mnist and $cifar stand in for gpu-mnist and gpu-single-cifar, whose recipes ask for CUDA"
else
  sizes=(60000 10000 10000 10000)
  mnist_size=()
  cifar_size=(--epochs "$cifar_epochs")
  say "gpu-single-cifar runs $cifar_epochs of the published 10 epochs (GPU_CHECK_CIFAR_EPOCHS): the 15 minutes" \
    "of device time hold the rest; the published 25.6 s is per epoch, so a shorter run compares"
fi
started=$SECONDS
PYTHONPATH="$root/tests:$root/recipes${PYTHONPATH:+:$PYTHONPATH}" "$python" - "$data" "${sizes[@]}" <<'EOF'
import sys
from pathlib import Path

from cifar_files import write_cifar10
from mnist_files import write_mnist

data, mnist_train, mnist_test, cifar_per_batch, cifar_test = sys.argv[1], *map(int, sys.argv[2:])
write_mnist(Path(data), train_count=mnist_train, test_count=mnist_test)
write_cifar10(Path(data), train_per_batch=cifar_per_batch, test_size=cifar_test)
print(f"gpu_check: data: MNIST {mnist_train} + {mnist_test}, CIFAR-10 {5 * cifar_per_batch} + {cifar_test} images")
EOF
say "data written in $((SECONDS - started)) s"

experiment() {  # envkit experiment NAME ... (recipe arguments after --) with the step's time limit
  local begun=$SECONDS
  timeout "$step_timeout" "${envkit[@]}" experiment --results-dir "$results" ${allow[@]+"${allow[@]}"} "$@" \
    || fail "envkit experiment $* failed or ran past ${step_timeout} s (exit $?)"
  say "$1: $((SECONDS - begun)) s"
}

# 1. The example project's GPU experiment: a user's script after `envkit init`, on its cuda target.
example=$work/example
rm -rf "$example"
cp -R "$root/tests/example_project" "$example"
(cd "$example" && "${envkit[@]}" init >/dev/null) || fail "envkit init failed in $example"
# Its test line, as PyTorch's MNIST example prints it, read into metrics (envkit.yaml's metrics patterns).
awk '{ print } $0 == "  train:" {
  print "    metrics:"
  print "      patterns:"
  print "        accuracy: '"'"'Accuracy: \\d+/\\d+ \\((\\d+%)\\)'"'"'"
  print "        test_loss: '"'"'Average loss: ([0-9.]+)'"'"'"
}' "$example/envkit.yaml" >"$example/envkit.yaml.new" && mv "$example/envkit.yaml.new" "$example/envkit.yaml"
if ! "$python" -c 'import tabulate' 2>/dev/null; then
  # The example's one dependency of its own, and no network to install it: a two-column printer in its place,
  # on the run's path only (the check is about the device, not the table).
  mkdir -p "$work/site"
  printf '%s\n' 'def tabulate(rows, headers=()):' \
    '    return "\n".join("  ".join(str(cell) for cell in row) for row in [headers, *rows])' >"$work/site/tabulate.py"
  export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
  say "$python has no tabulate (train.py's own dependency): a two-column printer from $work/site stands in"
fi
(cd "$example" && experiment train --target cuda --python "$python")
"$python" - "$results" <<'EOF'
import json
import sys
from pathlib import Path

for path in sorted(Path(sys.argv[1]).glob("*.json")):
    record = json.loads(path.read_text())
    if record.get("run", {}).get("experiment") == "train":
        print("gpu_check: the example's record, its device block:", json.dumps(record["run"].get("device"), sort_keys=True))
        print("gpu_check: its metrics:", json.dumps(record.get("metrics"), sort_keys=True))
EOF

# 2. The seed recipes at their published settings on data of the published sizes, nothing downloaded.
cd "$root"
experiment "$mnist" --python "$python" --data-dir "$data" -- --quiet --no-download ${mnist_size[@]+"${mnist_size[@]}"}
experiment "$cifar" --python "$python" --data-dir "$data" -- --quiet --no-download --data-check exists \
  "${cifar_size[@]}"

# 3. The report: the example's comparison, and the recipes' rows beside the published ones.
"${envkit[@]}" report "$results" --reference
say "done in $SECONDS s"
