"""Singular spectra of the attention matrices, and how much of each reads (or writes) the position subspace.

Layout: row vectors, y = x @ W, as in GPT-2's Conv1D `c_attn`/`c_proj`. The full
query map of a layer is W_Q.transpose(1, 0, 2).reshape(D, D): input dimension ×
(head, d_head), i.e. the first D columns of `c_attn.weight`; likewise W_K, W_V.
The full output map W_O.reshape(D, D) is `c_proj.weight`: (head, d_head) × output.

Anisotropy of a matrix with singular values σ_1 ≥ … ≥ σ_r: condition number
σ_1/σ_r, log-volume Σ log σ_i (the log of the volume scaling factor |det W|),
and Roy & Vetterli's effective rank exp(H(σ/Σσ)).

Alignment with P's top-k right-singular subspace B (orthonormal, D × k): the
fraction of a matrix's squared Frobenius norm that lies on B,

    a_k(W) = ‖Bᵀ W‖²_F / ‖W‖²_F = Σ_i σ_i² ‖Bᵀ u_i‖² / Σ_i σ_i²,

the squared overlap of its input singular vectors u_i with B weighted by σ_i²
(for W_O, the output side: ‖W_O B‖²_F / ‖W_O‖²_F). A uniformly random k-dimensional
subspace gives exactly k/D in expectation, so a_k/(k/D) is the enrichment over chance.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy.linalg import svd, svdvals

from analyses.toolkit import plotting
from analyses.toolkit.linalg import effective_rank, top_right_singular_vectors
from analyses.toolkit.subspaces import energy_fraction
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table
from analyses.engine.sources import ModelShape

MATRICES = ("Q", "K", "V", "O")


def per_head(tensors: Mapping[str, np.ndarray], layer: int, kind: str) -> np.ndarray:
    """W_kind of one layer in float64: [n_heads, D, d_head] for Q, K, V; [n_heads, d_head, D] for O."""
    return np.asarray(tensors[f"blocks.{layer}.attn.W_{kind}"], dtype=np.float64)


def full_matrix(tensors: Mapping[str, np.ndarray], layer: int, kind: str) -> np.ndarray:
    """The D × D map of one layer in the x @ W layout (input rows, output columns), float64."""
    W = per_head(tensors, layer, kind)
    if kind == "O":
        return W.reshape(-1, W.shape[-1])
    return W.transpose(1, 0, 2).reshape(W.shape[1], -1)


def anisotropy(singular_values: np.ndarray) -> dict[str, float]:
    """Condition number σ_max/σ_min, log-volume Σ log σ, and effective rank of a full-rank spectrum."""
    s = np.sort(np.asarray(singular_values, dtype=np.float64))[::-1]
    if s[-1] <= 0:
        raise ValueError("the spectrum has a zero singular value: condition number and log-volume are infinite")
    return {"sigma_max": float(s[0]), "sigma_min": float(s[-1]), "condition": float(s[0] / s[-1]),
            "log_volume": float(np.log(s).sum()), "effective_rank": effective_rank(s)}


def input_gain(tensors: Mapping[str, np.ndarray], shape: ModelShape, layer: int) -> np.ndarray:
    """The LayerNorm gain γ applied to the residual stream just before layer `layer`'s attention reads it.

    GPT-2 (pre-LN): that layer's ln1. BERT (post-LN): the embedding LayerNorm for layer 0, else the
    previous layer's ln2 (the stream a BERT layer reads is the previous layer's normalised output).
    """
    if shape.family == "gpt2":
        name = f"blocks.{layer}.ln1.w"
    else:
        name = "embed.ln.w" if layer == 0 else f"blocks.{layer - 1}.ln2.w"
    return np.asarray(tensors[name], dtype=np.float64)


# ---------------------------------------------------------------------------
# Spectra and anisotropy


def attention_spectra(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, reference_model: str,
                      reference_layer: int, reference: Mapping[str, float]) -> Result:
    """Singular values and anisotropy of every full attention matrix and of every head's block."""
    L, H, D = shape.n_layers, shape.n_heads, shape.d_model
    spectra = np.zeros((L, len(MATRICES), D))
    rows, head_rows = [], []
    head_stats = np.zeros((L, len(MATRICES), H, 3))  # condition, log-volume, effective rank
    for layer in range(L):
        for m, kind in enumerate(MATRICES):
            s = svdvals(full_matrix(tensors, layer, kind), check_finite=False)
            spectra[layer, m] = s
            a = anisotropy(s)
            rows.append((layer, f"W_{kind}", a["sigma_max"], a["sigma_min"], a["condition"], a["log_volume"],
                         a["effective_rank"]))
            for head, block in enumerate(per_head(tensors, layer, kind)):
                b = anisotropy(svdvals(block, check_finite=False))
                head_stats[layer, m, head] = b["condition"], b["log_volume"], b["effective_rank"]
                head_rows.append((layer, head, f"W_{kind}", b["condition"], b["log_volume"], b["effective_rank"]))
    table = Table(("layer", "matrix", "σ_max", "σ_min", "condition", "log-volume", "effective rank"), tuple(rows),
                  formats={"σ_max": ".3f", "σ_min": ".2e", "condition": ".3g", "log-volume": ".1f",
                           "effective rank": ".1f"})
    heads = Table(("layer", "head", "matrix", "condition", "log-volume", "effective rank"), tuple(head_rows),
                  formats={"condition": ".3g", "log-volume": ".2f", "effective rank": ".2f"})
    cond = np.array(table.column("condition")).reshape(L, len(MATRICES))
    erank = np.array(table.column("effective rank")).reshape(L, len(MATRICES))
    numbers = {
        "n_matrices": Number(len(rows), "d", "full attention matrices analysed (layers × Q, K, V, O)"),
        "n_head_blocks": Number(len(head_rows), "d", "per-head blocks analysed"),
        "condition_min": Number(cond.min(), "sci2", "smallest condition number of a full matrix"),
        "condition_max": Number(cond.max(), "sci2", "largest condition number of a full matrix"),
        "effective_rank_min": Number(erank.min(), ".1f", "smallest effective rank of a full matrix"),
        "effective_rank_max": Number(erank.max(), ".1f", "largest effective rank of a full matrix"),
        "head_effective_rank_min": Number(head_stats[..., 2].min(), ".1f",
                                          "smallest effective rank of a per-head block (at most d_head)"),
        "head_effective_rank_median": Number(float(np.median(head_stats[..., 2])), ".1f",
                                             "median effective rank of a per-head block"),
    }
    for m, kind in enumerate(MATRICES):
        k = kind.lower()
        numbers[f"condition_median_{k}"] = Number(float(np.median(cond[:, m])), "sci2",
                                                  f"median over layers of the condition number of W_{kind}")
        numbers[f"effective_rank_median_{k}"] = Number(float(np.median(erank[:, m])), ".1f",
                                                       f"median over layers of the effective rank of W_{kind}")
        low = int(np.argmin(erank[:, m]))
        numbers[f"effective_rank_min_layer_{k}"] = Number(low, "d", f"layer with the lowest effective rank of W_{kind}")
        numbers[f"effective_rank_min_{k}"] = Number(erank[low, m], ".1f", f"lowest effective rank of W_{kind}")
    tables = {"anisotropy": table, "anisotropy_heads": heads}
    if shape.name == reference_model:
        ref = anisotropy(spectra[reference_layer, 0])
        ref_rows = []
        for key, label, fmt in (("log_volume", "log-volume Σ log σ", ".2f"),
                                ("effective_rank", "effective rank exp(H)", ".2f"),
                                ("condition", "condition number σ_max/σ_min", "sci2")):
            numbers[f"ref_{key}"] = Number(reference[key], fmt, f"{label} of layer-{reference_layer} W_Q, as reported")
            numbers[f"layer{reference_layer}_wq_{key}"] = Number(ref[key], fmt,
                                                                 f"{label} of layer-{reference_layer} W_Q, recomputed")
            ref_rows.append((label, reference[key], ref[key]))
        numbers["reference_layer"] = Number(reference_layer, "d", "layer of the reported W_Q anisotropy values")
        tables["reference"] = Table(("quantity", "reported", "recomputed"), tuple(ref_rows),
                                    formats={"reported": ".5g", "recomputed": ".5g"})
    return Result(numbers, tables, {"spectra": spectra, "head_stats": head_stats})


