"""Is the rotation of layer 0's query–key forms on the helix more than any three directions would show?

Each layer-0 head's QK form on P's top k right-singular directions B, M = Bᵀ diag(γ) W_Q W_Kᵀ diag(γ) B / √d_head
(`toolkit.attention.qk_form`, as in `positional_qk`), has an antisymmetric share a = ‖(M − Mᵀ)/2‖_F / ‖M‖_F.
Null, per head: the same head's form on random orthonormal k-frames (Gaussian D × k, QR), which keeps the head
and the size of the frame and drops what is special about P's directions. p = (1 + #{frames with a ≥ observed}) /
(1 + N), and the heads that exceed their null are those Holm's procedure rejects over the heads of the layer at the
report's familywise rate (`toolkit.pvalues`).

Intervention, per head: the attention pattern of the position rows alone with the antisymmetric part of the top-k
form taken out of the scores, S − C (M − Mᵀ)/2 Cᵀ (C the coordinates of the standardised rows on B), against the
pattern with it, in the statistics that classify heads (`toolkit.attention.head_statistics`): the mean attention on
the current key and the mean distance attended.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit.attention import attention_pattern, head_scores, head_statistics, position_inputs, qk_form, query_rows
from analyses.toolkit.linalg import top_right_singular_vectors
from analyses.toolkit.pvalues import FAMILYWISE_ALPHA, holm, p_value_text
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape

NEEDS = ("W_pos", "blocks.0.attn.W_Q", "blocks.0.attn.W_K", "blocks.0.attn.b_Q", "blocks.0.attn.b_K")
MIN_MASS = 0.01
"""Heads whose mean attention on the current key is below this get no cited ratio of that attention."""
FAMILY_NEEDS = {"gpt2": ("blocks.0.ln1.w", "blocks.0.ln1.b"), "bert": ("W_token_type", "embed.ln.w", "embed.ln.b")}


def antisymmetric_share(M: np.ndarray) -> np.ndarray:
    """‖(M − Mᵀ)/2‖_F / ‖M‖_F for a square matrix or a stack of them."""
    M = np.asarray(M, dtype=np.float64)
    return np.linalg.norm((M - np.swapaxes(M, -1, -2)) / 2, axis=(-2, -1)) / np.linalg.norm(M, axis=(-2, -1))


def random_frames(d: int, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n random orthonormal d × k frames (QR of Gaussian matrices, signs fixed by R's diagonal: Haar-distributed)."""
    Q, R = np.linalg.qr(rng.standard_normal((n, d, k)))
    return Q * np.sign(np.diagonal(R, axis1=-2, axis2=-1))[:, None, :]


