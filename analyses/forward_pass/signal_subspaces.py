"""Signal subspaces of the hidden states, layer by layer."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text
from analyses.engine.sources import ModelShape
from analyses.forward_pass.prompts import (FAMILY_NEEDS, LIBRARIES, NEEDS, PROMPTS, PROMPT_WORDS, prompt_ids,
                                           state_labels)
from analyses.toolkit import plotting
from analyses.toolkit.forward import forward
from analyses.toolkit.linalg import effective_rank
from analyses.toolkit.signal import (TW_Q99, classical_mds, mds_share, mean_angle, projection_distance, shared_rank,
                                     signal_subspace, union_rank)
from analyses.toolkit.subspaces import principal_angles, random_basis


def random_mean_angle(D: int, a: int, b: int, n_draws: int, rng: np.random.Generator) -> float:
    """Mean over draws of the average principal angle (degrees) between uniformly random a- and b-subspaces of R^D."""
    if not (a and b):
        return float("nan")
    return float(np.mean([mean_angle(random_basis(D, a, rng), random_basis(D, b, rng)) for _ in range(n_draws)]))


def signal_subspaces(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, prompt_words: tuple[int, ...],
                     n_random: int, seed: int) -> Result:
    """For each prompt and each hidden state X (n × D): the signal subspace of its centred rows above the noise
    edge (`toolkit.signal`), the effective rank of all its singular values, the average principal angle (degrees)
    between consecutive states' signal subspaces against random subspaces of the same dimensions, the rank of the
    union of all states' subspaces, and classical MDS of the states from their projection distances."""
    rng = np.random.default_rng(seed)
    D, L = shape.d_model, shape.n_layers
    labels = state_labels(L)
    numbers = {"n_states": Number(L + 1, "d", "hidden states: after the embeddings and after each layer"),
               "n_random": Number(n_random, "d", "random subspace pairs per reference angle"),
               "d_model": Number(D, "d", "width of the residual stream"),
               "tw_q99": Number(TW_Q99, ".4f", "99th percentile of the Tracy–Widom law (β = 1) in the noise threshold")}
    state_rows, prompt_rows, arrays = [], [], {}
    for name, n_words in zip(PROMPTS, prompt_words):
        ids = prompt_ids(tensors, shape, n_words)
        n = len(ids)
        H = forward(tensors, shape, ids).hidden[:, 0]
        subs = [signal_subspace(h) for h in H]
        bases = [s.basis for s in subs]
        ranks = np.array([s.rank for s in subs])
        eranks = np.array([effective_rank(s.singular_values) for s in subs])
        # every pair of states, as the slides compare them: the average angle and the sum of the angles
        pairs = [(i, j) for i in range(L + 1) for j in range(i + 1, L + 1) if ranks[i] and ranks[j]]
        pair_angles = {(i, j): np.degrees(principal_angles(bases[i], bases[j])) for i, j in pairs}
        angles = [pair_angles.get((s, s + 1), np.zeros(0)) for s in range(L)]  # each state against the next
        means = np.array([mean_angle(bases[s], bases[s + 1]) for s in range(L)])
        sums = np.array([a.sum() for a in angles])
        reference = np.array([random_mean_angle(D, a.shape[1], b.shape[1], n_random, rng)
                              for a, b in zip(bases[:-1], bases[1:])])
        distances = np.array([[projection_distance(a, b) for b in bases] for a in bases])
        coords, eigenvalues = classical_mds(distances, 2)
        union, shared = union_rank(bases), shared_rank(bases)
        q = subs[0].noise
        numbers |= {
            f"{name}_tokens": Number(n, "d", f"tokens of the {name} prompt"),
            f"{name}_rank_first": Number(int(ranks[0]), "d", f"{name}: signal rank after the embeddings"),
            f"{name}_rank_last": Number(int(ranks[-1]), "d", f"{name}: signal rank after the last layer"),
            f"{name}_rank_min": Number(int(ranks.min()), "d", f"{name}: smallest signal rank over the states"),
            f"{name}_rank_max": Number(int(ranks.max()), "d", f"{name}: largest signal rank over the states"),
            f"{name}_rank_max_state": Text(labels[int(ranks.argmax())], f"{name}: the state with the largest rank"),
            f"{name}_possible": Number(min(n - 1, D), "d", f"{name}: non-zero singular values of a centred state"),
            f"{name}_erank_first": Number(eranks[0], ".1f", f"{name}: effective rank after the embeddings"),
            f"{name}_erank_last": Number(eranks[-1], ".1f", f"{name}: effective rank after the last layer"),
            f"{name}_erank_min": Number(eranks.min(), ".1f", f"{name}: smallest effective rank over the states"),
            f"{name}_erank_min_state": Text(labels[int(eranks.argmin())], f"{name}: the state with the smallest effective rank"),
            f"{name}_union_rank": Number(union, "d", f"{name}: rank of the union of all states' signal subspaces"),
            f"{name}_union_share": Number(union / D, ".1%", f"{name}: that rank as a share of D"),
            f"{name}_rank_total": Number(int(ranks.sum()), "d", f"{name}: sum of the states' signal ranks"),
            f"{name}_shared_rank": Number(shared, "d", f"{name}: directions shared by the states (mean projector > ½)"),
            f"{name}_mds_share": Number(mds_share(eigenvalues, 2), ".0%", f"{name}: share of the MDS configuration in 2-D"),
            f"{name}_threshold_over_edge": Number(q.threshold / q.edge, ".3f",
                                                  f"{name}: noise threshold over the bare MP edge (Tracy–Widom allowance)"),
        }
        if np.isfinite(means).any():
            numbers |= {
                f"{name}_angle_mean": Number(float(np.nanmean(means)), ".1f",
                                             f"{name}: average principal angle between consecutive states, averaged over transitions"),
                f"{name}_angle_min": Number(float(np.nanmin(means)), ".1f", f"{name}: smallest consecutive average angle"),
                f"{name}_angle_max": Number(float(np.nanmax(means)), ".1f", f"{name}: largest consecutive average angle"),
                f"{name}_angle_max_into": Text(labels[int(np.nanargmax(means)) + 1],
                                               f"{name}: the state that the largest step leads into"),
                f"{name}_angle_random": Number(float(np.nanmean(reference)), ".1f",
                                               f"{name}: the same between random subspaces of the same dimensions"),
                f"{name}_angle_sum_mean": Number(float(sums.mean()), ".0f",
                                                 f"{name}: sum (not average) of the angles, averaged over transitions"),
            }
        if pairs:
            pair_means = np.array([a.mean() for a in pair_angles.values()])
            pair_sums = np.array([a.sum() for a in pair_angles.values()])
            numbers |= {
                f"{name}_pairs_mean": Number(float(pair_means.mean()), ".1f", f"{name}: average angle over all pairs of states"),
                f"{name}_pairs_min": Number(float(pair_means.min()), ".1f", f"{name}: smallest pairwise average angle"),
                f"{name}_pairs_max": Number(float(pair_means.max()), ".1f", f"{name}: largest pairwise average angle"),
                f"{name}_pairs_sum_mean": Number(float(pair_sums.mean()), ".0f", f"{name}: sum of the angles, averaged over pairs"),
                f"{name}_pairs_sum_min": Number(float(pair_sums.min()), ".0f", f"{name}: smallest sum of angles of a pair"),
                f"{name}_pairs_sum_max": Number(float(pair_sums.max()), ".0f", f"{name}: largest sum of angles of a pair"),
                f"{name}_pairs_angles_max": Number(max(a.size for a in pair_angles.values()), "d",
                                                   f"{name}: most angles in one pair (the summands of a sum)"),
            }
        for s, label in enumerate(labels):
            nxt = angles[s] if s < L else np.zeros(0)
            state_rows.append((name, label, int(ranks[s]), eranks[s], subs[s].noise.sigma, subs[s].noise.threshold,
                               float(subs[s].singular_values[0]),
                               float(nxt.mean()) if nxt.size else float("nan"), float(nxt.sum()) if s < L else float("nan"),
                               int(nxt.size)))
        prompt_rows.append((name, int(ranks.min()), int(ranks.max()), union, shared,
                            float(np.nanmean(means)) if np.isfinite(means).any() else float("nan"),
                            float(np.nanmean(reference)) if np.isfinite(reference).any() else float("nan"),
                            float(sums.mean()), mds_share(eigenvalues, 2)))
        arrays |= {f"{name}_sv": np.array([s.singular_values / s.noise.threshold for s in subs]),
                   f"{name}_edge": np.array(q.edge / q.threshold), f"{name}_ranks": ranks, f"{name}_eranks": eranks,
                   f"{name}_angles": means, f"{name}_reference": reference, f"{name}_mds": coords}
    tables = {
        "states": Table(("prompt", "after", "signal rank", "effective rank", "noise σ̂", "threshold", "largest σ",
                         "mean angle to next (°)", "sum of angles to next (°)", "angles"), tuple(state_rows),
                        formats={"effective rank": ".1f", "noise σ̂": ".3g", "threshold": ".3g", "largest σ": ".3g",
                                 "mean angle to next (°)": ".1f", "sum of angles to next (°)": ".0f"}),
        "prompts": Table(("prompt", "rank from", "rank to", "union rank", "shared rank", "angle (°)", "random (°)",
                          "sum of angles (°)", "MDS in 2-D"), tuple(prompt_rows),
                         formats={"angle (°)": ".1f", "random (°)": ".1f", "sum of angles (°)": ".0f", "MDS in 2-D": ".0%"}),
    }
    arrays["labels"] = np.array(labels)
    return Result(numbers, tables, arrays)


