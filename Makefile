# Two entry points, each self-sufficient on a fresh machine:
#   make report   set up .venv, then `quarto render` (HTML and PDF; its pre-render step brings the
#                 analyses cache up to date); without Quarto, only the analyses
#   make test     set up .venv and run the test suite
# GPT-2's weights: set GPT2_WEIGHTS=DIR for a local copy, otherwise they come from the Hugging Face hub.
# GPT-1's position table: set GPT1_WEIGHTS=DIR (../shared/models/gpt1), otherwise it comes from the hub.

VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: report test bench status

# The CPU build of torch (needed by the MiniLM package's sentence-transformers) goes in
# first, so that nothing later pulls a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml requirements.lock
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c requirements.lock -e '.[test]'
	touch $@

report: $(VENV)/.installed
	@if command -v quarto >/dev/null 2>&1; then \
		ANALYSES_PYTHON=$(PY) quarto render; \
	else \
		$(PY) -m analyses run && \
		echo "Quarto is not installed, so the cache is up to date but the website and PDF were not rendered." && \
		echo "Install Quarto 1.10.18 (see the README, Rendering), then run: make report"; \
	fi

test: $(VENV)/.installed
	$(PY) -m pytest

status: $(VENV)/.installed
	$(PY) -m analyses status

bench: $(VENV)/.installed
	$(PY) -m analyses bench
