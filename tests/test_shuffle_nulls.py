"""Constructed and closed-form checks of the four null models (analyses/shuffle_nulls.py), the draws their family
needs under Holm's rule (each null its own family), and one statistic recomputed independently from GPT-2's weights."""

from __future__ import annotations

import os

import numpy as np
import pytest

from analyses.shuffle_nulls import (
    KEPT_BY_CONSTRUCTION,
    NULLS,
    PCA_KEY,
    DRAWS_NEEDED,
    TESTED as TESTED_BY_NULL,
    effect_size,
    shuffle_columns,
    shuffle_entries,
    shuffle_nulls,
    phases_shared,
    similarity_statistics,
    top_variance_share,
)
from analyses.engine.sources import ModelShape
from analyses.toolkit.pvalues import FAMILYWISE_ALPHA, draws_for, floor_bound, two_sided_p

SHAPE = ModelShape("constructed", "gpt2", 24, 48, 1, 1, 1, 4, "pre")
PARAMS = {"n_draws": 100, "seed": 3, "threshold": 0.5, "bins": 40, "n_components": 3}
STAT_KEYS = [f"{kind}_{stat}" for kind in ("positions", "dimensions") for stat in ("std", "frac_abs_above", "max_abs")]
TESTED = [(null, key) for null in NULLS for key in [*STAT_KEYS, PCA_KEY] if key not in KEPT_BY_CONSTRUCTION.get(null, ())]


def test_effect_size_closed_forms():
    null = np.array([1.0, 2.0, 3.0, 4.0])
    assert effect_size(null, 2.5 + 2 * np.std(null, ddof=1)) == pytest.approx(2.0)
    assert effect_size(np.zeros(5), 0.3) == np.inf and effect_size(np.zeros(5), 0.0) == 0.0


def test_shuffles_keep_what_they_promise():
    P = np.random.default_rng(0).standard_normal((30, 7)) + np.arange(7)
    rng = np.random.default_rng(1)
    entries, columns = shuffle_entries(P)(rng), shuffle_columns(P)(rng)
    assert entries.shape == columns.shape == P.shape
    np.testing.assert_array_equal(np.sort(entries.ravel()), np.sort(P.ravel()))  # same multiset of values
    np.testing.assert_array_equal(np.sort(columns, axis=0), np.sort(P, axis=0))  # same values per dimension
    assert not np.array_equal(np.sort(entries, axis=0), np.sort(P, axis=0))  # entries move between dimensions
    assert not np.array_equal(columns, P)


def test_the_draws_fast_path_matches_the_exact_one_and_histograms_count_every_pair():
    """The null draws' symmetric products and Lanczos PCA give the observation's statistics to float64 rounding:
    an effect size divides by a null standard deviation as small as 4e-5, so float32 would not do."""
    P = np.random.default_rng(2).standard_normal((48, 24))
    exact, hists = similarity_statistics(P, 0.5, 40)
    fast, fast_hists = similarity_statistics(P, 0.5, 40, exact=False)
    for key, value in exact.items():
        assert fast[key] == pytest.approx(value, rel=1e-10, abs=1e-14)
    assert all(np.array_equal(hists[k], fast_hists[k]) for k in hists)
    X = np.cumsum(np.random.default_rng(3).standard_normal((64, 20)), axis=0)
    fast_pca = similarity_statistics(X, 0.5, 40, 3, exact=False)[0][PCA_KEY]
    assert fast_pca == pytest.approx(top_variance_share(X, 3), rel=1e-10)
    s = np.linalg.svd(X - X.mean(axis=0), compute_uv=False) ** 2
    assert top_variance_share(X, 3) == pytest.approx(s[:3].sum() / s.sum(), rel=1e-12)
    assert hists["positions"].sum() == 48 * 47 // 2 and hists["dimensions"].sum() == 24 * 23 // 2


def test_iid_matrix_gives_p_values_that_are_not_small():
    """Under an i.i.d. matrix both nulls are exchangeable with the observation: p-values are ~uniform."""
    p_values = []
    for seed in range(2):
        P = np.random.default_rng(100 + seed).standard_normal((48, 24))
        result = shuffle_nulls({"W_pos": P}, SHAPE, **PARAMS)
        p_values += [two_sided_p(result.arrays[f"{null}_stats"][key], result.arrays["observed"][key])
                     for null, key in TESTED]
        assert all(result.numbers[f"{null}_{key}_p"].value.startswith(("p = ", "p < ")) for null, key in TESTED)
    p_values = np.array(p_values)
    assert p_values.min() > 0.01
    assert 0.25 < p_values.mean() < 0.75