def plot_spectra(result: Result, shape: ModelShape):
    """Singular values against rank for W_Q, W_K, W_V, W_O, one line per layer, log scale."""
    spectra = result.arrays["spectra"]
    plt = plotting.pyplot()
    cmap = plt.get_cmap(plotting.SEQUENTIAL)
    fig, axes = plotting.subplots(1, 4, figsize=(10, 3.2), sharey=True)
    rank = np.arange(1, spectra.shape[-1] + 1)
    for m, (ax, kind) in enumerate(zip(axes, MATRICES)):
        for layer in range(spectra.shape[0]):
            ax.plot(rank, spectra[layer, m], lw=0.9, color=cmap(layer / max(1, spectra.shape[0] - 1)), rasterized=True)
        ax.set_yscale("log")
        ax.set_title(f"W_{kind}")
        ax.set_xlabel("rank i")
    axes[0].set_ylabel("singular value σ_i (log scale)")
    norm = plt.Normalize(0, spectra.shape[0] - 1)
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, fraction=0.02, pad=0.02)
    bar.set_label("layer")
    fig.suptitle(f"{shape.name}: singular spectra of the {shape.d_model}×{shape.d_model} attention matrices",
                 y=1.02)
    return fig


def plot_head_effective_rank(result: Result, shape: ModelShape):
    """Effective rank of every head's block (at most d_head), layers × heads, for Q, K, V, O."""
    erank = result.arrays["head_stats"][..., 2]
    fig, axes = plotting.subplots(1, 4, figsize=(10, 3.0), sharey=True)
    for m, (ax, kind) in enumerate(zip(axes, MATRICES)):
        image = ax.imshow(erank[:, m], cmap=plotting.SEQUENTIAL, vmin=0, vmax=shape.d_head, aspect="auto",
                          interpolation="nearest")
        ax.set_title(f"W_{kind} per head")
        ax.set_xlabel("head")
    axes[0].set_ylabel("layer")
    plotting.colorbar(fig, image, axes[-1], f"effective rank (max {shape.d_head})")
    fig.suptitle(f"{shape.name}: effective rank of each head's {shape.d_head}-dimensional block", y=1.02)
    return fig


