"""Constructed checks of the positional attention pipeline: patterns, head classes, and the QK form on P's PCs."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.positional_attention import offset_profile, qk_form, rotation_angle, row_centred_r2
from analyses.toolkit.attention import (attention_pattern, classify, head_scores, head_statistics, query_rows,
                                        standardise)

N = 64
THRESHOLDS = {"key_mass": 0.2, "local_width": 8}


def planted_scores(n: int, target) -> np.ndarray:
    """Scores 10 on the key target(i) and 0 elsewhere."""
    S = np.zeros((n, n))
    i = np.arange(n)
    S[i, np.clip(target(i), 0, n - 1)] = 10.0
    return S


def classify_scores(S: np.ndarray, causal: bool = True) -> str:
    A = attention_pattern(S, causal)
    return classify(head_statistics(A, query_rows(len(S), causal, 16)), **THRESHOLDS)


def test_softmax_rows_sum_to_one_and_respect_the_mask():
    S = np.random.default_rng(0).standard_normal((N, N))
    A = attention_pattern(S, causal=True)
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(A[np.triu_indices(N, k=1)] == 0)
    assert A[0, 0] == 1.0


def test_planted_heads_are_classified():
    assert classify_scores(planted_scores(N, lambda i: i - 1)) == ("previous-token",)
    assert classify_scores(planted_scores(N, lambda i: i)) == ("current-token",)
    assert classify_scores(planted_scores(N, lambda i: 0 * i)) == ("first-position",)
    assert classify_scores(np.zeros((N, N))) == ("diffuse",)  # uniform over the prefix
    split = planted_scores(N, lambda i: i) + planted_scores(N, lambda i: i - 1)  # half on i, half on i − 1
    assert classify_scores(split) == ("current-token", "previous-token")
    window = np.where(np.abs(np.arange(N)[:, None] - np.arange(N)[None, :]) <= 5, 0.0, -20.0)  # flat, 6 keys
    assert classify_scores(window) == ("local window",)
    assert classify_scores(planted_scores(N, lambda i: i + 1), causal=False) == ("local window",)  # next token


def test_statistics_of_a_previous_token_head():
    A = attention_pattern(planted_scores(N, lambda i: i - 1), causal=True)
    stats = head_statistics(A, query_rows(N, True, 16))
    assert stats["prev_mode"] == 1.0
    assert stats["half_width"] == 1
    assert stats["mass_prev"] == pytest.approx(np.exp(10) / (np.exp(10) + np.arange(16, N)).mean(), rel=0.05)
    profile = offset_profile(A, query_rows(N, True, 16), np.arange(0, 4))
    assert int(np.argmax(profile)) == 1


def test_uniform_causal_pattern_statistics():
    A = attention_pattern(np.zeros((N, N)), causal=True)
    queries = query_rows(N, True, 16)
    stats = head_statistics(A, queries)
    assert stats["entropy"] == pytest.approx(np.mean(np.log(queries + 1)), abs=1e-12)
    assert stats["mean_distance"] == pytest.approx(np.mean(queries / 2), abs=1e-12)


def test_standardise_and_scores():
    rng = np.random.default_rng(1)
    X = standardise(rng.standard_normal((5, 12)) * 3 + 1, eps=0.0)
    np.testing.assert_allclose(X.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(X.var(axis=1), 1, atol=1e-12)
    W_Q, W_K = rng.standard_normal((12, 4)), rng.standard_normal((12, 4))
    S = head_scores(X, W_Q, np.zeros(4), W_K, np.zeros(4))
    np.testing.assert_allclose(S, X @ W_Q @ W_K.T @ X.T / 2.0, atol=1e-12)


def test_rotation_form_reproduces_the_offset_preference():
    """Positions on a circle, θ_n = ω n; a form ρ R(φ) makes the score peak where ω(i − j) = φ."""
    omega, phi = 2 * np.pi / 40, np.pi / 4
    M = 2.0 * np.array([[np.cos(phi), -np.sin(phi)], [np.sin(phi), np.cos(phi)]])
    assert rotation_angle(M) == pytest.approx(phi, abs=1e-12)
    n = np.arange(200)
    coords = np.stack([np.cos(omega * n), np.sin(omega * n)], axis=1)
    R = coords @ M @ coords.T
    i, window = 150, 20  # keys i − 19 … i: less than half a turn, so the peak is unique
    j = i - window + 1 + int(np.argmax(R[i, i - window + 1:i + 1]))
    assert i - j == round(phi / omega)


def test_qk_form_with_gain_and_r2():
    rng = np.random.default_rng(2)
    d, dh = 10, 4
    B, _ = np.linalg.qr(rng.standard_normal((d, 3)))
    W_Q, W_K, gain = rng.standard_normal((d, dh)), rng.standard_normal((d, dh)), rng.uniform(0.5, 2, d)
    M = qk_form(W_Q, W_K, gain, B)
    c = rng.standard_normal((6, 3))
    z = c @ B.T  # inputs inside the subspace: the form is exact
    full = (z * gain) @ W_Q @ ((z * gain) @ W_K).T / 2.0
    np.testing.assert_allclose(c @ M @ c.T, full, atol=1e-10)
    mask = np.tril(np.ones((6, 6), dtype=bool))
    assert row_centred_r2(full, c @ M @ c.T, mask) == pytest.approx(1.0, abs=1e-12)
    assert row_centred_r2(full, full + 5.0, mask) == pytest.approx(1.0, abs=1e-12)  # row constants do not count


def circle_heads(n_ctx: int = 64, omega: float = 2 * np.pi / 80, beta: float = 5000.0, phis=None):
    """Layer-0 tensors for positions on a circle, p_n = r(cos ωn e₁ + sin ωn e₂) with e₁, e₂ zero-mean, and a
    head per φ in `phis` whose scores are ∝ β cos(ω(i − j) − φ); by default two: φ = ω peaks on the previous key
    (head 0), φ = 0 on the query itself (head 1). Within n_ctx < 2π/ω no other key comes close, so the peak holds
    almost all the mass."""
    from analyses.engine.sources import ModelShape

    phis = (omega, 0.0) if phis is None else tuple(phis)
    D, H, dh = 8, len(phis), 4
    e1, e2 = np.zeros(D), np.zeros(D)
    e1[:2], e2[2:4] = np.array([1, -1]) / np.sqrt(2), np.array([1, -1]) / np.sqrt(2)
    n = np.arange(n_ctx)
    P = 10.0 * (np.cos(omega * n)[:, None] * e1 + np.sin(omega * n)[:, None] * e2)
    a = np.sqrt(2 * beta * np.sqrt(dh) / D)  # q·k/√dh = a² D cos(…)/√dh
    W_Q, W_K = np.zeros((H, D, dh)), np.zeros((H, D, dh))
    for head, phi in enumerate(phis):
        W_Q[head, :, 0], W_Q[head, :, 1] = a * e1, a * e2
        W_K[head, :, 0] = a * (np.cos(phi) * e1 - np.sin(phi) * e2)
        W_K[head, :, 1] = a * (np.sin(phi) * e1 + np.cos(phi) * e2)
    tensors = {"W_pos": P, "blocks.0.attn.W_Q": W_Q, "blocks.0.attn.W_K": W_K, "blocks.0.attn.b_Q": np.zeros((H, dh)),
               "blocks.0.attn.b_K": np.zeros((H, dh)), "blocks.0.ln1.w": np.ones(D), "blocks.0.ln1.b": np.zeros(D)}
    return tensors, ModelShape("circle", "gpt2", D, n_ctx, 1, H, 10, 4 * D, "pre")


def test_positional_attention_classifies_planted_previous_and_current_token_heads():
    from analyses.positional_attention import positional_attention

    tensors, shape = circle_heads()
    result = positional_attention(tensors, shape, min_query=8, key_mass=0.2, local_width=4, max_offset=8, zoom=8,
                                  pool=4, key_mass_range=(0.2,), width_factors=(1.0,))
    assert result.tables["heads"].column("class") == ["previous-token", "current-token"]
    numbers = {k: v.value for k, v in result.numbers.items()}
    assert numbers["head0_mass_prev"] == pytest.approx(1.0, abs=1e-5)
    assert numbers["head1_mass_self"] == pytest.approx(1.0, abs=1e-5)
    assert numbers["head0_half_width"] == 1 and numbers["head1_half_width"] == 0
    assert result.numbers["heads_previous_token"].text == "0" and result.numbers["heads_current_token"].text == "1"


def test_positional_qk_recovers_the_rotation_and_the_preferred_offsets():
    """Three full turns of period 80: ω = 2π/80 from the helix period, peaks φ/ω back, and the lowest score
    half a turn from the peak, ((φ + π)/ω) mod 80 (41 and 40 tokens back), seen in the restricted profile."""
    from analyses.positional_attention import positional_qk

    omega = 2 * np.pi / 80
    tensors, shape = circle_heads(n_ctx=240, omega=omega)
    result = positional_qk(tensors, shape, n_components=2, min_query=8, edge=20, mechanism_offsets=4)
    numbers = {k: v.value for k, v in result.numbers.items()}
    assert abs(numbers["omega_deg"]) == pytest.approx(360 / 80, rel=1e-6)
    assert numbers["head0_preferred_offset"] == pytest.approx(1.0, rel=1e-6)
    assert numbers["head1_preferred_offset"] == pytest.approx(0.0, abs=1e-9)
    assert numbers["head0_min_offset_predicted"] == pytest.approx(41.0, rel=1e-6)
    assert numbers["head1_min_offset_predicted"] == pytest.approx(40.0, rel=1e-6)
    assert numbers["head0_min_turns"] == pytest.approx(41 / 80, rel=1e-6)
    assert numbers["head0_min_offset_restricted"] == 41 and numbers["head1_min_offset_restricted"] == 40
    assert numbers["head0_r2"] == pytest.approx(1.0, abs=1e-9)  # the scores live in the top-2 plane


def test_the_mechanism_figure_draws_a_rotation_on_a_circle_as_its_closed_form():
    """A head scoring ρ cos(ωδ − φ) (δ = i − j, φ = 0.6, ω = 2π/80): its symmetric part scores ρ cos φ cos ωδ
    (peak at the query), its rotation part ρ sin φ sin ωδ (peak a quarter turn back, 20 tokens), their sum peaks at
    φ/ω; its attention on key i − δ is exp(ρ cos(ωδ − φ)) / Σ_{δ' ≤ i} exp(ρ cos(ωδ' − φ)), averaged over the
    queries, and likewise for each part alone. Checked on the lines the figure draws."""
    from analyses.positional_attention import plot_mechanism, positional_qk
    from analyses.toolkit import plotting

    omega, phi, n_ctx, min_query = 2 * np.pi / 80, 0.6, 240, 8
    tensors, shape = circle_heads(n_ctx=n_ctx, omega=omega, beta=0.4, phis=(phi,))
    result = positional_qk(tensors, shape, n_components=2, min_query=min_query, edge=20, mechanism_offsets=12)
    fig = plot_mechanism(result, shape)
    left, right = fig.axes[:2]
    drawn = {line.get_label(): line.get_data() for ax in (left, right) for line in ax.get_lines()}
    z = standardise(tensors["W_pos"], shape.ln_eps)
    q = z[0] @ tensors["blocks.0.attn.W_Q"][0]
    rho = q @ q / np.sqrt(q.size)  # |q|² / √d_head: the score's amplitude on the circle
    delta, _ = drawn["sum: the form"]
    closed = {"symmetric part": rho * np.cos(phi) * np.cos(omega * delta),
              "rotation part": rho * np.sin(phi) * np.sin(omega * delta), "sum: the form": rho * np.cos(omega * delta - phi)}
    for label, expected in closed.items():
        np.testing.assert_allclose(drawn[label][1], expected, rtol=1e-6, atol=1e-9 * rho)
    assert delta[np.argmax(drawn["sum: the form"][1])] == round(phi / omega)
    assert delta[np.argmax(drawn["rotation part"][1])] == 20 and delta[np.argmax(drawn["symmetric part"][1])] == 0
    queries = np.arange(min_query, n_ctx)
    for label, score in (("all scores", lambda d: np.cos(omega * d - phi)),
                         ("rotation taken out", lambda d: np.cos(phi) * np.cos(omega * d)),
                         ("symmetric part taken out", lambda d: np.sin(phi) * np.sin(omega * d))):
        near, attention = drawn[label]
        expected = [np.mean([np.exp(rho * score(d)) / np.exp(rho * score(np.arange(i + 1))).sum() for i in queries if i >= d])
                    for d in near]  # the queries that have a key d back
        np.testing.assert_allclose(attention, expected, rtol=1e-9)
    plotting.pyplot().close(fig)


@pytest.mark.parametrize("phi", [-2.5, -1.0, 0.0, 0.7, 3.0])
@pytest.mark.parametrize("omega", [2 * np.pi / 50, -2 * np.pi / 50])
def test_minimum_offset_is_the_first_minimum_of_the_rotation_score(phi, omega):
    from analyses.positional_attention import minimum_offset

    delta = np.linspace(0, 50, 500001)[:-1]
    expected = delta[np.argmin(np.cos(omega * delta - phi))]
    assert minimum_offset(phi, omega) == pytest.approx(expected, abs=1e-3)
    assert 0 <= minimum_offset(phi, omega) < 50


def uniform_heads(n_ctx: int):
    """Layer-0 tensors with W_Q = b_Q = 0: every score is 0, so each causal row i attends 1/(i + 1) to each key j ≤ i."""
    from analyses.engine.sources import ModelShape

    D, H, dh = 8, 1, 4
    rng = np.random.default_rng(3)
    tensors = {"W_pos": rng.standard_normal((n_ctx, D)), "blocks.0.attn.W_Q": np.zeros((H, D, dh)),
               "blocks.0.attn.W_K": rng.standard_normal((H, D, dh)), "blocks.0.attn.b_Q": np.zeros((H, dh)),
               "blocks.0.attn.b_K": rng.standard_normal((H, dh)), "blocks.0.ln1.w": np.ones(D),
               "blocks.0.ln1.b": np.zeros(D)}
    return tensors, ModelShape("uniform", "gpt2", D, n_ctx, 1, H, 10, 4 * D, "pre")


def registered_params(name: str) -> dict:
    import analyses.positional_attention  # noqa: F401  (registers the analyses)
    from analyses.engine.registry import _REGISTRY

    return dict(_REGISTRY[name].params)


def test_query_rows_start_at_min_query():
    """Averages are over queries i ≥ min_query (causal) and min_query ≤ i < n − min_query (bidirectional)."""
    np.testing.assert_array_equal(query_rows(16, True, 8), np.arange(8, 16))
    np.testing.assert_array_equal(query_rows(16, False, 4), np.arange(4, 12))


def test_head_statistics_average_exactly_the_queries_from_min_query():
    """Uniform causal pattern, n = 16, min_query = 8, queries i = 8…15: mean |i − j| = mean(i/2) = 23/4 exactly,
    mass on key 0 (= on i, = on i − 1) = (1/8) Σ_{i=8}^{15} 1/(i + 1) = (H₁₆ − H₈)/8. Row 7 would give 11/2."""
    from fractions import Fraction

    from analyses.positional_attention import positional_attention

    tensors, shape = uniform_heads(16)
    n = positional_attention(tensors, shape, min_query=8, key_mass=0.2, local_width=32, max_offset=4, zoom=8,
                             pool=4, key_mass_range=(0.2,), width_factors=(1.0,)).numbers
    mass = float(sum(Fraction(1, i + 1) for i in range(8, 16)) / 8)
    assert n["head0_mean_distance"].value == pytest.approx(23 / 4, rel=1e-12)
    for key in ("mass_first", "mass_self", "mass_prev"):
        assert n[f"head0_{key}"].value == pytest.approx(mass, rel=1e-12)


def test_registered_key_mass_is_the_documented_threshold():
    """The chapter's mass figure draws the threshold as 'a dashed line at 0.2' (report/appendix-attention.qmd)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "report" / "appendix-attention.qmd").read_text()
    documented = float(re.search(r"dashed line at ([0-9.]+)", text).group(1))
    assert registered_params("positional_attention")["key_mass"] == documented == 0.2


