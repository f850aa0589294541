"""The committed cache against a fresh recomputation from the real weights, with every input perturbed.

One pass recomputes every registered analysis on every model of the report (`python -m analyses verify --perturb`):
the cached status (ok or skipped) is what a recomputation gives, and every cached number, table cell and figure array
agrees with the recomputed one at its declared accuracy, with the same printed string, although every floating-point
input was moved at rounding level; each value must change by at most a tenth of its declared accuracy. That one pass
is shared out among the OpenBLAS kernels this processor runs (round robin by analysis), so the contract is also
tried on every kernel at hand; a recomputation with unperturbed inputs would check less, and is not run again.
The pass starts in the background as soon as the tests are collected and these tests run last (tests/conftest.py).
GPT-2's entries need $GPT2_WEIGHTS (skipped, saying so, when it is unset); MiniLM's come from its installed package;
common ones need none.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import in_background

from analyses.engine.cache import Cache
from analyses.engine.cli import EXIT_UNVERIFIED
from analyses.engine.pipeline import plan, select, status
from analyses.engine.report import figures_shown
from analyses.engine.sources import REPORT_MODELS, WEIGHTS_ENV, model_spec, open_source
from analyses.engine.verify import CORE_TYPES, core_types

REPO = Path(__file__).resolve().parents[1]
CACHE = Cache.at(REPO)
ANALYSES = select()
CASES = [job.label.split("/") for job in plan(ANALYSES, [model_spec(m) for m in REPORT_MODELS])]
"""Every (scope, analysis) the report holds: each model's analyses (a control only its group's), the common ones."""

PASS_TIMEOUT_S = 1200
"""The longest the tests wait for each kernel's pass once they reach it (the passes started at collection, beside the
other tests and the book's render)."""

NATIVE = "native"
"""Where OpenBLAS core types cannot be chosen by name (not x86-64), the whole pass runs on the native kernel."""


@dataclass
class KernelPass:
    """One `verify --perturb` run over a share of the analyses, under one OpenBLAS core type."""

    returncode: int
    stdout: str
    stderr: str
    ratios: dict[str, float | str]

    def verdicts(self) -> dict[str, str]:
        """Job label → its line's verdict ('reproduced …', 'not checked: …', or the problems)."""
        lines = (line.split(None, 1) for line in self.stdout.splitlines()[1:])
        return {parts[0]: parts[1] for parts in lines if len(parts) == 2 and "/" in parts[0]}


def share(core_type: str, kernels: list[str]) -> list[str]:
    """The analyses a kernel recomputes: each kernel a share, round robin by registration order."""
    return [a.name for a in ANALYSES[kernels.index(core_type)::len(kernels)]]


_PASSES: dict[str, tuple] = {}
"""The session's perturbed recomputation: core type → (its process, its output files, its ratios file)."""


def start_perturbed_pass() -> None:
    """Start the kernels' passes in the background, once per session; the conftest calls this as soon as the tests
    are collected, so that the recomputation runs beside the other tests (its tests run last). The passes run side by
    side, each computing one analysis at a time on one BLAS thread (the summation order of a thread count is one more
    order that the rounding-level perturbation stands for)."""
    if _PASSES:
        return
    kernels = list(core_types()[0]) or [NATIVE]
    for core_type in kernels:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
        if core_type != NATIVE:
            env["OPENBLAS_CORETYPE"] = core_type
        ratios = Path(tempfile.mkdtemp(prefix=f"perturbed-{core_type}-")) / "ratios.json"
        stdout, stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        process = subprocess.Popen([sys.executable, "-m", "analyses", "verify", "--perturb", "--jobs", "1",
                                    "--ratios", str(ratios), *share(core_type, kernels)],
                                   cwd=REPO, env=env, stdout=stdout, stderr=stderr, text=True,
                                   preexec_fn=in_background)
        _PASSES[core_type] = (process, stdout, stderr, ratios)
    atexit.register(_stop_passes)


def _stop_passes() -> None:
    """Once the passes are read, or at the session's end (even an interrupted one): no pass left running, no ratios
    folder left behind."""
    for process, _, _, ratios in _PASSES.values():
        if process.poll() is None:
            process.kill()
            process.wait()
        shutil.rmtree(ratios.parent, ignore_errors=True)


@pytest.fixture(scope="module")
def perturbed_pass() -> dict[str, KernelPass]:
    """Core type → its pass, waited for (started at collection, or here)."""
    start_perturbed_pass()
    passes = {}
    try:
        for core_type, (process, stdout, stderr, ratios) in _PASSES.items():
            process.wait(timeout=PASS_TIMEOUT_S)
            stdout.seek(0)
            stderr.seek(0)
            passes[core_type] = KernelPass(process.returncode, stdout.read(), stderr.read(),
                                           json.loads(ratios.read_text()) if ratios.is_file() else {})
    finally:
        _stop_passes()
    return passes


@pytest.mark.slow
@pytest.mark.parametrize("scope, name", CASES)
def test_cached_result_survives_a_perturbed_recomputation(scope, name, perturbed_pass):
    assert CACHE.manifest(scope, name) is not None, f"{scope}/{name} is not cached: run `python -m analyses run`"
    verdicts = {label: verdict for run in perturbed_pass.values() for label, verdict in run.verdicts().items()}
    verdict = verdicts.get(f"{scope}/{name}", "not recomputed by verify")
    if verdict.startswith("not checked"):
        pytest.skip(f"{scope}/{name}: {verdict} (set $GPT2_WEIGHTS for GPT-2, $GPT1_WEIGHTS for GPT-1)")
    assert verdict.startswith("reproduced"), f"{scope}/{name}: {verdict}"


@pytest.mark.slow
@pytest.mark.parametrize("core_type", CORE_TYPES)
def test_each_kernel_at_hand_runs_its_share_of_the_perturbed_pass(core_type, perturbed_pass):
    """The share ran under the kernel its core type names (OpenBLAS reports it in verify's first line) and passed;
    the tightest ratios (change over declared accuracy) are printed."""
    kernels, skipped = core_types()
    if core_type not in kernels:
        pytest.skip(f"OpenBLAS core type {core_type}: {skipped.get(core_type) or skipped.get('all')}")
    run = perturbed_pass[core_type]
    assert run.stdout.startswith(f"BLAS kernel: {kernels[core_type]}, 1 thread(s)"), run.stdout + run.stderr
    unverified_allowed = not os.environ.get(WEIGHTS_ENV)
    assert run.returncode == 0 or (unverified_allowed and run.returncode == EXIT_UNVERIFIED), run.stdout + run.stderr
    tightest = list(run.ratios.items())[:10]
    print(f"{core_type}: the ten largest changes as a fraction of the declared accuracy:",
          *(f"{ratio if isinstance(ratio, str) else f'{ratio:.3g}'} {where}" for where, ratio in tightest), sep="\n  ")
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
