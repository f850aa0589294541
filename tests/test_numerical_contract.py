"""The numerical contract: every cited value declares how exactly it is determined, and prints the same on
every machine whose computation lies within that accuracy.

The cache checks need no weights and always run; the comparison machinery is tested on synthetic entries,
each check broken on purpose (a value outside its accuracy, a changed print, a changed cell, an array
computed with another ddof or permuted).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import resealed

from analyses.engine.cache import COMMON, Cache, result_outputs
from analyses.engine.results import (
    COUNT_SHARE,
    EXACT,
    FLOAT64,
    Accuracy,
    Number,
    Result,
    Table,
    array_summary,
    format_value,
    printed_stably,
    stable_format,
    summaries_agree,
)
from analyses.engine.verify import compare, unstable

REPO = Path(__file__).resolve().parents[1]
CACHE = Cache.at(REPO)
ENTRIES = CACHE.entries()


@pytest.mark.parametrize("scope, name", ENTRIES, ids=[f"{s}-{n}" for s, n in ENTRIES])
def test_every_cached_value_declares_its_accuracy_and_prints_stably(scope, name):
    """Each cached number states its format and accuracy; no printed digit is one that a value within the
    declared accuracy would change (where one is, the chapter must cite fewer digits)."""
    entry = CACHE.entry(scope, name)
    numbers = json.loads((entry / "numbers.json").read_text())
    undeclared = [k for k, n in numbers.items() if not isinstance(n["value"], str)
                  and not ({"format", "accuracy"} <= set(n) and n["accuracy"].get("basis"))]
    assert not undeclared, f"numbers without a declared format and accuracy: {undeclared}"
    assert not unstable(entry), f"printed digits not fixed by the declared accuracy: {unstable(entry)}"


def test_rounding_that_the_accuracy_allows_is_found():
    assert printed_stably(0.1234, ".3f", FLOAT64)
    assert not printed_stably(0.1235, ".3f", Accuracy(rel=1e-3))  # 0.1234 or 0.1236 within reach
    assert not printed_stably(0.3124999999999998, ".1%", FLOAT64)  # 31.2% or 31.3% on another machine
    assert printed_stably(0.3124999999999998, ".2%", FLOAT64)
    assert printed_stably(0.875, ".0%", COUNT_SHARE)  # an exact share: the tie rounds the same everywhere
    assert not printed_stably(4219.75, ".0f", Accuracy(abs=0.3))
    assert printed_stably(7, "d", EXACT)


def test_rounding_noise_prints_without_a_sign_and_bounds_are_refused_when_exceeded():
    assert format_value(-1e-13, ".3f") == format_value(1e-13, ".3f") == "0.000"
    assert format_value(-0.004, ".1%") == "-0.4%" and format_value(-2e-5, "sci1") == "-2.0e-5"
    assert Number.bound(3e-13, 1e-12, "an error", "a bound").text == "1.0e-12"
    with pytest.raises(ValueError, match="not below its bound"):
        Number.bound(1e-12, 1e-12, "an error", "a bound")


def test_defaults_integers_exact_floats_float64():
    assert Number(3, "d").accuracy is EXACT and Number(0.5, ".2f").accuracy is FLOAT64
    assert FLOAT64.tolerance(2.0) == pytest.approx(2e-9) and FLOAT64.agree(1.0, 1.0 + 5e-10)
    assert not FLOAT64.agree(1.0, 1.0 + 2e-9) and EXACT.agree(5, 5) and not EXACT.agree(5, 6)


def test_a_figure_array_computed_another_way_is_detected():
    """ddof 0 instead of 1 scales a standard deviation by √((n−1)/n), one changed entry or a permutation
    moves the fixed weighted sum: each is far outside float64 accuracy."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 5))
    summary = array_summary(x.std(axis=0, ddof=1))
    assert summaries_agree(summary, array_summary(x.std(axis=0, ddof=1) * (1 + 1e-12)), FLOAT64)
    assert not summaries_agree(summary, array_summary(x.std(axis=0, ddof=0)), FLOAT64)
    permuted = x.copy()
    permuted[[0, 1]] = permuted[[1, 0]]
    assert not summaries_agree(array_summary(x), array_summary(permuted), FLOAT64)
    one = x.copy()
    one[3, 2] += 1e-6
    assert not summaries_agree(array_summary(x), array_summary(one), FLOAT64)
    assert array_summary(np.array(["a", "b"])) is None
    assert array_summary([1.0, math.nan])["nonfinite"] == 1


