"""Statements about a whole range ("from … on", "never", "first", "every run", "at every length") checked over that
range, wordings that the measurements contradict kept out of the chapters, and the growing chapter's key readings
recomputed with other code from the committed training histories (and GPT-2's table)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
GPT2 = os.environ.get("GPT2_WEIGHTS")


def chapters() -> str:
    return " ".join(" ".join(p.read_text().split()) for p in [REPO / "index.qmd", *sorted((REPO / "report").glob("*.qmd"))]
                    if p.name != "provenance.qmd")


def cited(key: str) -> str:
    value = yaml.safe_load((REPO / "_variables.yml").read_text())
    for part in key.split("."):
        value = value[part]
    return str(value)


def test_no_chapter_says_the_learned_cosine_stays_negative_from_its_first_negative_offset_on():
    """The mean cosine of GPT-2's rows turns negative at one offset and is positive again near one helix turn, so
    "negative from offset … on" (and "falls below zero from offset …") is wrong wherever a first negative offset is
    cited that way."""
    text = chapters()
    pattern = re.compile(r"(negative|below zero) from (offset )?\{\{< var [\w.]*first_negative[\w.]* >\}\}")
    assert not pattern.findall(text)


@pytest.mark.skipif(not GPT2, reason="needs GPT-2's weights (GPT2_WEIGHTS unset)")
def test_gpt2_mean_cosine_first_negative_offset_and_its_return_above_zero():
    """Over every offset: the cited offset is the first with a negative mean cosine (position 0 left out, as cited),
    and the curve is positive again at larger offsets, as the chapters now say."""
    from safetensors.numpy import load_file

    from analyses.toolkit.linalg import cosine_matrix, mean_by_offset

    P = np.asarray(load_file(os.path.join(GPT2, "model.safetensors"))["wpe.weight"], dtype=np.float64)
    means, _, _ = mean_by_offset(cosine_matrix(P), exclude=(0,))
    first = int(cited("gpt2.similarity.offset_first_negative"))
    assert int(cited("gpt2.sinusoidal_vs_learned.first_negative_offset_learned")) == first
    assert (means[:first - 1] > 0).all() and means[first - 1] < 0  # means[i] is offset i + 1
    assert (means[first:] > 0).any()
    assert means[int(cited("gpt2.similarity.offset_next_max")) - 1] > 0


def test_similarity_null_readings_hold_under_the_rule():
    """The similarity chapter reads: every shuffle test rejected, each observation outside every draw (including
    the share not explained by offset, where P lies below the shuffles); the shared-phase null not rejected on the two
    statistics that see where along the context the similarity changes, while independent phases are; and the
    shuffles' effect sizes cited as a range, not as "thousands"."""
    import csv

    numbers = json.loads((REPO / "report" / "_cache" / "gpt2" / "shuffle_nulls" / "numbers.json").read_text())
    value = {k: v["value"] for k, v in numbers.items()}
    with open(REPO / "report" / "_cache" / "gpt2" / "shuffle_nulls" / "null_tests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    decided = {(r["null"], r["similarity"], r["statistic"]): r["Holm"] for r in rows}
    for statistic in ("share of cos² not a function of offset", "sd of cos over n at fixed offset"):
        assert decided[("shared phases", "positions", statistic)] == "no"
        assert decided[("independent phases", "positions", statistic)].startswith("yes")
    for null in ("all entries shuffled", "each dimension shuffled"):
        assert decided[(null, "positions", "share of cos² not a function of offset")] == "yes, below"
    assert value["n_shuffle_rejected"] == value["n_shuffle_at_floor"] == value["n_shuffle_tests"]
    shuffle_effects = [abs(float(r["effect size"])) for r in rows
                       if r["null"] in ("all entries shuffled", "each dimension shuffled") and r["effect size"][-1].isdigit()]
    assert min(shuffle_effects) < 1000  # so "thousands of null standard deviations" would be false
    assert sum(z >= 1000 for z in shuffle_effects) > len(shuffle_effects) / 2  # the caption's "most in the thousands"
    assert value["shuffle_effect_min"] == pytest.approx(min(shuffle_effects), rel=1e-6)


@pytest.mark.parametrize("model", ["gpt2", "minilm"])
def test_similarity_null_verdicts_are_holm_within_each_null(model):
    """Each null is its own family: Holm's step-down rule, written here again, applied to each null's two-sided
    p-values from the cached table (a cell "< bound" is the floor 1/(1 + draws)) gives the table's verdicts, and
    each family's draws let its smallest p-value meet alpha/m."""
    import csv

    with open(REPO / "report" / "_cache" / model / "shuffle_nulls" / "null_tests.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Holm"] != "kept exactly"]
    for null in dict.fromkeys(r["null"] for r in rows):
        family = [r for r in rows if r["null"] == null]
        draws = int(family[0]["draws"])
        p = [1 / (1 + draws) if r["p-value"].startswith("<") else float(r["p-value"]) for r in family]
        m = len(p)
        assert 1 / (1 + draws) <= 0.05 / m, null
        rejected, order = [False] * m, sorted(range(m), key=lambda i: p[i])
        for rank, i in enumerate(order):
            if p[i] > 0.05 / (m - rank):
                break
            rejected[i] = True
        assert [r["Holm"].startswith("yes") for r in family] == rejected, null


