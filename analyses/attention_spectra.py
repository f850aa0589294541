"""Singular spectra of the attention matrices, and how much of each reads (or writes) the position subspace.

Layout: row vectors, y = x @ W, as in GPT-2's Conv1D `c_attn`/`c_proj`. The full
query map of a layer is W_Q.transpose(1, 0, 2).reshape(D, D): input dimension ×
(head, d_head), i.e. the first D columns of `c_attn.weight`; likewise W_K, W_V.
The full output map W_O.reshape(D, D) is `c_proj.weight`: (head, d_head) × output.

Anisotropy of a matrix with singular values σ_1 ≥ … ≥ σ_r: condition number
σ_1/σ_r, log-volume Σ log σ_i (the log of the volume scaling factor |det W|),
and Roy & Vetterli's effective rank exp(H(σ/Σσ)). Each is set against random matrices of the
same shape and Frobenius norm (`toolkit.random_matrices`): Gaussian ones (the Marchenko–Pastur
limit of the effective rank, the exact Gaussian mean of the log-volume, Edelman's limit law of the
condition number, and a few draws), and the matrix's own entries shuffled, which keeps their
distribution (heavy tails included) and destroys every arrangement. A matrix is more anisotropic
than noise only where a statistic falls outside these baselines.

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

from analyses.toolkit import plotting
from analyses.toolkit import random_matrices as rm
from analyses.toolkit.attention import VARIANTS, column_label, full_matrix, input_gain, per_head, variant_matrix
from analyses.toolkit.linalg import effective_rank, gram_singular_values, top_right_singular_vectors
from analyses.toolkit.subspaces import energy_fraction
from analyses.engine.registry import register
from analyses.engine.results import Accuracy, Number, Result, Table
from analyses.engine.sources import ModelShape

MATRICES = ("Q", "K", "V", "O")


def anisotropy(singular_values: np.ndarray) -> dict[str, float]:
    """Condition number σ_max/σ_min, log-volume Σ log σ, and effective rank of a full-rank spectrum."""
    s = np.sort(np.asarray(singular_values, dtype=np.float64))[::-1]
    if s[-1] <= 0:
        raise ValueError("the spectrum has a zero singular value: condition number and log-volume are infinite")
    return {"sigma_max": float(s[0]), "sigma_min": float(s[-1]), "condition": float(s[0] / s[-1]),
            "log_volume": float(np.log(s).sum()), "effective_rank": effective_rank(s)}


# ---------------------------------------------------------------------------
# Spectra and anisotropy, against random matrices of the same shape and norm


def _edelman_quantile(level: float) -> float:
    """x with exp(−2/x − 2/x²) = level: the `level` quantile of Edelman's limit law of κ/n."""
    from scipy.optimize import brentq

    return float(brentq(lambda x: np.exp(-2 / x - 2 / x**2) - level, 1e-3, 1e9, xtol=1e-12, rtol=1e-14))


GRAM = Accuracy(rel=2e-5, basis="float64 Gram eigenvalues: the smallest singular value taken from them errs by "
                                "about n·u·κ² relative (n·u ≈ 1e-13 for reductions of 10³ terms), about 1e-6 for "
                                "the condition numbers of a few thousand that shuffled matrices have (the perturbation "
                                "check measured up to 1.1e-6, OpenBLAS's Haswell kernel, one thread); declared 2e-5, "
                                "so that a tenfold margin holds; a printed digit it leaves undetermined is dropped")
"""The accuracy of a baseline's condition number (and of what its smallest singular values decide: its log-volume)."""
SMALLEST = Accuracy(rel=1e-6, basis="a smallest singular value from a backward-stable SVD errs by about n·u·‖A‖, "
                                    "relative n·u·κ ≈ 1e-7 for condition numbers κ up to 1e6; so does what it "
                                    "decides (the condition number, its Gaussian tail probability)")
"""The accuracy of an observed matrix's smallest singular value and condition number."""
LOG_VOLUME = Accuracy(abs=1e-5, basis="Σ log σ_i from a backward-stable SVD: each log σ_i errs by about n·u·κ_i, "
                                      "the sum by about n·u·κ ≈ 1e-7 for κ up to 1e6")
"""The accuracy of an observed matrix's log-volume (and of its gaps to the baselines' means)."""


