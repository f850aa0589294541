"""The helix's winding around its own axis: a closed form on planted helices, no dependence on the origin, and the
ranges that GPT-2's cited winding numbers are stated with."""

from __future__ import annotations

import os

import numpy as np
import pytest

from analyses.toolkit.helix_period import (axis_phase, helix_period, helix_winding, local_centres, on_helix_shares,
                                           on_helix_stretch, tangent_period, turn_length, turns_over_rules)


def circle(n: int, period: float, radius: float = 2.0, centre=(0.0, 0.0), drift=(0.0, 0.0)) -> np.ndarray:
    t = np.arange(n)
    return np.column_stack([centre[0] + drift[0] * t + radius * np.cos(2 * np.pi * t / period),
                            centre[1] + drift[1] * t + radius * np.sin(2 * np.pi * t / period)])


@pytest.mark.parametrize("method", ["mean", "circle"])
def test_local_centres_of_whole_turns_are_the_circle_centre(method):
    Z = circle(400, 50, centre=(3.0, -1.0))
    assert np.allclose(local_centres(Z, 50, method), [3.0, -1.0], atol=1e-9)


def test_circle_centres_match_a_direct_least_squares_fit():
    Z = circle(300, 70) + np.random.default_rng(0).normal(scale=0.1, size=(300, 2))
    w = Z[40:40 + 70]
    direct = np.linalg.lstsq(np.column_stack([2 * w, np.ones(70)]), (w ** 2).sum(1), rcond=None)[0][:2]
    assert local_centres(Z, 70, "circle")[40 + 35] == pytest.approx(direct, abs=1e-9)


def test_angle_around_the_axis_does_not_depend_on_the_origin_and_follows_a_drifting_axis():
    """A circle whose centre drifts by several radii: around the origin the angle is wrong, around the local axis it
    counts the planted turns (away from the ends, whose centre is the first or last turn's); moving the origin
    anywhere changes nothing."""
    Z = circle(1000, 100, drift=(0.02, 0.01))
    theta, radius = axis_phase(Z, 100)
    assert (theta[950] - theta[50]) / (2 * np.pi) == pytest.approx(9.0, abs=1e-3)
    assert radius[50:950] == pytest.approx(np.full(900, 2.0), abs=0.02)
    for shift in ([5.0, -3.0], [0.1, 0.2], [-40.0, 7.0]):
        moved, _ = axis_phase(Z + shift, 100)
        assert moved == pytest.approx(theta, abs=1e-9)
    origin = np.unwrap(np.arctan2(Z[:, 1], Z[:, 0]))
    assert abs(origin[-1] - origin[0]) / (2 * np.pi) < 9  # around the origin the drift eats turns


def test_turn_length_is_the_fixed_point_and_helix_winding_reads_a_planted_helix():
    rng = np.random.default_rng(2)
    Q, _ = np.linalg.qr(rng.standard_normal((16, 3)))
    t = np.arange(900)
    P = np.column_stack([3 * np.cos(2 * np.pi * t / 120), 3 * np.sin(2 * np.pi * t / 120), 0.002 * t]) @ Q.T
    from analyses.toolkit.helix_period import principal_coordinates
    assert turn_length(principal_coordinates(P, 2), 100) == 120
    w = helix_winding(P, edge=100)
    assert w.window == 120 and w.turns == pytest.approx(899 / 120, rel=1e-3)
    assert w.period == pytest.approx(120, rel=1e-3) == helix_period(P, 100)
    assert w.start == pytest.approx(120, rel=1e-2) and w.end == pytest.approx(120, rel=1e-2)
    for key, (low, high) in w.ranges.items():
        assert low <= getattr(w, key) <= high
    assert w.ranges["period"][1] / w.ranges["period"][0] < 1.05  # a clean helix hardly depends on the axis


def helix_with_off_ends(start: int = 100, end: int = 800, n: int = 900, period: float = 100.0) -> np.ndarray:
    """A helix (radius 3, period 100, a slow rise) on rows start … end − 1; before and after it each row lies off the
    plane, scattered over eight other directions (sd 1), and keeps only a tiny, fast residual circle (radius 0.05,
    period 10) in the plane, the shape of GPT-2's ends: an angle that races while the row is off the helix."""
    rng = np.random.default_rng(4)
    t = np.arange(n, dtype=np.float64)
    on = (t >= start) & (t < end)
    big, small = 3 * on, 0.05 * ~on
    X = np.column_stack([big * np.cos(2 * np.pi * t / period) + small * np.cos(2 * np.pi * t / 10),
                         big * np.sin(2 * np.pi * t / period) + small * np.sin(2 * np.pi * t / 10),
                         0.002 * t, (~on)[:, None] * rng.standard_normal((n, 8))])
    Q, _ = np.linalg.qr(rng.standard_normal((16, 11)))
    return X @ Q.T


