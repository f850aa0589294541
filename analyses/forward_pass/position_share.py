"""How much of each hidden state is position: variance explained by position and by token identity."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text
from analyses.engine.sources import ModelShape
from analyses.forward_pass.prompts import (FAMILY_NEEDS, LIBRARIES, NEEDS, PROMPT_WORDS, content_rows, prompt_ids,
                                           shuffled, state_labels)
from analyses.toolkit import plotting
from analyses.toolkit.forward import forward
from analyses.toolkit.linalg import top_right_singular_vectors


def regression_share(H: np.ndarray, Z: np.ndarray) -> float:
    """R² = ‖Πᴢ H_c‖²_F / ‖H_c‖²_F: the share of the (row-centred) variance of H [n, D] explained by a linear
    regression on the columns of Z [n, k] (centred; Πᴢ the projector onto their span)."""
    Hc = np.asarray(H, dtype=np.float64) - np.mean(H, axis=0)
    Zc = np.asarray(Z, dtype=np.float64) - np.mean(Z, axis=0)
    U, s, _ = np.linalg.svd(Zc, full_matrices=False)
    U = U[:, s > s[0] * 1e-10] if s.size and s[0] > 0 else U[:, :0]
    total = np.sum(Hc**2)
    return float(np.sum((U.T @ Hc) ** 2) / total) if total > 0 else 0.0


def chance_share(rank: int, n: int) -> float:
    """E R² = rank/(n − 1) of a regression on `rank` centred regressors when the n rows are assigned at random: the
    average of the projector over row permutations is rank/(n − 1) times the centring projector. With rank = k
    this is the position share's chance level; with rank = g − 1 (g groups) the token share's."""
    return rank / (n - 1)


def group_share(H: np.ndarray, groups: np.ndarray) -> float:
    """η² = Σ_g n_g ‖h̄_g − h̄‖² / Σ_n ‖h_n − h̄‖²: the share of the variance of the rows of H explained by the
    group each row belongs to (one-hot regression on token identity)."""
    H = np.asarray(H, dtype=np.float64)
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    means = np.zeros((counts.size, H.shape[1]))
    np.add.at(means, inverse, H)
    means /= counts[:, None]
    grand = H.mean(axis=0)
    total = np.sum((H - grand) ** 2)
    return float(np.sum(counts[:, None] * (means - grand) ** 2) / total) if total > 0 else 0.0


def position_features(tensors: Mapping[str, np.ndarray], rows: np.ndarray, k: int) -> np.ndarray:
    """z_n = p_n B_k for the given positions: the coordinates of each position's embedding on P's top-k right
    singular vectors (P as published, uncentred, as in every chapter)."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    return P[rows] @ top_right_singular_vectors(P, k)