def attention_spectra(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, reference_model: str,
                      reference_layer: int, reference: Mapping[str, float], n_gaussian: int, n_shuffles: int,
                      seed: int, alpha: float) -> Result:
    """Singular values and anisotropy of every full attention matrix and every head's block, each against
    Gaussian matrices of the same shape and Frobenius norm and against its own entries shuffled."""
    L, D = shape.n_layers, shape.d_model
    rng = np.random.default_rng(seed)
    # Gaussian draws: condition number and effective rank do not depend on the norm, so one set of draws per
    # shape serves every matrix; the log-volume is compared with its exact Gaussian mean for each matrix's norm.
    # Baseline spectra come from Gram eigenvalues (their condition numbers stay below ~1e5, where that is
    # accurate to ~1e-6); the observed matrices, with condition numbers up to ~1e6, get a full SVD.
    gauss = [anisotropy(gram_singular_values(rng.standard_normal((D, D)))) for _ in range(n_gaussian)]
    gauss_erank = np.array([g["effective_rank"] for g in gauss])
    gauss_log_volume = np.array([g["log_volume"] - D * np.log(np.sqrt(float(D * D))) for g in gauss])
    erank_limit = rm.mp_effective_rank_fraction(1.0) * D

    spectra, rows, base_rows, head_rows, head_stats = _measure(tensors, shape, rng, n_shuffles, erank_limit)
    table = Table(("layer", "matrix", "σ_max", "σ_min", "condition", "log-volume", "effective rank"), tuple(rows),
                  formats={"σ_max": ".3f", "σ_min": ".2e", "condition": ".3g", "log-volume": ".1f",
                           "effective rank": ".1f"},
                  accuracy={"σ_min": SMALLEST, "condition": SMALLEST, "log-volume": LOG_VOLUME})
    baselines = Table(
        ("layer", "matrix", "condition", "Gaussian P(κ ≥ condition)", "condition, shuffled", "effective rank",
         "effective rank / Gaussian", "effective rank, shuffled", "log-volume − Gaussian mean",
         "log-volume − shuffled"), tuple(base_rows),
        formats={"condition": ".3g", "Gaussian P(κ ≥ condition)": ".3f", "condition, shuffled": ".3g",
                 "effective rank": ".1f", "effective rank / Gaussian": ".3f", "effective rank, shuffled": ".1f",
                 "log-volume − Gaussian mean": ".0f", "log-volume − shuffled": ".0f"},
        accuracy={"condition": SMALLEST, "Gaussian P(κ ≥ condition)": SMALLEST, "condition, shuffled": GRAM,
                  "log-volume − Gaussian mean": LOG_VOLUME, "log-volume − shuffled": GRAM})
    heads = Table(("layer", "head", "matrix", "condition", "log-volume", "effective rank"), tuple(head_rows),
                  formats={"condition": ".3g", "log-volume": ".2f", "effective rank": ".2f"})
    cond = np.array(table.column("condition")).reshape(L, len(MATRICES))
    erank = np.array(table.column("effective rank")).reshape(L, len(MATRICES))
    tails = np.array([r[3] for r in base_rows])
    numbers = _full_matrix_numbers(rows, base_rows, head_rows, head_stats, cond, erank, tails, gauss, gauss_erank,
                                   gauss_log_volume, erank_limit, D=D, n_gaussian=n_gaussian, n_shuffles=n_shuffles,
                                   seed=seed, alpha=alpha)
    numbers |= _head_numbers(shape, rng, n_gaussian, head_stats) | _per_matrix_numbers(cond, erank)
    tables = {"anisotropy": table, "baselines": baselines, "anisotropy_heads": heads}
    if shape.name == reference_model:
        reference_numbers, tables["reference"] = _reference(spectra, reference_layer, reference, D)
        numbers |= reference_numbers
    mp = rm.mp_singular_quantiles(1.0, D)
    return Result(numbers, tables, {"spectra": spectra, "head_stats": head_stats, "mp": mp,
                                    "norms": np.sqrt((spectra**2).sum(axis=-1)),
                                    "gauss_erank": gauss_erank, "erank": erank, "cond": cond,
                                    "shuffled": np.array([[r[4], r[7]] for r in base_rows]).reshape(L, len(MATRICES), 2),
                                    "erank_limit": np.array(erank_limit)}, {"shuffled": GRAM, "cond": SMALLEST})


