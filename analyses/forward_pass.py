"""Position in the forward pass: the models run on the project's text, and what their hidden states and attention
do with position.

Input. The project's own text (`analyses.toolkit.text`), tokenised with each model's tokenizer; prompts are cut
from its start at word boundaries (`prompt_words` words: about 15, 150 and 500 GPT-2 tokens). MiniLM's prompts
carry its [CLS] … [SEP]; GPT-2's carry no special token (as transformers' generate uses it). The forward passes
are `analyses.toolkit.forward` (numpy, float64, checked against transformers in the tests).

Hidden states. State 0 is the residual stream after the embeddings (GPT-2: e_t + p_n; BERT: after the embedding
LayerNorm), state ℓ + 1 the stream after layer ℓ. The statistics of positions use the content rows R: every
position except the first (GPT-2's first token, an attention sink, and BERT's [CLS]) and BERT's final [SEP].

Analyses (definitions in each function's docstring):

1. `forward_prompts`: the prompts and their exact token ids.
2. `signal_subspaces`: per state, the singular values of the centred hidden states against the
   Marchenko–Pastur noise edge, the signal subspace, effective rank, principal angles between consecutive
   states, the union of all states' subspaces, and an MDS map of the states.
3. `position_share`: the share of hidden-state variance explained by position and by token identity, in the
   text's order and with the same tokens shuffled.
4. `text_attention`: every head's pattern on text against its pattern on the position rows alone.
5. `position_ablation`: P's top-3 principal subspace removed from the position embeddings, against random
   3-dimensional changes of the same size: attention, hidden states, sentence embeddings.
6. `logit_lens`: the next-token distribution read from every state, and greedy generation (GPT-2 with W_E).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from analyses.engine.inputs import ModelInputs
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape, model_spec
from analyses.toolkit import plotting
from analyses.toolkit.attention import (attention_pattern, classify, head_scores, head_statistics, position_inputs,
                                        query_rows)
from analyses.toolkit.forward import forward, lm_logits, mean_pool, token_rows
from analyses.toolkit.linalg import effective_rank, top_right_singular_vectors
from analyses.toolkit.signal import (TW_Q99, classical_mds, mds_share, mean_angle, projection_distance, shared_rank,
                                     signal_subspace, union_rank)
from analyses.toolkit.subspaces import principal_angles, random_basis
from analyses.toolkit.text import PARAGRAPHS, TITLE, prefix, sentences, words

PROMPTS = ("short", "medium", "long")
PROMPT_WORDS = (13, 131, 444)
"""Words of the text in each prompt: 15, 150 and 500 GPT-2 tokens (MiniLM: 16, 147 and 493 with [CLS], [SEP])."""
LAYER_NEEDS = ("attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "attn.b_Q", "attn.b_K", "attn.b_V", "attn.b_O",
               "ln1.w", "ln1.b", "ln2.w", "ln2.b", "mlp.W_in", "mlp.b_in", "mlp.W_out", "mlp.b_out")
NEEDS = ("tokenizer", "W_E", "W_pos", *(f"blocks.*.{name}" for name in LAYER_NEEDS))
FAMILY_NEEDS = {"bert": ("W_token_type", "embed.ln.w", "embed.ln.b")}
"""What `toolkit.forward` reads: every tensor of the model, the tokenizer, and BERT's embedding LayerNorm."""
LIBRARIES = ("transformers", "tokenizers")
"""The tokenizer's libraries: their versions decide the token ids."""


# ---------------------------------------------------------------------------
# Inputs


def prompt_ids(tensors, shape: ModelShape, n_words: int) -> np.ndarray:
    """The model's token ids of the text's first `n_words` words, with the model's own special tokens."""
    ids = tensors.tokenize(prefix(n_words), special_tokens=True)
    if len(ids) > shape.n_ctx:
        raise ValueError(f"the prompt of {n_words} words has {len(ids)} tokens; {shape.name} has {shape.n_ctx} positions")
    return ids


