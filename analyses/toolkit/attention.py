"""Attention read from the weights: per-head and full Q, K, V, O matrices, the LayerNorm gain in front of a
layer, score patterns and the statistics and classes of a head's pattern."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit.shape import Shape


def per_head(tensors: Mapping[str, np.ndarray], layer: int, kind: str) -> np.ndarray:
    """W_kind of one layer in float64: [n_heads, D, d_head] for Q, K, V; [n_heads, d_head, D] for O."""
    return np.asarray(tensors[f"blocks.{layer}.attn.W_{kind}"], dtype=np.float64)


def full_matrix(tensors: Mapping[str, np.ndarray], layer: int, kind: str) -> np.ndarray:
    """The D × D map of one layer in the x @ W layout (input rows, output columns), float64."""
    W = per_head(tensors, layer, kind)
    if kind == "O":
        return W.reshape(-1, W.shape[-1])
    return W.transpose(1, 0, 2).reshape(W.shape[1], -1)


def input_gain(tensors: Mapping[str, np.ndarray], shape: Shape, layer: int) -> np.ndarray:
    """The LayerNorm gain γ applied to the residual stream just before layer `layer`'s attention reads it.

    GPT-2 (pre-LN): that layer's ln1. BERT (post-LN): the embedding LayerNorm for layer 0, else the
    previous layer's ln2 (the stream a BERT layer reads is the previous layer's normalised output).
    """
    if shape.family == "gpt2":
        name = f"blocks.{layer}.ln1.w"
    else:
        name = "embed.ln.w" if layer == 0 else f"blocks.{layer - 1}.ln2.w"
    return np.asarray(tensors[name], dtype=np.float64)


VARIANTS = (("Q", "raw"), ("K", "raw"), ("V", "raw"), ("Q", "γ-folded"), ("K", "γ-folded"), ("V", "γ-folded"),
            ("O", "output"))
"""Columns of the alignment heatmap: raw input side, input side with the LayerNorm gain folded in, W_O's output."""


def column_label(kind: str, variant: str) -> str:
    return {"raw": f"W_{kind}", "γ-folded": f"diag(γ)W_{kind}", "output": f"W_{kind} (writes)"}[variant]


def variant_matrix(tensors: Mapping[str, np.ndarray], layer: int, kind: str, variant: str,
                   gain: np.ndarray) -> tuple[np.ndarray, str]:
    """The D × D matrix one column of VARIANTS reads (diag(γ) W for "γ-folded", with γ the layer's input
    gain) and the side, "input" or "output", whose energy it is measured on."""
    W = full_matrix(tensors, layer, kind)
    if variant == "γ-folded":
        W = gain[:, None] * W
    return W, "output" if variant == "output" else "input"


CLASSES = ("previous-token", "current-token", "first-position", "local window", "diffuse")