def _measure(tensors: Mapping[str, np.ndarray], shape: ModelShape, rng: np.random.Generator, n_shuffles: int,
             erank_limit: float):
    """(spectra, rows, baseline rows, head rows, head statistics): every full matrix's singular values and
    anisotropy against its own entries shuffled, and every head block's anisotropy."""
    from scipy.linalg import svdvals

    L, H, D = shape.n_layers, shape.n_heads, shape.d_model
    spectra = np.zeros((L, len(MATRICES), D))
    rows, base_rows, head_rows = [], [], []
    head_stats = np.zeros((L, len(MATRICES), H, 3))  # condition, log-volume, effective rank
    for layer in range(L):
        for m, kind in enumerate(MATRICES):
            W = full_matrix(tensors, layer, kind)
            s = svdvals(W, check_finite=False)
            spectra[layer, m] = s
            a = anisotropy(s)
            shuffled = [anisotropy(gram_singular_values(rm.shuffled_entries(W, rng))) for _ in range(n_shuffles)]
            rows.append((layer, f"W_{kind}", a["sigma_max"], a["sigma_min"], a["condition"], a["log_volume"],
                         a["effective_rank"]))
            gauss_lv = rm.gaussian_log_volume_mean((D, D), float(np.linalg.norm(W)))
            sh = {k: float(np.mean([x[k] for x in shuffled])) if shuffled else float("nan")
                  for k in ("condition", "log_volume", "effective_rank")}
            base_rows.append((layer, f"W_{kind}", a["condition"], rm.condition_tail_probability(a["condition"], D),
                              sh["condition"], a["effective_rank"], a["effective_rank"] / erank_limit,
                              sh["effective_rank"], a["log_volume"] - gauss_lv, a["log_volume"] - sh["log_volume"]))
            blocks = per_head(tensors, layer, kind)
            for head, sv in enumerate(gram_singular_values(blocks)):
                b = anisotropy(sv)
                head_stats[layer, m, head] = b["condition"], b["log_volume"], b["effective_rank"]
                head_rows.append((layer, head, f"W_{kind}", b["condition"], b["log_volume"], b["effective_rank"]))
    return spectra, rows, base_rows, head_rows, head_stats


