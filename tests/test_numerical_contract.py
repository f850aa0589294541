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
    assert stable_format(0.30, "sci2", loose) == "sci2"  # only fixed-point and percent formats are shortened
