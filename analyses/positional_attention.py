"""What layer 0's attention does with position alone: score patterns, head classes, and the QK circuit on P's top PCs.

Input: the position rows only, through the LayerNorm that precedes layer 0's attention
(GPT-2: ln_1 of block 0, applied to p_n; BERT: the embedding LayerNorm, applied to
p_n + t_0, the first token-type row). Token embeddings are left out, so this is the
positional component of the input, not the pattern on any real text.

Per head h, with x_n the normalised rows, q_n = x_n W_Q^h + b_Q^h, k_n = x_n W_K^h + b_K^h:

    S_ij = q_i · k_j / √d_head,   A_ij = softmax_j(S_ij)   (j ≤ i for the causal GPT-2).

Restricted to the top-3 right-singular directions V of P (uncentred), the bilinear part
of S is c_i M c_jᵀ with c_n = z_n V (z_n the LayerNorm-standardised row before its gain γ) and

    M^h = Vᵀ diag(γ) W_Q^h W_K^hᵀ diag(γ) V / √d_head.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.attention import (CLASSES, antisymmetric_share, attention_pattern, classify, head_scores, head_statistics,
                                        position_inputs, qk_form, query_rows)
from analyses.toolkit.helix_period import EDGE, helix_period
from analyses.toolkit.linalg import top_right_singular_vectors
from analyses.engine.registry import register
from analyses.engine.results import COUNT_SHARE, FLOAT64, Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape

NEEDS = ("W_pos", "blocks.0.attn.W_Q", "blocks.0.attn.W_K", "blocks.0.attn.b_Q", "blocks.0.attn.b_K")
FAMILY_NEEDS = {"gpt2": ("blocks.0.ln1.w", "blocks.0.ln1.b"), "bert": ("W_token_type", "embed.ln.w", "embed.ln.b")}
"""What `position_inputs` reads besides NEEDS: the LayerNorm in front of layer 0 (and BERT's first segment row)."""


def offset_profile(A: np.ndarray, queries: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Mean over `queries` of A[i, i − δ] for every offset δ (NaN where no query has that key)."""
    n = A.shape[0]
    out = np.full(len(offsets), np.nan)
    for o, delta in enumerate(offsets):
        i = queries[(queries - delta >= 0) & (queries - delta < n)]
        if i.size:
            out[o] = A[i, i - delta].mean()
    return out


def max_pool(A: np.ndarray, block: int) -> np.ndarray:
    """Maximum over non-overlapping block × block tiles (a thin diagonal stays visible when shrunk)."""
    n = A.shape[0] // block * block
    return A[:n, :n].reshape(n // block, block, n // block, block).max(axis=(1, 3))


def layer0_heads(tensors: Mapping[str, np.ndarray], shape: ModelShape):
    """Yield (head, S) for every layer-0 head on the position-only input."""
    z, gain, bias = position_inputs(tensors, shape)
    X = z * gain + bias
    W_Q, W_K = tensors["blocks.0.attn.W_Q"], tensors["blocks.0.attn.W_K"]
    b_Q, b_K = tensors["blocks.0.attn.b_Q"], tensors["blocks.0.attn.b_K"]
    for head in range(shape.n_heads):
        yield head, head_scores(X, W_Q[head], b_Q[head], W_K[head], b_K[head])


# ---------------------------------------------------------------------------
# Patterns and classes


REFERENCE_CONTEXT = 1024
"""The context length at which the scaled local window (the variant) equals the absolute one, `local_width` tokens."""


def scaled_width(local_width: int, n_ctx: int) -> int:
    """The variant's local window for a context of n_ctx positions: `local_width` per REFERENCE_CONTEXT positions, at
    least 2 (the same fraction of every context; the classes themselves use the absolute window, a token distance)."""
    return max(2, round(local_width * n_ctx / REFERENCE_CONTEXT))


def class_counts(stats: list[dict], key_masses: tuple[float, ...], widths: tuple[int, ...]) -> dict[tuple, dict]:
    """{(key_mass, width): {class: number of heads}} over a grid of the two thresholds that define the classes."""
    counts = {}
    for mass in key_masses:
        for width in widths:
            labels = [classify(s, key_mass=mass, local_width=width) for s in stats]
            counts[mass, width] = {c: sum(c in heads for heads in labels) for c in CLASSES}
    return counts


def positional_attention(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, min_query: int,
                         key_mass: float, local_width: int, max_offset: int, zoom: int,
                         pool: int, key_mass_range: tuple[float, ...], width_factors: tuple[float, ...]) -> Result:
    """Layer-0 attention patterns of the position rows alone, each head's offset profile and class, local attention
    judged by an absolute window of `local_width` tokens; the classes again with the window scaled to the context
    (`scaled_width`); the class counts over a grid of thresholds (`key_mass_range`) and windows (`width_factors`
    times either window)."""
    causal = shape.family == "gpt2"
    n = shape.n_ctx
    scaled = scaled_width(local_width, n)
    queries = query_rows(n, causal, min_query)
    offsets = np.arange(0 if causal else -max_offset, max_offset + 1)
    profiles, zooms, pooled, rows, classes = [], [], [], [], []
    numbers = {
        "min_query": Number(min_query, "d", "queries i < min_query are left out of every average"),
        "key_mass": Number(key_mass, ".2f", "mean attention on one key that makes a current-, previous-token or "
                                              "first-position head"),
        "local_width": Number(local_width, "d", "largest half-width |i − j| of a local-window head, in tokens (the same "
                                                "in every model)"),
        "local_width_scaled": Number(scaled, "d", f"the variant's window, scaled to the context ({local_width} tokens "
                                                  f"per {REFERENCE_CONTEXT} positions)"),
        "pool": Number(pool, "d", "tile size of the max-pooled full patterns"),
        "zoom": Number(zoom, "d", "positions shown in the zoomed patterns"),
    }
    all_stats = []
    for head, S in layer0_heads(tensors, shape):
        A = attention_pattern(S, causal)
        stats = head_statistics(A, queries)
        all_stats.append(stats)
        labels = classify(stats, key_mass=key_mass, local_width=local_width)
        label = " + ".join(labels)
        classes.append(labels)
        profiles.append(offset_profile(A, queries, offsets))
        zooms.append(A[:zoom, :zoom])
        pooled.append(max_pool(A, pool))
        rows.append((head, label, stats["prev_mode"], stats["self_mode"], stats["first_mode"], stats["mass_self"],
                     stats["mass_prev"],
                     stats["mass_first"], stats["half_width"], stats["mean_distance"], stats["entropy"]))
        for key, fmt in (("mass_self", ".2f"), ("mass_prev", ".2f"), ("mass_first", ".2f"), ("first_mode", ".0%"),
                         ("prev_mode", ".0%"), ("self_mode", ".0%"),
                         ("half_width", "d"), ("mean_distance", ".0f")):
            numbers[f"head{head}_{key}"] = Number(stats[key], fmt, f"layer-0 head {head}: {key}",
                                                  COUNT_SHARE if key.endswith("_mode") else None)
    for label in CLASSES:
        members = [h for h, c in enumerate(classes) if label in c]
        key = label.replace("-", "_").replace(" ", "_")
        numbers[f"n_{key}"] = Number(len(members), "d", f"layer-0 heads classified {label}")
        numbers[f"heads_{key}"] = Text(spoken_list(members), f"the layer-0 heads classified {label}")
    for label in ("local window", "diffuse"):  # the variant: the window scaled to the context
        members = [h for h, stats in enumerate(all_stats) if label in classify(stats, key_mass=key_mass, local_width=scaled)]
        key = label.replace(" ", "_")
        numbers[f"n_{key}_scaled"] = Number(len(members), "d", f"layer-0 heads classified {label}, window scaled")
        numbers[f"heads_{key}_scaled"] = Text(spoken_list(members), "those heads, window scaled to the context")
    widths = tuple(sorted({max(2, round(f * w)) for f in width_factors for w in (local_width, scaled)}))
    grid = class_counts(all_stats, key_mass_range, widths)
    for label in CLASSES:
        key = label.replace("-", "_").replace(" ", "_")
        over = [c[label] for c in grid.values()]
        numbers[f"n_{key}_min"] = Number(min(over), "d", f"fewest {label} heads over the grid of thresholds and windows")
        numbers[f"n_{key}_max"] = Number(max(over), "d", f"most {label} heads over the grid of thresholds and windows")
    numbers |= {"key_mass_low": Number(min(key_mass_range), ".2f", "lowest mass threshold of the grid"),
                "key_mass_high": Number(max(key_mass_range), ".2f", "highest mass threshold of the grid"),
                "width_low": Number(min(widths), "d", "narrowest local window of the grid"),
                "width_high": Number(max(widths), "d", "widest local window of the grid")}
    grid_table = Table(("mass threshold", "window", *CLASSES),
                       tuple((mass, width, *(c[label] for label in CLASSES)) for (mass, width), c in grid.items()),
                       formats={"mass threshold": ".2f"})
    both = [h for h, c in enumerate(classes) if len(c) > 1]
    numbers["n_several_keys"] = Number(len(both), "d", "layer-0 heads above the threshold on more than one key")
    numbers["heads_several_keys"] = Text(spoken_list(both), "the layer-0 heads above the threshold on several keys")
    table = Table(("head", "class", "argmax i−1", "argmax i", "argmax 0", "mass self", "mass i−1", "mass 0", "half-width",
                   "mean |i−j|", "entropy (nats)"), tuple(rows),
                  formats={"argmax i−1": ".0%", "argmax i": ".0%", "argmax 0": ".0%", "mass self": ".3f", "mass i−1": ".3f",
                           "mass 0": ".3f", "mean |i−j|": ".1f", "entropy (nats)": ".2f"},
                  accuracy=dict.fromkeys(("argmax i−1", "argmax i", "argmax 0"), COUNT_SHARE))
    return Result(numbers, {"heads": table, "class_grid": grid_table},
                  {"profiles": np.array(profiles), "offsets": offsets, "zooms": np.array(zooms),
                   "pooled": np.array(pooled), "classes": np.array([" + ".join(c) for c in classes]),
                   "masses": np.array([[r[5], r[6], r[7]] for r in rows])})


SHORT_CLASS = {"current-token": "current", "previous-token": "previous", "first-position": "first",
               "local window": "local", "diffuse": "diffuse"}
"""Head classes in a word, for figure labels."""


def _head_grid(n_heads: int, width: float = plotting.MAX_WIDTH, panel_height: float = 1.25):
    """One panel per head, four to a row (six where the count is not a multiple of four), labels on the outer
    panels only; `panel_height` in inches per row, titles included."""
    cols = 4 if n_heads % 4 == 0 else 6
    rows = -(-n_heads // cols)
    fig, axes = plotting.subplots(rows, cols, figsize=(width, panel_height * rows + 0.7), sharex=True, sharey=True)
    return fig, np.atleast_1d(axes).ravel()


def _head_title(head: int, classes: str) -> str:
    """'head h' over its classes in short words (e.g. 'current + previous'), on two lines."""
    return f"head {head}\n" + " + ".join(SHORT_CLASS.get(c, c) for c in classes.split(" + "))


def _log_norm(vmin: float):
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    return LogNorm(vmin=vmin, vmax=1.0)


def plot_patterns(result: Result, shape: ModelShape):
    """Every head's full pattern on the position rows alone, max-pooled, on a log colour scale."""
    pooled, classes = result.arrays["pooled"], result.arrays["classes"]
    pool = result.numbers["pool"].value
    fig, axes = _head_grid(len(pooled), panel_height=1.8)
    norm = _log_norm(1e-4)
    extent = (0, pooled.shape[-1] * pool, pooled.shape[-1] * pool, 0)
    for head, ax in enumerate(axes):
        image = ax.imshow(np.clip(pooled[head], 1e-4, 1), cmap=plotting.SEQUENTIAL, norm=norm, extent=extent,
                          interpolation="nearest", rasterized=True)
        ax.set_title(_head_title(head, classes[head]), fontsize=8)
    fig.supxlabel("key position j", fontsize=9)
    fig.supylabel("query position i", fontsize=9)
    bar = fig.colorbar(image, ax=list(axes), fraction=0.03, pad=0.02)
    bar.set_label(f"attention (max over {pool}×{pool} tiles, log scale)")
    return fig


def plot_zoom(result: Result, shape: ModelShape):
    """The first positions of every head's pattern, linear colour scale."""
    zooms, classes = result.arrays["zooms"], result.arrays["classes"]
    fig, axes = _head_grid(len(zooms), panel_height=1.8)
    for head, ax in enumerate(axes):
        image = ax.imshow(zooms[head], cmap=plotting.SEQUENTIAL, vmin=0, vmax=1, interpolation="nearest",
                          rasterized=True)
        ax.set_title(_head_title(head, classes[head]), fontsize=8)
    fig.supxlabel("key position j", fontsize=9)
    fig.supylabel("query position i", fontsize=9)
    bar = fig.colorbar(image, ax=list(axes), fraction=0.03, pad=0.02)
    bar.set_label("attention weight")
    return fig


def plot_masses(result: Result, shape: ModelShape):
    """Mean attention of each head on the query itself, the previous position and position 0, with the threshold."""
    masses, classes = result.arrays["masses"], result.arrays["classes"]
    threshold = result.numbers["key_mass"].value
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 3.6))
    heads = np.arange(len(masses))
    for j, (label, color) in enumerate((("key i (self)", "C0"), ("key i − 1 (previous)", "C1"), ("key 0 (first)", "C2"))):
        ax.bar(heads + (j - 1) * 0.27, masses[:, j], 0.27, color=color, label=label)
    ax.axhline(threshold, color="0.3", lw=0.9, ls="--", label=f"threshold {result.numbers['key_mass'].text}")
    labels = [f"{h}: " + " + ".join(SHORT_CLASS[c] for c in label.split(" + ")) for h, label in zip(heads, classes)]
    ax.set_xticks(heads, labels, rotation=35, ha="right", rotation_mode="anchor")
    ax.set_xlabel("head: class")
    ax.set_ylabel("mean attention on the key")
    ax.set_ylim(0, 1)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=4)
    return fig