@pytest.mark.parametrize("wording", [
    r"rule over the whole table", r"n_tests >}} tests form one family", r"shuffle_nulls\\.holm_threshold_min >}}",
    r"shuffle_nulls\.n_draws >}}",  # one family over all nulls' tests, one number of draws: no longer the rule
    r"thousands of (null )?(standard deviations|SDs)",  # false for the largest |cos| and five more shuffle tests
    r"distances run to thousands",
    r"Gaussian check", r"check for a Gaussian shape", r"Gaussian (upper )?tail at the effect size", r"p, Gaussian",
    r"Shapiro–Wilk \$p \\ge",  # a normality test of the draws, with no power in the tail, gating their p-values
])
def test_no_chapter_reads_the_similarity_nulls_as_before(wording):
    """The shuffles' effect sizes run from tens to tens of thousands of null standard deviations, and the p-values
    come from enough draws, two-sided, with no Gaussian tail gated by a normality test of the draws."""
    assert not re.findall(wording, chapters())


def test_landing_page_readings_hold_over_their_stated_ranges():
    """Two odd ends: both ends stay far above every other position for every window tried. Growing one: the trained
    model's table makes less than two turns around its axis however the axis is defined ("not a helix")."""
    def cached(scope: str, analysis: str) -> dict:  # the cache, not _variables.yml, which holds the cited keys only
        numbers = json.loads((REPO / "report" / "_cache" / scope / analysis / "numbers.json").read_text())
        return {key: number["value"] for key, number in numbers.items()}

    helix = cached("gpt2", "helix")
    assert helix["outlier_ends_low"] > 5 * helix["outlier_rest_p99_high"]
    for model in ("kjv_gpt2", "kjv_gpt2_seed1"):
        assert cached(model, "helix")["turns_total_high"] < 2


def test_the_headline_is_the_period_and_every_turn_count_is_the_one_over_the_rows_on_the_helix():
    """The abstract leads with one turn per period (and the turns per context), not with a whole-table count; a
    whole-table count is cited only as the count over the rows on the helix, beside the rows it runs between, and the
    end is not said to wind faster while its rows lie off the helix (as the start is not)."""
    text = chapters()
    index = " ".join((REPO / "report" / "index.qmd").read_text().split())
    lead = index.split("**")[1]
    assert "gpt2.helix.period" in lead and "turns_total" not in lead
    assert "gpt2.helix.cycles_in_context" in index
    for stale in ("helix of about {{< var gpt2.helix.turns_total >}} turns", "narrows and turns faster",
                  "and faster over the last positions", "from the first row to the last;",
                  "over its {{< var gpt1.model.n_ctx >}} positions they turn", "the rows lie off the helix, as the first",
                  "rate of a residual angle", "first and the last rows lie off it", "the last positions, which stay close",
                  "as the axis and the rule's threshold vary"):
        assert stale not in text, stale
    for match in re.finditer(r"\{\{< var gpt2\.helix\.turns_total >\}\}", text):
        nearby = text[max(0, match.start() - 400):match.end() + 400]
        assert ("helix_first" in nearby and "helix_last" in nearby) or "rows on the helix" in nearby, nearby
        assert "turns_rules_low" in nearby or "rows on the helix" in nearby, nearby  # the rule's range beside it
    # GPT-1: most rows between its first and last passing rows fail the rule, as the claims row says
    assert int(cited("gpt1.helix.helix_rows")) < int(cited("gpt1.helix.helix_span")) / 2
    assert cited("gpt2.helix.turns_total") == cited("gpt2.position_profile.all_turns")  # one count per table


