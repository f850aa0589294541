"""Attention on text against attention on the position rows alone."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape
from analyses.forward_pass.prompts import FAMILY_NEEDS, LIBRARIES, NEEDS, PROMPT_WORDS, prompt_ids
from analyses.toolkit import plotting
from analyses.toolkit.attention import (attention_pattern, classify, head_scores, head_statistics, position_inputs,
                                        query_rows)
from analyses.toolkit.forward import hook_layer, hook_names, run_with_hooks, token_rows


def overlap(A: np.ndarray, B: np.ndarray, queries: np.ndarray) -> float:
    """Mean over the queries of Σ_j min(A_ij, B_ij) = 1 − total-variation distance: 1 for identical rows."""
    return float(np.minimum(A[queries], B[queries]).sum(axis=1).mean())


def uniform_pattern(n: int, causal: bool) -> np.ndarray:
    """Equal attention on every key a query may see."""
    allowed = np.tril(np.ones((n, n))) if causal else np.ones((n, n))
    return allowed / allowed.sum(axis=1, keepdims=True)


def layer0_position_patterns(tensors: Mapping[str, np.ndarray], shape: ModelShape, n: int) -> np.ndarray:
    """Layer 0's patterns on the position rows alone as @sec-attention-layer0 computes them, on the first n
    positions: [heads, n, n]."""
    z, gain, bias = position_inputs(tensors, shape)
    X = z[:n] * gain + bias
    W_Q, W_K = tensors["blocks.0.attn.W_Q"], tensors["blocks.0.attn.W_K"]
    b_Q, b_K = tensors["blocks.0.attn.b_Q"], tensors["blocks.0.attn.b_K"]
    return np.array([attention_pattern(head_scores(X, W_Q[h], b_Q[h], W_K[h], b_K[h]), shape.family == "gpt2")
                     for h in range(shape.n_heads)])


def text_attention(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, prompt_words: int, min_query: int,
                   key_mass: float, local_width: int, positional: float, zoom: int) -> Result:
    """Every head's attention on the long prompt against its attention when the token rows are zero (the position
    rows alone, through all layers), over queries i ≥ min_query: their overlap O = mean_i Σ_j min(A, A°), the
    overlap with equal attention on every visible key, and each pattern's class by the thresholds of
    `positional_attention.classify`. A head stays positional when O ≥ `positional` and its text pattern is closer to
    the position-only pattern than to equal attention (O > O_equal)."""
    causal = shape.family == "gpt2"
    ids = prompt_ids(tensors, shape, prompt_words)
    n, L, H = len(ids), shape.n_layers, shape.n_heads
    queries = query_rows(n, causal, min_query)
    tokens = np.stack([token_rows(tensors, ids), np.zeros((n, shape.d_model))])
    uniform = uniform_pattern(n, causal)
    stats = {"overlap": np.zeros((L, H)), "uniform": np.zeros((L, H)), "distance_text": np.zeros((L, H)),
             "distance_alone": np.zeros((L, H))}
    classes, rows, zooms = {}, [], np.zeros((2, L, H, zoom, zoom))
    check = {}

    def hook(A: np.ndarray, name: str) -> None:
        layer = hook_layer(name)
        if layer == 0:
            check["diff"] = float(np.abs(A[1] - layer0_position_patterns(tensors, shape, n)).max())
        for h in range(H):
            text, alone = A[0, h], A[1, h]
            stats["overlap"][layer, h] = overlap(text, alone, queries)
            stats["uniform"][layer, h] = overlap(text, uniform, queries)
            s_text, s_alone = head_statistics(text, queries), head_statistics(alone, queries)
            c_text = classify(s_text, key_mass=key_mass, local_width=local_width)
            c_alone = classify(s_alone, key_mass=key_mass, local_width=local_width)
            classes[layer, h] = (c_text, c_alone)
            stats["distance_text"][layer, h] = s_text["mean_distance"]
            stats["distance_alone"][layer, h] = s_alone["mean_distance"]
            zooms[:, layer, h] = A[:, h, :zoom, :zoom]
            rows.append((layer, h, " + ".join(c_alone), " + ".join(c_text), stats["overlap"][layer, h],
                         stats["uniform"][layer, h], s_alone["mass_prev"], s_text["mass_prev"], s_alone["mass_first"],
                         s_text["mass_first"], s_alone["mean_distance"], s_text["mean_distance"], s_alone["entropy"],
                         s_text["entropy"]))

    patterns = [name for name in hook_names(shape) if name.endswith("attn.hook_pattern")]
    run_with_hooks(tensors, shape, np.stack([ids, ids]),
                   [("hook_embed", lambda rows, name: tokens), *((name, hook) for name in patterns)])
    O, U = stats["overlap"], stats["uniform"]
    keep = (O >= positional) & (O > U)
    same = np.array([[classes[layer, h][0] == classes[layer, h][1] for h in range(H)] for layer in range(L)])
    best = np.unravel_index(int(np.argmax(O)), O.shape)
    numbers = {
        "tokens": Number(n, "d", "tokens of the prompt"),
        "min_query": Number(min_query, "d", "queries i < min_query are left out"),
        "positional": Number(positional, ".2f", "overlap from which a head counts as staying positional"),
        "n_heads": Number(L * H, "d", "heads in all layers"),
        "n_positional": Number(int(keep.sum()), "d", "heads that stay positional: overlap ≥ the threshold and above "
                                                     "the overlap with equal attention"),
        "n_overlap_above": Number(int(np.sum(O >= positional)), "d", "heads with an overlap ≥ the threshold"),
        "positional_heads": Text(spoken_list(f"{layer}.{h}" for layer, h in zip(*np.nonzero(keep))),
                                 "those heads, as layer.head"),
        "n_positional_l0": Number(int(keep[0].sum()), "d", "of them in layer 0"),
        "overlap_median": Number(float(np.median(O)), ".2f", "median overlap over all heads"),
        "overlap_median_l0": Number(float(np.median(O[0])), ".2f", "median overlap in layer 0"),
        "overlap_median_later": Number(float(np.median(O[1:])) if L > 1 else float(np.median(O)), ".2f",
                                       "median overlap in layers ≥ 1"),
        "overlap_max": Number(float(O.max()), ".2f", "largest overlap of a head"),
        "overlap_max_head": Text(f"{best[0]}.{best[1]}", "that head, layer.head"),
        "overlap_min": Number(float(O.min()), ".2f", "smallest overlap of a head"),
        "overlap_min_head": Text("{}.{}".format(*np.unravel_index(int(np.argmin(O)), O.shape)), "that head, layer.head"),
        "zoom": Number(zoom, "d", "positions shown in the pattern figure"),
        "uniform_median": Number(float(np.median(U)), ".2f", "median overlap of the text pattern with equal attention"),
        "n_above_uniform": Number(int(np.sum(O > U)), "d", "heads closer to their position-only pattern than to equal attention"),
        "n_same_class": Number(int(same.sum()), "d", "heads with the same class on text and on position alone"),
        "distance_text_median": Number(float(np.median(stats["distance_text"])), ".0f",
                                       "median over heads of the mean attention distance |i − j| on text"),
        "distance_alone_median": Number(float(np.median(stats["distance_alone"])), ".0f",
                                        "the same on position alone"),
        "n_farther_on_text": Number(int(np.sum(stats["distance_text"] > stats["distance_alone"])), "d",
                                    "heads that attend farther on text than on position alone"),
        "n_same_class_l0": Number(int(same[0].sum()), "d", "of them in layer 0"),
        "layer0_check": Number(check["diff"], "sci1", "largest difference between layer 0's position-only patterns "
                                                      "here and as positional_attention computes them"),
    }
    for layer in range(L):
        numbers[f"overlap_median_layer{layer}"] = Number(float(np.median(O[layer])), ".2f",
                                                         f"median overlap in layer {layer}")
        numbers[f"n_positional_layer{layer}"] = Number(int(keep[layer].sum()), "d",
                                                       f"heads of layer {layer} that stay positional")
    table = Table(("layer", "head", "class (position alone)", "class (text)", "overlap", "overlap with equal",
                   "mass i−1 (alone)", "mass i−1 (text)", "mass 0 (alone)", "mass 0 (text)", "mean |i−j| (alone)",
                   "mean |i−j| (text)", "entropy (alone)", "entropy (text)"), tuple(rows),
                  formats={"overlap": ".2f", "overlap with equal": ".2f", "mass i−1 (alone)": ".2f",
                           "mass i−1 (text)": ".2f", "mass 0 (alone)": ".2f", "mass 0 (text)": ".2f",
                           "mean |i−j| (alone)": ".1f", "mean |i−j| (text)": ".1f", "entropy (alone)": ".2f",
                           "entropy (text)": ".2f"})
    order = np.argsort(O.ravel())
    shown_heads = [np.unravel_index(int(i), O.shape) for i in (*order[::-1][:2], *order[:2])]
    arrays = {"overlap": O, "uniform": U, "same": same, "zooms": zooms, "shown": np.array(shown_heads),
              "threshold": np.array(positional)}
    return Result(numbers, {"heads": table}, arrays)


def plot_overlap(result: Result, shape: ModelShape):
    """Overlap of every head's text pattern with its position-only pattern (dots: same class on both)."""
    O, same = result.arrays["overlap"], result.arrays["same"]
    L, H = O.shape
    fig, ax = plotting.subplots(figsize=(7.2, 0.36 * L + 1.6), layout="constrained")
    image = ax.imshow(O, cmap=plotting.SEQUENTIAL, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    for (layer, h), value in np.ndenumerate(O):
        ax.text(h, layer, f"{value:.2f}" + ("•" if same[layer, h] else ""), ha="center", va="center", fontsize=plotting.MIN_FONT,
                color="black" if value > 0.6 else "white")
    ax.set_xticks(range(H))
    ax.set_yticks(range(L))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    plotting.colorbar(fig, image, ax, "overlap with the position-only pattern")
    return fig


def plot_patterns(result: Result, shape: ModelShape):
    """The first positions of four heads, on text and on position alone: the two most and two least positional."""
    zooms, shown_heads, O = result.arrays["zooms"], result.arrays["shown"], result.arrays["overlap"]
    fig, axes = plotting.subplots(2, 4, figsize=(7.6, 4.2), layout="constrained")
    for c, (layer, h) in enumerate(shown_heads):
        for r, what in enumerate(("text", "position alone")):
            ax = axes[r, c]
            image = ax.imshow(np.clip(zooms[r, layer, h], 1e-3, 1), cmap=plotting.SEQUENTIAL, norm=_log_norm(1e-3),
                              interpolation="nearest")
            second = f"overlap {O[layer, h]:.2f}" if r == 0 else what
            ax.set_title(f"head {layer}.{h}{', text' if r == 0 else ''}\n{second}", fontsize=plotting.MIN_FONT)
            ax.set_xticks([])
            ax.set_yticks([])
    axes[1, 0].set_xlabel("key j")
    axes[1, 0].set_ylabel("query i")
    plotting.colorbar(fig, image, list(axes.ravel()), "attention weight (log)")
    return fig


register(
    "text_attention", "Attention on text against attention on position alone", text_attention,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS[-1], "min_query": 32, "key_mass": 0.2, "local_width": 32,
            "positional": 0.5, "zoom": 48},
    figures={"overlap": plot_overlap, "patterns": plot_patterns},
)


def _log_norm(vmin: float):
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    return LogNorm(vmin=vmin, vmax=1.0)
