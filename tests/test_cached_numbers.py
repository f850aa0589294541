"""The committed cache against a fresh recomputation from the real weights.

For every registered analysis and every model of the report: the cached status
(ok or skipped) is what a recomputation gives, and every cached number, table cell
and figure array agrees with the recomputed one at its declared accuracy, with the
same printed string; then once more for the whole cache under another BLAS kernel.
GPT-2's entries need $GPT2_WEIGHTS (skipped, saying so, when it is unset); MiniLM's
come from its installed package; common ones need none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyses.engine.cache import Cache
from analyses.engine.pipeline import plan, select, status
from analyses.engine.report import figures_shown
from analyses.engine.sources import REPORT_MODELS, WEIGHTS_ENV, model_spec, open_source

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


ALTERNATIVE_KERNEL = "Prescott"
"""An OpenBLAS core type that every x86-64 processor runs (SSE3 kernels), unlike the AVX2 or AVX-512 kernels that
OpenBLAS picks on today's processors; its sums run in another order, so its last bits differ."""


@pytest.mark.slow
def test_recomputation_under_another_blas_kernel_prints_the_same():
    """The whole cache recomputed by `python -m analyses verify` with OpenBLAS forced onto another kernel: every
    value within its declared accuracy, every printed string the same."""
    if not os.environ.get(WEIGHTS_ENV):
        pytest.skip(f"${WEIGHTS_ENV} is not set: cannot recompute GPT-2's cached numbers")
    native = subprocess.run([sys.executable, "-c", "from analyses.engine.verify import blas_kernels; "
                             "import numpy; print(blas_kernels())"], capture_output=True, text=True, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")} | {
        "OPENBLAS_CORETYPE": ALTERNATIVE_KERNEL}
    run = subprocess.run([sys.executable, "-m", "analyses", "verify"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=900)
    kernel = run.stdout.splitlines()[0] if run.stdout else ""
    if not kernel.startswith("BLAS kernel:") or kernel.split(": ", 1)[1] in native.stdout:
        pytest.skip(f"OpenBLAS did not change its kernel to {ALTERNATIVE_KERNEL} here ({kernel or run.stderr.strip()}; "
                    f"native {native.stdout.strip()})")
    assert run.returncode == 0, run.stdout + run.stderr


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