def _entry(tmp_path: Path, result: Result) -> Path:
    cache = Cache(tmp_path / "cache", tmp_path / "_variables.yml")
    manifest = {"analysis": "toy", "scope": COMMON, "status": "ok", "input": {}}
    cache.write(COMMON, "toy", manifest, result_outputs(result, {}, {}))
    return cache.entry(COMMON, "toy")


def _toy(value: float = 0.25, cell: float = 1.5, array_scale: float = 1.0) -> Result:
    table = Table(("name", "x"), (("a", cell), ("b", 2)), {"x": ".2f"})
    return Result({"share": Number(value, ".3f", "a share", Accuracy(rel=1e-6, basis="test"))}, {"t": table},
                  {"curve": np.linspace(0, 1, 11) * array_scale, "labels": np.array(["p", "q"])})


def test_compare_accepts_what_lies_within_the_declared_accuracy(tmp_path):
    entry = _entry(tmp_path, _toy())
    assert compare(entry, _toy(value=0.25 * (1 + 5e-7), cell=1.5 * (1 + 1e-10), array_scale=1 + 1e-12)) == []


@pytest.mark.parametrize("fresh, found", [
    (dict(value=0.25 * (1 + 3e-6)), "share"),           # outside ±1e-6 relative, same print
    (dict(value=0.2506), "prints"),                     # a printed string changed
    (dict(cell=1.6), "table t"),                        # a table cell changed
    (dict(array_scale=1.001), "array curve"),            # a figure's values changed
])
def test_compare_finds_what_the_cache_does_not_hold(tmp_path, fresh, found):
    problems = compare(_entry(tmp_path, _toy()), _toy(**fresh))
    assert len(problems) == 1 and found in problems[0], problems


def test_unstable_names_the_cached_value_and_cell(tmp_path):
    table = Table(("x",), ((0.3124999999999998,), (0.5,)), {"x": ".1%"})
    result = Result({"tie": Number(0.3124999999999998, ".1%", "a tie"), "fine": Number(0.3, ".1%", "fine")},
                    {"t": table})
    entry = _entry(tmp_path, result)
    assert unstable(entry) == ["tie"]  # a table cell drops the decimal its accuracy does not fix
    assert table.to_markdown().splitlines()[2:] == ["| 31% |", "| 50.0% |"]
    spec = json.loads((entry / "tables.json").read_text())
    assert spec["t"]["x"]["format"] == [".0%", ".1%"]
    spec["t"]["x"]["format"] = ".1%"  # a cache that prints the undetermined decimal is caught
    (entry / "tables.json").write_text(json.dumps(spec))
    assert unstable(entry) == ["tie", "t[1].x"]


def test_a_format_loses_only_the_decimals_the_accuracy_does_not_fix():
    loose = Accuracy(rel=1e-5, basis="test")
    assert stable_format(0.123456, ".4f", loose) == ".4f"
    assert stable_format(0.12345, ".4f", loose) == ".3f"  # 0.12345 ± 1.2e-6 straddles the fourth decimal
    assert stable_format(0.05, ".1%", Accuracy(abs=1e-3, basis="test")) == ".0%"
    assert stable_format(0.30, "sci2", loose) == "sci2"  # fixed-point, percent and significant digits are shortened
    assert stable_format(0.123455, ".5g", loose) == ".4g" and stable_format(0.15, ".1g", Accuracy(abs=0.1, basis="t")) == ".1g"


# ---- the perturbation check: declared accuracies proved at rounding level, not only by the kernels at hand ----

