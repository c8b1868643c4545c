# dlperf: the user's entry. `make resnet50-pytorch NODES=4 GPUS=8 AMP=on`, `make test`.
# Every <model>-<framework> target is a pattern rule: a framework added later works at once.

PYTHON   ?= python3
VENV     ?= .venv
DLPERF   := $(VENV)/bin/dlperf
STAMP    := $(VENV)/.dlperf-installed

# Case selection, passed to `dlperf run` only when set.
NODES    ?=
GPUS     ?=
BATCH    ?=
AMP      ?=
REPEATS  ?=
PROFILE  ?= auto
RUNTIME  ?= local
INVENTORY?=
SESSION  ?=
RUN_ARGS ?=
# SIGNING_KEY=~/.ssh/dlperf_ed25519: the SSH key that signs sessions (run targets) and versions
# (release); its public half listed in the reports folder's allowed_signers (docs/reports.md).
SIGNING_KEY ?=
# FRAMEWORK_PYTHON=/usr/bin/python3: an interpreter that already holds the framework (a GPU
# machine's own CUDA build) runs the scripts instead of .venvs/<framework> (local runtime).
FRAMEWORK_PYTHON ?=
# CONTAINER=docker (or podman): the local runtime runs each node's command in the framework's
# image (`make images`) instead of .venvs/<framework> (docs/clusters.md, "Container platforms").
CONTAINER ?=
# HARDWARE="NVIDIA H100 80GB HBM3": the nodes' device for the estimate before the run and, under
# Slurm, its time-limit guard (--hardware); exported to dlperf, never through a shell's quoting.
HARDWARE ?=
ifneq ($(HARDWARE),)
export DLPERF_HARDWARE := $(HARDWARE)
endif
# REHEARSE=on (as root): the cases on simulated hosts of this machine, one per node of the largest
# case, each its own address, hostname and clock (docs/clusters.md); no INVENTORY.
REHEARSE ?=
ifneq ($(filter-out on off,$(REHEARSE)),)
$(error REHEARSE=$(REHEARSE) is not allowed; allowed values: on, off)
endif
# A rehearsal runs through the process runtime; a RUNTIME given (command line or environment) is
# passed on, and refused by dlperf unless it is process, never silently replaced.
rehearse_runtime = $(if $(filter file,$(origin RUNTIME)),process,$(RUNTIME))

run_flags = --profile $(PROFILE) \
	$(if $(filter on,$(REHEARSE)),--runtime $(rehearse_runtime) --simulated-hosts,--runtime $(RUNTIME)) \
	$(if $(NODES),--nodes $(NODES)) $(if $(GPUS),--gpus $(GPUS)) \
	$(if $(BATCH),--batch $(BATCH)) $(if $(AMP),--amp $(AMP)) \
	$(if $(REPEATS),--repeats $(REPEATS)) $(if $(INVENTORY),--inventory $(INVENTORY)) \
	$(if $(SESSION),--session $(SESSION)) $(if $(FRAMEWORK_PYTHON),--python $(FRAMEWORK_PYTHON)) \
	$(if $(CONTAINER),--container $(CONTAINER)) \
	$(if $(SIGNING_KEY),--signing-key "$(SIGNING_KEY)") $(RUN_ARGS)

bench = $(DLPERF) run --framework $(2) --model $(1) $(run_flags)

.PHONY: install envs test test-fast lint selftest report images base-image release audit clean-venv \
	gpu-wheels gpu-pack gpu-check gpu-check-rehearsal

install: $(STAMP)

$(STAMP): pyproject.toml PyTorch/requirements-cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test]' -r PyTorch/requirements-cpu.txt
	touch $@

# The local runtime's environments (.venvs/<framework>, .venvs/<source>), made once ahead of
# runs and tests (otherwise the first run or test that needs one makes it). ENVS="pytorch,paddle"
# narrows the set.
ENVS ?=