def test_every_reading_of_the_off_toeplitz_share_stands_beside_the_shift_invariant_null():
    """1 − τ is not the share that depends on absolute position: a shift-invariant (shared-phase) process with P's
    spectra leaves as much off the Toeplitz part. Wherever it is cited, the null's range is cited beside it, and no
    chapter attributes it to absolute position."""
    text = chapters()
    key = "{{< var gpt2.toeplitz_gram.nontoeplitz_share >}}"
    assert key in text
    for match in re.finditer(re.escape(key), text):
        nearby = text[max(0, match.start() - 700):match.end() + 700]
        assert "shared_nontoeplitz_share" in nearby or "shared_toeplitz_share" in nearby, nearby
        after = text[match.end():match.end() + 80]
        assert "absolute position" not in after.split(".")[0] or "cannot" in after, after
    for stale in ("of its energy that depends on absolute position", "nontoeplitz_share >}} depends on absolute",
                  "the part of $G$ that depends on absolute position.", "consistent with a shift-invariant process",
                  "nontoeplitz_share >}}, is no more than", "no more than a shift-invariant process", "within {{< var gpt2.toeplitz_gram",
                  "shared_nontoeplitz_share_min >}} to"):
        assert stale not in text, stale
    # P's τ lies above the null: its 1 − τ below the null's central 95 %, and the cited p is (1 + count) / (1 + N)
    assert float(cited("gpt2.toeplitz_gram.nontoeplitz_share").rstrip("%")) < float(
        cited("gpt2.toeplitz_gram.shared_nontoeplitz_share_q025").rstrip("%"))
    count, draws = int(cited("gpt2.toeplitz_gram.shared_at_or_above")), int(
        cited("gpt2.toeplitz_gram.n_shared").replace(",", ""))
    assert cited("gpt2.toeplitz_gram.shared_p") == f"{(1 + count) / (1 + draws):.3f}"
    assert "more offset-like than" in text



def test_every_reading_of_the_shift_map_keeps_to_what_the_nulls_and_the_unregularised_fit_allow():
    """The held-out shift map, as a referee's independent check left it. The independent-phase surrogates are
    circular: they carry the jump from the table's last row to its first, which makes them rougher than GPT-2's
    table, so they are not "tables without shift structure" and beating them is no evidence of one ("better than
    both nulls" withdrawn). The full-width one-step share above 1 is that of the unregularised least-squares map,
    which overfits, so every "worse than standing still" says "unregularised" in the same sentence. The readings
    that replace them stay: better than for random walks, not demonstrably better than for the surrogates."""
    text = chapters()
    for withdrawn in ("better than both nulls", "tables without shift structure", "better than for tables without",
                      "more than for smooth tables without shift structure"):
        assert withdrawn not in text, withdrawn
    sentences = re.split(r"(?<=[.;!?])\s+(?=[A-Z@(\[{])", text)
    worse = [s for s in sentences if re.search(r"worse than (by )?standing still", s)]
    assert worse
    for sentence in worse:
        assert "unregularised" in sentence, sentence
    for kept in ("better than for random walks, though not demonstrably better than for surrogates",
                 "no better than standing still (worse, unregularised)", "without the wrap-around jump"):
        assert kept in text, kept


@pytest.mark.skipif(not GPT2, reason="needs GPT-2's weights (GPT2_WEIGHTS unset)")
def test_gpt2_toeplitz_share_against_shared_phase_draws_recomputed_directly():
    """Other code: each shift-invariant draw by its own FFT with one phase per frequency, G formed and its diagonals
    averaged directly; 40 draws put the null's mean within 4 of the cited sd of the cited mean, and P's τ as cited."""
    from safetensors.numpy import load_file

    P = np.asarray(load_file(os.path.join(GPT2, "model.safetensors"))["wpe.weight"], dtype=np.float64)
    X = P - P.mean(axis=0)
    n = len(X)
    index = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])

    def tau(Y):
        G = Y @ Y.T
        means = np.bincount(index.ravel(), weights=G.ravel()) / np.bincount(index.ravel())
        return float(np.sum(means[index] ** 2) / np.sum(G * G))

    assert f"{tau(X):.3f}" == cited("gpt2.toeplitz_gram.toeplitz_share_3f")
    rng = np.random.default_rng(12345)
    spectrum = np.fft.rfft(X, axis=0)
    draws = []
    for _ in range(40):
        phase = np.exp(1j * rng.uniform(0, 2 * np.pi, len(spectrum)))
        phase[0] = phase[-1] = 1.0
        draws.append(tau(np.fft.irfft(spectrum * phase[:, None], n=n, axis=0)))
    mean, sd = float(cited("gpt2.toeplitz_gram.shared_toeplitz_share_mean")), float(
        cited("gpt2.toeplitz_gram.shared_toeplitz_share_sd"))
    assert abs(np.mean(draws) - mean) < 4 * sd / np.sqrt(40) + 0.001
    assert np.std(draws, ddof=1) == pytest.approx(sd, rel=0.5)