def test_a_perturbation_moves_each_input_by_at_most_delta_and_keeps_the_draws():
    from analyses.engine.verify import Perturbation
    from analyses.toolkit import forward

    perturbation = Perturbation()
    assert perturbation.delta(np.float64) == pytest.approx(1.137e-13, rel=1e-3)  # 2^10 unit roundoffs
    assert perturbation.delta(np.float32) == pytest.approx(6.10e-5, rel=1e-3)
    x = np.linspace(1, 2, 1000)
    moved = perturbation.apply(x, np.float64, perturbation.stream("x"))
    change = np.abs(moved / x - 1)
    assert 0 < change.max() <= perturbation.delta(np.float64) * (1 + 1e-3) and change.mean() > 1e-14
    inputs = perturbation.tensors({"W": x.astype(np.float32), "ids": np.arange(3)})
    assert inputs["W"] is inputs["W"] and inputs["W"].dtype == np.float64  # one perturbation per name
    assert not np.array_equal(inputs["W"], x.astype(np.float32)) and np.array_equal(inputs["ids"], np.arange(3))
    as_analyses_module = {"__name__": "analyses.probe", "np": np}  # the draws of the analyses' own modules move
    exec("def generator(seed):\n    return np.random.default_rng(seed)", as_analyses_module)
    with perturbation.draws_and_passes():
        assert type(np.random.default_rng(5)) is np.random.Generator  # a library's own draws do not
        rng = as_analyses_module["generator"](5)
        normal, integers = rng.standard_normal(100), rng.integers(0, 1000, 10)
        weights32 = forward.in_precision(np.ones(50, dtype=np.float32), np.float32)
        weights64 = forward.in_precision(np.ones(50, dtype=np.float32), np.float64)
    reference = np.random.default_rng(5)
    expected_normal, expected_integers = reference.standard_normal(100), reference.integers(0, 1000, 10)
    assert np.array_equal(integers, expected_integers)  # the same stream: only the floats move
    assert 0 < np.abs(normal / expected_normal - 1).max() <= perturbation.delta(np.float64) * 1.001
    assert 0 < np.abs(weights32 - 1).max() <= perturbation.delta(np.float32) * 1.001
    assert np.array_equal(weights64, np.ones(50))  # float64 passes take their perturbation from the inputs
    assert np.random.default_rng(5).standard_normal() == expected_normal[0]  # restored on leaving


def _gram_log_volume(tensors, shape, *, accuracy: Accuracy) -> Result:
    """log det of a near-singular matrix's Gram spectrum: its smallest eigenvalue errs by about ε·κ² relative."""
    A = np.asarray(tensors["A"], dtype=np.float64)
    eigenvalues = np.linalg.eigvalsh(A.T @ A)
    return Result({"log_volume": Number(0.5 * float(np.log(eigenvalues).sum()), ".1f", "log-volume", accuracy)})


def _ill_conditioned(n: int = 40, condition: float = 1e5) -> np.ndarray:
    rng = np.random.default_rng(3)
    U, _ = np.linalg.qr(rng.standard_normal((n, n)))
    V, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (U * np.geomspace(1, 1 / condition, n)) @ V.T


@pytest.mark.parametrize("accuracy, holds", [(FLOAT64, False), (Accuracy(rel=1e-5, basis="ε·κ²"), True)])
def test_the_perturbation_check_refuses_an_accuracy_tighter_than_the_computation_supports(tmp_path, accuracy, holds):
    """A Gram log-volume at κ = 1e5 moves by about ε·κ² = 1e-6 relative under a perturbation at rounding level:
    1e-9 declared fails the check (the change is more than a tenth of it), ε·κ² passes."""
    from types import SimpleNamespace

    from analyses.engine.registry import Analysis
    from analyses.engine.verify import Perturbation, check

    A = _ill_conditioned()
    analysis = Analysis("toy", "toy", _gram_log_volume, params={"accuracy": accuracy})
    cache = Cache(tmp_path / "cache", tmp_path / "_variables.yml")
    manifest = {"analysis": "toy", "scope": "m", "status": "ok", "input": {"code": "toy"}}
    cache.write("m", "toy", manifest, result_outputs(analysis.run({"A": A}, None), {}, {}))
    source = SimpleNamespace(tensors={"A": A}, shape=None, missing=lambda needs: [])
    job = SimpleNamespace(scope="m", analysis=analysis, source=source, needs=())
    assert check(job, cache)[0].problems == []  # unperturbed, the same bytes
    comparison, _ = check(job, cache, Perturbation())
    assert comparison.ratios["log_volume"] > 0
    assert (comparison.problems == []) == holds, comparison.problems