def test_the_count_starts_and_ends_where_the_rows_lie_on_the_helix():
    """The rule (most of a row's offset from the axis in the plane of the angle) finds the planted helix's first and
    last rows, at both ends alike; the count over them is the planted turns; counted from row 0 to the last row (the
    old estimator) the residual circles would add about ten turns at each end."""
    P = helix_with_off_ends()
    w = helix_winding(P, edge=100)
    assert 100 <= w.first <= 104 and 795 <= w.last <= 799
    assert w.turns == pytest.approx((w.last - w.first) / 100, abs=0.15)  # the axis at a transition mixes both sides
    assert w.shares[150:750].min() > 0.95 and w.shares[:50].max() < 0.1 and w.shares[850:].max() < 0.1
    assert (w.theta[-1] - w.theta[0]) / (2 * np.pi) > w.turns + 10
    low, high = w.ranges["turns"]
    assert low <= w.turns <= high and high - low < 0.2


def test_no_row_on_the_helix_gives_no_count():
    """The sinusoidal table spreads every row over many planes: no row has most of its offset in the top pair's plane,
    so it has no helix to count (NaN, printed "no helix"), and the rule's stretch needs two rows."""
    from analyses.toolkit.sinusoids import sinusoidal_table

    w = helix_winding(sinusoidal_table(512, 768, 10000.0))
    assert w.first is None and np.isnan(w.turns) and np.isnan(w.ranges["turns"]).all()
    assert on_helix_stretch(np.array([0.1, 0.9, 0.2])) is None
    assert on_helix_stretch(np.array([0.1, 0.9, 0.2, 0.7, 0.3])) == (1, 3)


def test_on_helix_shares_are_one_on_a_planar_circle_and_origin_free():
    Z = circle(400, 50, centre=(3.0, -1.0))
    P = np.column_stack([Z, np.zeros((400, 3))])
    assert on_helix_shares(P, 50)[25:375] == pytest.approx(np.ones(350), abs=1e-9)
    assert on_helix_shares(P + 7.0, 50) == pytest.approx(on_helix_shares(P, 50), abs=1e-12)


def test_less_than_a_turn_uses_the_whole_context_as_one_window():
    Z = circle(200, 500)
    assert turn_length(Z, 50) == 200


GPT2 = os.environ.get("GPT2_WEIGHTS")


@pytest.mark.skipif(not GPT2, reason="needs GPT-2's weights (GPT2_WEIGHTS unset)")
def test_gpt2_cited_winding_holds_as_the_origin_and_the_edges_move():
    """GPT-2's trained rows: moving the PCA origin by up to a tenth of the bulk's radius, in any direction, leaves the
    winding numbers unchanged (they are measured around the axis), and moving the bulk's edges from 50 to 150 keeps the
    period inside the range the report states beside it; the bulk period's reading (about 500–560 tokens per turn)
    and the turn count's (two to three and a quarter turns, below the 3.61 counted around the PCA origin) hold within
    those ranges."""
    from safetensors.numpy import load_file

    P = np.asarray(load_file(os.path.join(GPT2, "model.safetensors"))["wpe.weight"], dtype=np.float64)[:-1]
    w = helix_winding(P)
    assert 1.6 <= w.ranges["turns"][0] <= w.turns <= w.ranges["turns"][1] <= 1.95  # rows on the helix only
    assert 490 <= w.ranges["period"][0] <= w.period <= w.ranges["period"][1] <= 570
    from analyses.toolkit.helix_period import principal_coordinates
    Z = principal_coordinates(P, 2)
    radius = np.median(w.radius[100:-100])
    for angle in np.linspace(0, 2 * np.pi, 12, endpoint=False):
        moved, _ = axis_phase(Z + 0.1 * radius * np.array([np.cos(angle), np.sin(angle)]), w.window)
        assert moved == pytest.approx(w.theta, abs=1e-9)
    for edge in (50, 75, 125, 150):
        assert w.ranges["period"][0] * 0.97 <= helix_winding(P, edge=edge).period <= w.ranges["period"][1] * 1.03


