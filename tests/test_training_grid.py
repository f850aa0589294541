"""What decides the helix: the table-shape numbers on tables whose answers are known in closed form, the
references, every window of a known helix, the grid's recipes, the power-law fit's intervals on synthetic data of
known slope, the context fit at matched exposure per position, and the fixed-positions control's paired training
loss."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.engine.sources import GRID, MAIN_RECIPE, MODELS, ModelShape
from analyses.toolkit.table_shape import (MEASURES, bulk_turns, pair_ratio, power_law_intervals, power_law_slope,
                                          reference_shapes, table_shape)
from analyses.engine.results import checked_sample
from analyses.toolkit.training import Recipe
from analyses.training_grid import (CAUSE_RUNS, COMPUTE_ONLY, CONTEXT_RUNS, MAIN_RUNS, RUNS, cause_effects, change,
                                    context_scaling, context_slope_variants,
                                    fixed_positions_gap, matched_exposure, paired_training_gap, ratio_at_step, run_key,
                                    window_shape, window_slope_variants)


def helix(n: int, turns: float, d: int = 16, rise: float = 0.0) -> np.ndarray:
    """A helix of `turns` turns over n rows in the first two coordinates, rising by `rise` per row in the third."""
    angle = 2 * np.pi * turns * np.arange(n) / n
    P = np.zeros((n, d))
    P[:, 0], P[:, 1], P[:, 2] = np.cos(angle), np.sin(angle), rise * np.arange(n)
    return P


@pytest.mark.parametrize("turns", [2.0, 3.0, 5.0])
def test_a_helix_of_k_turns_has_k_turns_its_period_equal_cosine_and_sine_and_a_toeplitz_gram(turns):
    s = table_shape(helix(512, turns))
    assert s["turns"] == pytest.approx(turns, rel=0.02)
    assert s["period"] == pytest.approx(512 / turns, rel=0.02)  # the bulk, 311 rows, holds ≥ 1.2 turns
    assert s["pc1"] == pytest.approx(0.5, abs=0.02) and s["pair_ratio"] == pytest.approx(1.0, abs=0.05)
    assert s["top3"] == pytest.approx(1.0)
    assert s["toeplitz"] > 0.95


def test_the_period_is_undefined_where_the_bulk_holds_less_than_one_turn():
    assert bulk_turns(512, 100, 311) == pytest.approx(1.0)  # rows 100 … 411: 311 steps
    assert np.isfinite(table_shape(helix(512, 1.8))["period"])  # 311 / (512 / 1.8) ≈ 1.09 turns in the bulk
    assert np.isnan(table_shape(helix(512, 1.4))["period"])  # ≈ 0.85 turn in the bulk


def test_a_straight_ramp_is_one_component_and_reads_half_a_turn_around_its_own_midpoint():
    """The origin-free winding measures the angle around the table's local centre: from the midpoint of a straight
    line its two ends lie opposite, so a ramp reads 0.5 turn, not 0 (a ramp is told from a helix by λ2/λ1)."""
    s = table_shape(helix(256, 0.0, rise=1.0))
    assert s["pc1"] == pytest.approx(1.0) and s["pair_ratio"] == pytest.approx(0.0, abs=1e-12)
    assert s["turns"] == pytest.approx(0.5, abs=0.01)
    assert np.isnan(s["period"])


def test_random_walks_have_the_brownian_bridge_spectrum_and_the_draws_are_seeded():
    """A centred random walk's principal variances fall as 1/k² (the Karhunen–Loève expansion of a Brownian
    motion with its mean removed): PC1 holds 6/π² of the variance, λ2/λ1 = 1/4, the top three 1.49/(π²/6)."""
    draws = reference_shapes((400, 400), 3, seed=1)
    walk = draws["walk"].mean(axis=0)
    i = {m: MEASURES.index(m) for m in MEASURES}
    assert walk[i["pc1"]] == pytest.approx(6 / np.pi**2, abs=0.04)
    assert walk[i["pair_ratio"]] == pytest.approx(0.25, abs=0.04)
    assert walk[i["top3"]] == pytest.approx((1 + 1 / 4 + 1 / 9) * 6 / np.pi**2, abs=0.04)
    gaussian = draws["gaussian"].mean(axis=0)
    assert gaussian[i["top3"]] < 0.05  # no low-rank structure: about 3 of 400 equal variances, spread by MP
    again = reference_shapes((400, 400), 3, seed=1)
    np.testing.assert_array_equal(draws["walk"], again["walk"])


def test_windows_of_a_helix_cut_the_turns_in_proportion_and_every_window_from_row_1_is_measured():
    """A helix of period 128 over 1,025 rows (the last one untrained): windows of 512 hold 4 turns each; every start
    1, 1 + 64, … that fits is a window (windows of 256: 1 … 705, 12 of them; of 512: 1 … 449, 8), summarised by
    median, smallest and largest."""
    shape = ModelShape("toy", "gpt2", 16, 1025, 1, 1, 10, 64, "pre")
    r = window_shape({"W_pos": helix(1025, 1025 / 128)}, shape, lengths=(256, 512), stride=64, first_row=1,
                     untrained_rows=1, edge=100, runs=(), variant_strides=(64, 128), n_sample=3, cached_rows=None)
    assert r.numbers["w512_turns_median"].value == pytest.approx(4.0, rel=0.02)
    assert r.numbers["turns_slope"].value == pytest.approx(1.0, abs=0.03)  # a fixed period: turns ∝ length
    assert r.numbers["w256_turns_min"].value == pytest.approx(2.0, rel=0.03)
    assert r.numbers["whole_turns"].value == pytest.approx(8.0, rel=0.02)
    assert r.numbers["w256_windows"].value == 12 and r.numbers["w512_windows"].value == 8
    np.testing.assert_array_equal(r.arrays["w512_starts"], np.arange(1, 450, 64))
    assert len(r.tables["windows"].rows) == 3 + 3 + 1
    assert r.numbers["slope_variants"].value == 2 * 2 * 2  # two strides, row 0 in or out, mean or median
    assert "w512_turns" not in r.numbers  # the mean of a few windows is no longer cited


def test_the_window_summary_is_the_median_and_range_of_every_window_not_of_a_few():
    """A table that is a straight ramp but for a bent stretch: the windows that hold the bend are the few largest
    λ2/λ1, so the median over every window is a ramp's while the largest is the bend's, and a start every 8 rows from
    row 1 finds it wherever it lies."""
    shape = ModelShape("toy", "gpt2", 16, 1025, 1, 1, 10, 64, "pre")
    P = helix(1025, 0.0, rise=1.0)
    P[600:700, 1] = 40 * np.sin(np.linspace(0, np.pi, 100))  # a bump away from the line
    r = window_shape({"W_pos": P}, shape, lengths=(128,), stride=8, first_row=1, untrained_rows=1, edge=100, runs=(),
                     variant_strides=(8,), n_sample=3, cached_rows=None)
    ratios = np.array([pair_ratio(P[s:s + 128]) for s in np.arange(1, 1024 - 128 + 1, 8)])
    assert r.numbers["w128_pair_ratio_median"].value == pytest.approx(np.median(ratios)) and np.median(ratios) < 1e-9
    assert r.numbers["w128_pair_ratio_max"].value == pytest.approx(ratios.max()) and ratios.max() > 0.05


def test_a_check_handed_the_cached_rows_measures_its_sample_again_and_reads_the_rest():
    """`window_shape` with its own table `rows` handed back gives the same result bit for bit; a cached value outside
    the checked sample is taken as cached (so an edit there shows in the aggregates), one inside it is measured again
    (so an edit there is undone): the check costs its sample, and every number still follows from every window."""
    shape = ModelShape("toy", "gpt2", 16, 1025, 1, 1, 10, 64, "pre")
    P = helix(1025, 1025 / 300) + 0.05 * np.random.default_rng(0).standard_normal((1025, 16))
    params = dict(lengths=(256, 512), stride=64, first_row=1, untrained_rows=1, edge=100, runs=(),
                  variant_strides=(64, 128), n_sample=3)
    full = window_shape({"W_pos": P}, shape, **params, cached_rows=None)
    table = full.tables["rows"]
    rows = {c: [row[i] for row in table.rows] for i, c in enumerate(table.columns)}
    again = window_shape({"W_pos": P}, shape, **params, cached_rows=rows)
    assert again.numbers == full.numbers
    np.testing.assert_array_equal(np.array(again.tables["rows"].rows), np.array(table.rows))  # NaN periods equal
    w256 = [i for i, (L, first) in enumerate(zip(rows["positions"], rows["first row"])) if L == 256 and first % 64 == 1]
    sampled = sorted(checked_sample(len(w256), 3))
    assert sampled == [0, 6, 11] and len(w256) == 12
    edited = {c: list(v) for c, v in rows.items()}
    edited["turns"][w256[6]] += 1.0   # inside the sample: measured again
    edited["turns"][w256[1]] += 100.0  # outside it: read as cached, so the largest turns over windows of 256 moves
    moved = window_shape({"W_pos": P}, shape, **params, cached_rows=edited)
    np.testing.assert_array_equal(moved.tables["rows"].rows[w256[6]], table.rows[w256[6]])
    assert moved.numbers["w256_turns_max"].value == pytest.approx(rows["turns"][w256[1]] + 100.0)


def _arc(n: int, period: float = 1000.0) -> np.ndarray:
    return helix(n, n / period)


def test_every_variant_of_the_fits_finds_the_same_scaling_in_a_clean_case():
    """Arcs of one period: λ2/λ1 ∝ n^b with b near 2 whichever run is left out and whether row 0 is kept, for the
    context runs (2 × 5 fits) and for windows of one long arc (2 × 3 fits)."""
    contexts = dict(zip(CONTEXT_RUNS, (128, 256, 256, 512)))
    ratios = {first: {name: pair_ratio(_arc(n)[first:]) for name, n in contexts.items()} for first in (0, 1)}
    slopes = context_slope_variants(ratios, contexts)
    assert len(slopes) == 10 and 1.9 < slopes.min() <= slopes.max() < 2.3 and np.ptp(slopes) < 0.15
    arc, lengths = _arc(1024), [128, 256, 512]
    by_row = {first: {L: np.array([pair_ratio(arc[s:s + L]) for s in range(first, 1024 - L + 1, 8)]) for L in lengths}
              for first in (1, 0)}
    windows = window_slope_variants(lengths, (8, 16, 32), by_row)
    assert len(windows) == 12 and 1.9 < windows.min() <= windows.max() < 2.3 and np.ptp(windows) < 0.15
    with pytest.raises(ValueError, match="multiple"):
        window_slope_variants(lengths, (8, 12), by_row)


def test_the_variants_of_the_context_fit_span_a_run_that_is_off_the_trend():
    """One seed's table a full helix (λ2/λ1 ≈ 1) among arcs: the fit with it is pulled away from b ≈ 2, the fit that
    leaves it out is not, so the range covers both."""
    contexts = dict(zip(CONTEXT_RUNS, (128, 256, 256, 512)))
    tables = {name: _arc(n) for name, n in contexts.items()} | {"kjv-gpt2-seed1": helix(256, 2.0)}
    slopes = context_slope_variants({first: {name: pair_ratio(t[first:]) for name, t in tables.items()}
                                     for first in (0, 1)}, contexts)
    assert slopes.max() > 1.8 and slopes.min() < 1.0


def test_the_fixed_positions_gap_is_paired_at_the_last_step_and_read_over_training():
    """Losses at steps 0–400: the fixed run is furthest behind at step 100 (0.5), closest after it at step 200 (0.0),
    and in the second half (steps 200–400) behind both seeds at two of three evaluations, by 0.05 on average against
    the seeds' mean, while the seeds differ by 0.02 on average and 0.04 at most."""
    fixed = np.array([8.0, 5.0, 4.2, 4.11, 4.05])
    main = np.array([8.0, 4.5, 4.2, 4.0, 4.0])
    seed1 = np.array([8.0, 4.6, 4.16, 4.02, 4.04])
    n = fixed_positions_gap(fixed, main, seed1, np.array([0, 100, 200, 300, 400]), np.zeros(400), np.zeros(400))
    assert n["sinusoidal_loss_gap"].value == pytest.approx(0.05)
    assert n["sinusoidal_loss_gap_seed1"].value == pytest.approx(0.01)
    assert n["seed_loss_gap"].value == pytest.approx(0.04)
    assert n["sinusoidal_loss_gap_max"].value == pytest.approx(0.5) and n["sinusoidal_loss_gap_max_step"].value == 100
    assert n["sinusoidal_loss_gap_narrowest"].value == pytest.approx(0.0)
    assert n["sinusoidal_loss_gap_narrowest_step"].value == 200
    assert n["late_from_step"].value == 200 and n["late_evaluations"].value == 3
    assert n["sinusoidal_late_behind"].value == 2
    assert n["sinusoidal_late_gap"].value == pytest.approx(np.mean([0.02, 0.1, 0.03]))
    assert n["seed_late_gap"].value == pytest.approx(np.mean([0.04, 0.02, 0.04]))
    assert n["seed_late_gap_max"].value == pytest.approx(0.04)
    assert n["sinusoidal_train_late_gap"].value == 0.0 and n["train_late_steps"].value == 201  # steps 200 … 400
    with pytest.raises(ValueError, match="same steps"):
        fixed_positions_gap(fixed[:-1], main, seed1, np.array([0, 100, 200, 300, 400]), np.zeros(400), np.zeros(400))


