"""The helix's winding and period, the one definition every chapter cites.

The angle of the position rows' top two principal coordinates is measured around the helix's own axis, not around
the origin of the PCA: the axis at position n is the mean of (z1, z2) over one turn centred on n (the first and
last turns' windows at the ends), so the angle does not depend on where the coordinates put their origin. The
turn length that sets the window is the period the angle then gives (a fixed point, found from the whole context).
`helix_winding` adds the sensitivity of every winding number to that choice: the window ±25 %, centres from a
circle fitted to each window instead of its mean, and the centre moved by a tenth of the bulk's radius.

The whole-table turn count runs only over the rows that lie on the helix (`on_helix_shares`): a row is on it when most
of its offset from the axis, in the full space, lies in the (z1, z2) plane the angle is measured in. Elsewhere (GPT-2's
first rows and its last rows alike) the angle is that of a small residual of a row that lies off the plane, and
counts no winding of the helix. The count runs from the first such row to the last, the same rule at both ends.
`turns_over_rules` gives the count's range over the rule itself (the plane, the axis's window, how the window meets
the ends of the table, the threshold). `tangent_period` measures a stretch's rate with no axis at all: the direction
of the chord z(n + k) − z(n) turns once per turn of the helix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyses.toolkit.linalg import top_right_singular_vectors


def principal_coordinates(P: np.ndarray, k: int) -> np.ndarray:
    """z[n, i] = (p_n − p̄) · u_i for the top-k principal axes u_i (signs as in `top_right_singular_vectors`)."""
    P = np.asarray(P, dtype=np.float64)
    return (P - P.mean(axis=0)) @ top_right_singular_vectors(P, k, center=True)


EDGE = 100
"""Positions left out at each end to form the bulk (helix and every analysis that uses its period), in a context of
at least 4 × EDGE positions; a shorter context leaves out a quarter at each end (`bulk_edge`)."""

WINDOW_FACTORS = (0.75, 1.25)
"""The local centres' window, as a fraction of the turn length, at the ends of the range `helix_winding` tries."""

CENTRE_SHIFT = 0.1
"""How far `helix_winding` moves the axis, as a fraction of the bulk's median radius (8 directions)."""

ON_HELIX_SHARE = 0.5
"""A row lies on the helix when more than this share of its offset from the axis lies in the (z1, z2) plane."""

ON_HELIX_SHARES = (0.4, 0.5, 0.6)
"""The thresholds `helix_winding` tries for the rule, beside the axis's definitions, for the count's range."""

ENDS = ("clamped", "truncated")
"""How a window of rows centred on a row meets the ends of the table: moved inside it ("clamped": the end's own
window) or cut at it ("truncated": the rows that exist)."""

CHORDS = (5, 10)
"""Rows spanned by the chords whose direction `tangent_period` follows (one step is mostly noise)."""


