"""How far each attention head's query-key map W_Q W_Kᵀ is from symmetric: the trace ratio
s = tr(M²) / ‖M‖²_F (1 for a symmetric M, −1 for an antisymmetric one), and the heads furthest from
symmetric in either direction, against random heads of the same shape."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape
from analyses.toolkit.attention import per_head
from analyses.toolkit.pvalues import draws_for

BATCH = 100
"""Gaussian pairs drawn at once (bounds memory: a pair at GPT-2's shape is 0.8 MB)."""


def qk_trace_ratio(W_Q: np.ndarray, W_K: np.ndarray) -> np.ndarray:
    """s = tr(M²)/‖M‖²_F of M = W_Q W_Kᵀ, for stacks [..., D, d] of per-head maps, from d × d products:
    ‖M‖² = tr(W_QᵀW_Q · W_KᵀW_K) and tr(M²) = tr((W_KᵀW_Q)²). The signed symmetry of M: ‖M_sym‖² − ‖M_anti‖²
    over their sum, +1 for a symmetric M, −1 for an antisymmetric one, about 1/D for independent Gaussian maps."""
    Q, K = np.asarray(W_Q, dtype=np.float64), np.asarray(W_K, dtype=np.float64)
    Qt, Kt = np.swapaxes(Q, -1, -2), np.swapaxes(K, -1, -2)
    KtQ = Kt @ Q
    norm2 = np.einsum("...ij,...ji->...", Qt @ Q, Kt @ K)
    return np.einsum("...ij,...ji->...", KtQ, KtQ) / norm2


def qk_antisymmetry(W_Q: np.ndarray, W_K: np.ndarray) -> np.ndarray:
    """a = ‖(M − Mᵀ)/2‖_F / ‖M‖_F of M = W_Q W_Kᵀ = √((1 − s)/2) with s = `qk_trace_ratio`, since
    ‖(M − Mᵀ)/2‖² = (‖M‖² − tr(M²))/2. 0 for a symmetric M, 1 for an antisymmetric one."""
    return np.sqrt(np.clip(1 - qk_trace_ratio(W_Q, W_K), 0.0, None) / 2)


def qk_distance(a: np.ndarray) -> np.ndarray:
    """The sources' distance d(M, Mᵀ) = ‖M − Mᵀ‖ / (‖M‖ + ‖Mᵀ‖ + ‖M − Mᵀ‖) = a/(1 + a), in [0, ½]."""
    return a / (1 + a)


def qk_symmetry(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_random: int, seed: int) -> Result:
    """Every head's full D × D query-key map M_h = W_Q^h W_K^hᵀ: the signed symmetry s = tr(M²)/‖M‖²_F
    (`qk_trace_ratio`) and the sources' d(M_h, M_hᵀ) = a/(1 + a) with a = √((1 − s)/2), against independent
    Gaussian W_Q, W_K of the same shape (s about 1/D), enough of them (`draws_for`) that a head beyond every pair,
    p = 1/(1 + N), is rejected by Holm's procedure over all L·H heads at the familywise level. d folds both tails of s into a narrow band near its null
    value; s shows which heads lean symmetric (s above every Gaussian draw) and which antisymmetric (below)."""
    L, H = shape.n_layers, shape.n_heads
    if n_random < draws_for(L * H):
        raise ValueError(f"{n_random} Gaussian pairs cannot make 'beyond every pair' a Holm rejection over {L * H} "
                         f"heads (need {draws_for(L * H)})")
    s = np.array([qk_trace_ratio(per_head(tensors, layer, "Q"), per_head(tensors, layer, "K")) for layer in range(L)])
    d = qk_distance(np.sqrt(np.clip(1 - s, 0.0, None) / 2))
    rng = np.random.default_rng(seed)
    random_s = np.concatenate([qk_trace_ratio(rng.standard_normal((n, shape.d_model, shape.d_head)),
                                              rng.standard_normal((n, shape.d_model, shape.d_head)))
                               for n in np.diff([*range(0, n_random, BATCH), n_random])])
    random_d = qk_distance(np.sqrt((1 - random_s) / 2))
    # heads as layer.head, most symmetric first (a stable sort: of equal values the first comes first, as argmin)
    ranked = [f"{layer}.{head}" for layer, head in zip(*np.unravel_index(np.argsort(d, axis=None, kind="stable"),
                                                                         d.shape))]
    high = np.unravel_index(d.argmax(), d.shape)
    tail = [(layer, head) for layer, head in zip(*np.nonzero(s < random_s.min()))]  # row-major: layer, then head
    null_mean, null_sd = float(random_s.mean()), float(random_s.std(ddof=1))
    numbers = {
        "n_heads": Number(L * H, "d", "heads compared"),
        "n_random": Number(n_random, "d", "Gaussian pairs (W_Q, W_K) of the same shape"),
        "n_random_needed": Number(draws_for(L * H), "d",
                                  "the fewest Gaussian pairs for which 'beyond every pair' (p = 1/(1 + N)) is a "
                                  "rejection by Holm's procedure over every head"),
        "d_median": Number(float(np.median(d)), ".3f", "median over heads of d(M_h, M_hᵀ)"),
        "d_q10": Number(float(np.quantile(d, 0.1)), ".3f", "10th percentile over heads of d(M_h, M_hᵀ)"),
        "d_min": Number(float(d.min()), ".3f", "smallest d(M_h, M_hᵀ): the most symmetric head"),
        "d_min_head": Text(ranked[0], "that head, layer.head"),
        "most_symmetric": Text(spoken_list(ranked[:5]),
                               "the five heads with the smallest d, most symmetric first (layer.head)"),
        "d_max": Number(float(d.max()), ".3f", "largest d(M_h, M_hᵀ): the least symmetric head"),
        "d_max_head": Text(f"{high[0]}.{high[1]}", "that head, layer.head"),
        "d_random_mean": Number(float(random_d.mean()), ".3f", "mean d of the Gaussian pairs"),
        "d_random_sd": Number(float(random_d.std(ddof=1)), ".1g", "standard deviation of d over the Gaussian pairs"),
        "d_random_min": Number(float(random_d.min()), ".3f", "smallest d of the Gaussian pairs"),
        "n_below_random": Number(int(np.count_nonzero(d < random_d.min())), "d",
                                 "heads more symmetric than every Gaussian pair"),
        "n_above_random": Number(int(np.count_nonzero(d > random_d.max())), "d",
                                 "heads less symmetric than every Gaussian pair (s below every draw)"),
        "s_median": Number(float(np.median(s)), ".3f", "median over heads of s = tr(M_h²)/‖M_h‖²_F"),
        "s_max": Number(float(s.max()), ".3f", "largest s: the most symmetric head"),
        "s_min": Number(float(s.min()), ".3f", "smallest s: the most antisymmetric head (d_max_head)"),
        "s_min_z": Number((float(s.min()) - null_mean) / null_sd, ".0f",
                          "smallest s in standard deviations of the Gaussian pairs' s from their mean"),
        "s_random_mean": Number(null_mean, ".4f", "mean s of the Gaussian pairs (about 1/D)"),
        "s_random_sd": Number(null_sd, ".4f", "standard deviation of s over the Gaussian pairs"),
        "s_random_min": Number(float(random_s.min()), ".4f", "smallest s of the Gaussian pairs"),
        "s_random_max": Number(float(random_s.max()), ".4f", "largest s of the Gaussian pairs"),
        "antisymmetric_heads": Text(spoken_list(f"{layer}.{head}" for layer, head in tail),
                                    "heads with s below every Gaussian pair (layer.head)"),
        "layer0_antisymmetric": Text(spoken_list(f"{head} (s = {s[0, head]:.3f})" for layer, head in tail
                                                 if layer == 0),
                                     "layer-0 heads with s below every Gaussian pair, with their s"),
        "layer0_symmetric": Text(spoken_list(f"{head} (s = {s[0, head]:.3f})" for head in np.nonzero(s[0] > 0.5)[0]),
                                 "layer-0 heads with s above ½ (the symmetric part holds over three quarters of ‖M‖²)"),
    }
    H_columns = tuple(f"head {h}" for h in range(H))
    distances = Table(("layer", *H_columns), tuple((layer, *d[layer]) for layer in range(L)),
                      formats={c: ".3f" for c in H_columns})
    signed = Table(("layer", *H_columns), tuple((layer, *s[layer]) for layer in range(L)),
                   formats={c: ".3f" for c in H_columns})
    return Result(numbers, {"distances": distances, "trace_ratio": signed}, {"d": d, "random_d": random_d, "s": s})


register(
    "qk_symmetry", "How far each head's query-key map is from symmetric", qk_symmetry,
    needs=("blocks.*.attn.W_Q", "blocks.*.attn.W_K"), params={"n_random": 2879, "seed": 0},  # draws_for(144): GPT-2's and GPT-1's 144 heads
)