@pytest.mark.skipif(not GPT2, reason="needs GPT-2's weights (GPT2_WEIGHTS unset)")
def test_gpt2_readings_of_the_ends_hold_over_every_definition_of_the_axis():
    """"Faster over the last trained positions" holds for every definition of the axis tried (every end rate below
    every bulk rate); "faster at the start" does not (some definitions put the start slower than the bulk), so the
    chapters must not claim it."""
    from pathlib import Path

    from safetensors.numpy import load_file

    P = np.asarray(load_file(os.path.join(GPT2, "model.safetensors"))["wpe.weight"], dtype=np.float64)[:-1]
    w = helix_winding(P)
    assert w.ranges["end"][1] < w.ranges["period"][0]
    assert w.ranges["start"][1] > w.ranges["period"][1]
    root = Path(__file__).resolve().parents[1]
    text = " ".join(p.read_text() for p in [root / "index.qmd", *sorted((root / "report").glob("*.qmd"))])
    text = " ".join(text.split())
    for stale in ("faster at both ends", "first positions wind much faster", "the path winds fast", "fast early winding"):
        assert stale not in text, stale


def test_the_bulk_period_is_positive_when_the_bulk_turns_against_the_whole():
    """A path that turns one way over its ends and the other way over its bulk: the period of the bulk is counted
    in the bulk's own direction (as the winding's), never negative."""
    t = np.arange(600, dtype=np.float64)
    angle = np.where(t < 100, 0.2 * t, np.where(t < 500, 20 - 0.02 * (t - 100), 12 + 0.3 * (t - 500)))
    P = np.column_stack([np.cos(angle), np.sin(angle), 0.001 * t, np.zeros(600)])
    period = helix_period(P, 100)
    assert period > 0
    assert helix_winding(P, edge=100).period == pytest.approx(period, rel=1e-9)