def plot_profiles(result: Result, shape: ModelShape):
    """Mean attention against offset i − j for every head (log colour)."""
    profiles, offsets, classes = result.arrays["profiles"], result.arrays["offsets"], result.arrays["classes"]
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 3.6))
    image = ax.imshow(np.clip(profiles, 1e-5, 1), aspect="auto", cmap=plotting.SEQUENTIAL, norm=_log_norm(1e-5),
                      extent=(offsets[0] - 0.5, offsets[-1] + 0.5, len(profiles) - 0.5, -0.5),
                      interpolation="nearest")
    ax.set_yticks(range(len(profiles)), [f"{h}: {c}" for h, c in enumerate(classes)])
    ax.set_xlabel("offset i − j (tokens back from the query)")
    ax.set_ylabel("head: class")
    plotting.colorbar(fig, image, ax, "mean attention on key i − offset (log)")
    return fig


register(
    "positional_attention", "Layer-0 attention of the position rows alone", positional_attention,
    needs=NEEDS, family_needs=FAMILY_NEEDS,
    params={"min_query": 32, "key_mass": 0.2, "local_width": 32, "max_offset": 64, "zoom": 48, "pool": 4,
            "key_mass_range": (0.15, 0.2, 0.25), "width_factors": (0.5, 1.0, 2.0)},
    figures={"patterns": plot_patterns, "zoom": plot_zoom, "profiles": plot_profiles, "masses": plot_masses},
    groups=("first report",),
)

