"""The helix: the path that the positions trace in the top three principal components.

With P centred and projected on its top principal axes, z_k(n) = (p_n − p̄) · u_k, the
first two coordinates turn around the origin while the third drifts along an axis.
Measured here:

* each z_k(n) fitted by a sinusoid c + A cos(2πn/T + φ) (the FFT peak, refined by least
  squares over T with A, φ, c solved linearly), with R² = 1 − SS_res / SS_tot, on all
  positions and on the bulk (positions edge … n_ctx − edge − 1);
* the winding around the helix's own axis (`toolkit.helix_period`): θ(n) the unwrapped angle of (z_1, z_2)
  around the mean of (z_1, z_2) over one turn centred on n, not around the PCA origin, over the trained rows (the
  last `untrained_rows` left out); radius r(n) the distance from that axis; each winding number with its range over
  the axis's definition (window, centre by mean or fitted circle, the axis moved);
* the whole table's turn count, Δθ / 2π from the first row on the helix to the last (`helix_winding` on every row,
  as every other chapter counts a table's turns: a row is on the helix when most of its offset from the axis lies
  in the (z_1, z_2) plane), and the turns of each stretch: off the helix at the start, on it before, in and after
  the bulk, off it at the end;
* THE helix period, the one definition every chapter cites: T = 2π / mean(θ(n+1) − θ(n)) over the
  bulk, i.e. tokens per turn. T is a deterministic function of the weights and of the positions it is
  averaged over, and the turning rate drifts along the context, so its uncertainty is that choice, not
  sampling error: T is reported for several edges of the bulk and over equal segments of it;
* the local speed of the path at the start: its median step against the bulk's, in the full space and in the
  (z_1, z_2) plane; the pitch, the advance per turn of the one-turn running mean of (z_1, z_2, z_3), over the bulk;
* outliers: each position's distance from the straight line through its `window`
  neighbours on one side (the better of the two sides), in units of the median step
  ‖p_{n+1} − p_n‖, all in the full D-dimensional space.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.helix_period import (CHORDS, EDGE, ON_HELIX_SHARE, ON_HELIX_SHARES, WINDOW_FACTORS, bulk_edge,
                                           bulk_phase_increments, helix_period, helix_winding, local_centres,
                                           on_helix_shares, principal_coordinates, tangent_period, turns_over_rules)
from analyses.toolkit.linalg import top_right_singular_vectors
from analyses.toolkit.linalg import explained_variance_ratio
from analyses.toolkit.sinusoids import fit_sinusoid
from analyses.engine.registry import register
from analyses.engine.results import FITTED, Number, Result, Table, Text
from analyses.engine.sources import ModelShape


def axial_rise(Z: np.ndarray, turn_length: int) -> float:
    """Advance per position along the helix axis: ‖d c(n)/dn‖, c(n) the mean of Z over one turn centred on n.

    Averaging over a full turn cancels the rotation, so c(n) runs along the axis; its slope is fitted
    by least squares. The norm makes the result independent of how PCA orients axes within the subspace.
    """
    Z = np.asarray(Z, dtype=np.float64)
    if not 1 <= turn_length <= len(Z) - 2:
        raise ValueError(f"need 1 <= turn_length <= {len(Z) - 2}, got {turn_length}")
    cumulative = np.vstack([np.zeros(Z.shape[1]), np.cumsum(Z, axis=0)])
    centres = (cumulative[turn_length:] - cumulative[:-turn_length]) / turn_length
    n = np.arange(len(centres), dtype=np.float64)
    slope = np.linalg.lstsq(np.column_stack([n, np.ones_like(n)]), centres, rcond=None)[0][0]
    return float(np.linalg.norm(slope))


def extrapolation_error(X: np.ndarray, window: int) -> np.ndarray:
    """For each row n: min over the two sides of ‖x̂_n − x_n‖, x̂_n the linear extrapolation from the
    `window` rows next to n on that side (rows near an end use the one side they have).

    A position that merely continues its neighbours' trend scores about the size of one step's
    wiggle; an isolated jump scores its full distance from the trend.
    """
    X = np.asarray(X, dtype=np.float64)
    if window < 2 or len(X) <= window:
        raise ValueError(f"need 2 <= window < number of rows, got window={window} for {len(X)} rows")
    design = np.vander(np.arange(1, window + 1, dtype=np.float64), 2)  # value at distance d: slope·d + intercept
    weights = np.linalg.pinv(design)[1]  # the intercept, i.e. the value at distance 0
    error = np.full(len(X), np.inf)
    for i in range(len(X)):
        if i >= window:
            error[i] = np.linalg.norm(weights @ X[i - 1::-1][:window] - X[i])
        if i + window < len(X):
            error[i] = min(error[i], np.linalg.norm(weights @ X[i + 1:i + 1 + window] - X[i]))
    return error


def local_periods(increments: np.ndarray, n_windows: int) -> np.ndarray:
    """2π / mean increment over each of n_windows equal consecutive windows of the bulk (tokens per turn)."""
    return np.array([2 * np.pi / w.mean() for w in np.array_split(increments, n_windows)])


def period_sensitivity(P: np.ndarray, edge: int, edges: tuple[int, ...], n_windows: int) -> Table:
    """The helix period over each bulk edge … n_ctx − edge − 1 (for the edges that keep at least half the
    positions) and over n_windows equal segments of the bulk at `edge`: how T depends on where it is measured."""
    n_pos = len(P)
    rows = [("bulk", e, e, n_pos - e - 1, helix_period(P, e)) for e in edges if n_pos - 2 * e >= n_pos // 2]
    segments = np.array_split(np.arange(edge, n_pos - edge - 1), n_windows)  # increment i: position i → i + 1
    rows += [(f"segment {k + 1} of {n_windows}", edge, int(seg[0]), int(seg[-1]) + 1, float(period))
             for k, (seg, period) in enumerate(zip(segments, local_periods(bulk_phase_increments(P, edge), n_windows)))]
    tokens = ".0f" if rows[0][-1] >= 100 else ".1f"
    return Table(("positions", "edge", "from", "to", "tokens per turn"), tuple(rows), formats={"tokens per turn": tokens})


def helix(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_components: int, edge: int, window: int,
          fft_pad: int, n_outliers: int, period_edges: tuple[int, ...], period_windows: int,
          untrained_rows: int, other_windows: tuple[int, ...]) -> Result:
    """Principal coordinates, sinusoid fits per component, helix turns/radius/pitch, and outlier scores."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    n_pos = len(P)
    edge = bulk_edge(n_pos, edge)
    if not 0 < edge < n_pos // 2 - 1:
        raise ValueError(f"edge must lie in 1..{n_pos // 2 - 2}, got {edge}")
    ratios = explained_variance_ratio(P)
    Z = principal_coordinates(P, n_components)
    n = np.arange(n_pos)
    bulk = slice(edge, n_pos - edge)
    fits = [fit_sinusoid(n, Z[:, k], fft_pad) for k in range(n_components)]
    bulk_fits = [fit_sinusoid(n[bulk], Z[bulk, k], fft_pad) for k in range(n_components)]

    numbers = {"edge": Number(edge, "d", "positions left out at each end to form the bulk"),
               "last_position": Number(n_pos - 1, "d", "index of the last position"),
               "bulk_last": Number(n_pos - edge - 1, "d", "last position of the bulk"),
               "top3": Number(ratios[:3].sum(), ".1%", "variance share of the top 3 principal components")}
    for k, (fit, bfit) in enumerate(zip(fits, bulk_fits), start=1):
        numbers[f"pc{k}_share"] = Number(ratios[k - 1], ".1%", f"variance share of PC{k}")
        numbers[f"pc{k}_period"] = Number(fit.period, ".1f", f"PC{k}: fitted period in tokens, all positions", FITTED)
        numbers[f"pc{k}_r2"] = Number(fit.r2, ".3f", f"PC{k}: R² of the sinusoid, all positions")
        numbers[f"pc{k}_period_bulk"] = Number(bfit.period, ".1f", f"PC{k}: fitted period in tokens, bulk", FITTED)
        numbers[f"pc{k}_r2_bulk"] = Number(bfit.r2, ".3f", f"PC{k}: R² of the sinusoid, bulk")
    freq_table = Table(
        ("component", "variance share", "period (tokens)", "R²", "cycles in context", "period, bulk", "R², bulk"),
        tuple((f"PC{k + 1}" + (" (half a cycle: period at the bound)" if f.at_bound else ""), ratios[k], f.period, f.r2,
               n_pos / f.period, b.period, b.r2) for k, (f, b) in enumerate(zip(fits, bulk_fits))),
        formats={"variance share": ".1%", "period (tokens)": ".0f", "R²": ".3f", "cycles in context": ".2f",
                 "period, bulk": ".0f", "R², bulk": ".3f"},
        accuracy=dict.fromkeys(("period (tokens)", "cycles in context", "period, bulk"), FITTED))

    turning, sensitivity, turns, radius = _turning(P, Z, edge, untrained_rows, period_edges, period_windows)
    counted, stretches = _count(P, edge, untrained_rows)
    outliers, outlier_table, score = _outliers(P, window, n_outliers, other_windows)
    numbers |= turning | counted | outliers
    arrays = {"Z": Z, "ratios": ratios[:n_components], "turns": turns, "radius": radius, "score": score,
              "fits": np.array([[f.period, f.amplitude, f.phase, f.offset] for f in fits]),
              "bulk_fits": np.array([[f.period, f.amplitude, f.phase, f.offset] for f in bulk_fits])}
    return Result(numbers, {"frequencies": freq_table, "outliers": outlier_table, "period": sensitivity,
                            "stretches": stretches}, arrays, {"fits": FITTED, "bulk_fits": FITTED})