GROWING = REPO / "report" / "growing-helix.qmd"
RETRACTED_GROWING = (
    "More steps straighten the ramp",  # λ2/λ1 rises after its minimum in every learned run
    "more steps straighten",
    "gives no sign that a longer run",
    "Straighter than GPT-2 at every length",  # false at 128 against every window
    "At each context the trained table is straighter than GPT-2's windows",
    "Fixed sinusoidal positions cost a little",  # the training loss matches: generalisation, not fit
    "not a consequence of length, width, or learned causal positions as such",  # two models of one width
    "not a consequence of the number of positions or of the width",
)


@pytest.mark.parametrize("wording", RETRACTED_GROWING)
def test_the_growing_readings_the_referee_broke_do_not_come_back(wording):
    assert wording.lower() not in chapters().lower()


def test_no_chapter_cites_an_extrapolation_or_a_context_slope_without_its_interval_or_gpt2s_windows_by_a_few():
    """Issue 44: the fit at GPT-2's context only with its prediction interval, the context slopes only with their 95 %
    intervals (each key cited beside its low and high end), and GPT-2's windows only by their median and range over
    every window (the mean of five windows, one holding row 0, was the old estimator)."""
    text = chapters()
    assert "context_pair_ratio_at_gpt2" not in text
    for key in ("context_matched_slope", "context_pair_ratio_slope", "context_matched_at_gpt2"):
        for cite in re.finditer(rf"common\.training_grid\.{key} >", text):
            nearby = text[cite.start():cite.start() + 400]
            assert f"{key}_low >" in nearby and f"{key}_high >" in nearby, key
    assert not re.search(r"gpt2\.window_shape\.w\d+_(top3|pc1|pair_ratio|turns|toeplitz) >", text)
    assert "gpt2.window_shape.n_windows" not in text


def test_the_growing_conclusions_state_the_budget_they_were_measured_at():
    """The abstract's bullet, the chapter's opening and conclusions and the limits name the training tokens (issue 44,
    item 4): the main runs' and, for the long runs' conclusion, theirs."""
    budget = "{{< var common.training_grid.main_tokens_millions >}} M tokens"
    index = " ".join((REPO / "report" / "index.qmd").read_text().split())
    bullet = index[index.index("**Growing one.**"):index.index("```{=latex}")]
    assert budget in bullet
    chapter = " ".join(GROWING.read_text().split())
    assert budget in chapter[:chapter.index("## The model")]
    start = chapter.index("a longer context does not bend the ramp") - 200
    assert budget in chapter[start:start + 900]
    start = chapter.index("Four times the steps bends the ramp")  # the long runs' conclusion, at their own budget
    assert "{{< var common.training_grid.main_long_tokens_millions >}} M tokens" in chapter[start:start + 600]
    limits = " ".join((REPO / "report" / "related-work.qmd").read_text().split())
    limits = limits[limits.index("**The budget.**"):][:600]
    assert budget in limits and "main_long_tokens_millions" in limits


def test_the_gpt1_readings_say_what_two_models_can_show_and_where_the_table_comes_from():
    """Issue 45, §6: wherever GPT-1's table is read against GPT-2's, the text says it has one public source and that
    two models of one width (one of them a window of a longer table) show at most that none of these is sufficient."""
    appendix = " ".join((REPO / "report" / "appendix-helix.qmd").read_text().split())
    section = appendix[appendix.index("{#sec-low-rank-gpt1}"):appendix.index("{#sec-appendix-helix-gpt1}")]
    appendix = appendix[appendix.index("{#sec-appendix-helix-gpt1}"):appendix.index("{#sec-appendix-helix-caveats}")]
    for text in (section, appendix):
        assert "one public source" in text
        assert "not sufficient" in text and "width is the same in both" in text
    claims = " ".join((REPO / "report" / "appendix-claims.qmd").read_text().split())
    assert "one public copy" in claims


def _cached(scope: str, analysis: str) -> dict:
    numbers = json.loads((REPO / "report" / "_cache" / scope / analysis / "numbers.json").read_text())
    return {key: number["value"] for key, number in numbers.items()}


def _pair_ratios(W: np.ndarray) -> np.ndarray:
    """λ2/λ1 of each centred table in W [S, n, d], from the eigenvalues of its Gram matrix (not the project's PCA)."""
    out = []
    for P in np.asarray(W, dtype=np.float64):
        X = P - P.mean(axis=0)
        top = np.linalg.eigvalsh(X.T @ X)[-2:]
        out.append(top[0] / top[1])
    return np.array(out)