register(
    "attention_spectra", "Singular spectra and anisotropy of the attention matrices", attention_spectra,
    needs=("blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.W_V", "blocks.*.attn.W_O"),
    params={"reference_model": "gpt2", "reference_layer": 5,
            "reference": {"log_volume": 393.94, "effective_rank": 535.52, "condition": 3.48e4}},
    figures={"spectra": plot_spectra, "head_effective_rank": plot_head_effective_rank},
)

# ---------------------------------------------------------------------------
# Alignment with the position subspace

VARIANTS = (("Q", "raw"), ("K", "raw"), ("V", "raw"), ("Q", "γ-folded"), ("K", "γ-folded"), ("V", "γ-folded"),
            ("O", "output"))
"""Columns of the alignment heatmap: raw input side, input side with the LayerNorm gain folded in, W_O's output."""


def column_label(kind: str, variant: str) -> str:
    return {"raw": f"W_{kind}", "γ-folded": f"diag(γ)W_{kind}", "output": f"W_{kind} (writes)"}[variant]


def attention_alignment(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, ks: tuple[int, ...],
                        n_overlap_vectors: int, overlap_k: int) -> Result:
    """Enrichment a_k(W)/(k/D) of every attention matrix on P's top-k uncentred right-singular subspace.

    "γ-folded" reads diag(γ) W with γ the gain of the LayerNorm in front of the layer: a unit direction of
    the residual stream reaches W only after that per-dimension scaling, so this is what the stream drives.
    """
    L, D = shape.n_layers, shape.d_model
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    basis = top_right_singular_vectors(P, max(ks))
    enrichment = np.zeros((len(ks), L, len(VARIANTS)))
    for layer in range(L):
        gain = input_gain(tensors, shape, layer)
        for c, (kind, variant) in enumerate(VARIANTS):
            W = full_matrix(tensors, layer, kind)
            if variant == "γ-folded":
                W = gain[:, None] * W
            side = "output" if variant == "output" else "input"
            for i, k in enumerate(ks):
                enrichment[i, layer, c] = energy_fraction(W, basis[:, :k], side) / (k / D)
    rows = tuple((layer, column_label(*VARIANTS[c]), *(enrichment[i, layer, c] for i in range(len(ks))))
                 for layer in range(L) for c in range(len(VARIANTS)))
    table = Table(("layer", "matrix", *(f"k = {k}" for k in ks)), rows, formats={f"k = {k}": ".2f" for k in ks})
    # squared overlaps of layer 0's leading singular vectors with P's leading directions
    overlaps = []
    gain0 = input_gain(tensors, shape, 0)
    for kind, variant in VARIANTS:
        W = full_matrix(tensors, 0, kind)
        if variant == "γ-folded":
            W = gain0[:, None] * W
        U, _, Vt = svd(W, full_matrices=False, check_finite=False)
        vectors = U if variant != "output" else Vt.T
        overlaps.append((vectors[:, :n_overlap_vectors].T @ basis[:, :overlap_k]) ** 2)
    numbers = {"overlap_k": Number(overlap_k, "d", "P directions in the layer-0 overlap figure"),
               "l0_top_overlap_k": Number(float(np.max(overlaps[1])), ".2f",
                                          "largest squared overlap of a leading W_K singular vector, layer 0"),
               "n_overlap_vectors": Number(n_overlap_vectors, "d", "singular vectors per matrix in that figure")}
    for i, k in enumerate(ks):
        numbers[f"l0_gain_ratio_k{k}"] = Number(
            np.sum((gain0[:, None] * basis[:, :k]) ** 2) / k / np.mean(gain0**2), ".2f",
            f"layer 0: mean γ² along P's top-{k} directions relative to the mean γ² of all dimensions")
        numbers[f"chance_k{k}"] = Number(k / D, ".2%", f"chance share k/D of a random {k}-dimensional subspace")
        for c, (kind, variant) in enumerate(VARIANTS):
            tag = {"raw": "", "γ-folded": "_folded", "output": ""}[variant]
            numbers[f"l0_{kind.lower()}{tag}_k{k}"] = Number(
                enrichment[i, 0, c], ".1f", f"layer 0, {column_label(kind, variant)}: enrichment at k = {k}")
            numbers[f"l0_{kind.lower()}{tag}_share_k{k}"] = Number(
                enrichment[i, 0, c] * k / D, ".1%", f"layer 0, {column_label(kind, variant)}: share a_k at k = {k}")
        later = enrichment[i, 1:]
        numbers[f"later_max_k{k}"] = Number(later.max(), ".1f", f"largest enrichment in layers ≥ 1 at k = {k}")
        where = np.unravel_index(int(np.argmax(later)), later.shape)
        numbers[f"later_max_layer_k{k}"] = Number(int(where[0]) + 1, "d", f"layer of that maximum at k = {k}")
        numbers[f"later_max_matrix_k{k}"] = Number(int(where[1]), "d",
                                                   f"column of that maximum ({', '.join(column_label(*v) for v in VARIANTS)})")
        mid = enrichment[i, 3:] if L > 3 else later
        numbers[f"deep_median_k{k}"] = Number(float(np.median(mid)), ".2f",
                                              f"median enrichment over layers ≥ 3 and all columns at k = {k}")
    return Result(numbers, {"alignment": table},
                  {"enrichment": enrichment, "ks": np.array(ks), "overlaps": np.array(overlaps)})