def test_the_paired_training_gap_is_the_mean_over_the_second_half_with_the_standard_error_of_its_block_means():
    """Fixed − learned training loss of −0.01 in steps 1 … 999 and, from step 1,000 (the second half of 2,000 steps),
    alternating blocks of 100 steps at −0.003 and −0.001: mean −0.002 (the leftover step 2,000 at −0.002), and the
    ten block means' sd/√10. A gap that only the first half has does not enter."""
    steps = np.arange(1, 2001)
    gap = np.where(steps < 1000, -0.01, np.where(((steps - 1000) // 100) % 2 == 0, -0.003, -0.001))
    gap[-1] = -0.002
    n = paired_training_gap(4.0 + gap, np.full(2000, 4.0), 1000)
    assert n["train_late_steps"].value == 1001
    assert n["sinusoidal_train_late_gap"].value == pytest.approx(-0.002, abs=1e-12)
    blocks = np.array([-0.003, -0.001] * 5)
    assert n["sinusoidal_train_late_gap_se"].value == pytest.approx(blocks.std(ddof=1) / np.sqrt(10), rel=1e-9)
    with pytest.raises(ValueError, match="blocks"):
        paired_training_gap(np.zeros(300), np.zeros(300), 150)


def test_every_grid_run_changes_one_thing_from_its_reference_and_keeps_the_tokens_per_step():
    """A main-size run changes one thing from the main recipe (a second seed of a cause: the seed alone, from the
    cause's run; the long runs: the length of the schedule, its warm-up scaled with it); a small run from the small
    base or its longer run; each keeps its reference's tokens per step and held-out tokens."""
    base, long = GRID["kjv-small"], GRID["kjv-small-long"]
    for name, recipe in GRID.items():
        references = (MAIN_RECIPE,) if name.startswith("kjv-gpt2") else (base, long)
        if name.endswith("-seed1"):
            references = (GRID.get(name.removesuffix("-seed1"), MAIN_RECIPE),)
        assert recipe.tokens_per_step == references[0].tokens_per_step
        assert recipe.eval_windows * recipe.n_ctx == references[0].eval_windows * references[0].n_ctx
        assert MODELS[name].recipe == recipe and MODELS[name].groups == ("training grid",)
        changed = [{k for k, v in recipe.as_dict().items() if ref.as_dict()[k] != v} - set(COMPUTE_ONLY)
                   - ({"position_init_std"} if recipe.positions != ref.positions else set())  # a fixed table's RMS
                   - ({"warmup"} if recipe.warmup * ref.steps == ref.warmup * recipe.steps else set())  # scaled
                   for ref in references]
        assert min(map(len, changed)) == (0 if name in ("kjv-small", "kjv-small-long") else 1), name
    assert MODELS["kjv-gpt2"].recipe == MAIN_RECIPE
    assert [run_key(n) for n in RUNS][:5] == ["main", "main_seed1", "main_ctx128", "main_ctx512", "main_sigma01"]
    assert change("kjv-small") == "base" and change("kjv-gpt2-ctx512") == "context 512"
    assert change("kjv-gpt2-sinusoidal") == "fixed sinusoidal positions, RMS 0.034"
    assert [MODELS[n].recipe.n_ctx for n in CONTEXT_RUNS] == [128, 256, 256, 512]
    assert [change(n) for n in CAUSE_RUNS] == [
        "weight decay on the position table 0", "weight decay on the position table 1", "embedding dropout 0.1",
        "embedding dropout 0.1, seed 1", "initial position noise 0.01", "initial position noise 0.02",
        "initial position noise 0.1", "12,000 steps (4×, warm-up with them)",
        "12,000 steps (4×, warm-up with them), seed 1"]
    assert change("kjv-small-long") == "600 steps (2×)"  # the small grid's long run keeps its warm-up
    assert all(MODELS[n].recipe.n_ctx == MAIN_RECIPE.n_ctx for n in CAUSE_RUNS)


def test_a_causes_effect_is_its_distance_from_the_seeds_mean_in_units_of_the_seeds_difference():
    """Seeds at λ2/λ1 0.04 and 0.06 (mean 0.05, difference 0.02): a run at 0.09 lies 2 seed differences above, one at
    0.05 none; the run that ends most bent is named; identical seeds give no scale and are an error."""
    def shape(ratio: float, turns: float) -> np.ndarray:
        row = np.zeros(len(MEASURES))
        row[MEASURES.index("pair_ratio")], row[MEASURES.index("turns")] = ratio, turns
        return row

    seeds = (shape(0.04, 0.6), shape(0.06, 0.7))
    out = cause_effects({CAUSE_RUNS[0]: shape(0.09, 0.65), CAUSE_RUNS[1]: shape(0.05, 0.9)}, seeds)
    assert out["main_poswd0_pair_ratio_vs_seeds"].value == pytest.approx(2.0)
    assert out["main_poswd1_pair_ratio_vs_seeds"].value == pytest.approx(0.0)
    assert "main_poswd1_turns_vs_seeds" not in out
    assert out["seeds_pair_ratio_gap"].value == pytest.approx(0.02)
    assert out["cause_runs_above_seeds_pair_ratio"].value == 1
    assert out["cause_most_pair_ratio"].value == change(CAUSE_RUNS[0])
    assert "main_poswd0_seeds_above" not in out  # one seed: no count of seeds
    twice = cause_effects({CAUSE_RUNS[2]: shape(0.07, 0.6), CAUSE_RUNS[3]: shape(0.05, 0.6)}, seeds)
    assert CAUSE_RUNS[3] == CAUSE_RUNS[2] + "-seed1" and twice["main_drop01_seeds_above"].value == 1
    assert twice["two_of_four_p"].value == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="no scale of chance"):
        cause_effects({CAUSE_RUNS[0]: shape(0.09, 0.65)}, (seeds[0], seeds[0]))


def test_a_long_run_is_read_at_its_best_held_out_loss_at_the_main_runs_length_and_against_the_bar_of_a_helix():
    """A synthetic long run whose λ2/λ1 falls to 0.02 at step 100, then rises along log step to 0.4 at step 10,000,
    with turns rising to 1.2, and whose held-out loss is lowest at step 5,000: the snapshot before the lowest loss
    is read (4,000), λ2/λ1 at step 1,000 lies on the log-log line between snapshots, the last quarter's change is read
    against step 7,500, and the run misses the bar of a table that winds; a second run that reaches 1.6 turns at
    λ2/λ1 0.6 meets it."""
    from analyses.training_grid import HELIX, LONG_RUNS, long_training

    steps = np.array([0, 10, 100, 1000, 4000, 10000])
    ratios = np.array([0.9, 0.1, 0.02, 0.04, 0.2, 0.4])
    turns = np.array([np.nan, 0.5, 0.5, 0.6, 0.9, 1.2])
    shape = np.zeros((len(steps), len(MEASURES)))
    shape[:, MEASURES.index("pair_ratio")], shape[:, MEASURES.index("turns")] = ratios, turns
    eval_steps = np.arange(0, 10001, 1000)
    eval_loss = 4.0 - 0.1 * np.minimum(eval_steps, 5000) / 1000 + 0.05 * np.maximum(eval_steps - 5000, 0) / 1000
    run = {"steps": steps, "shape": shape, "eval_steps": eval_steps, "eval_loss": eval_loss}
    wound = {**run, "shape": shape.copy()}
    wound["shape"][-1, MEASURES.index("pair_ratio")], wound["shape"][-1, MEASURES.index("turns")] = 0.6, 1.6
    out = long_training({LONG_RUNS[0]: run, LONG_RUNS[1]: wound}, main_steps=1000)
    key = run_key(LONG_RUNS[0])
    assert out[f"{key}_best_loss_step"].value == 5000 and out[f"{key}_best_loss"].value == pytest.approx(3.5)
    assert out[f"{key}_best_loss_snapshot"].value == 4000 and out[f"{key}_pair_ratio_at_best_loss"].value == 0.2
    assert out[f"{key}_pair_ratio_at_main_end"].value == pytest.approx(0.04)
    late = np.exp(np.interp(np.log(7500), np.log([4000, 10000]), np.log([0.2, 0.4])))
    assert out[f"{key}_pair_ratio_late_change"].value == pytest.approx(0.4 / late - 1)
    assert out[f"{key}_pair_ratio_max"].value == 0.4 and out[f"{key}_turns_max"].value == pytest.approx(1.2)
    assert out["long_winding_runs"].value == 1
    assert (out["helix_turns"].value, out["helix_pair_ratio"].value) == (HELIX["turns"], HELIX["pair_ratio"])


def test_power_law_slope_recovers_the_exponent():
    n = np.array([128, 256, 512])
    assert power_law_slope(n, 3.0 * n ** 0.7)[0] == pytest.approx(0.7)
    assert power_law_slope(n, np.full(3, 2.5))[0] == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("fixed, slope", [("period", 1.0), ("turns", 0.0)])
def test_context_scaling_tells_a_fixed_period_from_a_fixed_number_of_turns_per_context(fixed, slope):
    """Helices at contexts 128, 256, 256, 512: of period 100 tokens (turns grow with n, b = 1), or of 2.5 turns
    whatever the context (b = 0, the same shape at every context: λ2/λ1 the same too, as the fit at 1024 gives)."""
    contexts = dict(zip(CONTEXT_RUNS, (128, 256, 256, 512)))
    finals = {name: np.array([table_shape(helix(n, n / 100 if fixed == "period" else 2.5))[m] for m in MEASURES])
              for name, n in contexts.items()}
    numbers = context_scaling(finals, contexts)
    assert numbers["context_turns_slope"].value == pytest.approx(slope, abs=0.03)
    assert "context_pair_ratio_at_gpt2" not in numbers  # no extrapolation without its prediction interval
    if fixed == "turns":
        assert numbers["context_pair_ratio_slope"].value == pytest.approx(0.0, abs=1e-3)
        assert numbers["context_pair_ratio_slope_low"].value < 0 < numbers["context_pair_ratio_slope_high"].value


def test_power_law_intervals_are_exact_without_noise_and_cover_at_their_level_with_it():
    """Four points at contexts 128, 256, 256, 512 (the context runs' design), log value = a + 0.7 log n + noise: with
    no noise the intervals are the point; with Gaussian noise the slope's 95 % interval holds the true 0.7 in 95 %
    of 4,000 draws and the prediction interval at 1,024 holds a new point there as often (Student's t with 2 degrees
    of freedom; a normal quantile would cover about 80 %)."""
    n = np.array([128, 256, 256, 512])
    exact = power_law_intervals(n, 3.0 * n ** 0.7, 1024)
    assert exact["b_low"] == pytest.approx(0.7) and exact["b_high"] == pytest.approx(0.7)
    assert exact["at_low"] == pytest.approx(3.0 * 1024 ** 0.7) and exact["at_high"] == pytest.approx(exact["at"])
    rng = np.random.default_rng(0)
    slope_covered = point_covered = 0
    draws = 4000
    for _ in range(draws):
        fit = power_law_intervals(n, 3.0 * n ** 0.7 * np.exp(0.3 * rng.standard_normal(4)), 1024)
        new = 3.0 * 1024 ** 0.7 * np.exp(0.3 * rng.standard_normal())
        slope_covered += fit["b_low"] <= 0.7 <= fit["b_high"]
        point_covered += fit["at_low"] <= new <= fit["at_high"]
    assert slope_covered / draws == pytest.approx(0.95, abs=0.012)
    assert point_covered / draws == pytest.approx(0.95, abs=0.012)
    with pytest.raises(ValueError, match="three points"):
        power_law_intervals(n[:2], n[:2] ** 0.7, 1024)


def _power_law_runs(beta: float, gamma: float):
    """The context runs at equal tokens per step (batch 4,096 / n), each λ2/λ1 = 0.01 · n^β · (step · batch)^−γ at
    log-spaced snapshots: the shape depends on the context and on the windows each row has seen, nothing else."""
    contexts = dict(zip(CONTEXT_RUNS, (128, 256, 256, 512)))
    batches = {name: 4096 // n for name, n in contexts.items()}
    steps = np.unique(np.round(np.geomspace(10, 3000, 20))).astype(int)
    steps = np.concatenate([[0], steps])
    series = {name: (steps, {first: 0.01 * n ** beta * np.maximum(steps * batches[name], 1) ** -gamma * (1 + first / 10)
                             for first in (0, 1)}) for name, n in contexts.items()}
    recipes = {name: Recipe(n_ctx=n, batch=batches[name]) for name, n in contexts.items()}
    return contexts, batches, series, recipes


@pytest.mark.parametrize("beta, gamma", [(0.0, 0.5), (1.5, 0.3)])
def test_matched_exposure_recovers_the_context_exponent_that_the_last_step_confounds(beta, gamma):
    """λ2/λ1 ∝ n^β (windows per row)^−γ: at the last step a row of context n has seen 3,000 · 4,096/n windows, so the
    last-step fit gives β + γ; read at equal windows per row (24,000: the 512-context run's last step; steps 750,
    1,500, 3,000) the fit gives β, with an interval of zero width, as the snapshots are log-spaced and a power law is
    a line in log-log."""
    contexts, batches, series, recipes = _power_law_runs(beta, gamma)
    last = {name: np.array([0, 0, by_row[0][-1], 1, 0, 0]) for name, (_, by_row) in series.items()}
    assert context_scaling(last, contexts)["context_pair_ratio_slope"].value == pytest.approx(beta + gamma)
    numbers = matched_exposure(series, contexts, batches, recipes)
    assert numbers["context_matched_windows"].value == 24000
    assert [numbers[f"{run_key(name)}_matched_step"].value for name in CONTEXT_RUNS] == [750, 1500, 1500, 3000]
    assert numbers["context_matched_slope"].value == pytest.approx(beta, abs=1e-9)
    assert numbers["context_matched_slope_high"].value - numbers["context_matched_slope_low"].value < 1e-6
    assert numbers["context_matched_slope_min"].value == pytest.approx(beta, abs=1e-9)
    assert numbers["context_matched_at_gpt2"].value == pytest.approx(0.01 * 1024 ** beta * 24000 ** -gamma, rel=1e-6)


def test_the_ratio_between_snapshots_is_read_on_the_log_log_line_and_never_extrapolated():
    steps, ratios = np.array([0, 10, 100, 1000]), np.array([1.0, 0.5, 0.05, 0.005])
    assert ratio_at_step(steps, ratios, 10 ** 1.5) == pytest.approx(0.05 * 10 ** 0.5)
    assert ratio_at_step(steps, ratios, 1000) == pytest.approx(0.005)
    with pytest.raises(ValueError, match="outside"):
        ratio_at_step(steps, ratios, 3000)


def test_a_table_that_bends_more_the_longer_it_is_has_a_rising_pair_ratio():
    """Arcs of a fixed period of 1,000 tokens: 128 positions are nearly straight, 512 bend through half a turn; λ2/λ1
    rises with the context, about as the square of the angle swept (b near 2) while the arc is short."""
    contexts = dict(zip(CONTEXT_RUNS, (128, 256, 256, 512)))
    finals = {name: np.array([table_shape(helix(n, n / 1000))[m] for m in MEASURES]) for name, n in contexts.items()}
    numbers = context_scaling(finals, contexts)
    assert 1.5 < numbers["context_pair_ratio_slope"].value < 2.5
    assert finals["kjv-gpt2-ctx128"][MEASURES.index("pair_ratio")] < 0.02


def test_the_grid_reads_each_runs_history_and_measures_its_last_table_and_half_way_steps(tmp_path, monkeypatch):
    """A run whose table goes from noise to a helix of two turns over 256 rows, written as `train` writes it: the
    grid reads its last table (two turns, λ2/λ1 ≈ 1), the loss's half-way step (8 → 4: 6 first reached at step 100)
    and the top-3 share's half-way step (the snapshot of the helix), and gives references of its shape."""
    import json

    from safetensors.numpy import save_file

    import analyses.training_grid as grid
    from analyses.engine.tensors import RECORD_PARTS

    rng = np.random.default_rng(0)
    noise = 0.01 * rng.standard_normal((256, 64))
    W = np.stack([noise, noise, helix(256, 2.0, d=64) + noise]).astype(np.float32)
    directory = tmp_path / "kjv-small"
    directory.mkdir()
    save_file({"history.steps": np.array([0, 10, 300]), "history.W_pos": W,
               "history.eval_steps": np.array([0, 50, 100, 300]),
               "history.eval_loss": np.array([8.0, 7.0, 5.9, 4.0], dtype=np.float32),
               "history.train_loss": np.linspace(8, 4, 300, dtype=np.float32)},
              str(directory / "history.safetensors"))
    record = dict.fromkeys(RECORD_PARTS, {}) | {"fingerprint": {"recipe": GRID["kjv-small"].as_dict()},
                                                 "run": {"seconds": 600.0}, "final": {"train_loss_last_100": 4.5},
                                                 "corpus": {"training_tokens": 1_000_000}}
    (directory / "training.json").write_text(json.dumps(record))
    monkeypatch.setattr(grid, "model_dir", lambda name: tmp_path / name)
    r = grid.training_grid(runs=("kjv-small",), n_draws=2, seed=0, edge=100, level=0.95)
    assert r.numbers["base_turns"].value == pytest.approx(2.0, rel=0.03)
    assert r.numbers["base_pair_ratio"].value == pytest.approx(1.0, abs=0.05)
    assert r.numbers["base_period"].text == "undefined"  # 55 rows of bulk hold less than a turn of 128
    assert r.numbers["base_loss_half_step"].value == 100 and r.numbers["base_share_half_step"].value == 300
    assert r.numbers["base_minutes"].value == pytest.approx(10.0)
    assert r.numbers["base_epochs"].value == pytest.approx(300 * 8 * 256 / 1e6)  # tokens trained on / in the text
    assert "gpu_runs" not in r.numbers  # a record without a GPU
    ratios = [table_shape(P)["pair_ratio"] for P in W]  # recomputed snapshot by snapshot
    assert r.numbers["base_pair_ratio_min"].value == pytest.approx(min(ratios))
    assert r.numbers["base_pair_ratio_min_step"].value == [0, 10, 300][int(np.argmin(ratios))]
    lowest = int(np.argmin(ratios))
    assert r.numbers["base_snapshots_after_min"].value == 2 - lowest
    assert r.numbers["base_rises_after_min"].value == int(np.sum(np.diff(ratios[lowest:]) > 0))
    assert r.numbers["base_pair_ratio_rise"].value == pytest.approx(ratios[-1] / min(ratios) - 1)
    assert "walk256x64_pc1" in r.numbers and len(r.tables["grid"].rows) == 1 + 2


def test_a_run_with_fixed_positions_reports_its_table_and_loss_but_no_growth(tmp_path, monkeypatch):
    """A fixed table does not grow: the grid gives its shape and loss, and no learned change, smallest λ2/λ1 or
    half-way step of a share that never moves (each would be 0/0 or the first snapshot)."""
    import json

    from safetensors.numpy import save_file

    import analyses.training_grid as grid
    from analyses.engine.tensors import RECORD_PARTS
    from analyses.toolkit.sinusoids import sinusoidal_table

    table = (0.034 * np.sqrt(2) * sinusoidal_table(256, 128)).astype(np.float32)
    directory = tmp_path / "kjv-gpt2-sinusoidal"
    directory.mkdir()
    save_file({"history.steps": np.array([0, 10, 3000]), "history.W_pos": np.stack([table] * 3),
               "history.eval_steps": np.array([0, 100, 3000]),
               "history.eval_loss": np.array([7.7, 4.5, 3.7], dtype=np.float32),
               "history.train_loss": np.linspace(8, 3, 3000, dtype=np.float32)}, str(directory / "history.safetensors"))
    record = dict.fromkeys(RECORD_PARTS, {}) | {"fingerprint": {"recipe": GRID["kjv-gpt2-sinusoidal"].as_dict()},
                                                 "run": {"seconds": 60.0}, "final": {"train_loss_last_100": 2.9},
                                                 "corpus": {"training_tokens": 1_000_000}}
    (directory / "training.json").write_text(json.dumps(record))
    monkeypatch.setattr(grid, "model_dir", lambda name: tmp_path / name)
    r = grid.training_grid(runs=("kjv-gpt2-sinusoidal",), n_draws=2, seed=0, edge=100, level=0.95)
    assert r.numbers["main_sinusoidal_loss"].value == pytest.approx(3.7)
    assert r.numbers["main_sinusoidal_pair_ratio"].value == pytest.approx(table_shape(table)["pair_ratio"])
    assert not any(k in r.numbers for k in ("main_sinusoidal_learned_top3", "main_sinusoidal_share_half_step",
                                            "main_sinusoidal_pair_ratio_min"))
    (row,) = r.tables["grid"].rows
    assert row[1] == "fixed sinusoidal positions, RMS 0.034" and row[-1] == "—"
    assert "main_sinusoidal_shape" not in r.arrays  # nothing for the growth figure to draw