MAIN_SIZE_LEARNED = {"kjv-gpt2": "main", "kjv-gpt2-seed1": "main_seed1", "kjv-gpt2-ctx128": "main_ctx128",
                     "kjv-gpt2-ctx512": "main_ctx512", "kjv-gpt2-sigma01": "main_sigma01",
                     "kjv-gpt2-poswd0": "main_poswd0", "kjv-gpt2-poswd1": "main_poswd1",
                     "kjv-gpt2-drop01": "main_drop01", "kjv-gpt2-drop01-seed1": "main_drop01_seed1",
                     "kjv-gpt2-sigma02": "main_sigma02", "kjv-gpt2-sigma10": "main_sigma10",
                     "kjv-gpt2-long": "main_long", "kjv-gpt2-long-seed1": "main_long_seed1"}
NOT_RISING = ("main_sigma10", "main_long")
"""The learned runs whose λ2/λ1 does not rise at every snapshot after its minimum: the largest initial scale (its
minimum is its last snapshot) and the first long run (a little below its highest at the end)."""


def _history(name: str) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(REPO / "models" / name / "history.safetensors"))


def test_every_learned_run_but_two_falls_to_a_minimum_then_rises_recomputed_from_the_committed_histories():
    """"Falls to a minimum and is higher at every snapshot after it" in all but the runs `NOT_RISING` names, over
    every snapshot of every learned main-size run, recomputed from the committed history files with other code; and
    the cached minimum, its step and the final value agree."""
    grid = _cached("common", "training_grid")
    assert grid["learned_main_runs"] == len(MAIN_SIZE_LEARNED)
    assert grid["rising_main_runs"] == len(MAIN_SIZE_LEARNED) - len(NOT_RISING)
    for name, key in MAIN_SIZE_LEARNED.items():
        h = _history(name)
        ratios, steps = _pair_ratios(h["history.W_pos"]), h["history.steps"]
        lowest = int(np.argmin(ratios))
        rising = 0 < lowest < len(ratios) - 1 and np.all(np.diff(ratios[lowest:]) > 0)
        assert rising == (key not in NOT_RISING), name
        assert grid[f"{key}_pair_ratio_min_step"] == steps[lowest]
        assert grid[f"{key}_pair_ratio_min"] == pytest.approx(ratios[lowest], rel=1e-6)
        assert grid[f"{key}_pair_ratio"] == pytest.approx(ratios[-1], rel=1e-6)


def test_the_weight_decay_runs_against_the_seeds_recomputed_from_the_committed_histories():
    """"Without decay it ends larger and about as straight; the strong decay shrinks it and bends it a little more,
    above both seeds, by less than two seeds can tell from chance": each run's last λ2/λ1 less the seeds' mean in
    units of their difference, from the committed tables with other code; the entries' RMS ordered as the text says;
    and the strong decay's distance short of what one degree of freedom needs at two-sided 5 % (under the null,
    (x − mean(s)) / |s₁ − s₀| is √(3/4) times a Student t on one degree of freedom)."""
    from scipy.stats import t

    grid = _cached("common", "training_grid")
    last = {key: _history(name)["history.W_pos"][-1].astype(np.float64)
            for name, key in MAIN_SIZE_LEARNED.items() if key in ("main", "main_seed1", "main_poswd0", "main_poswd1")}
    ratio = {key: _pair_ratios(W[None])[0] for key, W in last.items()}
    mean, gap = (ratio["main"] + ratio["main_seed1"]) / 2, abs(ratio["main"] - ratio["main_seed1"])
    for key in ("main_poswd0", "main_poswd1"):
        assert grid[f"{key}_pair_ratio_vs_seeds"] == pytest.approx((ratio[key] - mean) / gap, rel=1e-5)
    rms = {key: np.sqrt(np.mean(W ** 2)) for key, W in last.items()}
    assert rms["main_poswd1"] < min(rms["main"], rms["main_seed1"]) < max(rms["main"], rms["main_seed1"]) < rms["main_poswd0"]
    assert ratio["main_poswd1"] > max(ratio["main"], ratio["main_seed1"])
    assert abs(ratio["main_poswd0"] - mean) < gap  # about as straight as the seeds
    assert (ratio["main_poswd1"] - mean) / gap < np.sqrt(3 / 4) * t.ppf(0.975, 1)
    assert ratio["main_poswd1"] < 0.1  # far from a helix's 1


def _variances(P: np.ndarray) -> np.ndarray:
    """The column-centred table's variances along its principal axes, as shares of the total, largest first."""
    X = P - P.mean(axis=0)
    values = np.linalg.eigvalsh(X.T @ X)[::-1]
    return values / values.sum()