# ---------------------------------------------------------------------------
# QK circuit on P's top principal directions


def rotation_angle(M: np.ndarray) -> float:
    """φ of the closest αI + βJ (J the 90° rotation) to the 2 × 2 block M: φ = atan2(β, α).

    For coordinates c_n = r_n(cos θ_n, sin θ_n), c_i (αI + βJ) c_jᵀ = ρ r_i r_j cos(θ_i − θ_j − φ).
    """
    alpha = (M[0, 0] + M[1, 1]) / 2
    beta = (M[1, 0] - M[0, 1]) / 2
    return float(np.arctan2(beta, alpha))


def rotation_sense(coords: np.ndarray) -> float:
    """+1 or −1: the sign of the median per-position change of the polar angle of 2-D coordinates."""
    theta = np.arctan2(coords[:, 1], coords[:, 0])
    step = np.angle(np.exp(1j * np.diff(theta)))
    return float(np.sign(np.median(step)) or 1.0)


def minimum_offset(phi: float, omega: float) -> float:
    """The smallest offset δ ≥ 0 back from the query at which cos(ωδ − φ) is lowest: ((φ + π)/ω) mod 2π/|ω|.

    A rotation by φ scores the key δ tokens back by cos(θ_i − θ_{i−δ} − φ) = cos(ωδ − φ) on a helix turning at
    ω rad/token; it peaks at δ = φ/ω (the preferred offset) and is lowest half a turn away from that peak.
    """
    return float(((phi + np.pi) / omega) % (2 * np.pi / abs(omega)))


