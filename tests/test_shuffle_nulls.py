"""Constructed and closed-form checks of the shuffle null models (analyses/shuffle_nulls.py)."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.shuffle_nulls import (
    effect_size,
    empirical_p_value,
    shuffle_columns,
    shuffle_entries,
    shuffle_nulls,
    similarity_statistics,
)
from analyses.engine.sources import ModelShape

SHAPE = ModelShape("constructed", "gpt2", 24, 48, 1, 1, 1, 4, "pre")
PARAMS = {"n_draws": 200, "seed": 3, "threshold": 0.5, "bins": 40}
P_VALUE_KEYS = [f"{null}_{kind}_{stat}_p" for null in ("entries", "columns") for kind in ("positions", "dimensions")
                for stat in ("std", "frac_abs_above", "max_abs")]


def test_empirical_p_value_and_effect_size_closed_forms():
    null = np.array([1.0, 2.0, 3.0, 4.0])
    assert empirical_p_value(null, 3.0) == pytest.approx(3 / 5)  # (1 + #{3, 4}) / (1 + 4)
    assert empirical_p_value(null, 10.0) == pytest.approx(1 / 5)  # never 0
    assert empirical_p_value(null, 0.0) == pytest.approx(1.0)
    assert effect_size(null, 2.5 + 2 * np.std(null, ddof=1)) == pytest.approx(2.0)
    assert effect_size(np.zeros(5), 0.3) == np.inf and effect_size(np.zeros(5), 0.0) == 0.0


def test_shuffles_keep_what_they_promise():
    P = np.random.default_rng(0).standard_normal((30, 7)) + np.arange(7)
    rng = np.random.default_rng(1)
    entries, columns = shuffle_entries(P, rng), shuffle_columns(P, rng)
    assert entries.shape == columns.shape == P.shape
    np.testing.assert_array_equal(np.sort(entries.ravel()), np.sort(P.ravel()))  # same multiset of values
    np.testing.assert_array_equal(np.sort(columns, axis=0), np.sort(P, axis=0))  # same values per dimension
    assert not np.array_equal(np.sort(entries, axis=0), np.sort(P, axis=0))  # entries move between dimensions
    assert not np.array_equal(columns, P)


def test_float32_statistics_match_float64_and_histograms_count_every_pair():
    P = np.random.default_rng(2).standard_normal((48, 24))
    exact, hists = similarity_statistics(P, 0.5, 40)
    fast, _ = similarity_statistics(P, 0.5, 40, exact=False)
    for key, value in exact.items():
        assert fast[key] == pytest.approx(value, abs=1e-6)  # float32 rounding of cosines ~1e-7
    assert hists["positions"].sum() == 48 * 47 // 2 and hists["dimensions"].sum() == 24 * 23 // 2


def test_iid_matrix_gives_p_values_that_are_not_small():
    """Under an i.i.d. matrix both nulls are exchangeable with the observation: p-values are ~uniform."""
    p_values = []
    for seed in range(3):
        P = np.random.default_rng(100 + seed).standard_normal((48, 24))
        result = shuffle_nulls({"W_pos": P}, SHAPE, **PARAMS)
        p_values += [result.numbers[key].value for key in P_VALUE_KEYS]
    p_values = np.array(p_values)
    assert p_values.min() > 0.01
    assert 0.25 < p_values.mean() < 0.75


def test_structured_matrix_gets_the_smallest_p_value():
    """A smooth rank-2 matrix (a circle over positions) has far more similarity structure than its shuffles."""
    t = np.linspace(0, np.pi, 48)
    P = np.outer(np.cos(t), np.linspace(1, 2, 24)) + np.outer(np.sin(t), np.linspace(2, -1, 24))
    P += 0.01 * np.random.default_rng(0).standard_normal(P.shape)
    result = shuffle_nulls({"W_pos": P}, SHAPE, **PARAMS)
    smallest = 1 / (1 + PARAMS["n_draws"])
    for key in ("entries_positions_std_p", "columns_positions_std_p", "entries_dimensions_max_abs_p"):
        assert result.numbers[key].value == pytest.approx(smallest)
    assert result.numbers["min_p_value"].value == pytest.approx(smallest)


def test_nulls_are_deterministic_under_the_seed():
    P = np.random.default_rng(5).standard_normal((48, 24))
    a, b = (shuffle_nulls({"W_pos": P}, SHAPE, **PARAMS) for _ in range(2))
    assert {k: n.value for k, n in a.numbers.items()} == {k: n.value for k, n in b.numbers.items()}
    assert a.tables == b.tables
    c = shuffle_nulls({"W_pos": P}, SHAPE, **(PARAMS | {"seed": 4}))
    assert not np.array_equal(c.arrays["entries_stats"]["positions_std"], a.arrays["entries_stats"]["positions_std"])