def test_classify_at_the_registered_threshold():
    """With the registered params a key-mass of exactly key_mass (or 1.5×) passes, and one just below fails."""
    params = registered_params("positional_attention")
    t = params["key_mass"]
    for label, key in (("current-token", "mass_self"), ("previous-token", "mass_prev"),
                       ("first-position", "mass_first")):
        for value, expected in ((t, (label,)), (1.5 * t, (label,)), (t - 1e-9, ("local window",))):
            stats = {"mass_self": 0.0, "mass_prev": 0.0, "mass_first": 0.0, "half_width": 1} | {key: value}
            assert classify(stats, key_mass=t, local_width=params["local_width"]) == expected, (key, value)


def test_positional_attention_uses_the_key_mass_it_is_given():
    """Uniform causal pattern, n = 4, queries 1…3: mass on i, i − 1 and 0 are each (1/2 + 1/3 + 1/4)/3 = 13/36
    ≈ 0.361, above the registered 0.2 (and below 0.4): all three key classes."""
    from analyses.positional_attention import positional_attention

    params = registered_params("positional_attention")
    tensors, shape = uniform_heads(4)
    result = positional_attention(tensors, shape, min_query=1, key_mass=params["key_mass"],
                                  local_width=params["local_width"], max_offset=2, zoom=4, pool=2,
                                  key_mass_range=params["key_mass_range"], width_factors=params["width_factors"])
    assert result.numbers["head0_mass_self"].value == pytest.approx(13 / 36, rel=1e-12)
    assert result.tables["heads"].column("class") == ["current-token + previous-token + first-position"]


