# envkit's make targets for this project, written by `envkit init` (include it from your Makefile).
#   make <experiment>        one experiment of envkit.yaml in its default target's image, e.g. make train;
#                            TARGET=cuda runs it on another of its targets
#                            (GPUS=0,1  ARGS='--epochs 3'  RESULTS_DIR=results  DATA_DIR=data  DRY_RUN=1)
#   make render | lock | doctor | compare | report | help
# The experiments are read from envkit.yaml each time, so a new one is a make target at once.
# The including Makefile's default goal stays its own: included at its top, its first target after the include.
ENVKIT_CALLERS_GOAL := $(.DEFAULT_GOAL)
ENVKIT ?= envkit
ENVKIT_CONFIG ?= envkit.yaml
RESULTS_DIR ?= results
DATA_DIR ?= data
ENVKIT_EXPERIMENTS := $(shell $(ENVKIT) experiment --list --config '$(ENVKIT_CONFIG)' 2>/dev/null)
ENVKIT_DRY_RUN = $(if $(DRY_RUN),--dry-run)

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

$(ENVKIT_EXPERIMENTS):
	$(ENVKIT) experiment $@ --config '$(ENVKIT_CONFIG)' --results-dir '$(RESULTS_DIR)' --data-dir '$(DATA_DIR)' \
		$(if $(TARGET),--target '$(TARGET)') $(if $(GPUS),--gpus '$(GPUS)') $(ENVKIT_DRY_RUN) $(if $(ARGS),-- $(ARGS))

.DEFAULT_GOAL := $(ENVKIT_CALLERS_GOAL)