def standardise(X: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm without gain and bias: each row minus its mean, divided by sqrt(its variance + eps)."""
    X = np.asarray(X, dtype=np.float64)
    centred = X - X.mean(axis=1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(axis=1, keepdims=True) + eps)


def position_inputs(tensors: Mapping[str, np.ndarray], shape: Shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z, γ, β): the standardised position rows layer 0 reads, and the gain and bias of that LayerNorm."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    if shape.family == "gpt2":
        rows, ln = P, "blocks.0.ln1"
    else:
        rows, ln = P + np.asarray(tensors["W_token_type"][0], dtype=np.float64), "embed.ln"
    gain = np.asarray(tensors[f"{ln}.w"], dtype=np.float64)
    bias = np.asarray(tensors[f"{ln}.b"], dtype=np.float64)
    return standardise(rows, shape.ln_eps), gain, bias


def head_scores(X: np.ndarray, W_Q: np.ndarray, b_Q: np.ndarray, W_K: np.ndarray, b_K: np.ndarray) -> np.ndarray:
    """S_ij = (x_i W_Q + b_Q) · (x_j W_K + b_K) / √d_head for one head."""
    q = X @ np.asarray(W_Q, dtype=np.float64) + np.asarray(b_Q, dtype=np.float64)
    k = X @ np.asarray(W_K, dtype=np.float64) + np.asarray(b_K, dtype=np.float64)
    return q @ k.T / np.sqrt(q.shape[1])


def qk_form(W_Q: np.ndarray, W_K: np.ndarray, gain: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """M = Bᵀ diag(γ) W_Q W_Kᵀ diag(γ) B / √d_head for one head."""
    left = basis.T @ (gain[:, None] * np.asarray(W_Q, dtype=np.float64))
    right = basis.T @ (gain[:, None] * np.asarray(W_K, dtype=np.float64))
    return left @ right.T / np.sqrt(left.shape[1])


def antisymmetric_share(M: np.ndarray) -> np.ndarray:
    """‖(M − Mᵀ)/2‖_F / ‖M‖_F for a square matrix or a stack of them: the share of a query-key form that rotates
    (1 for a pure rotation generator, 0 for a symmetric form)."""
    M = np.asarray(M, dtype=np.float64)
    return np.linalg.norm((M - np.swapaxes(M, -1, -2)) / 2, axis=(-2, -1)) / np.linalg.norm(M, axis=(-2, -1))


def attention_pattern(S: np.ndarray, causal: bool) -> np.ndarray:
    """Row-wise softmax of S, keys j > i excluded when `causal`."""
    S = np.array(S, dtype=np.float64)
    if causal:
        S[np.triu_indices(S.shape[0], k=1)] = -np.inf
    S -= S.max(axis=1, keepdims=True)
    A = np.exp(S)
    return A / A.sum(axis=1, keepdims=True)


def query_rows(n: int, causal: bool, min_query: int) -> np.ndarray:
    """Queries averaged over: far enough from the edges that a window of `min_query` keys fits."""
    return np.arange(min_query, n) if causal else np.arange(min_query, n - min_query)


def head_statistics(A: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    """Summary of one pattern over the given queries.

    prev_mode / self_mode / first_mode: fraction of queries whose single most-attended key (a tie counts
    for none) is i − 1 / i / position 0;
    mass_*: mean attention on the query itself, the previous key, position 0;
    half_width: smallest w such that on average half the mass lies within |i − j| ≤ w;
    mean_distance: attention-weighted mean |i − j|; entropy: mean entropy in nats.
    """
    n = A.shape[0]
    rows = A[queries]
    two = np.partition(rows, -2, axis=1)[:, -2:]
    top = np.where(two[:, 1] > two[:, 0], rows.argmax(axis=1), -1)  # -1: no single most-attended key (a tie)
    distance = np.abs(queries[:, None] - np.arange(n)[None, :])
    flat = (np.arange(len(queries))[:, None] * n + distance).ravel()
    by_distance = np.bincount(flat, weights=rows.ravel(), minlength=len(queries) * n).reshape(len(queries), n)
    within = np.cumsum(by_distance, axis=1).mean(axis=0)
    safe = np.where(rows > 0, rows, 1.0)
    return {
        "prev_mode": float(np.mean(top == queries - 1)),
        "self_mode": float(np.mean(top == queries)),
        "first_mode": float(np.mean(top == 0)),
        "mass_self": float(rows[np.arange(len(queries)), queries].mean()),
        "mass_prev": float(rows[np.arange(len(queries)), queries - 1].mean()),
        "mass_first": float(rows[:, 0].mean()),
        "half_width": int(np.searchsorted(within, 0.5 - 1e-12)),
        "mean_distance": float((rows * distance).sum(axis=1).mean()),
        "entropy": float(-(rows * np.log(safe)).sum(axis=1).mean()),
    }


KEY_CLASSES = (("current-token", "mass_self"), ("previous-token", "mass_prev"), ("first-position", "mass_first"))
"""The classes defined by the mean attention on one key, and the statistic each reads."""


def classify(stats: Mapping[str, float], *, key_mass: float, local_width: int) -> tuple[str, ...]:
    """The classes of a head, by thresholds on its mean attention masses.

    It is a current-token, previous-token and/or first-position head for every one of the keys i, i − 1
    and 0 that holds on average at least `key_mass` of its attention (several can apply: a head may split
    its attention between the query and the previous position). A head with none of these is a local
    window head when half its attention lies within `local_width` tokens of the query, and diffuse otherwise.
    """
    labels = tuple(label for label, key in KEY_CLASSES if stats[key] >= key_mass)
    if labels:
        return labels
    return ("local window",) if stats["half_width"] <= local_width else ("diffuse",)