def _full_matrix_numbers(rows, base_rows, head_rows, head_stats, cond, erank, tails, gauss, gauss_erank,
                         gauss_log_volume, erank_limit, *, D: int, n_gaussian: int, n_shuffles: int, seed: int,
                         alpha: float) -> dict:
    """The cited numbers of the full matrices against their Gaussian and shuffled baselines."""
    from scipy.stats import binom

    n_matrices, n_below_alpha = cond.size, int(np.sum(tails < alpha))
    numbers = {
        "n_matrices": Number(len(rows), "d", "full attention matrices analysed (layers × Q, K, V, O)"),
        "n_head_blocks": Number(len(head_rows), "d", "per-head blocks analysed"),
        "condition_min": Number(cond.min(), "sci2", "smallest condition number of a full matrix", SMALLEST),
        "condition_max": Number(cond.max(), "sci2", "largest condition number of a full matrix", SMALLEST),
        "effective_rank_min": Number(erank.min(), ".1f", "smallest effective rank of a full matrix"),
        "effective_rank_max": Number(erank.max(), ".1f", "largest effective rank of a full matrix"),
        "head_effective_rank_min": Number(head_stats[..., 2].min(), ".1f",
                                          "smallest effective rank of a per-head block (at most d_head)"),
        "head_effective_rank_median": Number(float(np.median(head_stats[..., 2])), ".1f",
                                             "median effective rank of a per-head block"),
        # baselines
        "n_gaussian": Number(n_gaussian, "d", "Gaussian D × D draws (shared by all full matrices)"),
        "n_shuffles": Number(n_shuffles, "d", "shuffles of each matrix's own entries"),
        "seed": Number(seed, "d", "seed of the baseline draws"),
        "gaussian_effective_rank_limit": Number(erank_limit, ".1f",
                                                "effective rank of a D × D noise matrix, Marchenko–Pastur limit"),
        "gaussian_effective_rank_mean": Number(float(gauss_erank.mean()), ".1f", "mean effective rank of the Gaussian draws"),
        "gaussian_effective_rank_sd": Number(float(gauss_erank.std(ddof=1)) if n_gaussian > 1 else 0.0, ".2f",
                                             "standard deviation of the effective rank over the Gaussian draws"),
        "effective_rank_ratio_min": Number(float(erank.min() / erank_limit), ".0%",
                                           "smallest effective rank as a share of the Gaussian limit"),
        "effective_rank_ratio_max": Number(float(erank.max() / erank_limit), ".0%",
                                           "largest effective rank as a share of the Gaussian limit"),
        "effective_rank_gap_min_sd": Number(float((erank_limit - erank.max()) / gauss_erank.std(ddof=1))
                                            if n_gaussian > 1 else 0.0, ".0f",
                                            "smallest gap below the Gaussian limit, in Gaussian standard deviations"),
        "n_effective_rank_below_gaussian": Number(int(np.sum(erank < gauss_erank.min())), "d",
                                                  "full matrices whose effective rank is below every Gaussian draw"),
        "shuffled_effective_rank_min": Number(float(min(r[7] for r in base_rows)), ".1f",
                                              "smallest effective rank of a shuffled matrix"),
        "shuffled_effective_rank_max": Number(float(max(r[7] for r in base_rows)), ".1f",
                                              "largest effective rank of a shuffled matrix"),
        "shuffled_condition_min": Number(float(min(r[4] for r in base_rows)), "sci2",
                                         "smallest condition number of a shuffled matrix", GRAM),
        "shuffled_condition_max": Number(float(max(r[4] for r in base_rows)), "sci2",
                                         "largest condition number of a shuffled matrix", GRAM),
        "gaussian_condition_median": Number(_edelman_quantile(0.5) * D, "sci2",
                                            "median condition number of a D × D Gaussian matrix (Edelman's limit law)"),
        "gaussian_condition_p95": Number(_edelman_quantile(0.95) * D, "sci2",
                                         "95th percentile of the same law"),
        "gaussian_draw_condition_min": Number(min(g["condition"] for g in gauss), "sci2",
                                              "smallest condition number among the Gaussian draws", GRAM),
        "gaussian_draw_condition_max": Number(max(g["condition"] for g in gauss), "sci2",
                                              "largest condition number among the Gaussian draws", GRAM),
        "condition_tail_min": Number(float(tails.min()), ".4f",
                                     "smallest Gaussian tail probability P(κ ≥ observed) of a full matrix", SMALLEST),
        "alpha": Number(alpha, "g", "significance level for the condition-number tail"),
        "n_condition_below_alpha": Number(n_below_alpha, "d", "full matrices with Gaussian tail probability < alpha"),
        "n_condition_expected": Number(alpha * n_matrices, ".1f", "expected count if all were Gaussian, alpha × count"),
        "condition_count_p": Number(float(binom.sf(n_below_alpha - 1, n_matrices, alpha)), "sci2",
                                    "P(at least that many below alpha among independent Gaussian matrices), binomial"),
        "n_condition_below_bonferroni": Number(int(np.sum(tails < alpha / n_matrices)), "d",
                                               "full matrices with tail probability < alpha / count (Bonferroni)"),
        "log_volume_gap_min": Number(float(max(r[8] for r in base_rows)), ".0f",
                                     "smallest (least negative) log-volume minus its Gaussian mean", LOG_VOLUME),
        "log_volume_gap_max": Number(float(min(r[8] for r in base_rows)), ".0f",
                                     "most negative log-volume minus its Gaussian mean", LOG_VOLUME),
        "gaussian_log_volume_sd": Number(float(gauss_log_volume.std(ddof=1)) if n_gaussian > 1 else 0.0, ".2f",
                                         "standard deviation of the log-volume over the norm-matched Gaussian draws", GRAM),
        "shuffled_log_volume_gap_min": Number(float(max(r[9] for r in base_rows)), ".0f",
                                              "smallest (least negative) log-volume minus that of the shuffled matrix",
                                              GRAM),
        "shuffled_log_volume_gap_max": Number(float(min(r[9] for r in base_rows)), ".0f",
                                              "most negative log-volume minus that of the shuffled matrix", GRAM),
    }
    return numbers