def test_structured_matrix_gets_the_smallest_p_value():
    """A smooth rank-2 matrix (a circle over positions) has far more similarity structure than its shuffles."""
    t = np.linspace(0, np.pi, 48)
    P = np.outer(np.cos(t), np.linspace(1, 2, 24)) + np.outer(np.sin(t), np.linspace(2, -1, 24))
    P += 0.01 * np.random.default_rng(0).standard_normal(P.shape)
    result = shuffle_nulls({"W_pos": P}, SHAPE, **PARAMS)
    smallest, n = 1 / (1 + PARAMS["n_draws"]), PARAMS["n_draws"]
    for key in ("entries_positions_std_p", "columns_positions_std_p", "entries_dimensions_max_abs_p",
                "columns_pca_top_p", "phases_independent_pca_top_p"):
        assert result.numbers[key].value == f"p < {floor_bound(n)} ({n} draws)"
    cells = [r[8] for r in result.tables["null_tests"].rows if r[8] != "kept exactly"]
    assert result.numbers["n_tests_at_floor"].value == cells.count(f"< {floor_bound(n)}") >= 5
    assert all(result.numbers[f"{null}_min_p_value"].value == pytest.approx(smallest) for null in NULLS)


def test_nulls_are_deterministic_under_the_seed():
    P = np.random.default_rng(5).standard_normal((48, 24))
    a, b = (shuffle_nulls({"W_pos": P}, SHAPE, **PARAMS) for _ in range(2))
    assert {k: n.value for k, n in a.numbers.items()} == {k: n.value for k, n in b.numbers.items()}
    assert a.tables == b.tables
    c = shuffle_nulls({"W_pos": P}, SHAPE, **(PARAMS | {"seed": 4}))
    assert not np.array_equal(c.arrays["entries_stats"]["positions_std"], a.arrays["entries_stats"]["positions_std"])


def test_shared_phases_keep_the_dimension_statistics_and_say_so():
    """PᵀP and the singular values survive shared phases: those rows read "kept exactly" and carry no p-value."""
    P = np.cumsum(np.random.default_rng(6).standard_normal((48, 24)), axis=0)
    result = shuffle_nulls({"W_pos": P}, SHAPE, **(PARAMS | {"n_draws": 20}))
    drawn, _ = similarity_statistics(phases_shared(P)(np.random.default_rng(0)), PARAMS["threshold"], PARAMS["bins"],
                                     PARAMS["n_components"], exact=False)  # a draw, every statistic computed
    for key in KEPT_BY_CONSTRUCTION["phases_shared"]:
        np.testing.assert_allclose(drawn[key], result.arrays["observed"][key], rtol=1e-5)
        assert key not in result.arrays["phases_shared_stats"]  # so the null draws skip it
        assert f"phases_shared_{key}_p" not in result.numbers
    rows = [r for r in result.tables["null_tests"].rows if r[0] == "shared phases"]
    assert sum(r[8] == "kept exactly" for r in rows) == len(KEPT_BY_CONSTRUCTION["phases_shared"])
    assert result.numbers["n_tests"].value == 4 * 9 - len(KEPT_BY_CONSTRUCTION["phases_shared"])  # 9 statistics


def test_a_coordinated_helix_beats_independent_phases():
    """A helix (1.3 turns and a rising axis) mixed into many dimensions: every column is smooth, but the variance
    sits in three directions only because the columns are coordinated. Independent phases keep each column's
    spectrum and break that coordination, so the top-3 variance share of the surrogates falls far below."""
    rng = np.random.default_rng(11)
    n, d = 96, 24
    t = 2 * np.pi * 1.3 * np.arange(n) / n
    helix = np.column_stack([np.cos(t), np.sin(t), np.linspace(-1, 1, n)])
    P = helix @ rng.standard_normal((3, d)) + 0.02 * rng.standard_normal((n, d))
    result = shuffle_nulls({"W_pos": P}, SHAPE, **(PARAMS | {"n_draws": 40}))
    numbers = result.numbers
    assert numbers["observed_pca_top"].value > 0.99
    assert numbers["phases_independent_pca_top_p"].value == "p < 0.03 (40 draws)"  # the floor 1/41, rounded up
    assert numbers["phases_independent_pca_top_effect"].value > 5
    assert numbers["phases_independent_pca_top_null_mean"].value < 0.95