def plot_alignment(result: Result, shape: ModelShape):
    """Enrichment over chance (log colour, centred at 1) for every layer and matrix, one panel per k."""
    enrichment, ks = result.arrays["enrichment"], result.arrays["ks"]
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    top = float(np.ceil(np.abs(np.log10(enrichment)).max() * 10) / 10)
    norm = LogNorm(vmin=10**-top, vmax=10**top)
    fig, axes = plotting.subplots(1, len(ks), figsize=(3.0 * len(ks), 4.2), sharey=True)
    for ax, i in zip(np.atleast_1d(axes), range(len(ks))):
        image = ax.imshow(enrichment[i], cmap=plotting.DIVERGING, norm=norm, aspect="auto", interpolation="nearest")
        ax.set_xticks(range(len(VARIANTS)), [column_label(*v) for v in VARIANTS], rotation=60, ha="right",
                      fontsize=8)
        ax.set_title(f"top-{ks[i]} subspace of P")
    np.atleast_1d(axes)[0].set_ylabel("layer")
    plotting.colorbar(fig, image, list(np.atleast_1d(axes)), "enrichment a_k / (k/D) (log scale, 1 = chance)")
    fig.suptitle(f"{shape.name}: how much each attention matrix reads (or W_O writes) P's top-k directions",
                 y=1.0)
    return fig


def plot_overlaps(result: Result, shape: ModelShape):
    """Squared overlaps (u_i·v_j)² of layer 0's leading singular vectors with P's leading right-singular vectors."""
    overlaps = result.arrays["overlaps"]
    plotting.pyplot()
    from matplotlib.colors import PowerNorm

    fig, axes = plotting.subplots(1, len(VARIANTS), figsize=(12, 3.4), sharey=True)
    for ax, M, (kind, variant) in zip(axes, overlaps, VARIANTS):
        image = ax.imshow(M, cmap=plotting.SEQUENTIAL, norm=PowerNorm(0.5, vmin=0, vmax=1), aspect="auto",
                          interpolation="nearest")
        ax.set_title(column_label(kind, variant), fontsize=9)
        ax.set_xlabel("direction j of P")
        ax.set_xticks(range(0, M.shape[1], 3), [str(j + 1) for j in range(0, M.shape[1], 3)])
    axes[0].set_ylabel("singular vector i (by size)")
    axes[0].set_yticks(range(0, overlaps.shape[1], 3), [str(i + 1) for i in range(0, overlaps.shape[1], 3)])
    plotting.colorbar(fig, image, list(axes), "squared overlap (square-root scale)")
    fig.suptitle(f"{shape.name}, layer 0: leading singular vectors (input side; W_O: output side) "
                 "against P's top right-singular vectors", y=1.03)
    return fig


register(
    "attention_alignment", "Alignment of the attention matrices with the position subspace", attention_alignment,
    needs=("W_pos", "blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.W_V", "blocks.*.attn.W_O",
           "blocks.*.ln1.w"),
    params={"ks": (1, 3, 10, 30), "n_overlap_vectors": 16, "overlap_k": 10},
    figures={"alignment": plot_alignment, "overlaps": plot_overlaps},
)