def content_rows(n: int, shape: ModelShape) -> np.ndarray:
    """The positions the statistics use: all but the first (and BERT's final [SEP])."""
    return np.arange(1, n - 1) if shape.family == "bert" else np.arange(1, n)


def shuffled(ids: np.ndarray, shape: ModelShape, rng: np.random.Generator) -> np.ndarray:
    """The same tokens with those on the content rows in a random order (first token, and BERT's [SEP], stay)."""
    out = np.array(ids)
    rows = content_rows(len(ids), shape)
    out[rows] = rng.permutation(out[rows])
    return out


def state_labels(n_layers: int) -> list[str]:
    """'embeddings', 'layer 0', …: what each hidden state comes after."""
    return ["embeddings", *(f"layer {layer}" for layer in range(n_layers))]


def _slug(shape: ModelShape) -> str:
    try:
        return model_spec(shape.name).slug
    except Exception:  # a model the registry does not know (unit tests): its own name
        return shape.name.replace("-", "_")


def decode(tensors: ModelInputs, ids) -> list[str]:
    """Each id as its text, through the model's tokenizer; the id itself where no tokenizer is at hand (ids are
    always cached beside the strings)."""
    try:
        return tensors.decode(ids)
    except KeyError:
        return [str(int(i)) for i in ids]


def shown(token: str) -> str:
    """A token for a markdown table or text: quoted and escaped (JSON), as code, with pipes and backticks made safe."""
    return "`" + json.dumps(token, ensure_ascii=False).replace("`", "'").replace("|", "¦") + "`"


# ---------------------------------------------------------------------------
# 1. The prompts


def forward_prompts(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, prompt_words: tuple[int, ...]) -> Result:
    """The text, the prompts cut from it and their exact token ids (a table of every id). The text's length is
    counted paragraph by paragraph, without special tokens (the whole text exceeds MiniLM's 512 positions)."""
    all_ids = np.concatenate([tensors.tokenize(paragraph) for paragraph in PARAGRAPHS])
    numbers = {
        "title": Text(TITLE, "title of the project's text"),
        "text_words": Number(len(words()), "d", "words in the text"),
        "text_paragraphs": Number(len(PARAGRAPHS), "d", "paragraphs in the text"),
        "text_sentences": Number(len(sentences()), "d", "sentences in the text"),
        "text_tokens": Number(len(all_ids), "d", "tokens of the text's paragraphs, without special tokens"),
        "text_distinct": Number(len(np.unique(all_ids)), "d", "distinct token ids in the whole text"),
        "n_ctx": Number(shape.n_ctx, "d", "positions of the model"),
    }
    rows, id_rows = [], []
    for name, n_words in zip(PROMPTS, prompt_words):
        ids = prompt_ids(tensors, shape, n_words)
        tail = " ".join(words(prefix(n_words))[-5:])
        numbers |= {
            f"{name}_words": Number(n_words, "d", f"words in the {name} prompt"),
            f"{name}_tokens": Number(len(ids), "d", f"tokens (positions) of the {name} prompt"),
            f"{name}_distinct": Number(len(np.unique(ids)), "d", f"distinct token ids in the {name} prompt"),
            f"{name}_end": Text(f"… {tail}", f"the last words of the {name} prompt"),
        }
        rows.append((name, n_words, len(ids), len(np.unique(ids)), " ".join(map(str, ids[:3])) + " …", f"… {tail}"))
        id_rows += [(name, position, int(token)) for position, token in enumerate(ids)]
    tables = {
        "prompts": Table(("prompt", "words", "tokens", "distinct ids", "first ids", "ends with"), tuple(rows)),
        "token_ids": Table(("prompt", "position", "token id"), tuple(id_rows)),
    }
    return Result(numbers, tables)


register(
    "forward_prompts", "The project's text, the prompts and their token ids", forward_prompts,
    needs=("tokenizer",), libraries=LIBRARIES, params={"prompt_words": PROMPT_WORDS},
)