def test_position_statistics_see_where_along_the_context_the_similarity_changes():
    """The sinusoidal table's cosines depend on the offset only: nothing outside the offset means, no spread over
    n. Doubling the second half of a table's dimensions' weight changes cosines by position: both grow."""
    from analyses.shuffle_nulls import _position_statistics
    from analyses.toolkit.linalg import cosine_matrix, upper_triangle
    from analyses.toolkit.sinusoids import sinusoidal_table

    stats = {}
    _position_statistics(upper_triangle(cosine_matrix(sinusoidal_table(64, 16))), stats)
    assert stats["positions_nonoffset"] == pytest.approx(0.0, abs=1e-12)
    assert stats["positions_spread"] == pytest.approx(0.0, abs=1e-7)
    bent = sinusoidal_table(64, 16)
    bent[32:, :4] *= 5.0
    _position_statistics(upper_triangle(cosine_matrix(bent)), stats)
    assert stats["positions_nonoffset"] > 0.01 and stats["positions_spread"] > 0.01


def test_every_test_of_each_nulls_family_can_meet_holms_smallest_threshold_on_its_own_draws():
    """Each null asks its own question, so its tests (every statistic it does not keep by construction) are one Holm
    family of m tests; a p-value from N draws cannot fall below 1/(1 + N), so the null needs N ≥ `draws_for`(m) for
    its first p-value to meet alpha/m: 179 draws for nine tests, 99 for the shared phases' five. The registered
    analysis draws that many, and so does every cached model (50 draws, the old setting, could not)."""
    import json
    from pathlib import Path

    from analyses.engine.registry import all_analyses

    assert {null: len(tested) for null, tested in TESTED_BY_NULL.items()} == {
        "entries": 9, "columns": 9, "phases_independent": 9, "phases_shared": 9 - len(KEPT_BY_CONSTRUCTION["phases_shared"])}
    assert DRAWS_NEEDED == {"entries": 179, "columns": 179, "phases_independent": 179, "phases_shared": 99}
    for null, tested in TESTED_BY_NULL.items():  # the floor meets alpha/m; one draw fewer would not
        assert 1 / (1 + DRAWS_NEEDED[null]) <= FAMILYWISE_ALPHA / len(tested) < 1 / DRAWS_NEEDED[null]
    registered = all_analyses()["shuffle_nulls"].params["n_draws"]
    assert registered is None
    cached = sorted((Path(__file__).resolve().parents[1] / "report" / "_cache").glob("*/shuffle_nulls/numbers.json"))
    assert cached
    for path in cached:
        value = {k: v["value"] for k, v in json.loads(path.read_text()).items()}
        assert sum(value[f"{null}_n_tests"] for null in NULLS) == value["n_tests"], path
        for null in NULLS:
            family = value[f"{null}_n_tests"]
            assert family == len(TESTED_BY_NULL[null]), (path, null)
            assert value[f"{null}_n_draws"] >= value[f"{null}_n_draws_needed"] == draws_for(family), (path, null)
            assert value[f"{null}_min_p_value"] == pytest.approx(1 / (1 + value[f"{null}_n_draws"]))
            assert value[f"{null}_min_p_value"] <= value[f"{null}_holm_threshold_min"] == pytest.approx(
                FAMILYWISE_ALPHA / family), (path, null)


def test_holm_decides_within_each_null_and_a_full_family_at_the_floor_is_all_rejected():
    """A test at the floor 1/(1 + N) with N = `draws_for`(m) meets alpha/m, so a null whose every test sits at the
    floor has all of them rejected, on its own family; and the verdicts do not depend on the other nulls' p-values."""
    rng = np.random.default_rng(5)
    t = np.linspace(0, 2 * np.pi, 48)
    helix = np.column_stack([np.cos(t), np.sin(t), np.linspace(-1, 1, 48)])
    P = helix @ rng.standard_normal((3, 24)) + 0.01 * rng.standard_normal((48, 24))
    result = shuffle_nulls({"W_pos": P}, SHAPE, **(PARAMS | {"n_draws": None}))
    for null in NULLS:
        assert result.numbers[f"{null}_n_draws"].value == DRAWS_NEEDED[null]
    rows = [r for r in result.tables["null_tests"].rows if r[8] != "kept exactly"]
    for null, label in [("entries", "all entries shuffled"), ("columns", "each dimension shuffled")]:
        family = [r for r in rows if r[0] == label]
        if all(isinstance(r[8], str) for r in family):  # every test of the family at its floor
            assert all(r[9].startswith("yes") for r in family)
            assert result.numbers[f"{null}_n_rejected"].value == len(family)
        assert all(r[11] == DRAWS_NEEDED[null] for r in family)