@pytest.mark.skipif(not GPT2, reason="needs GPT-2's weights (GPT2_WEIGHTS unset)")
def test_gpt2_headline_count_recomputed_from_the_raw_table():
    """The cited count, recomputed with other code from the raw table: an SVD of the centred rows, the axis as a plain
    loop over clamped windows of the cited length, each row's share of its offset in the top pair's plane, the first
    and the last row above half, and the unwrapped angle between them."""
    from pathlib import Path

    import yaml
    from safetensors.numpy import load_file

    cited = yaml.safe_load((Path(__file__).resolve().parents[1] / "_variables.yml").read_text())["gpt2"]["helix"]
    P = np.asarray(load_file(os.path.join(GPT2, "model.safetensors"))["wpe.weight"], dtype=np.float64)
    X = P - P.mean(axis=0)
    plane = np.linalg.svd(X, full_matrices=False)[2][:2].T
    window, n = int(cited["winding_window"]), len(X)
    axis = np.empty_like(X)
    for i in range(n):
        a = min(max(i - window // 2, 0), n - window)
        axis[i] = X[a:a + window].mean(axis=0)
    offset = X - axis
    share = np.sum((offset @ plane) ** 2, axis=1) / np.sum(offset ** 2, axis=1)
    on = np.flatnonzero(share > 0.5)
    first, last = on[0], on[-1]
    d = offset @ plane
    angle = np.unwrap(np.arctan2(d[:, 1], d[:, 0]))
    turns = abs(angle[last] - angle[first]) / (2 * np.pi)
    assert (first, last) == (int(cited["helix_first"]), int(cited["helix_last"]))
    assert f"{turns:.2f}" == cited["turns_total"]
    assert 1.5 < turns < 2.0 < 2.95  # about two turns, not the 2.95 counted from row 0


def test_tangent_period_and_truncated_centres_in_closed_form():
    """A circle of period 100: its chords turn once per 100 rows whatever their length, either way round (the sign
    given), with no axis; a truncated window averages only the rows inside the table."""
    Z = circle(400, 100.0, centre=(5.0, -3.0))
    for chord in (1, 5, 10):
        assert tangent_period(Z, 50, 350, chord) == pytest.approx(100.0, rel=1e-9)
        assert tangent_period(Z[:, ::-1], 50, 350, chord, -1.0) == pytest.approx(100.0, rel=1e-9)
    assert tangent_period(Z[:, ::-1], 50, 350, 5) == float("inf")
    X = np.arange(10.0)[:, None]
    assert local_centres(X, 4, ends="truncated")[:, 0] == pytest.approx([0.5, 1, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8])
    assert local_centres(X, 4)[:, 0] == pytest.approx([1.5, 1.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 7.5])
    with pytest.raises(ValueError):
        local_centres(circle(50, 10.0), 10, "circle", ends="truncated")


def test_turns_over_rules_count_a_clean_helix_the_same_and_nothing_without_one():
    rng = np.random.default_rng(0)
    t = np.arange(800)
    Q, _ = np.linalg.qr(rng.standard_normal((24, 3)))
    P = np.column_stack([2 * np.cos(2 * np.pi * t / 200), 2 * np.sin(2 * np.pi * t / 200), 0.002 * t]) @ Q.T
    counts = turns_over_rules(P, 200, 100)
    whole_turn = counts.reshape(3, 2, 9)[1, 0]  # window × ends × (plane, threshold): one turn, the ends clamped
    assert len(counts) == 54 and whole_turn == pytest.approx(np.full(9, 799 / 200), rel=1e-3)
    # other windows, or a window truncated at the ends, move the axis off the circle's centre: a fraction of a turn
    assert counts.min() <= 799 / 200 + 0.01 and counts.max() - counts.min() < 0.3
    from analyses.toolkit.sinusoids import sinusoidal_table
    assert np.isnan(turns_over_rules(sinusoidal_table(512, 64, 10000.0), 128, 64)).all()


@pytest.mark.skipif(not GPT2, reason="needs GPT-2's weights (GPT2_WEIGHTS unset)")
def test_gpt2_end_of_the_table_recomputed_from_the_raw_table():
    """Other code: the cited end rate by the chords' direction (SVD of the trained rows, chords of 5 and 10 rows over the
    last 50 and 100), twice the bulk's; the end's radius around a clamped one-turn axis well below the bulk's; the
    count's range over the rule's plane, window, end treatment and threshold by plain loops."""
    from pathlib import Path

    import yaml
    from safetensors.numpy import load_file

    cited = yaml.safe_load((Path(__file__).resolve().parents[1] / "_variables.yml").read_text())["gpt2"]["helix"]
    P = np.asarray(load_file(os.path.join(GPT2, "model.safetensors"))["wpe.weight"], dtype=np.float64)
    T = P[:-1] - P[:-1].mean(axis=0)
    Z = T @ np.linalg.svd(T, full_matrices=False)[2][:2].T
    last = len(Z) - 1

    def chord_rate(a, b, k):  # tokens per turn of the chord z(n + k) − z(n), n = a … b − k, signed by the bulk
        d = Z[k:] - Z[:-k]
        phi = np.unwrap(np.arctan2(d[:, 1], d[:, 0]))
        sense = np.sign(phi[last - 100 - k] - phi[100])
        return 2 * np.pi * (b - k - a) / (sense * (phi[b - k] - phi[a]))

    end = [chord_rate(last - span, last, k) for k in (5, 10) for span in (50, 100)]
    bulk = [chord_rate(100, last - 100, k) for k in (5, 10)]
    assert (f"{min(end):.0f}", f"{max(end):.0f}") == (cited["tangent_period_end_low"], cited["tangent_period_end_high"])
    assert (f"{min(bulk):.0f}", f"{max(bulk):.0f}") == (cited["tangent_period_bulk_low"],
                                                         cited["tangent_period_bulk_high"])
    assert 1.7 < min(bulk) / max(end) and max(bulk) / min(end) < 2.5  # about twice as fast
    window = int(cited["winding_window"])
    radii = []
    for w in (round(0.75 * window), window, round(1.25 * window)):
        radii.append(np.linalg.norm(Z[last] - Z[len(Z) - w:].mean(axis=0)))  # clamped: the last w rows' mean
    assert (f"{min(radii):.1f}", f"{max(radii):.1f}") == (cited["radius_end_low"], cited["radius_end_high"])
    assert max(radii) < 0.6 * float(cited["radius_bulk"])
    X, n, counts = P - P.mean(axis=0), len(P), []
    for rows in (slice(0, n), slice(1, n - 1), slice(100, n - 100)):
        Y = P[rows] - P[rows].mean(axis=0)
        plane = np.linalg.svd(Y, full_matrices=False)[2][:2].T
        for w in (round(0.75 * window), window, round(1.25 * window)):
            for truncated in (False, True):
                axis = np.empty_like(X)
                for i in range(n):
                    a = max(i - w // 2, 0) if truncated else min(max(i - w // 2, 0), n - w)
                    axis[i] = X[a:(min(i - w // 2 + w, n) if truncated else a + w)].mean(axis=0)
                off = X - axis
                share = np.sum((off @ plane) ** 2, axis=1) / np.sum(off ** 2, axis=1)
                d = off @ plane
                angle = np.unwrap(np.arctan2(d[:, 1], d[:, 0]))
                for threshold in (0.4, 0.5, 0.6):
                    on = np.flatnonzero(share > threshold)
                    counts.append(abs(angle[on[-1]] - angle[on[0]]) / (2 * np.pi))
    assert (f"{min(counts):.1f}", f"{max(counts):.1f}") == (cited["turns_rules_low"], cited["turns_rules_high"])