def _head_numbers(shape: ModelShape, rng: np.random.Generator, n_gaussian: int, head_stats: np.ndarray) -> dict:
    """The head blocks against D × d_head Gaussian noise."""
    D = shape.d_model
    # per-head blocks: D × d_head noise has aspect ratio d_head / D
    ratio = shape.d_head / D
    low, high = rm.mp_singular_edges(ratio)
    head_limit = rm.mp_effective_rank_fraction(ratio) * shape.d_head
    head_gauss = [anisotropy(gram_singular_values(rng.standard_normal((D, shape.d_head)))) for _ in range(n_gaussian)]
    return {
        "head_gaussian_effective_rank_limit": Number(head_limit, ".1f",
                                                     "effective rank of a D × d_head noise block, Marchenko–Pastur limit"),
        "head_gaussian_condition_limit": Number(high / low, ".2f",
                                                "condition number of a D × d_head noise block, (1 + √λ)/(1 − √λ)"),
        "head_gaussian_draw_condition_max": Number(max(g["condition"] for g in head_gauss), ".2f",
                                                   "largest condition number among the Gaussian D × d_head draws"),
        "head_n_effective_rank_below_gaussian": Number(int(np.sum(head_stats[..., 2] < min(
            g["effective_rank"] for g in head_gauss))), "d", "head blocks with effective rank below every Gaussian draw"),
        "head_condition_median": Number(float(np.median(head_stats[..., 0])), ".1f",
                                        "median condition number of a head block"),
    }


def _per_matrix_numbers(cond: np.ndarray, erank: np.ndarray) -> dict:
    """Per kind of matrix: the medians over layers, and the layer of the lowest effective rank."""
    numbers = {}
    for m, kind in enumerate(MATRICES):
        k = kind.lower()
        numbers[f"condition_median_{k}"] = Number(float(np.median(cond[:, m])), "sci2",
                                                  f"median over layers of the condition number of W_{kind}", SMALLEST)
        numbers[f"effective_rank_median_{k}"] = Number(float(np.median(erank[:, m])), ".1f",
                                                       f"median over layers of the effective rank of W_{kind}")
        low_layer = int(np.argmin(erank[:, m]))
        numbers[f"effective_rank_min_layer_{k}"] = Number(low_layer, "d",
                                                          f"layer with the lowest effective rank of W_{kind}")
        numbers[f"effective_rank_min_{k}"] = Number(erank[low_layer, m], ".1f", f"lowest effective rank of W_{kind}")
    return numbers


def _reference(spectra: np.ndarray, reference_layer: int, reference: Mapping[str, float], D: int):
    """(numbers, table): the reported anisotropy of one layer's W_Q beside its recomputation."""
    numbers = {}
    ref = anisotropy(spectra[reference_layer, 0])
    ref_rows = []
    for key, label, fmt, accuracy in (("log_volume", "log-volume Σ log σ", ".2f", LOG_VOLUME),
                                      ("effective_rank", "effective rank exp(H)", ".2f", None),
                                      ("condition", "condition number σ_max/σ_min", "sci2", SMALLEST)):
        numbers[f"ref_{key}"] = Number(reference[key], fmt, f"{label} of layer-{reference_layer} W_Q, as reported")
        numbers[f"layer{reference_layer}_wq_{key}"] = Number(ref[key], fmt,
                                                             f"{label} of layer-{reference_layer} W_Q, recomputed",
                                                             accuracy)
        ref_rows.append((label, reference[key], ref[key]))
    numbers["reference_layer"] = Number(reference_layer, "d", "layer of the reported W_Q anisotropy values")
    numbers[f"layer{reference_layer}_wq_log10_volume"] = Number(
        ref["log_volume"] / np.log(10), ".2f", f"log10 of the volume factor ∏σ of layer-{reference_layer} W_Q",
        LOG_VOLUME)
    numbers[f"layer{reference_layer}_wq_entropy"] = Number(
        float(np.log(ref["effective_rank"])), ".4f",
        f"spectral entropy H = log(effective rank) of layer-{reference_layer} W_Q (nats, non-negative)")
    numbers[f"layer{reference_layer}_wq_condition_tail"] = Number(
        rm.condition_tail_probability(ref["condition"], D), ".3f",
        f"Gaussian P(κ ≥ condition) of layer-{reference_layer} W_Q", SMALLEST)
    numbers["float32_max_log10"] = Number(float(np.log10(np.finfo(np.float32).max)), ".2f",
                                          "log10 of the largest float32 number")
    table = Table(("quantity", "reported", "recomputed"), tuple(ref_rows),
                  formats={"reported": ".5g", "recomputed": ".5g"})
    return numbers, table