def _count(P: np.ndarray, edge: int, untrained_rows: int) -> tuple[dict, Table]:
    """(numbers, table): the whole table's turns from its first row on the helix to its last (`helix_winding` on every
    row, the rule finding both ends), with the range over the axis's definitions and the rule's thresholds, and the
    turns of each stretch between row 0, row 1, the first row on the helix, the bulk's edges, the last row on the
    helix, the last trained row and the last row."""
    n_pos = len(P)
    whole = helix_winding(P, edge=edge)
    if whole.first is None:
        return {"turns_total": Text("no helix", "no row has most of its offset from the axis in the plane")}, \
            Table(("from", "to", "turns"), ())
    trained_last = n_pos - 1 - untrained_rows
    bounds = sorted({0, 1, whole.first, edge, trained_last - edge, whole.last, trained_last, n_pos - 1})
    turns = whole.theta / (2 * np.pi)
    rows = tuple((a, b, "yes" if whole.first <= a and b <= whole.last else "no", float(turns[b] - turns[a]),
                  float(np.median(whole.shares[a:b + 1]))) for a, b in zip(bounds, bounds[1:]))
    table = Table(("from", "to", "on the helix", "turns", "median share in the plane"), rows,
                  formats={"turns": ".2f", "median share in the plane": ".2f"})
    low, high = whole.ranges["turns"]
    rules = turns_over_rules(P, whole.window, edge)
    numbers = {
        "turns_total": Number(whole.turns, ".2f", "turns of (z1, z2) around the helix's axis from the first row on "
                                                 "the helix to the last"),
        "turns_total_low": Number(low, ".2f", "the same: smallest over the axis's definitions and the rule's thresholds"),
        "turns_total_high": Number(high, ".2f", "the same: largest over the axis's definitions and the rule's thresholds"),
        **{f"turns_rules_{side}": (Number(value, ".1f", f"the same: {side}est over the rule's plane, window, end "
                                                        "treatment and threshold (`turns_over_rules`)")
                                   if np.isfinite(value) else Text("no helix", "no variant of the rule finds a helix"))
           for side, value in (("low", np.nanmin(rules) if np.isfinite(rules).any() else np.nan),
                               ("high", np.nanmax(rules) if np.isfinite(rules).any() else np.nan))},
        "helix_rows": Number(int(np.count_nonzero(whole.shares[whole.first:whole.last + 1] > ON_HELIX_SHARE)), "d",
                             "rows from the first on the helix to the last that pass the rule"),
        "helix_span": Number(whole.last - whole.first + 1, "d", "rows from the first on the helix to the last"),
        "helix_rule_share": Number(ON_HELIX_SHARE, ".0%", "share of a row's offset from the axis in the plane above "
                                                         "which the row is on the helix"),
        "helix_rule_low": Number(ON_HELIX_SHARES[0], ".0%", "smallest threshold of the rule tried"),
        "helix_rule_high": Number(ON_HELIX_SHARES[-1], ".0%", "largest threshold of the rule tried"),
        "helix_first": Number(whole.first, "d", "first row with most of its offset from the axis in the (z1, z2) plane"),
        "helix_last": Number(whole.last, "d", "last row with most of its offset from the axis in the (z1, z2) plane"),
        "helix_share_first": Number(float(whole.shares[1]), ".0%",
                                    "share of row 1's offset from the axis in the (z1, z2) plane"),
        "helix_share_last": Number(float(whole.shares[trained_last]), ".0%",
                                   "share of the last trained row's offset from the axis in the (z1, z2) plane"),
        "helix_share_bulk": Number(float(np.median(whole.shares[edge:trained_last - edge + 1])), ".0%",
                                   "median share of a bulk row's offset from the axis in the (z1, z2) plane"),
        "turns_off_start": Number(float(turns[whole.first] - turns[0]), ".2f",
                                  "turns from row 0 to the first row on the helix (not counted)"),
        "turns_off_end": Number(float(turns[trained_last] - turns[whole.last]), ".2f",
                                "turns from the last row on the helix to the last trained row (not counted)"),
    }
    return numbers, table