def test_both_dropout_seeds_bend_the_table_beyond_the_main_seeds_and_roughen_it_recomputed_from_the_histories():
    """"GPT-2's dropout bends it a little more in both of its seeds, the two highest of the four runs; its seeds differ
    more than the main seeds do; less dominated by PC1, the top-three share falling too; a smaller table; its held-out
    loss ends higher": from the committed histories with other code (eigenvalues of XᵀX, not an SVD of X); and of the
    3,000-step causes it bends the table most but for the largest initial scale, which is noise, not a bend."""
    grid = _cached("common", "training_grid")
    keys = ("main", "main_seed1", "main_drop01", "main_drop01_seed1")
    h = {key: _history(name) for name, key in MAIN_SIZE_LEARNED.items()}
    last = {key: _pair_ratios(v["history.W_pos"][-1:].astype(np.float64))[0] for key, v in h.items()}
    seeds, dropout = (last["main"], last["main_seed1"]), (last["main_drop01"], last["main_drop01_seed1"])
    assert min(dropout) > max(seeds) and grid["main_drop01_seeds_above"] == 2
    assert abs(dropout[1] - dropout[0]) > abs(seeds[1] - seeds[0])
    short = ("main_poswd0", "main_poswd1", "main_sigma01", "main_sigma02", "main_drop01", "main_drop01_seed1")
    assert max(short, key=last.get) in ("main_drop01", "main_drop01_seed1")
    assert grid["two_of_four_p"] == pytest.approx(1 / 6)
    shares = {key: _variances(h[key]["history.W_pos"][-1].astype(np.float64)) for key in keys}
    for seed in keys[:2]:
        for drop in keys[2:]:
            assert shares[drop][0] < shares[seed][0] and shares[drop][:3].sum() < shares[seed][:3].sum()
            rms = {k: np.sqrt(np.mean(h[k]["history.W_pos"][-1].astype(np.float64) ** 2)) for k in (seed, drop)}
            assert rms[drop] < rms[seed]
            assert h[drop]["history.eval_loss"][-1] > h[seed]["history.eval_loss"][-1]
    for drop in keys[2:]:
        assert grid[f"{drop}_pc1"] == pytest.approx(shares[drop][0], rel=1e-6)
        assert grid[f"{drop}_top3"] == pytest.approx(shares[drop][:3].sum(), rel=1e-6)


def test_the_largest_initial_scale_is_still_mostly_noise_and_ends_with_the_highest_loss_of_its_length():
    """"Started at 0.1 the table is still mostly its initial noise (PC1's share like a Gaussian table's more than a
    ramp's); its held-out loss ends the highest of the learned runs of the main recipe's length and context", from
    the committed histories."""
    grid = _cached("common", "training_grid")
    h = {key: _history(name) for name, key in MAIN_SIZE_LEARNED.items()}
    W = h["main_sigma10"]["history.W_pos"].astype(np.float64)
    shares = _variances(W[-1])
    assert shares[0] < 0.25 and shares[:3].sum() < 0.5  # a ramp's PC1 holds most of the variance
    assert np.sqrt(np.mean(W[-1] ** 2)) > 0.5 * np.sqrt(np.mean(W[0] ** 2))  # the start not decayed away
    short = [key for key in h if h[key]["history.steps"][-1] == h["main_sigma10"]["history.steps"][-1]
             and h[key]["history.W_pos"].shape == W.shape]  # the main recipe's length and context
    assert max(short, key=lambda k: h[k]["history.eval_loss"][-1]) == "main_sigma10"
    assert grid["main_sigma10_pc1"] == pytest.approx(shares[0], rel=1e-6)


def _walk_pair_ratios(n: int, d: int, draws: int, seed: int) -> np.ndarray:
    """λ2/λ1 of `draws` Gaussian random walks of n steps in d dimensions (cumulative sums, other code than the
    project's references)."""
    rng = np.random.default_rng(seed)
    return _pair_ratios(np.cumsum(rng.standard_normal((draws, n, d)), axis=1))