def test_a_statistic_below_its_null_is_rejected_too():
    """No direction was fixed beforehand: a smooth circle's cosines depend on offset almost only, far less than a
    shuffle's (whose cosines do not depend on offset at all), so the observation lies below every draw of the
    shuffles' share not explained by offset, and the two-sided test with enough draws rejects it, as "below"."""
    t = np.linspace(0, np.pi, 48)
    P = np.outer(np.cos(t), np.linspace(1, 2, 24)) + np.outer(np.sin(t), np.linspace(2, -1, 24))
    P += 0.01 * np.random.default_rng(0).standard_normal(P.shape)
    result = shuffle_nulls({"W_pos": P}, SHAPE, **(PARAMS | {"n_draws": None}))
    assert all(result.numbers[f"{null}_n_draws"].value == DRAWS_NEEDED[null] for null in NULLS)
    verdict = {(r[0], r[1], r[2]): r[9] for r in result.tables["null_tests"].rows}
    for null in ("all entries shuffled", "each dimension shuffled"):
        assert verdict[(null, "positions", "share of cos² not a function of offset")] == "yes, below"
        assert verdict[(null, "positions", "std of cos")] == "yes, above"
    assert result.numbers["n_rejected_below"].value >= 2


@pytest.mark.skipif(not os.environ.get("GPT2_WEIGHTS"), reason="needs GPT-2's weights (GPT2_WEIGHTS unset)")
def test_gpt2_spread_of_position_cosines_against_shared_phases_recomputed_independently():
    """The borderline test of the table, with other code: the standard deviation of GPT-2's position cosines from the
    full cosine matrix, and its shared-phase null from 40 draws of a circulant rotation written here (one random phase
    per rfft bin, the same for every column) under another seed. The observation matches the cache, and the null's
    mean, spread and the effect size agree with the cached ones within Monte Carlo error."""
    import csv
    import json
    from pathlib import Path

    from safetensors.numpy import load_file

    cache = Path(__file__).resolve().parents[1] / "report" / "_cache" / "gpt2" / "shuffle_nulls"
    cached = {k: v["value"] for k, v in json.loads((cache / "numbers.json").read_text()).items()}
    with open(cache / "null_tests.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f)
                   if (r["null"], r["similarity"], r["statistic"]) == ("shared phases", "positions", "std of cos"))
    P = np.asarray(load_file(os.path.join(os.environ["GPT2_WEIGHTS"], "model.safetensors"))["wpe.weight"], np.float64)
    n = len(P)
    upper = np.triu_indices(n, 1)

    def spread(X):
        U = X / np.linalg.norm(X, axis=1, keepdims=True)
        return (U @ U.T)[upper].std()

    observed = spread(P)
    assert observed == pytest.approx(cached["observed_positions_std"], rel=1e-9)
    spectrum, rng = np.fft.rfft(P, axis=0), np.random.default_rng(2024)
    draws = []
    for _ in range(40):
        phase = np.exp(2j * np.pi * rng.uniform(size=len(spectrum)))
        phase[0] = phase[-1] = 1.0  # the mean and (n even) the Nyquist bin stay real
        draws.append(spread(np.fft.irfft(spectrum * phase[:, None], n=n, axis=0)))
    mean, sd = np.mean(draws), np.std(draws, ddof=1)
    cached_mean, cached_sd = float(row["null mean"]), float(row["null std"])
    assert abs(mean - cached_mean) < 4 * cached_sd / np.sqrt(len(draws))
    assert 0.6 < sd / cached_sd < 1.6
    assert (observed - mean) / sd == pytest.approx(cached["phases_shared_positions_std_effect"], abs=1.5)


def test_the_effects_figure_labels_statistics_in_upright_words_and_fills_each_null_apart():
    """Fig. 'effects' from the cached table of GPT-2: tick labels upright and without the table's formula names
    (abs(, std, frac), every null's bars with a fill pattern of its own (grey print merges colours)."""
    import csv
    from pathlib import Path

    from matplotlib.patches import Rectangle

    from analyses.engine.results import Result, Table
    from analyses.shuffle_nulls import HATCHES, NULLS, plot_effects
    from analyses.toolkit import plotting

    rows = list(csv.reader((Path(__file__).resolve().parents[1] / "report/_cache/gpt2/shuffle_nulls/null_tests.csv")
                           .open()))

    def cell(i, value):
        try:
            return float(value) if i >= 3 else value
        except ValueError:
            return value

    table = Table(tuple(rows[0]), tuple(tuple(cell(i, v) for i, v in enumerate(row)) for row in rows[1:]))
    fig = plot_effects(Result({}, {"null_tests": table}), None)
    ax = fig.axes[0]
    fig.draw_without_rendering()
    labels = ax.get_xticklabels()
    assert len(labels) == len(rows[1:]) // len(NULLS)
    for label in labels:
        assert label.get_rotation() == 0
        assert not any(code in label.get_text() for code in ("abs(", "std", "frac", "cos²", "P:")), label.get_text()
    hatches = {bar.get_hatch() or "" for bar in ax.patches if isinstance(bar, Rectangle)}
    assert hatches == set(HATCHES.values()) and len(set(HATCHES.values())) == len(NULLS)
    plotting.pyplot().close(fig)