# ---------------------------------------------------------------------------
# 2. Signal subspaces layer by layer


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
        ax.set_title(f"{name} prompt ({result.numbers[f'{name}_tokens'].text} tokens)", fontsize=9)
    top = max(float(a[f"{name}_sv"].max()) for name in PROMPTS)
    axes[0].set_ylim(0.1, 1.5 * top)  # below 0.1: BERT's LayerNorm null direction (a singular value ≈ 0), off the scale
    plotting.plain_log_ticks(axes[0].yaxis)
    axes[0].set_ylabel("σ_i / noise threshold")
    axes[0].legend(loc="lower left", fontsize=7)
    import matplotlib as mpl

    mappable = mpl.cm.ScalarMappable(norm=mpl.colors.Normalize(0, len(colours) - 1), cmap=plotting.SEQUENTIAL)
    bar = fig.colorbar(mappable, ax=list(axes), fraction=0.03, pad=0.02)
    bar.set_label("state (0: embeddings)")
    fig.suptitle(f"{shape.name}: singular values of the centred hidden states", fontsize=10)
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
    top[0].legend(fontsize=7, loc="best")
    colours = _state_colours(len(labels))
    for ax, name in zip(bottom, PROMPTS):
        xy = a[f"{name}_mds"]
        ax.plot(xy[:, 0], xy[:, 1], color="0.7", lw=0.8, zorder=1)
        ax.scatter(xy[:, 0], xy[:, 1], c=colours, s=22, zorder=2)
        for s_, label in enumerate(["E", *range(len(labels) - 1)]):
            ax.annotate(str(label), xy[s_], textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_title(f"MDS, {name}: {result.numbers[f'{name}_mds_share'].text} in 2-D", fontsize=8)
        ax.set_xlabel("MDS 1", fontsize=8)
    bottom[0].set_ylabel("MDS 2")
    fig.suptitle(f"{shape.name}: signal subspaces through the layers (states: E, the embeddings; ℓ, after layer ℓ)",
                 fontsize=10)
    return fig


def _figure(slug: str, analysis: str, figure: str, caption: str, alt: str) -> str:
    return (f"![{caption}](_cache/{slug}/{analysis}/{figure}){{#fig-forward-{slug.replace('_', '-')}-{figure} "
            f"fig-alt=\"{alt}\"}}\n\n")


def _heading(shape: ModelShape, what: str) -> str:
    return f"**{shape.name}: {what}.** "


def signal_section(result: Result, shape: ModelShape) -> str:
    """A markdown fragment with this model's figures and key numbers (the chapter includes GPT-2's)."""
    n, slug = result.numbers, _slug(shape)
    text = _heading(shape, "signal subspaces") + (
        f"Over the {n['n_states'].text} states the signal rank of the long prompt runs from "
        f"{n['long_rank_min'].text} to {n['long_rank_max'].text} (largest {n['long_rank_max_state'].text}); the union of "
        f"all states' signal subspaces has rank {n['long_union_rank'].text}, {n['long_union_share'].text} of the "
        f"{n['d_model'].text} dimensions (short prompt: {n['short_union_rank'].text}, medium: "
        f"{n['medium_union_rank'].text}).")
    if "long_angle_mean" in n:
        text += (f" Consecutive states' signal subspaces are {n['long_angle_mean'].text}° apart on average "
                 f"(random subspaces of the same dimensions: {n['long_angle_random'].text}°).")
    text += "\n\n"
    text += _figure(slug, "signal_subspaces", "spectra",
                    f"{shape.name}: singular values of each centred hidden state over its noise threshold (solid red "
                    f"line at 1), with the bare Marchenko–Pastur edge (dashed); values above the line span the signal "
                    f"subspace.",
                    f"Three log-log panels of singular values against index for {shape.name}, one line per state, "
                    f"with a horizontal threshold line.")
    text += _figure(slug, "signal_subspaces", "layers",
                    f"{shape.name}, top: signal rank, effective rank and the mean principal angle between consecutive "
                    f"states (dotted: random subspaces of the same dimensions), for the three prompts. Bottom: the states "
                    f"placed in two dimensions by classical MDS of the projection distances between their signal "
                    f"subspaces (E: embeddings; ℓ: after layer ℓ).",
                    f"Six panels for {shape.name}: three line plots against the state index, one line per prompt, and "
                    f"three scatter plots of the states joined in order.")
    return text


register(
    "signal_subspaces", "Signal subspaces of the hidden states, layer by layer", signal_subspaces,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS, "n_random": 5, "seed": 0},
    figures={"spectra": plot_spectra, "layers": plot_layers},
    files={"section.md": signal_section},
)