def test_the_local_window_scales_with_the_context():
    from analyses.positional_attention import scaled_width

    assert [scaled_width(32, n) for n in (1024, 512, 256, 16)] == [32, 16, 8, 2]


def test_class_counts_over_the_grid_follow_the_thresholds():
    """Two heads: one with 0.22 on the previous key (a previous-token head at 0.15 and 0.20, not at 0.25, where its
    half-width 10 makes it local for a window of 16 or more, diffuse for 8), one diffuse with half-width 40."""
    from analyses.positional_attention import class_counts

    stats = [{"mass_self": 0.05, "mass_prev": 0.22, "mass_first": 0.0, "half_width": 10},
             {"mass_self": 0.01, "mass_prev": 0.01, "mass_first": 0.01, "half_width": 40}]
    grid = class_counts(stats, (0.15, 0.2, 0.25), (8, 16, 64))
    assert grid[0.2, 16]["previous-token"] == 1 and grid[0.2, 16]["diffuse"] == 1
    assert grid[0.25, 16]["local window"] == 1 and grid[0.25, 8]["diffuse"] == 2
    assert grid[0.25, 64]["local window"] == 2 and grid[0.15, 64]["previous-token"] == 1


def test_the_local_window_is_a_token_distance_and_the_scaled_window_a_variant():
    """A head with equal scores attends uniformly to the keys j ≤ i: over 64 positions and queries from 8 its
    half-width lies between 2 and 32 tokens, so the absolute window of 32 tokens makes it local, while the window
    scaled to the context (32 · 64/1024 → 2) makes it diffuse. Both are reported; the class is the absolute one."""
    from analyses.engine.sources import ModelShape
    from analyses.positional_attention import positional_attention

    D, H, n = 8, 2, 64
    rng = np.random.default_rng(0)
    tensors = {"W_pos": rng.standard_normal((n, D)), "blocks.0.attn.W_Q": np.zeros((H, D, 4)),
               "blocks.0.attn.W_K": np.zeros((H, D, 4)), "blocks.0.attn.b_Q": np.zeros((H, 4)),
               "blocks.0.attn.b_K": np.zeros((H, 4)), "blocks.0.ln1.w": np.ones(D), "blocks.0.ln1.b": np.zeros(D)}
    shape = ModelShape("uniform", "gpt2", D, n, 1, H, 10, 4 * D, "pre")
    result = positional_attention(tensors, shape, min_query=8, key_mass=0.2, local_width=32, max_offset=4, zoom=8,
                                  pool=4, key_mass_range=(0.2,), width_factors=(1.0,))
    numbers = {k: v.value for k, v in result.numbers.items()}
    assert 2 < numbers["head0_half_width"] <= 32
    assert numbers["local_width"] == 32 and numbers["local_width_scaled"] == 2
    assert numbers["n_local_window"] == 2 and numbers["n_diffuse"] == 0
    assert numbers["n_local_window_scaled"] == 0 and numbers["n_diffuse_scaled"] == 2
    assert result.tables["heads"].column("class") == ["local window", "local window"]
    assert (numbers["width_low"], numbers["width_high"]) == (2, 32)  # the grid holds both windows
    assert (numbers["n_local_window_min"], numbers["n_local_window_max"]) == (0, 2)


def test_the_qk_forms_print_negative_values_with_a_minus_sign():
    """The forms' cells are text drawn by the figure, not tick labels that `axes.unicode_minus` handles: a
    negative entry prints with U+2212, never a hyphen."""
    import re

    from matplotlib.text import Text

    from analyses.positional_attention import plot_forms, positional_qk
    from analyses.toolkit import plotting

    tensors, shape = circle_heads(n_ctx=240, omega=2 * np.pi / 80, phis=(0.6, -0.6, 1.0, -1.0))
    result = positional_qk(tensors, shape, n_components=2, min_query=8, edge=20, mechanism_offsets=4)
    assert (result.arrays["forms"] < 0).any()
    fig = plot_forms(result, shape)
    cells = [t.get_text() for t in fig.findobj(Text) if re.fullmatch(r"\S?\d+\.\d+", t.get_text())]
    assert any(text.startswith("\N{MINUS SIGN}") for text in cells)
    assert not [text for text in cells if text.startswith("-")]
    assert plotting.pyplot().rcParams["axes.unicode_minus"]  # tick labels: matplotlib's own minus
    plotting.pyplot().close(fig)