def _state_colours(n_states: int):
    cmap = plotting.pyplot().get_cmap(plotting.SEQUENTIAL)
    return [cmap(0.9 * s / max(n_states - 1, 1)) for s in range(n_states)]


def plot_spectra(result: Result, shape: ModelShape):
    """Singular values of every state over the noise threshold (1), with the bare Marchenko–Pastur edge."""
    a = result.arrays
    fig, axes = plotting.subplots(1, 3, figsize=(7.8, 2.9), sharey=True, layout="constrained")
    colours = _state_colours(len(a["labels"]))
    for ax, name in zip(axes, PROMPTS):
        sv = a[f"{name}_sv"]
        index = np.arange(1, sv.shape[1] + 1)
        for s, values in enumerate(sv):
            ax.plot(index, values, color=colours[s], lw=1.0)
        ax.axhline(1.0, color="C3", lw=1.0, label="noise threshold")
        ax.axhline(float(a[f"{name}_edge"]), color="C3", lw=0.8, ls="--", label="MP edge")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("index i")
        ax.set_title(f"{name}, {result.numbers[f'{name}_tokens'].text} tokens", fontsize=plotting.MIN_FONT)
    top = max(float(a[f"{name}_sv"].max()) for name in PROMPTS)
    axes[0].set_ylim(0.1, 1.5 * top)  # below 0.1: BERT's LayerNorm null direction (a singular value ≈ 0), off the scale
    plotting.plain_log_ticks(axes[0].yaxis)
    axes[0].set_ylabel("σ_i / noise threshold")
    axes[0].legend(loc="lower left", fontsize=plotting.MIN_FONT)
    import matplotlib as mpl

    mappable = mpl.cm.ScalarMappable(norm=mpl.colors.Normalize(0, len(colours) - 1), cmap=plotting.SEQUENTIAL)
    bar = fig.colorbar(mappable, ax=list(axes), fraction=0.03, pad=0.02)
    bar.set_label("state (0: embeddings)")
    return fig