# ---------------------------------------------------------------------------
# 3. How much of each hidden state is position


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
    axes[0].set_title("position: regression on p_n's top-k coordinates", fontsize=9)
    axes[1].plot(states, tok[:, 0], "o-", color="C3", ms=3, label="text order")
    axes[1].fill_between(states, tok[:, 1:].min(axis=1), tok[:, 1:].max(axis=1), color="C3", alpha=0.25, lw=0,
                         label="shuffled (range)")
    axes[1].axhline(float(a["chance_tok"]), color="C3", lw=0.7, ls=":", label="chance")
    axes[1].set_title("token identity (one-hot)", fontsize=9)
    axes[0].set_ylabel("share of variance")
    for ax in axes:
        ax.set_xticks(states, ["E", *range(len(states) - 1)], fontsize=8)
        ax.set_xlabel("state (E: embeddings, ℓ: after layer ℓ)", fontsize=8)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"{shape.name}: how much of each hidden state position and token identity explain "
                 f"(dotted: chance)", fontsize=10)
    return fig


def share_section(result: Result, shape: ModelShape) -> str:
    n, slug = result.numbers, _slug(shape)
    text = _heading(shape, "position and token shares") + (
        f"With k = {n['primary_k'].text}, position explains {n['pos_emb'].text} of the variance after the "
        f"embeddings and {n['pos_last'].text} after the last layer (shuffled order: {n['pos_shuffled_emb'].text} and "
        f"{n['pos_shuffled_last'].text}; chance {n['chance_pos'].text}); token identity explains "
        f"{n['tok_emb'].text} and {n['tok_last'].text} (chance {n['chance_tok'].text}).\n\n")
    text += _figure(slug, "position_share", "shares",
                    f"{shape.name}: share of each hidden state's variance explained by position (regression on P's "
                    f"top-k coordinates) and by token identity, in the text's order (lines) and with the same tokens "
                    f"shuffled (bands); dotted lines: chance.",
                    f"Two line plots of variance shares against the state index for {shape.name}.")
    return text


register(
    "position_share", "How much of each hidden state is position", position_share,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS[-1], "ks": (3, 10, 30), "primary_k": 10, "n_shuffles": 3, "seed": 0},
    figures={"shares": plot_shares}, files={"section.md": share_section},
)


# ---------------------------------------------------------------------------
# 4. Attention on text against attention on position alone


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

    def hook(layer: int, A: np.ndarray) -> None:
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

    forward(tensors, shape, np.stack([ids, ids]), tokens=tokens, attention_hook=hook)
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
        ax.text(h, layer, f"{value:.2f}" + ("•" if same[layer, h] else ""), ha="center", va="center", fontsize=6.5,
                color="black" if value > 0.6 else "white")
    ax.set_xticks(range(H))
    ax.set_yticks(range(L))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    plotting.colorbar(fig, image, ax, "overlap with the position-only pattern")
    ax.set_title(f"{shape.name}: attention on text against attention on position alone (•: same class)", fontsize=9)
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
            ax.set_title(f"head {layer}.{h}, {what}" + (f"\noverlap {O[layer, h]:.2f}" if r == 0 else ""), fontsize=7.5)
            ax.set_xticks([])
            ax.set_yticks([])
    axes[1, 0].set_xlabel("key j")
    axes[1, 0].set_ylabel("query i")
    plotting.colorbar(fig, image, list(axes.ravel()), "attention weight (log)")
    fig.suptitle(f"{shape.name}: the first {zooms.shape[-1]} positions of the most and least positional heads",
                 fontsize=10)
    return fig