def position_share(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, prompt_words: int, ks: tuple[int, ...],
                   primary_k: int, n_shuffles: int, seed: int) -> Result:
    """Per hidden state, on the content rows R of the long prompt (n' rows):

    position share R²_pos,k = R²(H on z_n = p_n B_k), token share η²_tok = share explained by the token id (one-hot);
    under a random assignment of rows their expectations are exactly k/(n' − 1) and (g − 1)/(n' − 1), g the number of
    distinct ids. Repeated with the same tokens in `n_shuffles` random orders (content kept, position moved).
    """
    rng = np.random.default_rng(seed)
    ids = prompt_ids(tensors, shape, prompt_words)
    n = len(ids)
    rows = content_rows(n, shape)
    batch = np.stack([ids, *(shuffled(ids, shape, rng) for _ in range(n_shuffles))])
    hidden = forward(tensors, shape, batch).hidden[:, :, rows]  # [states, batch, n', D]
    Z = position_features(tensors, rows, max(ks))
    n_rows, groups = len(rows), len(np.unique(ids[rows]))
    states = hidden.shape[0]
    pos = np.array([[[regression_share(hidden[s, b], Z[:, :k]) for k in ks] for b in range(len(batch))]
                    for s in range(states)])  # [states, batch, ks]
    tok = np.array([[group_share(hidden[s, b], batch[b, rows]) for b in range(len(batch))] for s in range(states)])
    chance_tok = chance_share(groups - 1, n_rows)
    p = ks.index(primary_k)
    labels = state_labels(shape.n_layers)
    numbers = {
        "tokens": Number(n, "d", "tokens of the prompt"),
        "rows": Number(n_rows, "d", "content rows used (n')"),
        "distinct": Number(groups, "d", "distinct token ids on those rows (g)"),
        "n_shuffles": Number(n_shuffles, "d", "random orders of the same tokens"),
        "primary_k": Number(primary_k, "d", "P's top-k directions of the cited position share"),
        "chance_pos": Number(chance_share(primary_k, n_rows), ".1%", "chance level k/(n' − 1) of the position share"),
        "chance_tok": Number(chance_tok, ".1%", "chance level (g − 1)/(n' − 1) of the token share"),
    }
    for s, label in enumerate(labels):
        tag = "emb" if s == 0 else f"l{s - 1}"
        numbers |= {
            f"pos_{tag}": Number(pos[s, 0, p], ".1%", f"position share after {label}, text order"),
            f"pos_shuffled_{tag}": Number(pos[s, 1:, p].mean(), ".1%", f"position share after {label}, shuffled (mean)"),
            f"tok_{tag}": Number(tok[s, 0], ".1%", f"token share after {label}, text order"),
            f"tok_shuffled_{tag}": Number(tok[s, 1:].mean(), ".1%", f"token share after {label}, shuffled (mean)"),
        }
    last = "emb" if states == 1 else f"l{states - 2}"
    peak = int(np.argmax(pos[:, 0, p]))
    diff = pos[:, 1:, p].mean(axis=1) - pos[:, 0, p]
    numbers |= {
        "pos_last": numbers[f"pos_{last}"], "pos_shuffled_last": numbers[f"pos_shuffled_{last}"],
        "tok_last": numbers[f"tok_{last}"], "tok_shuffled_last": numbers[f"tok_shuffled_{last}"],
        "pos_max": Number(pos[peak, 0, p], ".1%", "largest position share over the states, text order"),
        "pos_max_state": Text(labels[peak], "the state where it peaks"),
        "pos_min": Number(pos[:, 0, p].min(), ".1%", "smallest position share over the states, text order"),
        "pos_min_state": Text(labels[int(np.argmin(pos[:, 0, p]))], "the state where it is smallest"),
        "pos_shuffled_sd_max": Number(pos[:, 1:, p].std(axis=1, ddof=1).max() if n_shuffles > 1 else 0.0, ".1%",
                                      "largest sd of the position share over the shuffles"),
        "pos_change_max": Number(float(np.abs(diff).max()), ".1%",
                                 "largest |shuffled mean − text order| of the position share over the states"),
        "tok_shuffled_minus_text_max": Number(float((tok[:, 1:].mean(axis=1) - tok[:, 0]).max()), ".1%",
                                              "largest gain of the token share when the order is shuffled"),
    }
    for i, k in enumerate(ks):
        numbers[f"pos_last_k{k}"] = Number(pos[-1, 0, i], ".1%", f"position share after the last layer, k = {k}")
        numbers[f"pos_emb_k{k}"] = Number(pos[0, 0, i], ".1%", f"position share after the embeddings, k = {k}")
    table_rows = []
    for s, label in enumerate(labels):
        table_rows.append((label, *(pos[s, 0, i] for i in range(len(ks))), pos[s, 1:, p].mean(),
                           pos[s, 1:, p].min(), pos[s, 1:, p].max(), tok[s, 0], tok[s, 1:].mean()))
    columns = ("after", *(f"position, k = {k}" for k in ks), f"shuffled, k = {primary_k}", "shuffled min",
               "shuffled max", "token id", "token id, shuffled")
    table = Table(columns, tuple(table_rows), formats={c: ".1%" for c in columns[1:]})
    arrays = {"pos": pos, "tok": tok, "ks": np.array(ks), "primary": np.array(primary_k),
              "chance_pos": np.array([chance_share(k, n_rows) for k in ks]), "chance_tok": np.array(chance_tok),
              "labels": np.array(labels)}
    return Result(numbers, {"shares": table}, arrays)


def plot_shares(result: Result, shape: ModelShape):
    """Position share (P's top-k) and token-identity share per state, text order against shuffled orders."""
    a = result.arrays
    pos, tok, ks, primary = a["pos"], a["tok"], list(a["ks"]), int(a["primary"])
    states = np.arange(pos.shape[0])
    fig, axes = plotting.subplots(1, 2, figsize=(7.8, 3.2), sharey=True, layout="constrained")
    for i, k in enumerate(ks):
        colour = f"C{i}"
        axes[0].plot(states, pos[:, 0, i], "o-", color=colour, ms=3, label=f"k = {k}, text order")
        axes[0].axhline(a["chance_pos"][i], color=colour, lw=0.7, ls=":")
        if k == primary:
            axes[0].fill_between(states, pos[:, 1:, i].min(axis=1), pos[:, 1:, i].max(axis=1), color=colour,
                                 alpha=0.25, lw=0, label=f"k = {k}, shuffled (range)")
    axes[0].set_title("position (P's top-k coordinates)")
    axes[1].plot(states, tok[:, 0], "o-", color="C3", ms=3, label="text order")
    axes[1].fill_between(states, tok[:, 1:].min(axis=1), tok[:, 1:].max(axis=1), color="C3", alpha=0.25, lw=0,
                         label="shuffled (range)")
    axes[1].axhline(float(a["chance_tok"]), color="C3", lw=0.7, ls=":", label="chance")
    axes[1].set_title("token identity (one-hot)")
    axes[0].set_ylabel("share of variance")
    for ax in axes:
        ax.set_xticks(states, ["E", *range(len(states) - 1)], fontsize=8)
        ax.set_xlabel("state (E: embeddings, ℓ: after layer ℓ)", fontsize=8)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=plotting.MIN_FONT, loc="best")
    return fig


register(
    "position_share", "How much of each hidden state is position", position_share,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS[-1], "ks": (3, 10, 30), "primary_k": 10, "n_shuffles": 3, "seed": 0},
    figures={"shares": plot_shares},
)