def _turning(P: np.ndarray, Z: np.ndarray, edge: int, untrained_rows: int, period_edges: tuple[int, ...],
             period_windows: int):
    """(numbers, period table, turns, radius): how (z1, z2) winds around the helix's own axis over the trained rows
    (`toolkit.helix_period.helix_winding`), with each number's range over the axis's definition, THE helix period and
    how it depends on where it is measured, the radius, the local speed of the path and the pitch."""
    from scipy.stats import spearmanr

    n_pos = len(P)
    trained = P[:n_pos - untrained_rows]
    winding = helix_winding(P, edge=edge, n_trained=len(trained))
    n = np.arange(n_pos)
    bulk = slice(edge, len(trained) - edge)
    turns, radius = winding.theta / (2 * np.pi), winding.radius
    increments = bulk_phase_increments(trained, edge)
    turn_length = winding.period  # = helix_period(trained, edge) = bulk length / turns
    local = local_periods(increments, period_windows)
    sensitivity = period_sensitivity(trained, edge, period_edges, period_windows)
    by_edge = {row[1]: row[-1] for row in sensitivity.rows if row[0] == "bulk"}
    edge_low, edge_high = min(by_edge, key=by_edge.get), max(by_edge, key=by_edge.get)
    tokens = ".0f" if turn_length >= 100 else ".1f"  # a few tokens per turn need a decimal
    radius_bulk = float(np.median(radius[bulk]))
    one_turn = round(turn_length) <= len(trained) - 2 * edge - 2  # the pitch needs a whole turn inside the bulk
    full_steps = np.linalg.norm(np.diff(trained, axis=0), axis=1)
    plane_steps = np.linalg.norm(np.diff(principal_coordinates(trained, 2), axis=0), axis=1)

    def start_over_bulk(steps):  # median step over rows 1 … edge against the bulk's (row 0's step left out)
        return float(np.median(steps[1:edge]) / np.median(steps[bulk]))

    def ranged(key, value, low, high, fmt, what):
        """The value and its range; a number of tokens per turn where the angle does not advance reads "no turn"."""
        def cite(v, description):
            return Number(v, fmt, description) if np.isfinite(v) else Text("no turn", f"{description}: no advance")
        return {key: cite(value, what), f"{key}_low": cite(low, f"{what}: smallest over the definitions of the axis"),
                f"{key}_high": cite(high, f"{what}: largest over the definitions of the axis")}

    def per_turn(value):  # tokens per turn: whole tokens, a decimal for the few that a fast helix takes
        return ".0f" if value >= 20 else ".1f"

    # The end of the trained rows: the radius at the last trained row around a one-turn axis (each window, the ends
    # clamped as the default axis, or truncated), and the turning rate by the chords' direction, which needs no axis
    last = len(trained) - 1
    Zt = principal_coordinates(trained, 2)
    windows = [int(min(max(round(f * winding.window), 3), len(trained))) for f in (WINDOW_FACTORS[0], 1.0, WINDOW_FACTORS[1])]
    end_radius = {ends: [float(np.hypot(*(Zt[last] - local_centres(Zt, w, ends=ends)[last]))) for w in windows]
                  for ends in ("clamped", "truncated")}
    offsets = Zt - local_centres(Zt, winding.window)  # the bulk's sense of turning in the plane's own orientation
    raw = np.unwrap(np.arctan2(offsets[:, 1], offsets[:, 0]))
    sense = float(np.sign(raw[last - edge] - raw[edge]) or 1.0)
    tangent_end = [tangent_period(Zt, last - span, last, chord, sense) for chord in CHORDS for span in (edge // 2, edge)
                   if chord < span]
    tangent_bulk = [tangent_period(Zt, edge, last - edge, chord, sense) for chord in CHORDS]
    three = top_right_singular_vectors(trained, 3, center=True)
    shares3 = on_helix_shares(trained, winding.window, U=three)
    halves = local_periods(increments, 2)

    def tokens_cite(key, value, what):
        return {key: Number(value, per_turn(value), what) if np.isfinite(value) else Text("no turn", f"{what}: none")}

    numbers = {
        "untrained_rows": Number(untrained_rows, "d", "rows left out at the end as untrained"),
        "winding_window": Number(winding.window, "d", "rows over which each local centre of the axis is averaged"),
        "turns_bulk": Number(float(turns[len(trained) - edge - 1] - turns[edge]), ".2f",
                             "turns of (z1, z2) around the axis over the bulk"),
        **ranged("period", turn_length, *winding.ranges["period"], tokens,
                 "THE helix period: tokens per turn of (z1, z2) around the axis over the bulk"),
        "period_edge_low": Number(by_edge[edge_low], tokens, "shortest helix period over the edges of the bulk tried"),
        "period_edge_low_at": Number(edge_low, "d", "the edge that gives it"),
        "period_edge_high": Number(by_edge[edge_high], tokens, "longest helix period over the edges of the bulk tried"),
        "period_edge_high_at": Number(edge_high, "d", "the edge that gives it"),
        "period_edge_first": Number(min(by_edge), "d", "smallest edge tried"),
        "period_edge_last": Number(max(by_edge), "d", "largest edge tried"),
        "period_windows": Number(period_windows, "d", "equal windows of the bulk for the local periods"),
        "period_local_min": Number(float(local.min()), tokens, "shortest local period over those windows"),
        "period_local_max": Number(float(local.max()), tokens, "longest local period over those windows"),
        "period_local_first": Number(float(local[0]), tokens, "local period in the first window of the bulk"),
        "period_local_last": Number(float(local[-1]), tokens, "local period in the last window of the bulk"),
        "cycles_in_context": Number(n_pos / turn_length, ".2f", "context length / helix period"),
        **ranged("period_first_edge", winding.start, *winding.ranges["start"], per_turn(winding.start),
                 "tokens per turn around the axis over the first `edge` rows"),
        **ranged("period_last_edge", winding.end, *winding.ranges["end"], per_turn(winding.end),
                 "tokens per turn around the axis over the last `edge` trained rows"),
        "period_half_first": Number(float(halves[0]), tokens, "tokens per turn over the first half of the bulk"),
        "period_half_second": Number(float(halves[1]), tokens, "tokens per turn over the second half of the bulk"),
        "end_row": Number(last, "d", "last trained row"),
        "radius_end": Number(end_radius["clamped"][1], ".2f",
                             "distance from the default (one-turn, clamped) axis at the last trained row"),
        "radius_end_low": Number(min(end_radius["clamped"]), ".1f",
                                 "the same: smallest over the axis's window (clamped at the end)"),
        "radius_end_high": Number(max(end_radius["clamped"]), ".1f",
                                  "the same: largest over the axis's window (clamped at the end)"),
        "radius_end_truncated_low": Number(min(end_radius["truncated"]), ".1f",
                                           "the same with the window truncated at the end: smallest over the window"),
        "radius_end_truncated_high": Number(max(end_radius["truncated"]), ".1f",
                                            "the same with the window truncated at the end: largest over the window"),
        "chord_short": Number(CHORDS[0], "d", "rows spanned by the shorter chord of the tangent direction"),
        "chord_long": Number(CHORDS[-1], "d", "rows spanned by the longer chord of the tangent direction"),
        **tokens_cite("tangent_period_end_low", min(tangent_end),
                      "tokens per turn of the chords' direction over the last edge/2 or edge trained rows: smallest"),
        **tokens_cite("tangent_period_end_high", max(tangent_end),
                      "tokens per turn of the chords' direction over the last edge/2 or edge trained rows: largest"),
        **tokens_cite("tangent_period_bulk_low", min(tangent_bulk),
                      "tokens per turn of the chords' direction over the bulk: smallest over the chords"),
        **tokens_cite("tangent_period_bulk_high", max(tangent_bulk),
                      "tokens per turn of the chords' direction over the bulk: largest over the chords"),
        "share3_first": Number(float(shares3[1]), ".0%", "share of row 1's offset from the axis in the span of the "
                                                         "top three principal axes"),
        "share3_last": Number(float(shares3[last]), ".0%", "share of the last trained row's offset from the axis in "
                                                           "the span of the top three principal axes"),
        "step_start_full": Number(start_over_bulk(full_steps), ".2f",
                                  "median step over rows 1 … edge / the bulk's, in the full space"),
        "step_start_plane": Number(start_over_bulk(plane_steps), ".2f",
                                   "median step over rows 1 … edge / the bulk's, in the (z1, z2) plane"),
        "radius_bulk": Number(radius_bulk, ".2f", "median distance from the axis over the bulk"),
        "radius_bulk_cv": Number(float(radius[bulk].std() / radius[bulk].mean()), ".1%",
                                 "coefficient of variation of the distance from the axis over the bulk"),
        "radius_first": Number(float(radius[1]), ".2f", "distance from the axis at position 1"),
        "radius_start_min": Number(float(radius[:edge].min()), ".2f",
                                   "smallest distance from the axis over the first `edge` rows"),
        "pc3_spearman": Number(float(spearmanr(n, Z[:, 2]).statistic), ".3f",
                               "Spearman correlation of z3 with position (±1: monotone axis)"),
    }
    if one_turn:
        pitch = axial_rise(Z[bulk, :3], int(round(turn_length))) * turn_length
        numbers |= {"pitch_bulk": Number(pitch, ".2f", "advance along the helix axis per turn, over the bulk (pitch)"),
                    "pitch_over_circumference": Number(pitch / (2 * np.pi * radius_bulk), ".3f",
                                                       "mean pitch / (2π · median radius)")}
    else:
        numbers["pitch_bulk"] = Text("undefined", "the pitch: undefined, since the bulk holds less than one turn")
    return numbers, sensitivity, turns, radius


def _outliers(P: np.ndarray, window: int, n_outliers: int, other_windows: tuple[int, ...]):
    """(numbers, table, scores): each position's distance from the trend of its neighbours, in median steps, and
    how the two ends' scores and the rest's 99th percentile move over other windows."""
    n_pos = len(P)
    steps = np.linalg.norm(np.diff(P, axis=0), axis=1)
    score = extrapolation_error(P, window) / np.median(steps)
    by_window = np.array([extrapolation_error(P, w) / np.median(steps) for w in (window, *other_windows)])
    ends = np.minimum(by_window[:, 0], by_window[:, -1])
    rest_p99 = np.percentile(by_window[:, 1:-1], 99, axis=1)
    order = np.argsort(-score, kind="stable")
    rest = np.delete(score, [0, n_pos - 1])
    numbers = {
        "window": Number(window, "d", "neighbours used for each one-sided linear extrapolation"),
        "median_step": Number(float(np.median(steps)), ".3f", "median step ‖p_{n+1} − p_n‖"),
        "step_first": Number(float(steps[0]), ".2f", "step ‖p_1 − p_0‖"),
        "step_last": Number(float(steps[-1]), ".2f", "step between the last two positions"),
        "outlier_first": Number(float(score[0]), ".1f", "position 0: distance from the extrapolated trend, in steps"),
        "outlier_last": Number(float(score[-1]), ".1f", "last position: distance from the trend, in steps"),
        "outlier_second": Number(float(score[1]), ".1f", "position 1: distance from the trend, in steps"),
        "outlier_rest_median": Number(float(np.median(rest)), ".2f", "median score of the other positions"),
        "outlier_rest_p99": Number(float(np.percentile(rest, 99)), ".2f", "99th percentile of the other positions"),
        "outlier_windows": Text(", ".join(str(w) for w in sorted((window, *other_windows))),
                                "windows of the one-sided extrapolation tried"),
        "outlier_ends_low": Number(float(ends.min()), ".1f",
                                   "smaller of the two ends' scores, at the window that makes it smallest"),
        "outlier_rest_p99_high": Number(float(rest_p99.max()), ".2f",
                                        "99th percentile of the other positions' scores, largest over the windows"),
    }
    nearest = np.minimum(np.r_[np.inf, steps], np.r_[steps, np.inf]) / np.median(steps)
    outlier_table = Table(("position", "distance from trend (median steps)", "distance to nearer neighbour (median steps)"),
                          tuple((int(i), score[i], nearest[i]) for i in order[:n_outliers]),
                          formats={"distance from trend (median steps)": ".1f",
                                   "distance to nearer neighbour (median steps)": ".1f"})
    return numbers, outlier_table, score


def _axis_label(result: Result, k: int) -> str:
    return f"PC{k + 1} ({result.arrays['ratios'][k]:.1%})"


def _outlier_positions(result: Result) -> list[int]:
    return [0, len(result.arrays["Z"]) - 1]


def plot_helix(result: Result, shape: ModelShape, elev: float = 22.0, azim: float = -60.0):
    """The top-3 principal coordinates in 3-D and two projections, coloured by position; ends marked."""
    plt = plotting.pyplot()
    from matplotlib.ticker import MaxNLocator

    Z = result.arrays["Z"]
    n = np.arange(len(Z))
    fig = plt.figure(figsize=(plotting.MAX_WIDTH, 4.6))
    grid = fig.add_gridspec(2, 2, width_ratios=[1.5, 1], wspace=0.1)
    ax3 = fig.add_subplot(grid[:, 0], projection="3d")
    axes = [fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, 1])]
    ax3.plot(Z[:, 0], Z[:, 1], Z[:, 2], color="0.75", lw=0.5)
    points = ax3.scatter(Z[:, 0], Z[:, 1], Z[:, 2], c=n, cmap=plotting.POSITION, s=3, depthshade=False,
                         rasterized=True)
    ax3.view_init(elev=elev, azim=azim)
    ax3.set_box_aspect(None, zoom=0.8)  # room inside the axes for the tick and axis labels
    for k, set_label in enumerate((ax3.set_xlabel, ax3.set_ylabel, ax3.set_zlabel)):
        set_label(_axis_label(result, k), labelpad=7)
    ax3.tick_params(labelsize=8, pad=0)
    for axis in (ax3.xaxis, ax3.yaxis, ax3.zaxis):
        axis.set_major_locator(MaxNLocator(5, steps=[1, 2, 5, 10]))
    for ax, (i, j) in zip(axes, ((0, 1), (0, 2))):
        ax.plot(Z[:, i], Z[:, j], color="0.75", lw=0.5)
        ax.scatter(Z[:, i], Z[:, j], c=n, cmap=plotting.POSITION, s=3, rasterized=True)
        ax.set_xlabel(_axis_label(result, i))
        ax.set_ylabel(_axis_label(result, j))
        ax.set_aspect("equal", adjustable="datalim")
    for p in _outlier_positions(result):
        ax3.scatter(*Z[p, :3], s=30, facecolors="none", edgecolors="black", linewidths=1.0)
        for ax, (i, j) in zip(axes, ((0, 1), (0, 2))):
            ax.scatter(Z[p, i], Z[p, j], s=30, facecolors="none", edgecolors="black", linewidths=1.0)
            ax.annotate(f"{p}", (Z[p, i], Z[p, j]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    fig.colorbar(points, ax=axes, fraction=0.05, pad=0.03, label="position")
    return fig


def plot_components(result: Result, shape: ModelShape):
    """Each top principal coordinate against position, with its fitted sinusoid (all positions)."""
    Z, fits = result.arrays["Z"], result.arrays["fits"]
    k = Z.shape[1]
    n = np.arange(len(Z))
    rows = (k + 1) // 2
    fig, axes = plotting.subplots(rows, 2, figsize=(plotting.MAX_WIDTH, 1.9 * rows + 0.8), sharex=True)
    for i, ax in enumerate(axes.flat[:k]):
        period, amplitude, phase, offset = fits[i]
        ax.plot(n, Z[:, i], color="C0", lw=1.0, label="principal coordinate")
        ax.plot(n, offset + amplitude * np.cos(2 * np.pi * n / period + phase), color="C3", lw=0.9, ls="--",
                label="fitted sinusoid")
        bound = np.isclose(period, 2 * len(Z), rtol=1e-6)
        ax.set_title(f"PC{i + 1} ({result.arrays['ratios'][i]:.1%}), R² = {result.numbers[f'pc{i + 1}_r2'].text}"
                     f"\nperiod {'≥ ' if bound else ''}{period:.0f} tokens{' (half a cycle)' if bound else ''}",
                     fontsize=plotting.MIN_FONT)
        ax.set_ylabel(f"z{i + 1}")
    for ax in axes.flat[k:]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("position")
    fig.legend(*axes.flat[0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    return fig


def plot_phase(result: Result, shape: ModelShape):
    """Turns of (z1, z2) around the helix's own axis and the distance from it, over the trained rows; the bulk shaded."""
    turns, radius = result.arrays["turns"], result.arrays["radius"]
    n = np.arange(len(turns))
    edge = result.numbers["edge"].value
    fig, (ax, ax_r) = plotting.subplots(2, 1, figsize=(plotting.MAX_WIDTH, 4.6), sharex=True)
    ax.plot(n, np.abs(turns), color="C0", lw=1.2)
    ax.set_ylabel("turns around the axis")
    ax_r.plot(n, radius, color="C2", lw=1.2)
    ax_r.set_ylabel("distance from the axis")
    ax_r.set_xlabel("position")
    for a in (ax, ax_r):
        a.axvspan(edge, len(n) - 1 - edge, color="0.92", zorder=0)
    ax.text(len(n) / 2, 0.05, f"bulk: one turn per {result.numbers['period'].text} tokens "
            f"(local periods {result.numbers['period_local_min'].text}–{result.numbers['period_local_max'].text})",
            ha="center", va="bottom", fontsize=8, transform=ax.get_xaxis_transform())
    return fig


def plot_outliers(result: Result, shape: ModelShape):
    """Distance of each position from the trend of its neighbours, in median steps (log y)."""
    score = result.arrays["score"]
    n = np.arange(len(score))
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 3.6))
    ax.plot(n, score, color="C0", lw=0.8)
    plotting.mark_positions(ax, np.argsort(-score, kind="stable")[:3], score, len(n))
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--", label="one median step")
    ax.set_yscale("log")
    ax.set_xlabel("position")
    ax.set_ylabel("distance from neighbours' trend\n(median steps, log scale)")
    ax.legend(loc="upper center")
    return fig


def helix_3d_html(result: Result, shape: ModelShape) -> str:
    """A markdown fragment with a rotatable plotly view of the helix (raw HTML; deterministic bytes)."""
    import plotly.graph_objects as go

    Z = np.round(result.arrays["Z"][:, :3], 4)
    n = np.arange(len(Z))
    fig = go.Figure()
    fig.add_trace(go.Scatter3d(
        x=Z[:, 0], y=Z[:, 1], z=Z[:, 2], mode="lines+markers", text=[f"position {i}" for i in n],
        hoverinfo="text", line={"color": "rgb(190,190,190)", "width": 2},
        marker={"size": 2.5, "color": n, "colorscale": "Plasma", "colorbar": {"title": {"text": "position"}}},
        name="positions"))
    ends = _outlier_positions(result)
    fig.add_trace(go.Scatter3d(
        x=Z[ends, 0], y=Z[ends, 1], z=Z[ends, 2], mode="markers+text", text=[f"{p}" for p in ends],
        hoverinfo="text", marker={"size": 6, "color": "black", "symbol": "circle-open"}, name="first and last"))
    fig.update_layout(
        title={"text": "positions in PC1–PC3 (drag to rotate)"},
        scene={"xaxis": {"title": {"text": _axis_label(result, 0)}},
               "yaxis": {"title": {"text": _axis_label(result, 1)}},
               "zaxis": {"title": {"text": _axis_label(result, 2)}},
               "camera": {"eye": {"x": 1.8, "y": -1.8, "z": 0.95}}},  # far enough that no axis label is clipped
        height=620, margin={"l": 10, "r": 10, "t": 50, "b": 60}, showlegend=False, template="plotly_white")
    div_id = "helix-3d-" + re.sub(r"[^a-z0-9]+", "-", shape.name.lower()).strip("-")
    # plotly.js is served by the site itself (copied there by report/_scripts/pre-render.sh), never a CDN;
    # the path is relative to the chapter's page, report/low-rank-helix.html.
    html = fig.to_html(full_html=False, include_plotlyjs="_assets/plotly.min.js", div_id=div_id)
    return f"```{{=html}}\n{html}\n```\n"


register(
    "helix", "The helix traced by the positions", helix,
    needs=("W_pos",), params={"n_components": 6, "edge": EDGE, "window": 4, "fft_pad": 16, "n_outliers": 6,
                              "period_edges": (25, 50, 100, 150, 200, 250), "period_windows": 4,
                              "untrained_rows": 1, "other_windows": (2, 3, 6, 8)},
    figures={"helix": plot_helix, "components": plot_components, "phase": plot_phase, "outliers": plot_outliers},
    files={"helix_3d.md": helix_3d_html},
    groups=("first report", "notebook subset", "position table"),
)