def attention_section(result: Result, shape: ModelShape) -> str:
    n, slug = result.numbers, _slug(shape)
    text = _heading(shape, "attention on text and on position alone") + (
        f"{n['n_positional'].text} of {n['n_heads'].text} heads keep an overlap of at least {n['positional'].text} "
        f"with their position-only pattern, more than with equal attention ({n['positional_heads'].text}); the median "
        f"overlap is "
        f"{n['overlap_median_l0'].text} in layer 0 and {n['overlap_median_later'].text} in later layers.\n\n")
    text += _figure(slug, "text_attention", "overlap",
                    f"{shape.name}: overlap of each head's attention on the long prompt with its attention on the "
                    f"position rows alone (1: identical; •: the same class on both).",
                    f"Heatmap of overlaps, layers by heads, for {shape.name}.")
    text += _figure(slug, "text_attention", "patterns",
                    f"{shape.name}: the first positions of the two most and the two least positional heads, on text "
                    f"(top) and on position alone (bottom).",
                    f"Eight small attention patterns for {shape.name}.")
    return text


register(
    "text_attention", "Attention on text against attention on position alone", text_attention,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS[-1], "min_query": 32, "key_mass": 0.2, "local_width": 32,
            "positional": 0.5, "zoom": 48},
    figures={"overlap": plot_overlap, "patterns": plot_patterns}, files={"section.md": attention_section},
)


# ---------------------------------------------------------------------------
# 5. A causal test: P's top-3 subspace removed


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
        last = forward(tensors, shape, batch, positions=positions, key_mask=masks).hidden[-1]
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

    def hook(layer: int, A: np.ndarray) -> None:
        q = A[:, :, queries]
        tv[:, layer] = 0.5 * np.abs(q[1:] - q[0]).sum(axis=-1).mean(axis=-1)

    hidden = forward(tensors, shape, batch, positions=positions, attention_hook=hook).hidden
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
    axes["tv"].legend(fontsize=7, loc="best")
    ratio = a["ratio"]
    ax = axes["ratio"]
    image = ax.imshow(ratio, cmap=plotting.DIVERGING, aspect="auto", interpolation="nearest",
                      norm=_log_norm_around_one(ratio))
    for (layer, h), value in np.ndenumerate(ratio):
        ax.text(h, layer, f"{value:.1f}", ha="center", va="center", fontsize=6.5,
                color="white" if abs(np.log(value)) > 0.6 * np.log(_log_norm_around_one(ratio).vmax) else "black")
    ax.set_xticks(range(ratio.shape[1]))
    ax.set_yticks(range(ratio.shape[0]))
    ax.set_xlabel("head", fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    ax.set_title(f"each head's change, top-{k} removed, over the controls' mean (log colour)", fontsize=8)
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
    fig.suptitle(f"{shape.name}: what changes when P loses its top-{k} subspace", fontsize=10)
    return fig


def _log_norm(vmin: float):
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    return LogNorm(vmin=vmin, vmax=1.0)


def _log_norm_around_one(values: np.ndarray):
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    top = float(np.exp(np.abs(np.log(np.clip(values, 1e-12, None))).max()))
    return LogNorm(vmin=1 / top, vmax=top)


def ablation_section(result: Result, shape: ModelShape) -> str:
    n, slug = result.numbers, _slug(shape)
    text = _heading(shape, "the causal test") + (
        f"Removing P's top-{n['k'].text} subspace ({n['energy_removed'].text} of its energy) changes the attention rows "
        f"by {n['tv_top'].text} in total variation on average, against {n['tv_random'].text} for random "
        f"{n['k'].text}-dimensional changes of the same size (ratio {n['tv_ratio'].text}); after the last layer "
        f"1 − cos is {n['cos_distance_top_last'].text} against {n['cos_distance_random_last'].text}. The head moved most "
        f"relative to the controls is {n['head_ratio_max_head'].text} ({n['head_ratio_max'].text} times their change).\n\n")
    text += _figure(slug, "position_ablation", "effects",
                    f"{shape.name}, top: attention change per layer, and 1 − cos and the signal-subspace angle per "
                    f"state, when P's top-{n['k'].text} subspace is removed (red) and for random changes of the same "
                    f"size (grey). Bottom: each head's change over the controls' mean change.",
                    f"Three line plots for {shape.name} with a red curve for the ablation and grey ones for the "
                    f"controls, and a heatmap of ratios, layers by heads.")
    return text


register(
    "position_ablation", "A causal test: P's top-3 subspace removed", position_ablation,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS[1], "k": 3, "n_random": 4, "seed": 0, "min_query": 32, "sentence_stride": 3},
    figures={"effects": plot_effects}, files={"section.md": ablation_section},
)