envs: $(STAMP)
	$(DLPERF) envs $(ENVS)

resnet50-%: $(STAMP)
	$(call bench,resnet50,$*)

inception3-%: $(STAMP)
	$(call bench,inception3,$*)

bert-%: $(STAMP)
	$(call bench,bert,$*)

# Llama 3 (PyTorch and JAX: make llama-pytorch, make llama-jax; docs/llama.md).
llama-%: $(STAMP)
	$(call bench,llama,$*)

selftest: $(STAMP)
	$(DLPERF) selftest

# Images: the Debian base from debootstrap (no registry), then the pinned images of images.lock.
# IMAGES="cpu-python pytorch-cpu" or VARIANT=cpu narrows the set (GPU bases cannot be pulled
# on a machine without registry access). SOURCE_CHECKOUTS="pytorch-examples=/srv/examples.git"
# builds upstream sources' images from local git copies (air-gapped; docs/upstream.md).
IMAGES  ?=
VARIANT ?=
SOURCE_CHECKOUTS ?=

base-image: $(STAMP)
	$(DLPERF) images base

images: $(STAMP)
	$(DLPERF) images build $(IMAGES) $(if $(VARIANT),--variant $(VARIANT)) \
		$(foreach copy,$(SOURCE_CHECKOUTS),--source-checkout $(copy))

# The suite on TEST_WORKERS pytest-xdist workers: the modules whose tests start docker, sshd,
# Slurm or namespaces run one after another on one worker, the rest spread over all; then the few
# `timing` tests alone, in one process (tests/conftest.py says why). TEST_WORKERS=0: no xdist.
# `make test-fast`: the edit loop's tier, no daemons, images, framework environments, `slow`
# corpora or `timing` tests.
# pytest exits 5 when a selection holds no test: a phase PYTEST_ARGS leaves empty is no failure,
# both phases empty is.
TEST_WORKERS ?= 2
LINTED := driver tests tools PyTorch TensorFlow PaddlePaddle MxNet OneFlow JAX NVIDIADeepLearningExamples
xdist = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS))
PYTEST := $(VENV)/bin/python -m pytest

# Bytecode for every process the suite starts (thousands: the CLI, benchmark scripts, agents),
# written once here: an environment with PYTHONDONTWRITEBYTECODE set would otherwise compile the
# kit's modules afresh in each (0.4 s of CPU per CLI start on the 2-core AVX2 EPYC).
BYTECODE = $(VENV)/bin/python -m compileall -q -j 0 $(LINTED) > /dev/null

