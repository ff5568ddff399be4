# envkit's make targets for this project, written by `envkit init` (include it from your Makefile).
#   make <experiment>        one experiment of envkit.yaml in its default target's image, e.g. make train;
#                            TARGET=cuda runs it on another of its targets
#                            (GPUS=0,1  ARGS='--epochs 3'  RESULTS_DIR={{ results_folder }}  DATA_DIR=data  DRY_RUN=1)
#                            RECIPE_PYTHON=.venv-cpu/bin/python runs it on this host with that interpreter;
#                            NO_CACHE BASE_IMAGE WHEELHOUSE CA_CERTS BUILD_ARGS change the build;
#                            NNODES NODE_RANK RDZV_ENDPOINT RDZV_ID NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME: torchrun
#                            across hosts; ON=ENGINE (envkit launch --help lists them) launches it there
#                            instead (NNODES GPUS_PER_NODE HOSTS REGISTRY LAUNCH_FLAGS), never here.
#   make render | lock | doctor | compare | report | help
# EPOCHS MODEL BATCH PER_DEVICE_BATCH DATASET MAX_STEPS are envkit's seed recipes' flags: your script takes its own
# (ARGS='--epochs 3'), so setting one stops make in one line instead of being dropped.
# The experiments are read from envkit.yaml each time, so a new one is a make target at once.
# The including Makefile's default goal stays its own: included at its top, its first target after the include.
ENVKIT_CALLERS_GOAL := $(.DEFAULT_GOAL)
ENVKIT ?= envkit
ENVKIT_CONFIG ?= envkit.yaml
RESULTS_DIR ?= {{ results_folder }}
DATA_DIR ?= data
ENVKIT_EXPERIMENTS := $(shell $(ENVKIT) experiment --list --config '$(ENVKIT_CONFIG)' 2>/dev/null)
ENVKIT_DRY_RUN = $(if $(DRY_RUN),--dry-run)
# A value quoted for the shell: '...' with each ' written as '\''.
envkit_quote = '$(subst ','\'',$(1))'

ENVKIT_RECIPE_FLAGS := $(strip $(foreach v,EPOCHS MODEL BATCH PER_DEVICE_BATCH DATASET MAX_STEPS,$(if $($(v)),$(v))))
ifneq ($(ENVKIT_RECIPE_FLAGS),)
$(error $(ENVKIT_RECIPE_FLAGS): flags of envkit's seed recipes, which a project's script does not take: pass your script's own, ARGS='--epochs 3')
endif

ENVKIT_WHERE = --config $(call envkit_quote,$(ENVKIT_CONFIG)) --results-dir $(call envkit_quote,$(RESULTS_DIR)) \
	--data-dir $(call envkit_quote,$(DATA_DIR)) $(if $(TARGET),--target $(call envkit_quote,$(TARGET)))
ENVKIT_BUILD = $(if $(NO_CACHE),--no-cache) $(if $(BASE_IMAGE),--base-image $(call envkit_quote,$(BASE_IMAGE))) \
	$(if $(WHEELHOUSE),--wheelhouse $(call envkit_quote,$(WHEELHOUSE))) \
	$(foreach c,$(CA_CERTS),--ca-cert $(call envkit_quote,$(c))) $(foreach a,$(BUILD_ARGS),--build-arg $(call envkit_quote,$(a)))
ENVKIT_MULTINODE = $(foreach v,NNODES NODE_RANK RDZV_ENDPOINT RDZV_ID NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME,\
	$(if $($(v)),$(v)=$(call envkit_quote,$($(v)))))
ENVKIT_LAUNCH = --on $(call envkit_quote,$(ON)) $(if $(NNODES),--nodes $(call envkit_quote,$(NNODES))) \
	$(if $(GPUS_PER_NODE),--gpus-per-node $(call envkit_quote,$(GPUS_PER_NODE))) \
	$(if $(HOSTS),--hosts $(call envkit_quote,$(HOSTS))) $(if $(REGISTRY),--registry $(call envkit_quote,$(REGISTRY))) \
	$(foreach v,NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME,$(if $($(v)),--env $(call envkit_quote,$(v)=$($(v))))) $(LAUNCH_FLAGS)

.PHONY: help render lock doctor compare report $(ENVKIT_EXPERIMENTS)

help: ## list envkit's targets and the project's experiments
	@echo "envkit targets: render lock doctor compare report"
	@echo "experiments: $(ENVKIT_EXPERIMENTS)"

render: ## render docker/<target>/ and the notebooks from envkit.yaml
	$(ENVKIT) render --all --config '$(ENVKIT_CONFIG)'

lock: ## lock every target's packages, the project's requirements with its torch build
	$(ENVKIT) lock --all --config '$(ENVKIT_CONFIG)'

doctor: ## what this host offers and which experiments run here
	$(ENVKIT) doctor --config '$(ENVKIT_CONFIG)'

compare: ## run the experiments this host can run, then the report
	$(ENVKIT) compare --config '$(ENVKIT_CONFIG)' --results-dir '$(RESULTS_DIR)' $(ENVKIT_DRY_RUN)

report: ## tabulate RESULTS_DIR
	$(ENVKIT) report '$(RESULTS_DIR)' --config '$(ENVKIT_CONFIG)'

# ON= set: envkit launch hands the experiment to that engine (an engine it does not know is its one line); else
# envkit experiment runs it here, in its target's image or with RECIPE_PYTHON.
$(ENVKIT_EXPERIMENTS):
ifeq ($(ON),)
	$(ENVKIT_MULTINODE) $(ENVKIT) experiment $@ $(ENVKIT_WHERE) $(if $(GPUS),--gpus $(call envkit_quote,$(GPUS))) \
		$(if $(RECIPE_PYTHON),--python $(call envkit_quote,$(RECIPE_PYTHON))) $(ENVKIT_BUILD) $(ENVKIT_DRY_RUN) \
		$(if $(ARGS),-- $(ARGS))
else
	$(ENVKIT) launch $@ $(ENVKIT_WHERE) $(ENVKIT_LAUNCH) $(ENVKIT_DRY_RUN) $(if $(ARGS),-- $(ARGS))
endif

.DEFAULT_GOAL := $(ENVKIT_CALLERS_GOAL)