def test_four_times_the_steps_bends_the_table_as_far_as_a_random_walk_without_a_turn_recomputed():
    """"The long runs end as bent as random walks of the table's shape, with as few turns, reaching the bar of a
    table that winds at no snapshot; most of the bend forms while the held-out loss still falls; at the main runs'
    length they are already more bent than the main runs at their end": λ2/λ1 and the held-out minimum from the
    committed histories with other code, and the walks drawn here (200 of them, another seed than the cache's)."""
    grid = _cached("common", "training_grid")
    walks = _walk_pair_ratios(256, 128, 200, seed=7)
    low, high = np.quantile(walks, [0.025, 0.975])
    assert grid["walk256x128_pair_ratio"] == pytest.approx(walks.mean(), abs=3 * walks.std() / np.sqrt(20))
    main_end = {key: _pair_ratios(_history(name)["history.W_pos"][-1:].astype(np.float64))[0]
                for name, key in MAIN_SIZE_LEARNED.items() if key in ("main", "main_seed1")}
    for name, key in (("kjv-gpt2-long", "main_long"), ("kjv-gpt2-long-seed1", "main_long_seed1")):
        h = _history(name)
        ratios, steps = _pair_ratios(h["history.W_pos"].astype(np.float64)), h["history.steps"]
        assert low < ratios[-1] < high, name  # inside the walks' central 95 %
        assert grid[f"{key}_pair_ratio"] == pytest.approx(ratios[-1], rel=1e-6)
        assert grid[f"{key}_turns"] < 1 and grid[f"{key}_turns_max"] < grid["helix_turns"]
        best = int(h["history.eval_steps"][np.argmin(h["history.eval_loss"])])
        assert grid[f"{key}_best_loss_step"] == best
        before = ratios[steps <= best][-1]
        assert grid[f"{key}_pair_ratio_at_best_loss"] == pytest.approx(before, rel=1e-6)
        lowest = ratios[np.argmin(ratios)]
        assert before - lowest > (ratios[-1] - lowest) / 2  # most of the rise before the lowest held-out loss
        assert h["history.eval_loss"][-1] > h["history.eval_loss"].min()  # overfitting after it
        at_main_end = ratios[steps <= 3000][-1]  # the snapshot at or before step 3,000, not interpolated
        assert at_main_end > max(main_end.values()), name
    assert grid["long_winding_runs"] == 0


def test_the_bucket_tasks_table_winds_beyond_random_walks_of_its_shape():
    """"About one turn, where random walks of the same shape give ...": the bucket task's λ2/λ1 from its committed
    table with other code, and both it and the cached turns beyond the walks' mean by more than five of their
    standard deviations (four for λ2/λ1, whose walks spread more); the look-back task's fast period the same in both seeds to a tenth of a position."""
    grid, synthetic = _cached("common", "training_grid"), _cached("common", "synthetic_positions")
    ratio = _pair_ratios(_history("synth-buckets")["history.W_pos"][-1:])[0]
    assert synthetic["buckets_pair_ratio"] == pytest.approx(ratio, rel=1e-5)
    assert ratio > grid["walk256x64_pair_ratio"] + 4 * grid["walk256x64_pair_ratio_sd"]
    assert synthetic["buckets_turns"] > grid["walk256x64_turns"] + 5 * grid["walk256x64_turns_sd"]
    assert 0.9 < synthetic["buckets_turns"] < 1.5  # about one turn
    fast = [synthetic[f"{key}_pair_peak2_period"] for key in ("offsets", "offsets_seed1")]
    assert abs(fast[0] - fast[1]) < 0.1 and all(f < 4 for f in fast)


def test_the_context_slope_at_matched_exposure_and_its_interval_recomputed_from_the_committed_histories():
    """Each context run read where steps × batch equals the 512-context run's last (λ2/λ1 interpolated on the log–log
    line between the snapshots around it), fitted by scipy's linregress with Student's t on 2 degrees of freedom:
    the cached b and its 95 % interval, which excludes GPT-2's windows' b; and the paired training-loss gap of the
    fixed-positions control over the second half."""
    from scipy.stats import linregress, t

    from analyses.engine.sources import model_spec

    grid = _cached("common", "training_grid")
    runs = ("kjv-gpt2-ctx128", "kjv-gpt2", "kjv-gpt2-seed1", "kjv-gpt2-ctx512")
    recipes = {name: model_spec(name).recipe for name in runs}
    exposure = min(r.steps * r.batch for r in recipes.values())
    logs, contexts = [], []
    for name in runs:
        h = _history(name)
        steps, ratios = h["history.steps"][1:].astype(float), _pair_ratios(h["history.W_pos"])[1:]
        target = exposure / recipes[name].batch
        i = int(np.searchsorted(steps, target))
        if steps[i] == target:
            logs.append(np.log(ratios[i]))
        else:
            w = (np.log(target) - np.log(steps[i - 1])) / (np.log(steps[i]) - np.log(steps[i - 1]))
            logs.append((1 - w) * np.log(ratios[i - 1]) + w * np.log(ratios[i]))
        contexts.append(recipes[name].n_ctx)
    fit = linregress(np.log(contexts), logs)
    half = t.ppf(0.975, len(runs) - 2) * fit.stderr
    assert grid["context_matched_windows"] == exposure
    assert grid["context_matched_slope"] == pytest.approx(fit.slope, abs=1e-6)
    assert grid["context_matched_slope_low"] == pytest.approx(fit.slope - half, abs=1e-6)
    assert grid["context_matched_slope_high"] == pytest.approx(fit.slope + half, abs=1e-6)
    assert grid["context_matched_slope_high"] < _cached("gpt2", "window_shape")["pair_ratio_slope_min"]
    fixed, main = (_history(name)["history.train_loss"].astype(np.float64) for name in ("kjv-gpt2-sinusoidal", "kjv-gpt2"))
    late = np.arange(1, len(fixed) + 1) >= len(fixed) / 2
    assert grid["sinusoidal_train_late_gap"] == pytest.approx(np.mean(fixed[late] - main[late]), abs=1e-9)
    assert abs(grid["sinusoidal_train_late_gap"]) < grid["sinusoidal_late_gap"] / 5  # fit alike, held-out not


