"""The committed cache against a fresh recomputation from the real weights.

For every registered analysis and every model of the report: the cached status
(ok or skipped) is what a recomputation gives, and every cached number, table cell
and figure array agrees with the recomputed one at its declared accuracy, with the
same printed string; then once more with every input perturbed at rounding level, each analysis under one of
the OpenBLAS kernels this processor runs and with two BLAS threads, every value within a tenth of its accuracy.
GPT-2's entries need $GPT2_WEIGHTS (skipped, saying so, when it is unset); MiniLM's
come from its installed package; common ones need none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyses.engine.cache import Cache
from analyses.engine.pipeline import plan, select, status
from analyses.engine.report import figures_shown
from analyses.engine.sources import REPORT_MODELS, WEIGHTS_ENV, model_spec, open_source
from analyses.engine.verify import CORE_TYPES, core_types

REPO = Path(__file__).resolve().parents[1]
CACHE = Cache.at(REPO)
ANALYSES = select()
CASES = [job.label.split("/") for job in plan(ANALYSES, [model_spec(m) for m in REPORT_MODELS])]
"""Every (scope, analysis) the report holds: each model's analyses (a control only its group's), the common ones."""


@pytest.fixture(scope="module")
def native_verdicts() -> dict[str, str]:
    """`python -m analyses verify` once, with the native BLAS kernel: job label → its verdict. verify recomputes each
    job in memory in a worker (every core), checks that a skipped job still lacks its inputs, and compares each
    number, table cell and figure array with the cache at its declared accuracy (`engine.verify.check`)."""
    run = subprocess.run([sys.executable, "-m", "analyses", "verify"], cwd=REPO, capture_output=True, text=True,
                         timeout=900)
    verdicts = dict(line.split(None, 1) for line in run.stdout.splitlines()[1:] if "/" in line.split(None, 1)[0])
    assert verdicts, run.stdout + run.stderr
    return verdicts


@pytest.mark.slow
@pytest.mark.parametrize("scope, name", CASES)
def test_cached_result_equals_recomputation(scope, name, native_verdicts):
    assert CACHE.manifest(scope, name) is not None, f"{scope}/{name} is not cached: run `python -m analyses run`"
    verdict = native_verdicts.get(f"{scope}/{name}", "not recomputed by verify")
    if verdict.startswith("not checked"):
        pytest.skip(f"{scope}/{name}: {verdict} (set $GPT2_WEIGHTS for GPT-2, $GPT1_WEIGHTS for GPT-1)")
    assert verdict == "reproduced", f"{scope}/{name}: {verdict}"


PERTURBED_THREADS = 2
"""The cache was written with one BLAS thread per analysis; the perturbed pass sums with two, in another order."""


def share(core_type: str) -> list[str]:
    """The analyses a kernel recomputes: each kernel this processor runs a share (round robin by name), so that one
    perturbed pass covers them all."""
    kernels = list(core_types()[0])
    return [a.name for a in ANALYSES[kernels.index(core_type)::len(kernels)]]


@pytest.mark.slow
@pytest.mark.parametrize("core_type", CORE_TYPES)
def test_perturbed_recomputation_under_each_kernel_keeps_a_tenfold_margin(core_type, tmp_path):
    """Every analysis recomputed once with its floating-point inputs perturbed at rounding level
    (`verify --perturb`), under one of the OpenBLAS kernels this processor runs and with two BLAS threads: every
    value within a tenth of its declared accuracy, every printed string the same. The tightest ratios are printed."""
    kernels, skipped = core_types()
    if core_type not in kernels:
        pytest.skip(f"OpenBLAS core type {core_type}: {skipped.get(core_type) or skipped.get('all')}")
    if not os.environ.get(WEIGHTS_ENV):
        pytest.skip(f"${WEIGHTS_ENV} is not set: cannot recompute GPT-2's cached numbers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")} | {"OPENBLAS_CORETYPE": core_type}
    ratios = tmp_path / "ratios.json"
    run = subprocess.run([sys.executable, "-m", "analyses", "verify", "--perturb", "--threads", str(PERTURBED_THREADS),
                          "--jobs", "1", "--ratios", str(ratios), *share(core_type)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert run.stdout.startswith(f"BLAS kernel: {kernels[core_type]}, {PERTURBED_THREADS} thread(s)"), run.stdout + run.stderr
    assert run.returncode == 0, run.stdout + run.stderr
    tightest = list(json.loads(ratios.read_text()).items())[:10]
    print(f"{core_type}: the ten largest changes as a fraction of the declared accuracy:",
          *(f"{ratio:.3g} {where}" for where, ratio in tightest), sep="\n  ")


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
