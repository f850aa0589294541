"""A causal test: P's top-3 principal subspace removed from the position embeddings."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text
from analyses.engine.sources import ModelShape
from analyses.forward_pass.prompts import (FAMILY_NEEDS, LIBRARIES, NEEDS, PROMPT_WORDS, content_rows, prompt_ids,
                                           state_labels)
from analyses.toolkit import plotting
from analyses.toolkit.attention import query_rows
from analyses.toolkit.forward import hook_layer, hook_names, mean_pool, run_with_hooks
from analyses.toolkit.linalg import top_right_singular_vectors
from analyses.toolkit.signal import mean_angle, signal_subspace
from analyses.toolkit.subspaces import random_basis
from analyses.toolkit.text import sentences


def ablate(P: np.ndarray, basis: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
    """P − (P B) Tᵀ with T = B by default: the component of every row in span B removed. With T another
    orthonormal basis of the same dimension, the same change per row (‖p_n B‖) moved into span T: the control."""
    P = np.asarray(P, dtype=np.float64)
    basis = np.asarray(basis, dtype=np.float64)
    target = basis if target is None else np.asarray(target, dtype=np.float64)
    return P - (P @ basis) @ target.T


def padded(batch_ids: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of several sequences padded (with 0) to a common length, and the mask of the real tokens."""
    n = max(len(ids) for ids in batch_ids)
    out, mask = np.zeros((len(batch_ids), n), dtype=np.int64), np.zeros((len(batch_ids), n), dtype=bool)
    for i, ids in enumerate(batch_ids):
        out[i, :len(ids)], mask[i, :len(ids)] = ids, True
    return out, mask


def sentence_embeddings(tensors: Mapping[str, np.ndarray], shape: ModelShape, docs: list[np.ndarray],
                        tables: list[np.ndarray], n_buckets: int = 3) -> np.ndarray:
    """Mean-pooled, normalised sentence embeddings [len(tables), len(docs), D] of every document under every
    position table; documents run in batches of similar length (padding changes nothing: padded keys get
    no attention and padded rows are not pooled)."""
    order = np.argsort([len(d) for d in docs], kind="stable")
    out = np.zeros((len(tables), len(docs), shape.d_model))
    for bucket in np.array_split(order, min(n_buckets, len(docs))):
        ids, mask = padded([docs[i] for i in bucket])
        n = ids.shape[1]
        batch = np.concatenate([ids] * len(tables))
        masks = np.concatenate([mask] * len(tables))
        positions = np.concatenate([np.broadcast_to(P[:n], (len(bucket), n, shape.d_model)) for P in tables])
        last = run_with_hooks(tensors, shape, batch, [("hook_pos_embed", lambda rows, name: positions)],
                              key_mask=masks).hidden[-1]
        out[:, bucket] = mean_pool(last, masks).reshape(len(tables), len(bucket), -1)
    return out