# ---------------------------------------------------------------------------
# 6. The logit lens and greedy generation (a causal LM with an output head: GPT-2 with W_E)

LENS_SHOWN = 5
"""Tokens listed per state in the lens table (the top `top_k` are listed for the last slides prompt)."""
SLIDES_PROMPTS = (("today", "Today we can go to"), ("einstein", "Einstein is best known for the theory of"))
"""The two prompts of @padova2025frog whose generation, logits and entropies the slides report (inputs only)."""


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def entropy(logits: np.ndarray) -> np.ndarray:
    """H = −Σ p log p in nats of softmax(logits) over the last axis."""
    logp = log_softmax(logits)
    p = np.exp(logp)
    return -np.where(p > 0, p * np.where(p > 0, logp, 0.0), 0.0).sum(axis=-1)


def decided_state(top1: np.ndarray) -> int:
    """The first state from which the top-1 token stays what it is after the last state."""
    same = top1 == top1[-1]
    return int(len(same) - np.argmin(same[::-1])) if not same.all() else 0


def logit_lens(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, prompt_words: tuple[int, ...],
               slides_prompts: tuple[tuple[str, str], ...], top_k: int, n_generate: int, chunk: int) -> Result:
    """For each prompt and each state ℓ, the next-token distribution softmax(ln_f(h_ℓ) W_Eᵀ) at the last position
    (the logit lens; after the last layer it is the model's own output): its entropy (nats; bits = nats / ln 2) and
    top-k tokens. At the last state also the mean entropy over all positions. Greedy generation of `n_generate`
    tokens from the slides' prompts and the short prompt, with the top-5 raw logits of every step."""
    W = np.asarray(tensors["W_E"], dtype=np.float64)
    top_table = None
    prompts = [(name, prompt_ids(tensors, shape, n_words)) for name, n_words in zip(PROMPTS, prompt_words)]
    prompts += [(name, tensors.tokenize(text, special_tokens=True)) for name, text in slides_prompts]
    labels = state_labels(shape.n_layers)
    numbers = {"top_k": Number(top_k, "d", "tokens listed per state"),
               "n_generate": Number(n_generate, "d", "tokens generated greedily")}
    lens_rows, generation_rows, arrays = [], [], {}
    for name, ids in prompts:
        H = forward(tensors, shape, ids).hidden[:, 0]  # [states, n, D]
        logits = lm_logits(tensors, shape, H[:, -1], W)  # [states, vocab]
        logp = log_softmax(logits)
        ent = entropy(logits)
        top = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
        last_all = np.concatenate([entropy(lm_logits(tensors, shape, H[-1, i:i + chunk], W))
                                   for i in range(0, len(ids), chunk)])
        decided = decided_state(top[:, 0])
        words_top = decode(tensors, top[:, 0])
        numbers |= {
            f"{name}_tokens": Number(len(ids), "d", f"tokens of the {name} prompt"),
            f"{name}_entropy_last": Number(ent[-1], ".3f", f"{name}: entropy (nats) of the next token after the last layer"),
            f"{name}_entropy_last_bits": Number(ent[-1] / np.log(2), ".3f", f"{name}: the same in bits"),
            f"{name}_entropy_first": Number(ent[0], ".2f", f"{name}: entropy (nats) read from the embeddings"),
            f"{name}_entropy_max": Number(ent.max(), ".2f", f"{name}: largest entropy (nats) over the states"),
            f"{name}_mean_entropy": Number(last_all.mean(), ".3f", f"{name}: mean over all positions of the entropy (nats) "
                                                                   "after the last layer"),
            f"{name}_mean_entropy_bits": Number(last_all.mean() / np.log(2), ".3f", f"{name}: the same in bits"),
            f"{name}_top1": Text(shown(words_top[-1]), f"{name}: the model's most likely next token"),
            f"{name}_top1_id": Number(int(top[-1, 0]), "d", f"{name}: its id"),
            f"{name}_top1_prob": Number(float(np.exp(logp[-1, top[-1, 0]])), ".4f", f"{name}: its probability"),
            f"{name}_decided": Text(labels[decided], f"{name}: the state from which that token stays on top"),
        }
        for s, label in enumerate(labels):
            words_k = decode(tensors, top[s, :LENS_SHOWN])
            lens_rows.append((name, label, ent[s], ent[s] / np.log(2), float(np.exp(logp[s, top[s, 0]])),
                              " ".join(shown(w) for w in words_k), " ".join(map(str, top[s, :LENS_SHOWN]))))
        arrays[f"{name}_entropy"] = ent
        if name == slides_prompts[-1][0]:  # the slides list the top ten of this prompt
            probs = np.exp(logp[-1, top[-1]])
            rows = tuple((j + 1, int(i), shown(w), float(p)) for j, (i, w, p) in
                         enumerate(zip(top[-1], decode(tensors, top[-1]), probs)))
            numbers |= {f"{name}_top{j + 1}_prob": Number(float(p), ".4f", f"{name}: probability of the {j + 1}th token")
                        for j, p in enumerate(probs)}
            numbers[f"{name}_top_sum"] = Number(float(probs.sum()), ".4f", f"{name}: probability of the top {top_k}")
            top_table = Table(("rank", "id", "token", "probability"), rows, formats={"probability": ".4f"})
    generate = [(name, ids) for name, ids in prompts if name in {n for n, _ in slides_prompts} | {PROMPTS[0]}]
    for name, ids in generate:
        out = list(ids)
        for step in range(1, n_generate + 1):
            h = forward(tensors, shape, np.array(out)).hidden[-1, 0, -1]
            logits = lm_logits(tensors, shape, h, W)
            order = np.argsort(-logits, kind="stable")[:5]
            words_5 = decode(tensors, order)
            generation_rows.append((name, step, shown(words_5[0]), int(order[0]),
                                    " ".join(f"{shown(w)} {logits[i]:.3f}" for w, i in zip(words_5, order)),
                                    " ".join(map(str, order))))
            for j, i in enumerate(order):
                numbers[f"{name}_step{step}_logit{j + 1}"] = Number(float(logits[i]), ".3f",
                                                                    f"{name}: logit of the {j + 1}th token at step {step}")
                numbers[f"{name}_step{step}_id{j + 1}"] = Number(int(i), "d", f"{name}: its id")
            out.append(int(order[0]))
        continuation = out[len(ids):]
        numbers[f"{name}_generated"] = Text(shown("".join(decode(tensors, continuation))),
                                            f"{name}: the greedy continuation")
        numbers[f"{name}_generated_ids"] = Text(" ".join(map(str, continuation)), f"{name}: its ids")
    tables = {
        "lens": Table(("prompt", "after", "entropy (nats)", "entropy (bits)", "p(top 1)", "top tokens", "ids"),
                      tuple(lens_rows), formats={"entropy (nats)": ".3f", "entropy (bits)": ".3f", "p(top 1)": ".4f"}),
        "generation": Table(("prompt", "step", "token", "id", "top-5 logits", "top-5 ids"), tuple(generation_rows)),
    }
    if top_table is not None:
        tables["top"] = top_table
    arrays["labels"] = np.array(labels)
    arrays["prompts"] = np.array([name for name, _ in prompts])
    return Result(numbers, tables, arrays)