def row_centred_r2(full: np.ndarray, part: np.ndarray, mask: np.ndarray) -> float:
    """1 − SSE/SST between two score matrices over `mask`, each row centred over its masked entries.

    Row-constant terms do not change a softmax, so only within-row variation is compared.
    """
    def centre(S):
        S = np.where(mask, S, 0.0)
        counts = np.maximum(mask.sum(axis=1, keepdims=True), 1)
        return np.where(mask, S - S.sum(axis=1, keepdims=True) / counts, 0.0)

    F, R = centre(full), centre(part)
    return float(1 - ((F - R) ** 2).sum() / (F**2).sum())


def form_terms(coords: np.ndarray, M: np.ndarray, queries: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """[3, len(offsets)]: the mean over `queries` i of the symmetric term c_i ((M + Mᵀ)/2) c_{i−δ}ᵀ, the
    antisymmetric (rotation) term c_i ((M − Mᵀ)/2) c_{i−δ}ᵀ and their sum c_i M c_{i−δ}ᵀ, at each offset δ = i − j
    (negative: keys after the query, which a causal mask hides; NaN where no query has that key)."""
    parts = ((M + M.T) / 2, (M - M.T) / 2, M)
    return np.array([offset_profile(coords @ X @ coords.T, queries, offsets) for X in parts])


def attention_without_parts(S: np.ndarray, coords: np.ndarray, M: np.ndarray, causal: bool, queries: np.ndarray,
                            offsets: np.ndarray) -> np.ndarray:
    """[3, len(offsets)]: the mean over `queries` of the softmax attention on key i − δ, from the full positional
    scores S, from S − c ((M − Mᵀ)/2) cᵀ (the rotation taken out) and from S − c ((M + Mᵀ)/2) cᵀ (the symmetric
    part taken out), as the intervention of `qk_rotation_null` takes them out."""
    parts = (np.zeros_like(M), (M - M.T) / 2, (M + M.T) / 2)
    return np.array([offset_profile(attention_pattern(S - coords @ X @ coords.T, causal), queries, offsets)
                     for X in parts])


def positional_qk(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_components: int,
                  min_query: int, edge: int, mechanism_offsets: int) -> Result:
    """Each layer-0 head's QK form on P's top right-singular directions; rotation in the plane of PCs 1–2. For the
    head with the most positional attention on the current key, the mechanism: its form's symmetric and
    antisymmetric terms against the offset (half a helix turn each way), and its attention on the nearest
    `mechanism_offsets` keys with each part taken out."""
    causal = shape.family == "gpt2"
    n = shape.n_ctx
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    basis = top_right_singular_vectors(P, n_components)
    z, gain, bias = position_inputs(tensors, shape)
    coords = z @ basis
    period = helix_period(P, edge)  # THE helix period (analysis `helix`, same edge), as a signed rate here
    omega = rotation_sense(coords[:, :2]) * 2 * np.pi / period
    mask = np.tril(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)
    mask[:min_query] = False
    forms, rows, restricted_profiles, full_profiles, current_mass = [], [], [], [], []
    offsets = np.arange(0, n // 2)
    queries = query_rows(n, causal, min_query)
    numbers = {
        "omega_deg": Number(np.degrees(omega), ".3f",
                            "signed helix rate in the plane of P's top two directions, 360°/period (degrees/token)"),
        "n_components": Number(n_components, "d", "top right-singular directions of P kept"),
    }
    W_Q, W_K = tensors["blocks.0.attn.W_Q"], tensors["blocks.0.attn.W_K"]
    for head, S in layer0_heads(tensors, shape):
        M = qk_form(W_Q[head], W_K[head], gain, basis)
        R = coords @ M @ coords.T
        anti = float(antisymmetric_share(M))
        phi = rotation_angle(M[:2, :2])
        preferred = phi / omega
        r2 = row_centred_r2(S, R, mask)
        forms.append(M)
        current_mass.append(float(np.diagonal(attention_pattern(S, causal))[queries].mean()))
        for name, S_ in (("restricted", R), ("full", S)):
            centred = S_ - np.where(mask, S_, 0).sum(axis=1, keepdims=True) / np.maximum(mask.sum(axis=1), 1)[:, None]
            (restricted_profiles if name == "restricted" else full_profiles).append(
                offset_profile(centred, queries, offsets))
        predicted_min = minimum_offset(phi, omega)
        within = offsets < period  # the first minimum: within one turn back
        min_restricted = int(offsets[within][np.nanargmin(restricted_profiles[-1][within])])
        min_full = int(offsets[within][np.nanargmin(full_profiles[-1][within])])
        rows.append((head, np.linalg.norm(M), anti, np.degrees(phi), preferred, predicted_min, min_restricted,
                     min_full, r2))
        numbers[f"head{head}_min_offset_predicted"] = Number(
            predicted_min, ".0f", f"head {head}: offset back where cos(ωδ − φ) is lowest, ((φ + π)/ω) mod period")
        numbers[f"head{head}_min_turns"] = Number(predicted_min / period, ".2f",
                                                  f"head {head}: that offset as a fraction of a helix turn")
        numbers[f"head{head}_min_offset_restricted"] = Number(
            min_restricted, "d", f"head {head}: offset (within one turn) of the lowest mean restricted (top-k) score")
        numbers[f"head{head}_min_offset_full"] = Number(min_full, "d",
                                                        f"head {head}: offset (within one turn) of the lowest mean full positional score")
        numbers[f"head{head}_antisymmetric"] = Number(anti, ".2f", f"head {head}: ‖(M − Mᵀ)/2‖ / ‖M‖")
        numbers[f"head{head}_phi_deg"] = Number(np.degrees(phi), ".0f", f"head {head}: rotation angle φ (degrees)")
        numbers[f"head{head}_preferred_offset"] = Number(preferred, ".0f",
                                                         f"head {head}: φ/ω, offset where c_i M c_j peaks")
        numbers[f"head{head}_r2"] = Number(r2, ".2f", f"head {head}: share of row-centred score variance")
    chosen = int(np.argmax(current_mass))
    span = int(round(period / 2))
    term_offsets = np.arange(-span, span + 1)
    near = np.arange(0, mechanism_offsets + 1) if causal else np.arange(-mechanism_offsets, mechanism_offsets + 1)
    b_Q, b_K = tensors["blocks.0.attn.b_Q"], tensors["blocks.0.attn.b_K"]
    S = head_scores(z * gain + bias, W_Q[chosen], b_Q[chosen], W_K[chosen], b_K[chosen])
    M = forms[chosen]
    mechanism = {"term_offsets": term_offsets, "terms": form_terms(coords, M, queries, term_offsets),
                 "near_offsets": near, "attention": attention_without_parts(S, coords, M, causal, queries, near)}
    numbers["mechanism_head"] = Number(chosen, "d", "the head with the most positional attention on the current key, "
                                       "whose mechanism is drawn")
    r2s = np.array([r[-1] for r in rows])
    numbers["r2_median"] = Number(float(np.median(r2s)), ".2f", "median over heads of the top-k share")
    numbers["r2_max"] = Number(float(r2s.max()), ".2f", "largest top-k share of a head")
    numbers["r2_max_head"] = Number(int(r2s.argmax()), "d", "head with the largest top-k share")
    table = Table(("head", "‖M‖_F", "antisymmetric share", "φ (degrees)", "φ/ω (tokens)",
                   "lowest at (predicted)", "lowest at (top-k form)", "lowest at (full)", "R² of top-k scores"),
                  tuple(rows), formats={"‖M‖_F": ".3f", "antisymmetric share": ".2f", "φ (degrees)": ".0f",
                                        "φ/ω (tokens)": ".0f", "lowest at (predicted)": ".0f",
                                        "R² of top-k scores": ".2f"})
    return Result(numbers, {"qk_forms": table},
                  {"forms": np.array(forms), "restricted": np.array(restricted_profiles),
                   "full": np.array(full_profiles), "offsets": offsets,
                   **{f"mechanism_{key}": np.asarray(value) for key, value in mechanism.items()}},
                  {f"mechanism_{key}": FLOAT64 for key in ("terms", "attention")})


def plot_forms(result: Result, shape: ModelShape):
    """The k × k QK form of every head, each on its own symmetric colour scale, values written in (in units of a
    power of ten per head, named in the panel's title, so that every value fits its cell)."""
    forms = result.arrays["forms"]
    fig, axes = _head_grid(len(forms), panel_height=1.75)
    k = forms.shape[-1]
    for head, ax in enumerate(axes):
        M = forms[head]
        top = float(np.abs(M).max())
        exponent = int(np.floor(np.log10(top))) if top > 0 else 0
        ax.imshow(M, cmap=plotting.DIVERGING, vmin=-top, vmax=top, interpolation="nearest")
        for (r, c), value in np.ndenumerate(M):
            shown = value / 10.0**exponent
            text = f"{shown:.1f}" if abs(shown) >= 0.995 else f"{shown:.2f}"
            ax.text(c, r, "0.00" if text == "-0.00" else text.replace("-", "\N{MINUS SIGN}"), ha="center", va="center",
                    fontsize=8,
                    color="white" if abs(value) > 0.6 * top else "black")
        ax.set_title(f"head {head} (×10$^{{{exponent}}}$)", fontsize=8)
        ax.set_xticks(range(k), [f"PC{j + 1}" for j in range(k)])
        ax.set_yticks(range(k), [f"PC{j + 1}" for j in range(k)])
    fig.supxlabel("key direction", fontsize=9)
    fig.supylabel("query direction", fontsize=9)
    return fig


def plot_score_profiles(result: Result, shape: ModelShape):
    """Mean row-centred score against offset: full positional scores against the top-k restriction."""
    full, restricted, offsets = result.arrays["full"], result.arrays["restricted"], result.arrays["offsets"]
    fig, axes = _head_grid(len(full), panel_height=1.5)
    for head, ax in enumerate(axes):
        ax.plot(offsets, full[head], lw=1, color="C0", label="all directions")
        ax.plot(offsets, restricted[head], lw=1, color="C3", ls="--",
                label=f"top-{result.numbers['n_components'].text} form")
        ax.axhline(0, color="0.6", lw=0.5)
        ax.set_title(f"head {head}", fontsize=8)
    fig.supxlabel("offset i − j", fontsize=9)
    fig.supylabel("score − row mean", fontsize=9)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside upper center", ncol=2)
    return fig


def plot_mechanism(result: Result, shape: ModelShape):
    """How one head's form on the helix makes its attention peak at the query: left, the mean score of the key δ
    tokens back from its symmetric part, its antisymmetric (rotation) part and their sum, half a helix turn each way
    (keys after the query shaded where a causal mask hides them); right, its attention on the nearest keys from all
    of its positional scores and with each part taken out."""
    terms, term_offsets = result.arrays["mechanism_terms"], result.arrays["mechanism_term_offsets"]
    attention, near = result.arrays["mechanism_attention"], result.arrays["mechanism_near_offsets"]
    fig, (left, right) = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 2.9), width_ratios=(1.35, 1))
    if shape.family == "gpt2":
        left.axvspan(term_offsets[0], 0, color="0.92", lw=0)
        left.annotate("keys after the query\n(masked)", (0.03, 0.04), xycoords="axes fraction", color="0.35",
                      fontsize=8)
    for curve, label, style in zip(terms, ("symmetric part", "rotation part", "sum: the form"),
                                   (dict(color="C0", ls="--"), dict(color="C3", ls=":"), dict(color="black"))):
        left.plot(term_offsets, curve, lw=1.4, label=label, **style)
    left.axhline(0, color="0.6", lw=0.5)
    left.axvline(0, color="0.6", lw=0.5)
    left.set_xlabel("offset i − j (tokens back from the query)")
    left.set_ylabel("mean score term")
    left.legend(loc="upper right")
    for curve, label, style in zip(attention, ("all scores", "rotation taken out", "symmetric part taken out"),
                                   (dict(color="black", marker="o"), dict(color="C0", ls="--", marker="s"),
                                    dict(color="C3", ls=":", marker="^"))):
        right.plot(near, curve, lw=1.2, ms=3.5, label=label, **style)
    right.set_xticks(near[::2] if len(near) > 8 else near)
    right.set_xlabel("offset i − j")
    right.set_ylabel("mean attention on the key")
    right.set_ylim(0, None)
    right.legend(loc="upper right")
    return fig


register(
    "positional_qk", "Layer-0 QK circuit on the top directions of P", positional_qk,
    needs=NEEDS, family_needs=FAMILY_NEEDS,
    params={"n_components": 3, "min_query": 32, "edge": EDGE, "mechanism_offsets": 12},
    figures={"forms": plot_forms, "score_profiles": plot_score_profiles, "mechanism": plot_mechanism},
    groups=("first report",),
)