def plot_spectra(result: Result, shape: ModelShape):
    """Singular values in units of ‖W‖_F/√D against rank, one line per layer, with the Marchenko–Pastur positions."""
    spectra, norms, mp = result.arrays["spectra"], result.arrays["norms"], result.arrays["mp"]
    D = spectra.shape[-1]
    plt = plotting.pyplot()
    cmap = plt.get_cmap(plotting.SEQUENTIAL)
    fig, axes = plotting.subplots(2, 2, figsize=(plotting.MAX_WIDTH, 4.8), sharex=True, sharey=True)
    rank = np.arange(1, D + 1)
    for m, (ax, kind) in enumerate(zip(axes.flat, MATRICES)):
        for layer in range(spectra.shape[0]):
            ax.plot(rank, spectra[layer, m] * np.sqrt(D) / norms[layer, m], lw=0.9,
                    color=cmap(layer / max(1, spectra.shape[0] - 1)), rasterized=True)
        ax.plot(rank, mp, color="black", lw=1.3, ls="--", label="Marchenko–Pastur\n(noise, same norm)")
        ax.set_yscale("log")
        ax.set_title(f"$W_{kind}$")
    for ax in axes[1]:
        ax.set_xlabel("rank i")
    for ax in axes[:, 0]:
        ax.set_ylabel(r"$\sigma_i\,/\,(\Vert W\Vert_F\,D^{-1/2})$")  # no radical: its sign prints at 5.6 pt
    axes[0, 0].legend(loc="lower left")
    norm = plt.Normalize(0, spectra.shape[0] - 1)
    bar = fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, fraction=0.03, pad=0.02)
    bar.set_label("layer")
    return fig


def plot_baselines(result: Result, shape: ModelShape):
    """Effective rank and condition number of every full matrix against Gaussian and shuffled baselines."""
    erank, cond, shuffled = result.arrays["erank"], result.arrays["cond"], result.arrays["shuffled"]
    limit, D = float(result.arrays["erank_limit"]), shape.d_model
    fig, (left, right) = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 3.7))
    layers = np.arange(erank.shape[0])
    for m, kind in enumerate(MATRICES):
        left.plot(layers + (m - 1.5) * 0.12, erank[:, m], "o", ms=4, color=f"C{m}", label=f"$W_{kind}$")
        left.plot(layers + (m - 1.5) * 0.12, shuffled[:, m, 1], "x", ms=4, color=f"C{m}", alpha=0.6)
        right.plot(layers + (m - 1.5) * 0.12, cond[:, m] / D, "o", ms=4, color=f"C{m}")
        right.plot(layers + (m - 1.5) * 0.12, shuffled[:, m, 0] / D, "x", ms=4, color=f"C{m}", alpha=0.6)
    left.plot([], [], "x", ms=4, color="0.4", label="entries shuffled")
    left.axhline(limit, color="black", lw=1, ls="--", label="Gaussian limit")
    left.set_ylabel("effective rank")
    left.set_title("effective rank")
    for level, style in ((0.5, ":"), (0.95, "--"), (0.99, "-.")):
        x = _edelman_quantile(level)
        right.axhline(x, color="black", lw=1, ls=style, label=f"{level:.0%}")
    right.set_yscale("log")
    right.set_ylabel("condition number / D (log scale)")
    right.set_title("condition number")
    for ax in (left, right):
        ax.set_xlabel("layer")
        ax.set_xticks(layers[::2] if len(layers) > 8 else layers)
    # legends below the panels, read row by row: the matrices, then the baselines
    handles, labels = left.get_legend_handles_labels()
    order = [0, 2, 4, 1, 3, 5]
    left.legend([handles[i] for i in order], [labels[i] for i in order], ncol=2, loc="upper center",
                bbox_to_anchor=(0.5, -0.22))
    right.legend(ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.22), title="Gaussian quantiles")
    return fig


def plot_head_effective_rank(result: Result, shape: ModelShape):
    """Effective rank of every head's block (at most d_head), layers × heads, for Q, K, V, O."""
    erank = result.arrays["head_stats"][..., 2]
    n_layers, n_heads = erank.shape[0], erank.shape[2]
    fig, axes = plotting.subplots(1, 4, figsize=(plotting.MAX_WIDTH, 1.25 + 1.3 * n_layers / n_heads), sharey=True)
    for m, (ax, kind) in enumerate(zip(axes, MATRICES)):
        image = ax.imshow(erank[:, m], cmap=plotting.SEQUENTIAL, vmin=0, vmax=shape.d_head, aspect="auto",
                          interpolation="nearest")
        ax.set_title(f"$W_{kind}$ per head")
        ax.set_xlabel("head")
        ax.set_xticks(range(0, erank.shape[2], 4 if erank.shape[2] > 8 else 2))
    axes[0].set_ylabel("layer")
    axes[0].set_yticks(range(0, erank.shape[0], 2))
    bar = fig.colorbar(image, ax=list(axes), fraction=0.03, pad=0.02)
    bar.set_label(f"effective rank\n(max {shape.d_head})")
    return fig