@pytest.mark.skipif(not GPT2, reason="needs GPT-2's weights (GPT2_WEIGHTS unset)")
def test_the_trained_tables_against_every_gpt2_window_of_their_length():
    """Every window of GPT-2's table that starts at row 1 + 8k: the cached median and range, recomputed; the trained
    128-context table is not straighter than the median window (so no "straighter at every length"), while the
    256- and 512-context tables are straighter than every window of theirs."""
    from safetensors.numpy import load_file

    P = np.asarray(load_file(os.path.join(GPT2, "model.safetensors"))["wpe.weight"], dtype=np.float64)[:-1]
    windows, grid = _cached("gpt2", "window_shape"), _cached("common", "training_grid")
    means = []
    for length, trained in ((128, ("main_ctx128",)), (256, ("main", "main_seed1")), (512, ("main_ctx512",))):
        ratios = _pair_ratios(np.stack([P[s:s + length] for s in range(1, len(P) - length + 1, 8)]))
        means.append(ratios.mean())
        assert windows[f"w{length}_windows"] == len(ratios)
        assert windows[f"w{length}_pair_ratio_median"] == pytest.approx(np.median(ratios), rel=1e-6)
        assert windows[f"w{length}_pair_ratio_min"] == pytest.approx(ratios.min(), rel=1e-6)
        assert windows[f"w{length}_pair_ratio_max"] == pytest.approx(ratios.max(), rel=1e-6)
        for key in trained:
            if length == 128:
                assert grid[f"{key}_pair_ratio"] > np.median(ratios)
                assert windows[f"{key}_straighter_windows"] == pytest.approx(np.mean(ratios < grid[f"{key}_pair_ratio"]))
            else:
                assert grid[f"{key}_pair_ratio"] < ratios.min()
    slope = np.polyfit(np.log([128, 256, 512]), np.log(means), 1)[0]
    assert windows["pair_ratio_slope"] == pytest.approx(slope, abs=1e-6)


def test_no_chapter_reads_the_helix_as_read_by_rotating_it():
    """The referee withdrew the rotation reading: the position heads' current-token attention rests on the symmetric
    part, and random frames' antisymmetric parts (about 1e-4 of the rotation's norm) controlled nothing. None of the
    withdrawn wordings may come back in any chapter."""
    text = chapters()
    for withdrawn in ("reads position by rotating it", "read the helix largely by rotating it",
                      "read the helix by rotating it", "changes nothing", "too weak at those sizes",
                      "too weak a baseline to speak of rotation"):
        assert withdrawn not in text, withdrawn


@pytest.mark.parametrize("chapter", ["position-content.qmd", "appendix-position-content.qmd"])
def test_minilms_first_rows_are_not_read_as_what_fine_tuning_changed(chapter):
    """MiniLM's first rows (those fine-tuning read) give another enrichment than all its rows, but nothing here
    compares them with other blocks of rows that fine-tuning never read: every paragraph citing the first rows'
    enrichment says that a cause in fine-tuning is not shown, and none attributes the difference to it."""
    for paragraph in (REPO / "report" / chapter).read_text().split("\n\n"):
        flat = " ".join(paragraph.split())
        if re.search(r"minilm\.position_token_subspaces\.\w+_trained", flat):
            assert re.search(r"comes from fine-tuning is not shown", flat), flat[:80]
        assert not re.search(r"(because of|due to|caused by|made by|set by) (the |its )?fine-tuning"
                             r"|fine-tuning (made|changed|moved|shifted|raised|lowered)", flat), flat[:80]
