# envkit's user interface: `make help` lists every target.
# Override any variable on the command line: make gpu-dp-cifar GPUS=0,1 MODEL=resnet50 EPOCHS=2

PYTHON ?= python3
VENV ?= .venv
GPUS ?= all
MODEL ?=
BATCH ?=
PER_DEVICE_BATCH ?=
EPOCHS ?=
DATASET ?=
MAX_STEPS ?=
RESULTS_DIR ?= $(CURDIR)/results
DATA_DIR ?= $(CURDIR)/data
TORCH_INDEX_URL ?=
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

ENVKIT := $(VENV)/bin/envkit
CONFIG := envkit.yaml
# What a rendered file depends on: the config, the templates and envkit's version matrix.
RENDER_INPUTS := $(CONFIG) $(wildcard templates/*) $(wildcard envkit/data/matrix.yaml)
comma := ,

# A malformed GPUS= is bad input on any host: stop before anything runs.
ifeq ($(shell printf '%s' '$(GPUS)' | grep -Ex 'all|[0-9]+(,[0-9]+)*'),)
$(error GPUS='$(GPUS)' is invalid: give comma-separated GPU indices (e.g. GPUS=0,1) or GPUS=all)
endif

# Recipe flags only for the variables that were set; the recipes own the defaults.
COMMON_FLAGS := $(if $(EPOCHS),--epochs $(EPOCHS)) $(if $(DATASET),--dataset $(DATASET)) $(if $(MAX_STEPS),--max-steps $(MAX_STEPS))
# BATCH is the global batch (the published tables' column); PER_DEVICE_BATCH the per-replica one.
BATCH_FLAGS := $(if $(BATCH),--global-batch $(BATCH)) $(if $(PER_DEVICE_BATCH),--per-device-batch $(PER_DEVICE_BATCH))
CIFAR_FLAGS := $(COMMON_FLAGS) $(BATCH_FLAGS) $(if $(MODEL),--model $(MODEL))
BUILD_FLAGS := $(if $(NO_CACHE),--no-cache) $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE)) \
	$(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE)) $(foreach c,$(CA_CERTS),--ca-cert $(c)) \
	$(foreach a,$(BUILD_ARGS),--build-arg $(a))
# single-GPU runs use the first GPU of GPUS
FIRST_GPU := $(if $(filter all,$(GPUS)),0,$(firstword $(subst $(comma), ,$(GPUS))))
RUN_ENV = RESULTS_DIR=$(RESULTS_DIR) DATA_DIR=$(DATA_DIR)

# experiment(kind, gpus, recipe and flags): check the host, build (cached), run.
# run.sh creates RESULTS_DIR and DATA_DIR as the caller, so results stay the caller's.
define experiment
	$(ENVKIT) doctor --require $(1) $(if $(2),--gpus $(2))
	$(ENVKIT) build $(1) $(BUILD_FLAGS)
	$(RUN_ENV) $(if $(2),GPUS=$(2)) docker/$(1)/run.sh $(3)
endef

.DEFAULT_GOAL := help
.PHONY: help venv xla-env render build-cpu build-cuda build-tpu-vm cpu-mnist gpu-mnist \
	tpu-mnist tpu-mnist-single gpu-single-cifar gpu-dp-cifar gpu-ddp-cifar compare push save load \
	prune demo test doctor

help: ## list the targets and the variables they read
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z0-9-]*:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "variables: GPUS MODEL BATCH PER_DEVICE_BATCH EPOCHS DATASET MAX_STEPS RESULTS_DIR DATA_DIR VENV PYTHON"
	@echo "           TORCH_INDEX_URL WHEELHOUSE BASE_IMAGE CA_CERTS BUILD_ARGS NO_CACHE REGISTRY TARGET IMAGES_DIR FILE KEEP DRY_RUN"

venv: $(ENVKIT) ## create the pinned dev environment in VENV (default .venv)

$(ENVKIT): requirements/dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL)) -r requirements/dev.txt
	$(VENV)/bin/pip install --no-deps -e .
	touch $@

xla-env: .venv-xla/bin/python ## create the torch_xla environment in .venv-xla (CPU XLA tests)

.venv-xla/bin/python: requirements/xla.txt
	$(PYTHON) -m venv .venv-xla
	.venv-xla/bin/pip install -r requirements/xla.txt
	touch $@

render: | $(ENVKIT) ## render docker/<target>/ from envkit.yaml and templates/
	$(ENVKIT) render --all

# Rendered files are committed; re-render only when one of their inputs changed.
# render leaves unchanged files alone, so touch them: otherwise every later make would
# render again. Dates never decide an image build (envkit build hashes the content).
docker/%/Dockerfile docker/%/run.sh: $(RENDER_INPUTS) | $(ENVKIT)
	$(ENVKIT) render --target $*
	touch docker/$*/Dockerfile docker/$*/run.sh

doctor: | $(ENVKIT) ## what this host offers and which experiment targets work here
	$(ENVKIT) doctor

build-cpu: docker/cpu/Dockerfile | $(ENVKIT) ## build the cpu image (cached; WHEELHOUSE= BASE_IMAGE= NO_CACHE=1)
	$(ENVKIT) build cpu $(BUILD_FLAGS)

build-cuda: docker/cuda/Dockerfile | $(ENVKIT) ## build the cuda image
	$(ENVKIT) build cuda $(BUILD_FLAGS)

build-tpu-vm: docker/tpu-vm/Dockerfile | $(ENVKIT) ## build the Cloud TPU VM image
	$(ENVKIT) build tpu-vm $(BUILD_FLAGS)

cpu-mnist: docker/cpu/Dockerfile docker/cpu/run.sh | $(ENVKIT) ## MNIST on CPU (EPOCHS= DATASET=fake MAX_STEPS=)
	$(call experiment,cpu,,mnist --device cpu $(COMMON_FLAGS) $(BATCH_FLAGS))

gpu-mnist: docker/cuda/Dockerfile docker/cuda/run.sh | $(ENVKIT) ## MNIST on one GPU (first of GPUS=)
	$(call experiment,cuda,$(FIRST_GPU),mnist --device cuda $(COMMON_FLAGS) $(BATCH_FLAGS))

tpu-mnist: docker/tpu-vm/Dockerfile docker/tpu-vm/run.sh | $(ENVKIT) ## MNIST on all TPU cores (one replica per core)
	$(call experiment,tpu-vm,,mnist --device tpu --cores all $(COMMON_FLAGS) $(BATCH_FLAGS))

tpu-mnist-single: docker/tpu-vm/Dockerfile docker/tpu-vm/run.sh | $(ENVKIT) ## MNIST on one TPU core
	$(call experiment,tpu-vm,,mnist --device tpu --cores 1 $(COMMON_FLAGS) $(BATCH_FLAGS))

gpu-single-cifar: docker/cuda/Dockerfile docker/cuda/run.sh | $(ENVKIT) ## CIFAR-10 at 112 px on one GPU (GPUS= MODEL= BATCH= EPOCHS=)
	$(call experiment,cuda,$(FIRST_GPU),cifar --device cuda --parallel none $(CIFAR_FLAGS))

gpu-dp-cifar: docker/cuda/Dockerfile docker/cuda/run.sh | $(ENVKIT) ## CIFAR-10 with DataParallel over GPUS=
	$(call experiment,cuda,$(GPUS),cifar --device cuda --parallel dp $(CIFAR_FLAGS))

gpu-ddp-cifar: docker/cuda/Dockerfile docker/cuda/run.sh | $(ENVKIT) ## CIFAR-10 with DistributedDataParallel (torchrun) over GPUS=
	$(call experiment,cuda,$(GPUS),cifar --device cuda --parallel ddp $(CIFAR_FLAGS))

compare: | $(ENVKIT) ## run the experiments this host can run, then tabulate RESULTS_DIR (EPOCHS= DATASET= MAX_STEPS=)
	$(ENVKIT) compare --results-dir $(RESULTS_DIR) $(COMMON_FLAGS)

demo: | $(ENVKIT) ## the comparisons this host can run, small and fast, then the report (BASE_IMAGE=)
	$(ENVKIT) demo $(if $(BASE_IMAGE),--base-image $(BASE_IMAGE))

push: | $(ENVKIT) ## push TARGET's image to REGISTRY=host[:port][/path]
	$(if $(REGISTRY),,$(error REGISTRY is empty: give one, e.g. make push REGISTRY=registry.example.com:5000/team TARGET=cpu))
	$(ENVKIT) push $(TARGET) --registry $(REGISTRY)

save: | $(ENVKIT) ## write TARGET's image to IMAGES_DIR as .tar.gz + .manifest.json
	$(ENVKIT) save $(TARGET) --output-dir $(IMAGES_DIR)

load: | $(ENVKIT) ## verify FILE (a saved .tar.gz or its manifest) and load it
	$(if $(FILE),,$(error FILE is empty: give the saved image, e.g. make load FILE=images/envkit-cpu-<tag>.tar.gz))
	$(ENVKIT) load $(FILE)

prune: | $(ENVKIT) ## remove TARGET's older images, never latest (KEEP=N spares the N newest; DRY_RUN=1 lists)
	$(ENVKIT) prune $(TARGET) $(if $(KEEP),--keep $(KEEP)) $(if $(DRY_RUN),--dry-run)

test: | $(ENVKIT) ## the whole test suite, integration tests included
	$(VENV)/bin/pytest --slow