register(
    "attention_spectra", "Singular spectra and anisotropy of the attention matrices, against random baselines",
    attention_spectra,
    needs=("blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.W_V", "blocks.*.attn.W_O"),
    params={"reference_model": "gpt2", "reference_layer": 5,
            "reference": {"log_volume": 393.94125, "effective_rank": 535.5224, "condition": 34819.75},
            "n_gaussian": 4, "n_shuffles": 1, "seed": 0, "alpha": 0.05},
    figures={"spectra": plot_spectra, "baselines": plot_baselines, "head_effective_rank": plot_head_effective_rank},
    groups=("first report", "notebook subset"),
)

# ---------------------------------------------------------------------------
# Alignment with the position subspace


def attention_alignment(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, ks: tuple[int, ...],
                        n_overlap_vectors: int, overlap_k: int) -> Result:
    """Enrichment a_k(W)/(k/D) of every attention matrix on P's top-k uncentred right-singular subspace.

    "γ-folded" reads diag(γ) W with γ the gain of the LayerNorm in front of the layer: a unit direction of
    the residual stream reaches W only after that per-dimension scaling, so this is what the stream drives.
    """
    from scipy.linalg import svd

    L, D = shape.n_layers, shape.d_model
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    basis = top_right_singular_vectors(P, max(ks))
    enrichment = np.zeros((len(ks), L, len(VARIANTS)))
    for layer in range(L):
        gain = input_gain(tensors, shape, layer)
        for c, (kind, variant) in enumerate(VARIANTS):
            W, side = variant_matrix(tensors, layer, kind, variant, gain)
            for i, k in enumerate(ks):
                enrichment[i, layer, c] = energy_fraction(W, basis[:, :k], side) / (k / D)
    rows = tuple((layer, column_label(*VARIANTS[c]), *(enrichment[i, layer, c] for i in range(len(ks))))
                 for layer in range(L) for c in range(len(VARIANTS)))
    table = Table(("layer", "matrix", *(f"k = {k}" for k in ks)), rows, formats={f"k = {k}": ".2f" for k in ks})
    # squared overlaps of layer 0's leading singular vectors with P's leading directions
    overlaps = []
    gain0 = input_gain(tensors, shape, 0)
    for kind, variant in VARIANTS:
        W, side = variant_matrix(tensors, 0, kind, variant, gain0)
        U, _, Vt = svd(W, full_matrices=False, check_finite=False)
        vectors = U if side == "input" else Vt.T
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
        kind, variant = VARIANTS[int(where[1])]
        layer = int(where[0]) + 1
        raw = VARIANTS.index((kind, "raw")) if (kind, "raw") in VARIANTS else int(where[1])
        numbers[f"later_max_raw_k{k}"] = Number(enrichment[i, layer, raw], ".1f",
                                                f"the raw W_{kind} of that layer: enrichment at k = {k}")
        gain = input_gain(tensors, shape, layer)
        numbers[f"later_max_gain_ratio_k{k}"] = Number(
            np.sum((gain[:, None] * basis[:, :k]) ** 2) / k / np.mean(gain**2), ".1f",
            f"that layer: mean γ² along P's top-{k} directions relative to the mean γ² of all dimensions")
        mid = enrichment[i, 3:] if L > 3 else later
        numbers[f"deep_median_k{k}"] = Number(float(np.median(mid)), ".2f",
                                              f"median enrichment over layers ≥ 3 and all columns at k = {k}")
    return Result(numbers, {"alignment": table},
                  {"enrichment": enrichment, "ks": np.array(ks), "overlaps": np.array(overlaps)})