test: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(BYTECODE)
	@$(PYTEST) $(xdist) -m "not timing" $(PYTEST_ARGS); first=$$?; \
	  $(PYTEST) -m timing $(PYTEST_ARGS); second=$$?; \
	  for rc in $$first $$second; do [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit $$rc; done; \
	  [ $$first -eq 0 ] || [ $$second -eq 0 ] || { echo "make test: no test selected" >&2; exit 5; }

test-fast: $(STAMP)
	$(VENV)/bin/ruff check $(LINTED)
	$(BYTECODE)
	DLPERF_TEST_TIER=fast $(PYTEST) $(xdist) -m "not daemons and not frameworks and not slow and not timing" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Released report versions: `make release VERSION=v0.2-gpu SESSIONS="results/a results/b"
# CHANGELOG="why"`, then `make audit` (every version) or `make audit VERSION=reports/v0.2-gpu`.
# REPORTS=DIR: the folder of released versions (default: the kit's own reports/); SIGNING_KEY
# signs the version; RELEASE_ARGS / AUDIT_ARGS: more arguments (`RELEASE_ARGS="--import FILE"`,
# `AUDIT_ARGS="--kit released"`).
VERSION  ?=
SESSIONS ?=
CHANGELOG?=
REPORTS  ?=
RELEASE_ARGS ?=
AUDIT_ARGS ?=

release: $(STAMP)
	$(DLPERF) release $(VERSION) $(SESSIONS) $(if $(CHANGELOG),--changelog "$(CHANGELOG)") \
		$(if $(REPORTS),--reports "$(REPORTS)") \
		$(if $(SIGNING_KEY),--signing-key "$(SIGNING_KEY)") $(RELEASE_ARGS)

audit: $(STAMP)
	$(DLPERF) audit $(if $(VERSION),$(VERSION),--all) $(if $(REPORTS),--reports "$(REPORTS)") \
		$(AUDIT_ARGS)

clean-venv:
	rm -rf $(VENV) .venvs

# The GPU check (docs/gpu-check.md), a smoke check of a booked GPU node whose own python3 holds
# torch: `make gpu-pack` on a machine with a network (the wheels of the kit's packages for the
# node's Python version, GPU_PYTHON_VERSION, default: GPU_PYTHON's; the kit's commit into
# .dlperf-kit-commit), then on the node, with no make needed:
# `OUT=/where/results/go bash tools/gpu-check.sh`. `make gpu-check-rehearsal OUT=...` runs the
# same stages on a CPU, in GPU_PYTHON (an interpreter holding torch and none of the kit's
# packages, as the node's python3 does); `python3 tools/gpu_check.py plan` lists the stages,
# their estimates and the plans.
GPU_PYTHON ?= python3
GPU_PYTHON_VERSION ?= $(shell $(GPU_PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
WHEEL_PLATFORMS := $(foreach n,2_17 2_26 2_27 2_28 2_34,--platform manylinux_$(n)_x86_64) \
	--platform manylinux2014_x86_64 --platform manylinux1_x86_64

gpu-wheels:
	@case "$(GPU_PYTHON_VERSION)" in 3.10|3.11|3.12|3.13) ;; \
	  *) echo "gpu-wheels: Python $(GPU_PYTHON_VERSION) is not one the kit supports (3.10-3.13); set GPU_PYTHON_VERSION" >&2; exit 2;; esac
	rm -rf .whl.new && $(PYTHON) -m pip download -q --no-deps --only-binary=:all: \
		--python-version $(GPU_PYTHON_VERSION) --implementation cp $(WHEEL_PLATFORMS) \
		-d .whl.new -r tools/gpu-wheels.txt
	echo $(GPU_PYTHON_VERSION) >.whl.new/python-version && rm -rf .whl && mv .whl.new .whl

gpu-pack:
	@if [ "$$(cat .whl/python-version 2>/dev/null)" != "$(GPU_PYTHON_VERSION)" ]; then \
	  $(MAKE) gpu-wheels; else echo "gpu-pack: .whl/ holds the wheels for Python $(GPU_PYTHON_VERSION)"; fi
	@commit=$$(git rev-parse HEAD) && \
	  dirty=$$(git status --porcelain -- . ':(exclude)reports' ':(exclude).dlperf-kit-commit') && \
	  echo "$$commit$${dirty:+-dirty}" >.dlperf-kit-commit && \
	  echo "gpu-pack: .dlperf-kit-commit = $$(cat .dlperf-kit-commit); carry .whl and .dlperf-kit-commit"

gpu-check:
	@[ -n "$(OUT)" ] || { echo "gpu-check: set OUT to the folder the results go to" >&2; exit 2; }
	OUT="$(OUT)" GPU_CHECK_PYTHON=$(GPU_PYTHON) bash tools/gpu-check.sh $(GPU_CHECK_ARGS)

gpu-check-rehearsal:
	@[ -d .whl ] || $(MAKE) gpu-pack
	@[ -n "$(OUT)" ] || { echo "gpu-check-rehearsal: set OUT to the folder the results go to" >&2; exit 2; }
	OUT="$(OUT)" GPU_CHECK_PYTHON=$(GPU_PYTHON) bash tools/gpu-check.sh --cpu $(GPU_CHECK_ARGS)