def frame_null(W_Q: np.ndarray, W_K: np.ndarray, gain: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """The head's antisymmetric share on each of the frames [n, D, k]."""
    left = np.swapaxes(frames, -1, -2) @ (gain[:, None] * np.asarray(W_Q, dtype=np.float64))
    right = np.swapaxes(frames, -1, -2) @ (gain[:, None] * np.asarray(W_K, dtype=np.float64))
    return antisymmetric_share(left @ np.swapaxes(right, -1, -2))


def frame_test(tensors: Mapping[str, np.ndarray], shape: ModelShape, k: int, n_frames: int, seed: int,
               min_query: int) -> tuple[list[float], list[np.ndarray], list[float], list[tuple[dict, dict]]]:
    """(shares, nulls, p-values, (pattern statistics with, without the antisymmetric part)) per layer-0 head, on
    P's top k directions against n_frames random k-frames."""
    causal = shape.family == "gpt2"
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    basis = top_right_singular_vectors(P, k)
    z, gain, bias = position_inputs(tensors, shape)
    X, coords = z * gain + bias, z @ basis
    queries = query_rows(shape.n_ctx, causal, min_query)
    frames = random_frames(P.shape[1], k, n_frames, np.random.default_rng(seed))
    W_Q, W_K = tensors["blocks.0.attn.W_Q"], tensors["blocks.0.attn.W_K"]
    b_Q, b_K = tensors["blocks.0.attn.b_Q"], tensors["blocks.0.attn.b_K"]
    shares, nulls, p_values, effects = [], [], [], []
    for head in range(shape.n_heads):
        M = qk_form(W_Q[head], W_K[head], gain, basis)
        share = float(antisymmetric_share(M))
        null = frame_null(W_Q[head], W_K[head], gain, frames)
        shares.append(share)
        nulls.append(null)
        p_values.append(float((1 + np.count_nonzero(null >= share)) / (1 + n_frames)))
        S = head_scores(X, W_Q[head], b_Q[head], W_K[head], b_K[head])
        effects.append((head_statistics(attention_pattern(S, causal), queries),
                        head_statistics(attention_pattern(S - coords @ ((M - M.T) / 2) @ coords.T, causal), queries)))
    return shares, nulls, p_values, effects


def qk_rotation_null(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_components: int, n_frames: int,
                     seed: int, min_query: int, other_sizes: tuple[int, ...]) -> Result:
    """Each layer-0 head's antisymmetric share on P's top directions against random frames, and the attention
    pattern without the antisymmetric part; the same for frames of `other_sizes` directions."""
    shares, nulls, p_values, effects = frame_test(tensors, shape, n_components, n_frames, seed, min_query)
    exceeds = holm(p_values)
    rows = tuple((head, shares[head], float(np.quantile(nulls[head], 0.95)),
                  p_value_text(p_values[head], n_frames).removeprefix("p = ").removeprefix("p "),
                  "yes" if exceeds[head] else "no",
                  effects[head][0]["mass_self"], effects[head][1]["mass_self"],
                  effects[head][0]["mean_distance"], effects[head][1]["mean_distance"])
                 for head in range(shape.n_heads))
    table = Table(("head", "antisymmetric share", "random frames, 95th pct.", "p", "exceeds (Holm)",
                   "current key", "current key, symmetric only", "distance", "distance, symmetric only"), rows,
                  formats={"antisymmetric share": ".2f", "random frames, 95th pct.": ".2f", "current key": ".2f",
                           "current key, symmetric only": ".2f", "distance": ".1f",
                           "distance, symmetric only": ".1f"})
    exceeding = [h for h in range(shape.n_heads) if exceeds[h]]
    numbers = {
        "n_frames": Number(n_frames, "d", "random orthonormal frames per head"),
        "seed": Number(seed, "d", "seed of the random frames"),
        "alpha": Number(FAMILYWISE_ALPHA, ".2f", "familywise error rate of Holm's procedure over the heads"),
        "n_heads": Number(shape.n_heads, "d", "heads tested"),
        "n_exceed": Number(len(exceeding), "d", "heads whose antisymmetric share exceeds their null (Holm)"),
        "heads_exceed": Text(spoken_list(str(h) for h in exceeding) if exceeding else "none",
                             "those heads"),
        "heads_not_exceed": Text(spoken_list(str(h) for h in range(shape.n_heads) if not exceeds[h]) or "none",
                                 "the other heads"),
    }
    for head in range(shape.n_heads):
        before, after = effects[head]
        numbers |= {
            f"head{head}_antisymmetric": Number(shares[head], ".2f", f"head {head}: antisymmetric share on P's frame"),
            f"head{head}_null_median": Number(float(np.median(nulls[head])), ".2f",
                                              f"head {head}: median antisymmetric share on random frames"),
            f"head{head}_null_q95": Number(float(np.quantile(nulls[head], 0.95)), ".2f",
                                           f"head {head}: 95th percentile on random frames"),
            f"head{head}_p": Text(p_value_text(p_values[head], n_frames), f"head {head}: p against random frames"),
            f"head{head}_mass_self": Number(before["mass_self"], ".2f", f"head {head}: mean attention on the current key"),
            f"head{head}_mass_self_symmetric": Number(after["mass_self"], ".2f",
                                                      f"head {head}: the same without the antisymmetric part"),
            f"head{head}_distance": Number(before["mean_distance"], ".1f", f"head {head}: mean distance attended"),
            f"head{head}_distance_symmetric": Number(after["mean_distance"], ".1f",
                                                     f"head {head}: the same without the antisymmetric part"),
        }
    for k in other_sizes:
        k_shares, _, k_p, k_effects = frame_test(tensors, shape, k, n_frames, seed, min_query)
        k_exceeds = holm(k_p)
        numbers[f"k{k}_n_exceed"] = Number(sum(k_exceeds), "d", f"heads exceeding their null on {k} directions")
        numbers[f"k{k}_heads_exceed"] = Text(spoken_list(str(h) for h in range(shape.n_heads) if k_exceeds[h]) or "none",
                                             f"heads exceeding their null (Holm) on frames of {k} directions")
        for head in range(shape.n_heads):
            if k_effects[head][0]["mass_self"] < MIN_MASS:
                continue  # a ratio of two near-zero masses fixes no digit
            numbers[f"k{k}_head{head}_mass_self_ratio"] = Number(
                k_effects[head][1]["mass_self"] / k_effects[head][0]["mass_self"], ".2f",
                f"head {head}, {k} directions: attention on the current key without the antisymmetric part / with it")
    numbers["other_sizes"] = Text(spoken_list(str(k) for k in other_sizes), "other frame sizes tried")
    return Result(numbers, {"heads": table}, {"shares": np.array(shares), "nulls": np.array(nulls)})


register(
    "qk_rotation_null", "Layer-0 QK rotations against random frames, and without them", qk_rotation_null,
    needs=NEEDS, family_needs=FAMILY_NEEDS,
    params={"n_components": 3, "n_frames": 999, "seed": 0, "min_query": 32, "other_sizes": (2, 4, 6)},
)