def position_ablation(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, prompt_words: int, k: int,
                      n_random: int, seed: int, min_query: int, sentence_stride: int) -> Result:
    """Forward passes with P replaced by P − (P B_k) B_kᵀ (B_k: P's top-k right singular vectors, uncentred) and, as
    controls, by P − (P B_k) R_sᵀ for uniformly random k-dimensional bases R_s (the same change at every position,
    in a random subspace). Against the unablated pass: per head, the total-variation distance of the attention
    rows, mean_i ½ Σ_j |A_ij − A'_ij|, and its ratio to the controls' mean; per state, 1 − cos(h_n, h'_n) averaged
    over the content rows and the average principal angle between the two signal subspaces; for BERT, the cosine of
    each sentence embedding (and of the prompt's own) to the unablated one, and whether it is still nearest to its
    own sentence."""
    rng = np.random.default_rng(seed)
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    B = top_right_singular_vectors(P, k)
    tables = [P, ablate(P, B), *(ablate(P, B, random_basis(shape.d_model, k, rng)) for _ in range(n_random))]
    n_conditions = len(tables)  # unablated, top-k removed, random controls
    ids = prompt_ids(tensors, shape, prompt_words)
    n, L, H = len(ids), shape.n_layers, shape.n_heads
    causal = shape.family == "gpt2"
    queries = query_rows(n, causal, min(min_query, n // 3))
    rows = content_rows(n, shape)
    batch = np.stack([ids] * n_conditions)
    positions = np.stack([T[:n] for T in tables])
    tv = np.zeros((n_conditions - 1, L, H))

    def hook(A: np.ndarray, name: str) -> None:
        q = A[:, :, queries]
        tv[:, hook_layer(name)] = 0.5 * np.abs(q[1:] - q[0]).sum(axis=-1).mean(axis=-1)

    patterns = [(name, hook) for name in hook_names(shape) if name.endswith("attn.hook_pattern")]
    hidden = run_with_hooks(tensors, shape, batch, [("hook_pos_embed", lambda rows, name: positions), *patterns]).hidden
    states = hidden.shape[0]
    pooled = mean_pool(hidden[-1])  # the prompt itself as one document (BERT's sentence embedding)
    prompt_cos = pooled[1:] @ pooled[0]
    h0 = hidden[:, 0]
    cos = np.einsum("sbnd,snd->sbn", hidden[:, 1:], h0) / (
        np.linalg.norm(hidden[:, 1:], axis=-1) * np.linalg.norm(h0, axis=-1)[:, None])
    distance = 1 - cos[:, :, rows].mean(axis=-1)  # [states, conditions − 1]
    input_change = (np.linalg.norm(hidden[0, 1:] - h0[0], axis=-1)
                    / np.linalg.norm(h0[0], axis=-1))[:, rows].mean(axis=-1)
    base = [signal_subspace(h0[s]).basis for s in range(states)]
    angle = np.full((states, n_conditions - 1), np.nan)
    for s in range(states):
        for c in range(1, n_conditions):
            other = signal_subspace(hidden[s, c]).basis
            if base[s].shape[1] and other.shape[1]:
                angle[s, c - 1] = mean_angle(base[s], other)
    removed = float(np.sum((P @ B) ** 2) / np.sum(P**2))
    tv_layer = tv.mean(axis=2)  # [conditions − 1, L]
    controls = slice(1, None)
    ratio = tv[0] / tv[controls].mean(axis=0)  # [L, H]
    ranked = np.argsort(-ratio.ravel(), kind="stable")
    head = lambda i: "{}.{}".format(*np.unravel_index(int(i), ratio.shape))  # noqa: E731
    numbers = {
        "k": Number(k, "d", "dimension of the removed subspace"),
        "n_random": Number(n_random, "d", "random control subspaces (seeds)"),
        "tokens": Number(n, "d", "tokens of the prompt"),
        "energy_removed": Number(removed, ".1%", "share of ‖P‖²_F in P's top-k subspace (what the ablation removes)"),
        "input_change_top": Number(input_change[0], ".1%", "mean relative change of the state after the embeddings, top-k removed"),
        "input_change_random": Number(input_change[controls].mean(), ".1%", "the same, random controls (mean)"),
        "tv_top": Number(tv[0].mean(), ".3f", "mean total-variation change of the attention rows, all heads, top-k removed"),
        "tv_random": Number(tv[controls].mean(), ".3f", "the same, random controls (mean over seeds)"),
        "tv_random_max": Number(tv[controls].mean(axis=(1, 2)).max(), ".3f", "the largest control seed's mean"),
        "tv_ratio": Number(tv[0].mean() / tv[controls].mean(), ".1f", "top-k change over the controls' mean change"),
        "tv_top_l0": Number(tv_layer[0, 0], ".3f", "layer 0's mean change, top-k removed"),
        "tv_random_l0": Number(tv_layer[controls, 0].mean(), ".3f", "layer 0's mean change, controls"),
        "tv_top_max": Number(tv[0].max(), ".3f", "largest change of one head, top-k removed"),
        "tv_top_max_head": Text(head(np.argmax(tv[0])), "that head"),
        "head_ratio_median": Number(float(np.median(ratio)), ".1f", "median over heads of the change over the controls' mean"),
        "head_ratio_max": Number(float(ratio.ravel()[ranked[0]]), ".1f", "largest such ratio of a head"),
        "head_ratio_max_head": Text(head(ranked[0]), "that head"),
        "head_ratio_max_tv": Number(float(tv[0].ravel()[ranked[0]]), ".2f", "its change, top-k removed"),
        "head_ratio_max_tv_random": Number(float(tv[controls].mean(axis=0).ravel()[ranked[0]]), ".3f",
                                           "its change under the controls (mean)"),
        "head_ratio_second": Number(float(ratio.ravel()[ranked[1]]), ".1f", "second largest ratio"),
        "head_ratio_second_head": Text(head(ranked[1]), "that head"),
        "head_ratio_third": Number(float(ratio.ravel()[ranked[2]]), ".1f", "third largest ratio"),
        "head_ratio_third_head": Text(head(ranked[2]), "that head"),
        "n_heads_above_controls": Number(int(np.sum(tv[0] > tv[controls].max(axis=0))), "d",
                                         "heads changed more by the ablation than by every control"),
        "n_heads": Number(L * H, "d", "heads"),
        "cos_distance_top_last": Number(distance[-1, 0], ".3f", "1 − cos after the last layer, top-k removed"),
        "cos_distance_random_last": Number(distance[-1, controls].mean(), ".3f", "the same, controls (mean)"),
        "cos_distance_top_max": Number(distance[:, 0].max(), ".3f", "largest 1 − cos over the states, top-k removed"),
        "cos_distance_top_max_state": Text(state_labels(L)[int(np.argmax(distance[:, 0]))], "that state"),
        "cos_distance_random_max": Number(distance[:, controls].mean(axis=1).max(), ".3f",
                                          "largest mean 1 − cos of the controls over the states"),
    }
    if np.isfinite(angle[:, 0]).any():
        numbers |= {
            "angle_top_max": Number(float(np.nanmax(angle[:, 0])), ".1f",
                                    "largest average principal angle between ablated and unablated signal subspaces"),
            "angle_random_max": Number(float(np.nanmax(np.nanmean(angle[:, controls], axis=1))), ".1f",
                                       "the same, controls (mean over seeds, largest over states)"),
        }
    arrays = {"tv": tv, "distance": distance, "angle": angle, "ratio": ratio, "labels": np.array(state_labels(L))}
    if shape.family == "bert":
        docs = [tensors.tokenize(s, special_tokens=True) for s in sentences()[::sentence_stride]]
        emb = sentence_embeddings(tensors, shape, docs, tables)
        cos_doc = np.einsum("cnd,nd->cn", emb[1:], emb[0])  # [conditions − 1, docs]
        nearest = np.argmax(np.einsum("cnd,md->cnm", emb[1:], emb[0]), axis=2) == np.arange(len(docs))
        across = emb[0] @ emb[0].T
        numbers |= {
            "n_sentences": Number(len(docs), "d", "sentences embedded (every `sentence_stride`-th of the text)"),
            "sentence_stride": Number(sentence_stride, "d", "every how many sentences one is embedded"),
            "sentence_cos_top_mean": Number(cos_doc[0].mean(), ".3f", "mean cosine of ablated to unablated sentence embeddings"),
            "sentence_cos_top_min": Number(cos_doc[0].min(), ".3f", "smallest such cosine"),
            "sentence_cos_random_mean": Number(cos_doc[controls].mean(), ".3f", "mean cosine under the controls"),
            "sentence_cos_random_min": Number(cos_doc[controls].min(), ".3f", "smallest cosine under any control"),
            "sentence_nearest_top": Number(nearest[0].mean(), ".0%", "ablated embeddings nearest to their own sentence"),
            "sentence_nearest_random": Number(nearest[controls].mean(), ".0%", "the same under the controls"),
            "prompt_cos_top": Number(prompt_cos[0], ".4f", "the prompt's own sentence embedding: cosine, top-k removed"),
            "prompt_cos_random": Number(prompt_cos[controls].mean(), ".4f", "the same, controls (mean)"),
            "sentence_cos_between_median": Number(float(np.median(across[np.triu_indices(len(docs), 1)])), ".3f",
                                                  "median cosine between different sentences (unablated)"),
        }
        arrays["sentence_cos"] = cos_doc
    table_rows = [(label, distance[s, 0], distance[s, controls].mean(), angle[s, 0], np.nanmean(angle[s, controls])
                   if np.isfinite(angle[s, controls]).any() else float("nan"),
                   *((tv_layer[0, s - 1], tv_layer[controls, s - 1].mean()) if s else (float("nan"),) * 2))
                  for s, label in enumerate(state_labels(L))]
    table = Table(("after", "1 − cos, top-k removed", "1 − cos, random", "angle (°), top-k removed", "angle (°), random",
                   "attention change, top-k removed", "attention change, random"), tuple(table_rows),
                  formats={"1 − cos, top-k removed": ".4f", "1 − cos, random": ".4f", "angle (°), top-k removed": ".1f",
                           "angle (°), random": ".1f", "attention change, top-k removed": ".3f",
                           "attention change, random": ".3f"})
    return Result(numbers, {"effects": table}, arrays)


def plot_effects(result: Result, shape: ModelShape):
    """Top: attention change per layer, 1 − cos and the signal-subspace angle per state, top-k removed (red) against
    the controls (grey). Bottom: each head's change over the controls' mean; for BERT, the sentence embeddings."""
    a = result.arrays
    tv, distance, angle = a["tv"].mean(axis=2), a["distance"], a["angle"]
    states = np.arange(distance.shape[0])
    fig, axes = plotting.pyplot().subplot_mosaic([["tv", "cos", "angle"], ["ratio", "ratio", "sentences"]],
                                                 figsize=(7.8, 5.6), layout="constrained")
    k = result.numbers["k"].text
    state_ticks = ["E", *range(len(states) - 1)]
    panels = (("tv", np.arange(tv.shape[1]), tv.T, "attention change (TV)", list(range(tv.shape[1])), "layer"),
              ("cos", states, distance, "1 − cos(h, h′)", state_ticks, "state (E: embeddings)"),
              ("angle", states, angle, "signal-subspace angle (°)", state_ticks, "state (E: embeddings)"))
    for key, x, values, ylabel, ticks, xlabel in panels:
        ax = axes[key]
        for c in range(1, values.shape[1]):
            ax.plot(x, values[:, c], color="0.6", lw=0.8, label="random controls" if c == 1 else None)
        ax.plot(x, values[:, 0], "o-", color="C3", ms=3, label=f"top-{k} removed")
        ax.set_xticks(x, ticks, fontsize=8)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
    axes["tv"].legend(fontsize=plotting.MIN_FONT, loc="best")
    ratio = a["ratio"]
    ax = axes["ratio"]
    image = ax.imshow(ratio, cmap=plotting.DIVERGING, aspect="auto", interpolation="nearest",
                      norm=_log_norm_around_one(ratio))
    for (layer, h), value in np.ndenumerate(ratio):
        ax.text(h, layer, f"{value:.1f}", ha="center", va="center", fontsize=plotting.MIN_FONT,
                color="white" if abs(np.log(value)) > 0.6 * np.log(_log_norm_around_one(ratio).vmax) else "black")
    ax.set_xticks(range(ratio.shape[1]))
    ax.set_yticks(range(ratio.shape[0]))
    ax.set_xlabel("head", fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    ax.set_title("each head: change / controls' mean", fontsize=8)
    ax = axes["sentences"]
    if "sentence_cos" in a:
        cos = a["sentence_cos"]
        x = np.arange(1, cos.shape[1] + 1)
        for c in range(1, cos.shape[0]):
            ax.plot(x, 1 - cos[c], ".", color="0.6", ms=3, label="random controls" if c == 1 else None)
        ax.plot(x, 1 - cos[0], "o", color="C3", ms=3, label=f"top-{k} removed")
        ax.set_xlabel("sentence", fontsize=8)
        ax.set_ylabel("1 − cos to the unablated", fontsize=8)
        ax.set_ylim(0, None)
        ax.set_title("sentence embeddings", fontsize=8)
    else:
        ax.axis("off")
    return fig


def _log_norm_around_one(values: np.ndarray):
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    top = float(np.exp(np.abs(np.log(np.clip(values, 1e-12, None))).max()))
    return LogNorm(vmin=1 / top, vmax=top)


register(
    "position_ablation", "A causal test: P's top-3 subspace removed", position_ablation,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS[1], "k": 3, "n_random": 4, "seed": 0, "min_query": 32, "sentence_stride": 3},
    figures={"effects": plot_effects},
)
