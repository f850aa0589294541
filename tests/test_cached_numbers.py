"""The committed cache against a fresh recomputation from the real weights.

For every registered analysis and every model of the report: the cached status
(ok or skipped) is what a recomputation gives, and every cached number and table
cell equals the recomputed one. GPT-2's entries need $GPT2_WEIGHTS (skipped, saying
so, when it is unset); MiniLM's come from its installed package; common ones need none.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path

import pytest

from analyses.engine.cache import COMMON, Cache
from analyses.engine.pipeline import Job, plan, select, status
from analyses.engine.report import figures_shown
from analyses.engine.sources import REPORT_MODELS, WEIGHTS_ENV, model_spec, open_source

REPO = Path(__file__).resolve().parents[1]
CACHE = Cache.at(REPO)
ANALYSES = select()
SCOPES = [model_spec(m).slug for m in REPORT_MODELS]
CASES = [(scope, a.name) for scope in SCOPES for a in ANALYSES if a.scope == "model"] + [
    (COMMON, a.name) for a in ANALYSES if a.scope == "common"]


def _source(scope: str):
    if scope == COMMON:
        return None
    name = next(m for m in REPORT_MODELS if model_spec(m).slug == scope)
    if name == "gpt2" and not os.environ.get(WEIGHTS_ENV):
        pytest.skip(f"${WEIGHTS_ENV} is not set: cannot recompute GPT-2's cached numbers")
    return open_source(name)


def _close(cached, fresh) -> bool:
    if isinstance(cached, float) or isinstance(fresh, float):
        return math.isclose(float(cached), float(fresh), rel_tol=1e-6, abs_tol=1e-9) or (
            math.isnan(float(cached)) and math.isnan(float(fresh)))
    return cached == fresh


def _cell(text: str):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


@pytest.mark.slow
@pytest.mark.parametrize("scope, name", CASES)
def test_cached_result_equals_recomputation(scope, name):
    analysis = next(a for a in ANALYSES if a.name == name)
    source = _source(scope)
    job = Job(analysis, scope, source)
    manifest = CACHE.manifest(scope, name)
    assert manifest is not None, f"{scope}/{name} is not cached: run `python -m analyses run`"
    missing = source.missing(job.needs) if source else []  # what the pipeline checks: tokenizer and family needs included
    assert manifest["status"] == ("skipped" if missing else "ok")
    if missing:
        return
    result = job.analysis.run(source.tensors if source else None, source.shape if source else None)
    entry = CACHE.entry(scope, name)
    cached = json.loads((entry / "numbers.json").read_text())
    assert set(cached) == set(result.numbers)
    wrong = {k: (v["value"], result.numbers[k].value) for k, v in cached.items()
             if not _close(v["value"], result.numbers[k].value)}
    assert not wrong, f"cached != recomputed: {wrong}"
    for table_name, table in result.tables.items():
        rows = list(csv.reader(io.StringIO((entry / f"{table_name}.csv").read_text())))
        assert tuple(rows[0]) == table.columns
        assert len(rows) - 1 == len(table.rows)
        for got, want in zip(rows[1:], table.rows):
            assert all(_close(_cell(g), w) if not isinstance(w, str) else g == w for g, w in zip(got, want)), (
                table_name, got, want)


def test_cache_and_cited_files_are_fresh_for_the_current_code():
    """Every cached result was computed by the code in this checkout (weights checked when available), no
    entry is orphaned, and _variables.yml and provenance.md are exactly what the verified cache rebuilds."""
    sources = []
    for model in REPORT_MODELS:
        try:
            sources.append(open_source(model))
        except Exception:  # weights unavailable: check everything but the weights
            sources.append(model_spec(model))
    report = status(plan(ANALYSES, sources, figures_shown(REPO)), CACHE)
    problems = [f"{job.label}: {reason}" for job, reason in report.jobs if reason]
    problems += [f"orphaned entry {scope}/{name}" for scope, name in report.orphans] + report.index_problems
    assert not problems, "stale cache; run `python -m analyses run --prune`:\n" + "\n".join(problems)