def test_core_types_are_chosen_from_the_processor_flags(monkeypatch):
    from analyses.engine import verify

    monkeypatch.setattr(verify.platform, "machine", lambda: "x86_64")
    verify.core_types.cache_clear()
    monkeypatch.setattr(verify, "_cpu_flags", lambda: {"pni", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma"})
    monkeypatch.setattr(verify, "_kernel_under", lambda name: {"Prescott": "Katmai", "Core2": "Katmai", "Penryn": "Katmai",
                                                               "Zen": "Haswell"}.get(name, name))
    ran, skipped = verify.core_types()
    assert list(ran) == ["Prescott", "Nehalem", "Sandybridge", "Haswell"]
    assert "avx512f" in skipped["SkylakeX"] and "fma4" in skipped["Bulldozer"] and "sse4a" in skipped["Barcelona"]
    assert skipped["Zen"] == "runs the Haswell kernel, already tried as Haswell"
    assert skipped["Core2"] == "runs the Katmai kernel, already tried as Prescott"
    monkeypatch.setattr(verify.platform, "machine", lambda: "arm64")
    verify.core_types.cache_clear()
    assert verify.core_types() == ({}, {"all": "OpenBLAS core types are chosen by name on x86-64 only (this is arm64)"})
    verify.core_types.cache_clear()


def test_a_hand_edited_table_that_the_book_includes_is_not_reproduced(tmp_path):
    """The .md a chapter includes is compared with the recomputed table's, not only its manifest's hash: an edited
    cell there, with the .csv untouched, is found (issue 34: a resealed manifest hid it)."""
    entry = _entry(tmp_path, _toy())
    markdown = entry / "t.md"
    markdown.write_text(markdown.read_text().replace("1.50", "1.60"))
    assert compare(entry, _toy()) == ["table t: the included t.md differs from the recomputed table's"]


def test_a_hand_edited_status_note_or_skip_reason_is_not_reproduced(tmp_path, tiny_checkpoint, monkeypatch):
    """The notes the book includes (status.md: empty, or the line saying why an analysis was skipped) are compared
    with what the manifest and today's inputs give: an edit resealed into the manifest is still found (issue 34)."""
    from analyses.engine.fingerprints import input_fingerprint, library_versions
    from analyses.engine.pipeline import Job, run
    from analyses.engine.registry import Analysis
    from analyses.engine.sources import local_source
    from analyses.engine.verify import check

    monkeypatch.setattr(Job, "inputs", lambda self: input_fingerprint(self.source.fingerprint, "c" * 64, {},
                                                                      library_versions()))
    source = local_source("tiny-gpt2", tiny_checkpoint)
    computed = Job(Analysis("norm", "Norm", lambda tensors, shape: Result(
        {"n": Number(float(np.linalg.norm(tensors["W_pos"])), ".3f", "norm")})), "tiny_gpt2", source)
    skipped = Job(Analysis("tokens", "Tokens", lambda tensors, shape: Result(), needs=("W_E",)), "tiny_gpt2", source)
    cache = Cache(tmp_path / "cache", tmp_path / "_variables.yml")
    run([computed, skipped], cache, progress=False)
    assert check(computed, cache)[0].problems == [] and check(skipped, cache)[0].problems == []

    resealed(cache, "tiny_gpt2", "norm", lambda m, files: files.update({"status.md": b"*Computed elsewhere.*\n"}))
    assert check(computed, cache)[0].problems == ["the included status.md differs from the note its manifest gives"]

    reason = cache.manifest("tiny_gpt2", "tokens")["reason"]
    resealed(cache, "tiny_gpt2", "tokens", lambda manifest, files: manifest.update(reason="Not needed."))
    assert check(skipped, cache)[0].problems[0].startswith("the cached reason for the skip differs from today's")
    resealed(cache, "tiny_gpt2", "tokens", lambda manifest, files: (manifest.update(reason=reason),
                                                                     files.update({"status.md": b"*Computed.*\n"})))
    assert check(skipped, cache)[0].problems == ["the included status.md differs from the note its manifest gives"]


def test_a_cell_is_compared_as_the_book_prints_it(tmp_path):
    """A cell whose accuracy leaves its last decimal undetermined prints with one decimal fewer (`stable_format`), on
    both sides of a rounding boundary: 0.2450003 and 0.2449997 at ±1e-3 relative both print 0.2, and agree."""
    loose = Accuracy(rel=1e-3, basis="test")

    def table(value):
        return Result(tables={"t": Table(("x",), ((value,),), {"x": ".2f"}, {"x": loose})})
    entry = _entry(tmp_path, table(0.2450003))
    assert (entry / "t.md").read_text().splitlines()[2] == "| 0.2 |"
    assert compare(entry, table(0.2449997)) == []
    assert compare(entry, table(0.2460003)) != []  # outside ±1e-3 relative