def bulk_edge(n_positions: int, edge: int = EDGE) -> int:
    """The edge a context of `n_positions` uses: `edge`, or a quarter of the context where that is less, so that the
    bulk always keeps at least half of the positions (GPT-2 and MiniLM: 100; a 256-position model: 64)."""
    return min(edge, n_positions // 4)


def _window_starts(n: int, window: int) -> np.ndarray:
    """First row of the window of `window` rows centred on each row, clamped to lie inside 0 … n − 1."""
    return np.clip(np.arange(n) - window // 2, 0, n - window)


def local_centres(Z: np.ndarray, window: int, method: str = "mean", ends: str = "clamped") -> np.ndarray:
    """The helix axis at each row of Z (n × d): the mean of Z over the `window` rows centred on the row ("mean"), or
    the centre of the least-squares circle through them ("circle", 2-D); rows near an end use the end's window
    (`ends` "clamped") or the part of their own window inside the table ("truncated", means only)."""
    Z = np.asarray(Z, dtype=np.float64)
    n = len(Z)
    if not 3 <= window <= n:
        raise ValueError(f"need 3 <= window <= {n}, got {window}")
    if ends not in ENDS or (ends == "truncated" and method != "mean"):
        raise ValueError(f"unknown end treatment {ends!r} for centres by {method!r}")
    starts = _window_starts(n, window)
    if method == "mean":
        cumulative = np.vstack([np.zeros(Z.shape[1]), np.cumsum(Z, axis=0)])
        if ends == "truncated":
            low = np.clip(np.arange(n) - window // 2, 0, n)
            high = np.clip(np.arange(n) - window // 2 + window, 0, n)
            return (cumulative[high] - cumulative[low]) / (high - low)[:, None]
        return ((cumulative[window:] - cumulative[:-window]) / window)[starts]
    if method != "circle":
        raise ValueError(f"unknown centre method {method!r}")
    # The circle x² + y² = 2a x + 2b y + c through each window by least squares: normal equations from running sums
    # of the coordinates (taken about their overall mean, for conditioning).
    d = Z - Z.mean(axis=0)
    x, y = d[:, 0], d[:, 1]
    s = x * x + y * y
    terms = np.column_stack([x * x, x * y, y * y, x, y, x * s, y * s, s])
    sums = (np.vstack([np.zeros(8), np.cumsum(terms, axis=0)])[window:]
            - np.vstack([np.zeros(8), np.cumsum(terms, axis=0)])[:-window])[starts]
    xx, xy, yy, sx, sy, xs, ys, ss = sums.T
    normal = np.stack([np.stack([4 * xx, 4 * xy, 2 * sx], -1), np.stack([4 * xy, 4 * yy, 2 * sy], -1),
                       np.stack([2 * sx, 2 * sy, np.full_like(sx, window)], -1)], -2)
    # pinv: a window of collinear points (a straight stretch) has no circle; it gets the least-norm solution
    solution = (np.linalg.pinv(normal) @ np.stack([2 * xs, 2 * ys, ss], -1)[..., None])[..., 0]
    return Z.mean(axis=0) + solution[:, :2]


def axis_phase(Z: np.ndarray, window: int, method: str = "mean") -> tuple[np.ndarray, np.ndarray]:
    """(θ, r): the unwrapped angle of (z1, z2) around the local axis (radians, 0 at the first row, signed so that
    it increases over the rows) and the distance from that axis. Moving Z's origin changes neither."""
    Z = np.asarray(Z, dtype=np.float64)[:, :2]
    d = Z - local_centres(Z, window, method)
    theta = np.unwrap(np.arctan2(d[:, 1], d[:, 0]))
    theta = theta - theta[0]
    return theta * (1.0 if theta[-1] >= 0 else -1.0), np.hypot(d[:, 0], d[:, 1])


def on_helix_shares(P: np.ndarray, window: int, ends: str = "clamped", U: np.ndarray | None = None) -> np.ndarray:
    """s_n = ‖(x_n − c_n) U‖² / ‖x_n − c_n‖² for each row: the share of the centred row x_n's offset from the local axis
    c_n (the mean of x over the `window` rows centred on n, as `local_centres` with `ends`) that lies in the span of
    U, by default the plane of the top two principal axes, the plane the angle is measured in (1 on a planar circle;
    small for a row off the plane)."""
    P = np.asarray(P, dtype=np.float64)
    X = P - P.mean(axis=0)
    offsets = X - local_centres(X, window, ends=ends)
    in_plane = offsets @ (top_right_singular_vectors(P, 2, center=True) if U is None else U)
    total = np.sum(offsets * offsets, axis=1)
    return np.divide(np.sum(in_plane * in_plane, axis=1), total, out=np.zeros(len(X)), where=total > 0)


def on_helix_stretch(shares: np.ndarray, threshold: float = ON_HELIX_SHARE) -> tuple[int, int] | None:
    """(first, last): the first and the last row whose share exceeds `threshold` (`on_helix_shares`), the rows the
    turn count runs between; None where fewer than two rows do (no helix to count)."""
    on = np.flatnonzero(np.asarray(shares) > threshold)
    return (int(on[0]), int(on[-1])) if len(on) >= 2 else None


def _period_over(theta: np.ndarray, first: int, last: int) -> float:
    """Tokens per turn from row `first` to row `last` (inf where the angle does not advance)."""
    advance = theta[last] - theta[first]
    return float(2 * np.pi * (last - first) / advance) if advance > 0 else float("inf")


def turn_length(Z: np.ndarray, edge: int, method: str = "mean", max_iterations: int = 50) -> int:
    """The window of the local centres: the bulk period that the window gives, rounded (a fixed point, from the
    whole context, whose centre is the PCA origin), at most the number of rows (less than a turn: the whole)."""
    n = len(Z)
    window, seen = n, []
    for _ in range(max_iterations):
        period = _period_over(axis_phase(Z, window, method)[0], edge, n - edge - 1)
        new = n if not np.isfinite(period) else int(min(max(round(period), 3), n))
        if new == window or new in seen:  # a fixed point, or a cycle: keep the larger window
            return max(new, window)
        seen.append(window)
        window = new
    raise RuntimeError(f"the helix turn length did not settle in {max_iterations} iterations")


def bulk_phase_increments(P: np.ndarray, edge: int) -> np.ndarray:
    """θ(n+1) − θ(n) for n in the bulk edge … n_ctx − edge − 2, θ the angle of (z1, z2) around the helix's own
    axis (radians), signed so that they advance over the bulk (which way round is a matter of orientation)."""
    edge = bulk_edge(len(P), edge)
    Z = principal_coordinates(P, 2)
    theta, _ = axis_phase(Z, turn_length(Z, edge))
    increments = np.diff(theta[edge:len(P) - edge])
    return increments * (1.0 if increments.sum() >= 0 else -1.0)


def helix_period(P: np.ndarray, edge: int = EDGE) -> float:
    """The helix period: tokens per turn of (z1, z2) around the helix's axis over the bulk, 2π / mean increment."""
    return float(2 * np.pi / bulk_phase_increments(P, edge).mean())


@dataclass(frozen=True)
class Winding:
    """How the helix winds around its own axis, over the trained rows, and how much each number depends on the axis.

    `ranges` gives (smallest, largest) of turns, period, start and end over the variants (`helix_winding`); turns are
    counted over the rows on the helix only (first … last, `on_helix_stretch`), NaN where no row is on it."""

    n_rows: int  # trained rows used (the first n_rows of the table)
    edge: int  # rows at each end outside the bulk
    window: int  # rows over which each local centre is averaged (the turn length, at most n_rows)
    theta: np.ndarray  # angle around the axis, radians, increasing, 0 at row 0
    radius: np.ndarray  # distance from the axis in the (z1, z2) plane
    shares: np.ndarray  # share of each row's offset from the axis in the (z1, z2) plane (`on_helix_shares`)
    first: int | None  # first row on the helix (None: no row is)
    last: int | None  # last row on the helix
    turns: float  # turns from the first row on the helix to the last (NaN where there is no such stretch)
    period: float  # tokens per turn over the bulk (= helix_period of the trained rows)
    start: float  # tokens per turn over rows 0 … edge
    end: float  # tokens per turn over the last edge trained rows
    ranges: dict


def helix_winding(P: np.ndarray, *, edge: int = EDGE, n_trained: int | None = None) -> Winding:
    """The helix's winding around its own axis over the first `n_trained` rows of P (all by default), with the range
    of each number over the variants: window × (0.75, 1, 1.25), centres by mean or fitted circle, and the axis moved by
    CENTRE_SHIFT of the bulk's median radius in 8 directions; the turns over the rows on the helix, their range also
    over the rule's thresholds ON_HELIX_SHARES (each stretch found around the default axis)."""
    P = np.asarray(P, dtype=np.float64)
    n = len(P) if n_trained is None else n_trained
    if not 8 <= n <= len(P):
        raise ValueError(f"need 8 <= n_trained <= {len(P)}, got {n_trained}")
    edge = bulk_edge(n, edge)
    plane = top_right_singular_vectors(P[:n], 2, center=True)  # one SVD for the coordinates and the shares
    Z = (P[:n] - P[:n].mean(axis=0)) @ plane  # `principal_coordinates(P[:n], 2)`
    window = turn_length(Z, edge)

    shares = on_helix_shares(P[:n], window, U=plane)
    stretches = [on_helix_stretch(shares, threshold) for threshold in ON_HELIX_SHARES]
    stretch = stretches[ON_HELIX_SHARES.index(ON_HELIX_SHARE)]

    def counted(theta, first_last):  # turns over a stretch on the helix, NaN where there is none
        return float("nan") if first_last is None else (theta[first_last[1]] - theta[first_last[0]]) / (2 * np.pi)

    def numbers(theta, first_last=stretch):  # the bulk's period in its own direction of turning, as `helix_period`
        bulk = theta[n - edge - 1] - theta[edge]
        return (counted(theta, first_last), _period_over(np.sign(bulk or 1.0) * theta, edge, n - edge - 1),
                _period_over(theta, 0, edge), _period_over(theta, n - edge - 1, n - 1))

    theta, radius = axis_phase(Z, window)
    shift = CENTRE_SHIFT * float(np.median(radius[edge:n - edge]))
    variants = []
    for method in ("mean", "circle"):
        for factor in (WINDOW_FACTORS[0], 1.0, WINDOW_FACTORS[1]):
            w = int(min(max(round(factor * window), 3), n))
            centres = local_centres(Z, w, method)
            for angle in [None, *np.arange(8) * np.pi / 4]:
                moved = centres if angle is None else centres + shift * np.array([np.cos(angle), np.sin(angle)])
                d = Z - moved
                t = np.unwrap(np.arctan2(d[:, 1], d[:, 0]))
                t = t - t[0]
                t = t * (1.0 if t[-1] >= 0 else -1.0)
                variants.extend(numbers(t, first_last) for first_last in stretches)
    variants = np.array(variants)
    keys = ("turns", "period", "start", "end")
    ranges = {k: (float(np.nanmin(column)), float(np.nanmax(column))) if not np.isnan(column).all()
              else (float("nan"), float("nan")) for k, column in zip(keys, variants.T)}
    return Winding(n, edge, window, theta, radius, shares, *(stretch or (None, None)), *numbers(theta), ranges)


def turns_over_rules(P: np.ndarray, window: int, edge: int) -> np.ndarray:
    """The whole-table turn count under every variant of its rule: the plane (top two principal axes of all rows, of
    rows 1 … n − 2, of the bulk edge … n − edge − 1) × the axis's window (WINDOW_FACTORS and 1, times `window`) × how
    the window meets the table's ends (ENDS) × the threshold (ON_HELIX_SHARES). Each variant measures the angle around
    its own axis in its own plane and counts it from its first row on the helix to its last (NaN: no such rows)."""
    P = np.asarray(P, dtype=np.float64)
    n = len(P)
    X = P - P.mean(axis=0)
    planes = [top_right_singular_vectors(P[rows], 2, center=True)
              for rows in (slice(0, n), slice(1, n - 1), slice(edge, n - edge))]
    counts = []
    for factor in (WINDOW_FACTORS[0], 1.0, WINDOW_FACTORS[1]):
        w = int(min(max(round(factor * window), 3), n))
        for ends in ENDS:
            offsets = X - local_centres(X, w, ends=ends)
            total = np.sum(offsets * offsets, axis=1)
            for U in planes:
                in_plane = offsets @ U  # the offset from the axis in the plane: what the angle is measured from
                shares = np.divide(np.sum(in_plane * in_plane, axis=1), total, out=np.zeros(n), where=total > 0)
                theta = np.unwrap(np.arctan2(in_plane[:, 1], in_plane[:, 0]))
                for threshold in ON_HELIX_SHARES:
                    stretch = on_helix_stretch(shares, threshold)
                    counts.append(float("nan") if stretch is None
                                  else abs(theta[stretch[1]] - theta[stretch[0]]) / (2 * np.pi))
    return np.array(counts)


def tangent_period(Z: np.ndarray, first: int, last: int, chord: int, direction: float = 1.0) -> float:
    """Tokens per turn of the direction of the chord z(n + chord) − z(n) in the (z1, z2) plane, over the chords from
    n = first to n = last − chord (rows first … last): 2π (last − chord − first) / Δφ, Δφ the unwrapped change of its
    angle signed by `direction` (the bulk's sense of turning); it needs no axis. Inf where the angle does not advance."""
    Z = np.asarray(Z, dtype=np.float64)[:, :2]
    if not 1 <= chord < last - first or first < 0 or last >= len(Z):
        raise ValueError(f"need 0 <= first < first + chord < last < {len(Z)}, got {first}, {last}, {chord}")
    d = Z[first + chord:last + 1] - Z[first:last + 1 - chord]
    phi = np.unwrap(np.arctan2(d[:, 1], d[:, 0]))
    return _period_over(np.sign(direction) * phi, 0, len(phi) - 1)