def plot_alignment(result: Result, shape: ModelShape):
    """Enrichment over chance (log colour, centred at 1) for every layer and matrix, one panel per k, two panels
    to a row, each cell's value written in (two significant digits)."""
    enrichment, ks = result.arrays["enrichment"], result.arrays["ks"]
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    top = float(np.ceil(np.abs(np.log10(enrichment)).max() * 10) / 10)
    norm = LogNorm(vmin=10**-top, vmax=10**top)
    cols = min(2, len(ks))
    rows = -(-len(ks) // cols)
    n_layers = enrichment.shape[1]
    fig, axes = plotting.subplots(rows, cols, figsize=(plotting.MAX_WIDTH, 0.75 + rows * (0.55 + 0.19 * n_layers)),
                                  sharey=True, sharex=True, squeeze=False)
    labels = [f"$W_{kind}$" for kind, _ in VARIANTS]
    groups = {"raw": "raw", "γ-folded": "gain folded in", "output": "writes"}
    for i, ax in enumerate(axes.flat):
        if i >= len(ks):
            ax.set_visible(False)
            continue
        image = ax.imshow(enrichment[i], cmap=plotting.DIVERGING, norm=norm, aspect="auto", interpolation="nearest")
        for (layer, column), value in np.ndenumerate(enrichment[i]):
            strong = abs(np.log10(value)) > 0.6 * top
            ax.text(column, layer, f"{value:.2g}", ha="center", va="center", fontsize=8,
                    color="white" if strong else "black")
        ax.set_xticks(range(len(VARIANTS)), labels)
        ax.set_title(f"top-{ks[i]} subspace")
        ax.set_yticks(range(n_layers))
        ax.tick_params(length=0)
        if i % cols == 0:
            ax.set_ylabel("layer")
        if i >= len(ks) - cols:  # the bottom row: which columns are raw, folded, written
            below = ax.secondary_xaxis("bottom")
            below.spines["bottom"].set_position(("outward", 14))
            below.spines["bottom"].set_visible(False)
            names = [groups[variant] for _, variant in VARIANTS]
            spans = list(dict.fromkeys(names))
            below.set_xticks([np.mean([j for j, n in enumerate(names) if n == name]) for name in spans], spans)
            below.tick_params(length=0)
    bar = fig.colorbar(image, ax=list(axes.flat), fraction=0.04, pad=0.02)
    bar.set_label("enrichment $a_k/(k/D)$\n(log scale, 1 = chance)")
    return fig


def plot_overlaps(result: Result, shape: ModelShape):
    """Squared overlaps (u_i·v_j)² of layer 0's leading singular vectors with P's leading right-singular vectors."""
    overlaps = result.arrays["overlaps"]
    plotting.pyplot()
    from matplotlib.colors import PowerNorm

    # raw W_Q, W_K, W_V and W_O's output side in the top row, the gain-folded W_Q, W_K, W_V below them
    fig, grid = plotting.subplots(2, 4, figsize=(plotting.MAX_WIDTH, 4.6))
    where = {("Q", "raw"): (0, 0), ("K", "raw"): (0, 1), ("V", "raw"): (0, 2), ("O", "output"): (0, 3),
             ("Q", "γ-folded"): (1, 0), ("K", "γ-folded"): (1, 1), ("V", "γ-folded"): (1, 2)}
    grid[1, 3].remove()
    axes = []
    for M, (kind, variant) in zip(overlaps, VARIANTS):
        ax = grid[where[kind, variant]]
        axes.append(ax)
        image = ax.imshow(M, cmap=plotting.SEQUENTIAL, norm=PowerNorm(0.5, vmin=0, vmax=1), aspect="auto",
                          interpolation="nearest")
        ax.set_title(column_label(kind, variant).replace(f"W_{kind}", f"$W_{kind}$"))
        ax.set_xticks(range(0, M.shape[1], 3), [str(j + 1) for j in range(0, M.shape[1], 3)])
        ax.set_yticks(range(0, M.shape[0], 3), [str(i + 1) for i in range(0, M.shape[0], 3)])
    fig.supxlabel("direction j of P (top right-singular vectors)", fontsize=9)
    fig.supylabel("singular vector i of the matrix (by size)", fontsize=9)
    bar = fig.colorbar(image, ax=axes, fraction=0.04, pad=0.02)
    bar.set_label("squared overlap (square-root scale)")
    return fig


register(
    "attention_alignment", "Alignment of the attention matrices with the position subspace", attention_alignment,
    needs=("W_pos", "blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.W_V", "blocks.*.attn.W_O"),
    family_needs={"gpt2": ("blocks.*.ln1.w",), "bert": ("embed.ln.w", "blocks.*.ln2.w")},  # `input_gain`
    params={"ks": (1, 3, 10, 30), "n_overlap_vectors": 16, "overlap_k": 10},
    figures={"alignment": plot_alignment, "overlaps": plot_overlaps},
    groups=("first report",),
)