def plot_entropy(result: Result, shape: ModelShape):
    """Entropy of the next-token distribution read from each state (the last state: the model's own)."""
    a = result.arrays
    labels = list(a["labels"])
    states = np.arange(len(labels))
    fig, ax = plotting.subplots(figsize=(6.4, 3.4), layout="constrained")
    for c, name in enumerate(a["prompts"]):
        ax.plot(states, a[f"{name}_entropy"], "o-", ms=3, color=f"C{c}", label=str(name))
    ax.set_xticks(states, ["E", *range(len(labels) - 1)])
    ax.set_xlabel("state read (E: embeddings, ℓ: after layer ℓ)")
    ax.set_ylabel("entropy of the next token (nats)")
    ax.legend(fontsize=8)
    ax.set_title(f"{shape.name}: the logit lens at the last position of each prompt", fontsize=10)
    return fig


def lens_section(result: Result, shape: ModelShape) -> str:
    n, slug = result.numbers, _slug(shape)
    tag = slug.replace("_", "-")
    einstein, today = SLIDES_PROMPTS[1][0], SLIDES_PROMPTS[0][0]
    text = _heading(shape, "the logit lens") + (
        f"After the last layer the next-token entropy of the slides' prompt on Einstein is "
        f"{n[f'{einstein}_entropy_last'].text} nats ({n[f'{einstein}_entropy_last_bits'].text} bits), the mean over its "
        f"positions {n[f'{einstein}_mean_entropy'].text} nats ({n[f'{einstein}_mean_entropy_bits'].text} bits); the most "
        f"likely next token is {n[f'{einstein}_top1'].text} (p = {n[f'{einstein}_top1_prob'].text}), on top from "
        f"{n[f'{einstein}_decided'].text} on. Greedy generation continues the slides' first prompt with "
        f"{n[f'{today}_generated'].text} (ids {n[f'{today}_generated_ids'].text}); the top logit of the second step is "
        f"{n[f'{today}_step2_logit1'].text}.\n\n")
    text += _figure(slug, "logit_lens", "entropy",
                    f"{shape.name}: entropy of the next-token distribution read through the final LayerNorm and the "
                    f"unembedding from each state, at the last position of each prompt.",
                    f"Line plot of entropy against state for each prompt, {shape.name}.")
    rows = result.tables["lens"]
    lens = Table(rows.columns[:-1], tuple(r[:-1] for r in rows.rows if r[0] == einstein), rows.formats)
    text += (f"::: {{#tbl-forward-{tag}-lens}}\n{lens.to_markdown()}\n{shape.name}: the logit lens on the prompt "
             f"of @padova2025frog, state by state: entropy and the top {LENS_SHOWN} tokens.\n:::\n\n")
    if "top" in result.tables:
        text += (f"::: {{#tbl-forward-{tag}-top}}\n{result.tables['top'].to_markdown()}\n{shape.name}: the "
                 f"{n['top_k'].text} most likely next tokens after the prompt on Einstein, as the slides list them "
                 f"(together {n[f'{einstein}_top_sum'].text}).\n:::\n\n")
    gen = result.tables["generation"]
    text += (f"::: {{#tbl-forward-{tag}-generation}}\n{Table(gen.columns[:-1], tuple(r[:-1] for r in gen.rows)).to_markdown()}"
             f"\n{shape.name}: greedy generation, with the five largest raw logits of each step.\n:::\n")
    return text


register(
    "logit_lens", "The logit lens and greedy generation", logit_lens,
    # GPT-2's output head is W_E (tied) after ln_f; BERT has no LM head: the need `lm_head`, which no BERT checkpoint
    # of this pipeline provides, records the sentence encoder as skipped for that reason
    needs=NEEDS, family_needs={"gpt2": ("ln_final.w", "ln_final.b"), "bert": (*FAMILY_NEEDS["bert"], "lm_head")},
    libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS, "slides_prompts": SLIDES_PROMPTS, "top_k": 10, "n_generate": 3, "chunk": 64},
    figures={"entropy": plot_entropy}, files={"section.md": lens_section},
)