def plot_layers(result: Result, shape: ModelShape):
    """Top: signal rank, effective rank and the mean angle between consecutive states, per prompt. Bottom: classical
    MDS of the states from the projection distances of their signal subspaces, one panel per prompt."""
    a = result.arrays
    labels = list(a["labels"])
    states = np.arange(len(labels))
    fig, axes = plotting.subplots(2, 3, figsize=(plotting.MAX_WIDTH, 5.6), layout="constrained")
    top, bottom = axes
    for c, name in enumerate(PROMPTS):
        colour = f"C{c}"
        top[0].plot(states, a[f"{name}_ranks"], "o-", color=colour, ms=3, label=name)
        top[1].plot(states, a[f"{name}_eranks"], "o-", color=colour, ms=3, label=name)
        top[2].plot(states[:-1] + 0.5, a[f"{name}_angles"], "o-", color=colour, ms=3, label=name)
        top[2].plot(states[:-1] + 0.5, a[f"{name}_reference"], ":", color=colour, lw=1)
    top[0].set_ylabel("signal rank r")
    top[1].set_ylabel("effective rank")
    top[2].set_ylabel("mean principal angle (°)")
    top[2].set_ylim(0, 90)
    top[2].set_title("to the next state\n(dotted: random)", fontsize=8)
    for ax in top[:2]:
        ax.set_yscale("log")
        plotting.plain_log_ticks(ax.yaxis)
    for ax in top:
        ax.set_xticks(states, ["E", *range(len(labels) - 1)], fontsize=8)
        ax.set_xlabel("state")
    top[0].legend(fontsize=plotting.MIN_FONT, loc="best")
    colours = _state_colours(len(labels))
    for ax, name in zip(bottom, PROMPTS):
        xy = a[f"{name}_mds"]
        ax.plot(xy[:, 0], xy[:, 1], color="0.7", lw=0.8, zorder=1)
        ax.scatter(xy[:, 0], xy[:, 1], c=colours, s=22, zorder=2)
        for s_, label in enumerate(["E", *range(len(labels) - 1)]):
            ax.annotate(str(label), xy[s_], textcoords="offset points", xytext=(4, 3), fontsize=plotting.MIN_FONT)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_title(f"MDS, {name}: {result.numbers[f'{name}_mds_share'].text} in 2-D", fontsize=8)
        ax.set_xlabel("MDS 1", fontsize=8)
    bottom[0].set_ylabel("MDS 2")
    return fig


register(
    "signal_subspaces", "Signal subspaces of the hidden states, layer by layer", signal_subspaces,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS, "n_random": 5, "seed": 0},
    figures={"spectra": plot_spectra, "layers": plot_layers},
)
