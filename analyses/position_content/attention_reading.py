"""What the attention weights read: position against token subspaces, plain and weighted by where P's and E's
energy is."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.inputs import ModelInputs
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape
from analyses.engine.tensors import TOKEN_SUBSPACE
from analyses.position_content.measures import (SUBSPACES, enrichment_and_z, reading_heatmaps,
                                                subspace_bases, usable_ks)
from analyses.toolkit.attention import VARIANTS, column_label, input_gain, variant_matrix
from analyses.toolkit.subspaces import trace_ratio


def reading_table(stats: np.ndarray, ks: tuple[int, ...], labels: list[str], primary: int) -> Table:
    """stats [layer, column, subspace, k, (a, ratio, z)] as rows (layer, matrix) with ratios per subspace and k."""
    p = ks.index(primary)
    rows = []
    for layer in range(stats.shape[0]):
        for c, label in enumerate(labels):
            rows.append((layer, label, *(stats[layer, c, s, i, 1] for s in range(2) for i in range(len(ks))),
                         stats[layer, c, 0, p, 2], stats[layer, c, 1, p, 2]))
    columns = ("layer", "matrix", *(f"{name}: k = {k}" for name in SUBSPACES for k in ks),
               f"z P (k = {primary})", f"z E (k = {primary})")
    return Table(columns, tuple(rows), formats={c: (".1f" if c.startswith("z") else ".2f") for c in columns[2:]})


def attention_position_content(tensors: ModelInputs, shape: ModelShape, *, ks: tuple[int, ...],
                               primary_k: int, strong: float) -> Result:
    """Share of each attention matrix's reading (W_O: writing) energy in P's and in E's top-k subspaces."""
    L, D = shape.n_layers, shape.d_model
    available = np.asarray(tensors["E_centred.V"]).shape[1]
    ks = usable_ks(ks, available, D)
    bases = subspace_bases(tensors, max(ks))
    stats = np.zeros((L, len(VARIANTS), 2, len(ks), 3))
    for layer in range(L):
        gain = input_gain(tensors, shape, layer)
        for c, (kind, variant) in enumerate(VARIANTS):
            W, side = variant_matrix(tensors, layer, kind, variant, gain)
            stats[layer, c] = enrichment_and_z(W, [bases[name] for name in SUBSPACES], ks, side)
    labels = [column_label(*v) for v in VARIANTS]
    p = ks.index(primary_k)
    numbers = {"primary_k": Number(primary_k, "d", "k of the heatmap and of the cited values"),
               "chance": Number(primary_k / D, ".1%", "k/D at that k"),
               "token_subspace_origin": Text(tensors.origin("E_centred.V"), "where E's top directions come from")}
    for c, (kind, variant) in enumerate(VARIANTS):
        tag = {"raw": "raw", "γ-folded": "", "output": ""}[variant]
        key = f"{kind.lower()}{'_' + tag if tag else ''}"
        for s, name in enumerate(SUBSPACES):
            n = name.lower()
            numbers[f"l0_{key}_{n}"] = Number(stats[0, c, s, p, 1], ".2f",
                                              f"layer 0, {labels[c]}: enrichment in {name}'s top-{primary_k}")
            numbers[f"l0_{key}_{n}_z"] = Number(stats[0, c, s, p, 2], ".0f",
                                                f"layer 0, {labels[c]}: z in {name}'s top-{primary_k}")
            if variant != "raw" and L > 1:
                numbers[f"later_{key}_{n}_median"] = Number(
                    float(np.median(stats[1:, c, s, p, 1])), ".2f",
                    f"median over layers ≥ 1 of {labels[c]}'s enrichment in {name}'s top-{primary_k}")
        if variant != "raw":
            more_e = int(np.sum(stats[:, c, 1, p, 1] > stats[:, c, 0, p, 1]))
            numbers[f"n_layers_e_over_p_{key}"] = Number(more_e, "d",
                                                         f"layers where {labels[c]} reads E's subspace more than P's")
    folded = [c for c, (_, v) in enumerate(VARIANTS) if v == "γ-folded"]
    numbers["n_layers"] = Number(L, "d", "layers")
    numbers["max_p_folded"] = Number(float(stats[:, folded, 0, p, 1].max()), ".2f",
                                     "largest enrichment in P's subspace of any gain-folded W_Q, W_K, W_V")
    where = np.unravel_index(int(np.argmax(stats[:, folded, 0, p, 1])), (L, len(folded)))
    numbers["max_p_folded_layer"] = Number(int(where[0]), "d", "its layer")
    numbers["max_p_folded_matrix"] = Text(labels[folded[where[1]]], "its matrix")
    numbers["strong"] = Number(strong, "g", "enrichment above which a layer counts as reading P strongly")
    numbers["layers_strong_p"] = Text(
        spoken_list(layer for layer in range(L) if stats[layer, folded, 0, p, 1].max() > strong),
        f"layers whose gain-folded W_Q, W_K or W_V reads P's top-{primary_k} above that enrichment")
    table = reading_table(stats, ks, labels, primary_k)
    layer0 = Table(table.columns, tuple(row for row in table.rows if row[0] == 0), table.formats)
    return Result(numbers, {"reading": table, "layer0": layer0},
                  {"stats": stats, "ks": np.array(ks), "primary": np.array(primary_k)})


def plot_reading(result: Result, shape: ModelShape):
    """Enrichment a/(k/D) of every attention matrix in P's and in E's top-k subspaces (log colour, 1 = chance)."""
    stats, ks, primary = result.arrays["stats"], list(result.arrays["ks"]), int(result.arrays["primary"])
    return reading_heatmaps(stats[:, :, :, ks.index(primary), 1],
                            tuple(f"top-{primary} subspace of {name}" for name in ("P (position)", "E (tokens)")),
                            "enrichment a / (k/D)\n(log scale, 1 = chance)",
                            f"{shape.name}: what each attention matrix reads ($W_O$: writes), position against tokens",
                            shape)


register(
    "attention_position_content", "What the attention weights read: position against token subspaces",
    attention_position_content,
    needs=("W_pos", "E_centred.V", "blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.W_V",
           "blocks.*.attn.W_O"),
    family_needs={"gpt2": ("blocks.*.ln1.w",), "bert": ("embed.ln.w", "blocks.*.ln2.w")},  # `input_gain`
    params={"ks": (10, 30, 100), "primary_k": 30, "strong": 1.5},
    figures={"reading": plot_reading},
)


def energy_grams(tensors: Mapping[str, np.ndarray], shape: ModelShape) -> dict[str, np.ndarray]:
    """X_cᵀX_c for X = P and E, with X_c = X less each row's mean (what a LayerNorm passes on): P's in full;
    E's as V S² Vᵀ from its available directions (all of them when W_E is present), and E's without its first
    direction (`E_wo1`), which the per-token centring leaves to carry the mean token."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    P_c = P - P.mean(axis=1, keepdims=True)
    S, V = np.asarray(tensors["E_centred.S"], dtype=np.float64), np.asarray(tensors["E_centred.V"], dtype=np.float64)
    return {"P": P_c.T @ P_c, "E": (V * S**2) @ V.T, "E_wo1": (V[:, 1:] * S[1:] ** 2) @ V[:, 1:].T}


def missing_energy_bounds(S: np.ndarray, V: np.ndarray, B: np.ndarray, D: int, skip: int = 0) -> tuple[float, float]:
    """Bounds on r = D tr(A B) / (tr A tr B) for E_c's full A when only its top directions (S, V) are known; with
    `skip`, for A without its first `skip` directions (left out on purpose, not missing).

    The D − 1 − k missing directions (E_c lacks the all-ones one) each hold σ² ≤ σ_k², so the missing energy m
    lies in [0, (D − 1 − k) σ_k²] and adds at most σ_k² tr(Π B) to tr(A B), Π projecting onto the complement
    of V and of the all-ones vector: r ≥ D t / ((T + m_max) tr B) and r ≤ D (t + σ_k² tr(Π B)) / (T tr B).
    """
    S, V, B = (np.asarray(x, dtype=np.float64) for x in (S, V, B))
    kept_S, kept_V = S[skip:], V[:, skip:]
    t, T, tr_B = float(np.sum(((kept_V * kept_S**2) @ kept_V.T) * B)), float(np.sum(kept_S**2)), float(np.trace(B))
    n_missing = D - 1 - V.shape[1]
    if n_missing <= 0:
        return D * t / (T * tr_B), D * t / (T * tr_B)
    ones = np.ones((D, 1)) / np.sqrt(D)
    in_complement = tr_B - float(np.sum((V.T @ B) * V.T)) - float((ones.T @ B @ ones).item())
    s2 = float(S[-1] ** 2)
    return D * t / ((T + n_missing * s2) * tr_B), D * (t + s2 * in_complement) / (T * tr_B)


def attention_energy_reading(tensors: ModelInputs, shape: ModelShape) -> Result:
    """How strongly every attention matrix reads (W_O: writes) where P's and E's energy is, weighted by it:
    r_X(W) = D ‖X_c W‖²_F / (‖X_c‖²_F ‖W‖²_F), 1 for a map blind to X's geometry, against W turned by uniformly
    random rotations (same singular values; exact mean 1 and sd); for E also the range that its missing
    directions allow, and the value with the second PCA run where there is one."""
    L, D = shape.n_layers, shape.d_model
    grams = energy_grams(tensors, shape)
    S_E, V_E = np.asarray(tensors["E_centred.S"]), np.asarray(tensors["E_centred.V"])
    replicate = tensors.replicate_token_subspace()
    gram_b = (np.asarray(replicate[1], dtype=np.float64) * np.asarray(replicate[0], dtype=np.float64) ** 2) @ \
        np.asarray(replicate[1], dtype=np.float64).T if replicate is not None else None
    # [layer, column, (r_P, sd_P, r_E, sd_E, r_E lower bound, r_E upper bound, r_E second run, r_E without v₁,
    #  its sd, its lower and upper bounds)]
    stats = np.zeros((L, len(VARIANTS), 11))
    for layer in range(L):
        gain = input_gain(tensors, shape, layer)
        for c, (kind, variant) in enumerate(VARIANTS):
            W, side = variant_matrix(tensors, layer, kind, variant, gain)
            B = W @ W.T if side == "input" else W.T @ W
            r_p, sd_p = trace_ratio(grams["P"], B)
            r_e, sd_e = trace_ratio(grams["E"], B)
            lo, hi = missing_energy_bounds(S_E, V_E, B, D)
            r_b = trace_ratio(gram_b, B)[0] if gram_b is not None else r_e
            stats[layer, c] = (r_p, sd_p, r_e, sd_e, lo, hi, r_b, *trace_ratio(grams["E_wo1"], B),
                               *missing_energy_bounds(S_E, V_E, B, D, skip=1))
    labels = [column_label(*v) for v in VARIANTS]
    numbers = {"token_subspace_origin": Text(tensors.origin("E_centred.V"), "where E's directions come from"),
               "k_available": Number(V_E.shape[1], "d", "directions of E_c available"),
               "n_layers": Number(L, "d", "layers")}
    if replicate is not None:
        numbers["e_replicate_max_rel_diff"] = Number(
            float(np.max(np.abs(stats[:, :, 6] / stats[:, :, 2] - 1))), ".1%",
            "largest relative difference of any r_E between the two PCA runs")
    folded = [c for c, (_, v) in enumerate(VARIANTS) if v == "γ-folded"]
    for c, (kind, variant) in enumerate(VARIANTS):
        tag = {"raw": "raw", "γ-folded": "", "output": ""}[variant]
        key = f"{kind.lower()}{'_' + tag if tag else ''}"
        for name, (r, sd) in (("p", (0, 1)), ("e", (2, 3))):
            numbers[f"l0_{key}_{name}"] = Number(stats[0, c, r], ".2f",
                                                 f"layer 0, {labels[c]}: r_{name.upper()} (1: blind to its geometry)")
            numbers[f"l0_{key}_{name}_sd"] = Number(stats[0, c, sd], ".2f",
                                                    f"layer 0, {labels[c]}: sd of r_{name.upper()} over random rotations")
            if L > 1:
                numbers[f"later_{key}_{name}_median"] = Number(
                    float(np.median(stats[1:, c, r])), ".2f", f"median over layers ≥ 1 of {labels[c]}'s r_{name.upper()}")
        numbers[f"l0_{key}_e_lo"] = Number(stats[0, c, 4], ".2f", f"layer 0, {labels[c]}: lower bound of r_E")
        numbers[f"l0_{key}_e_wo1"] = Number(stats[0, c, 7], ".2f",
                                            f"layer 0, {labels[c]}: r_E without E_c's first direction")
        numbers[f"l0_{key}_e_wo1_sd"] = Number(stats[0, c, 8], ".2f", f"layer 0, {labels[c]}: its sd over rotations")
        numbers[f"l0_{key}_e_wo1_lo"] = Number(stats[0, c, 9], ".2f", f"layer 0, {labels[c]}: its lower bound")
        numbers[f"l0_{key}_e_wo1_hi"] = Number(stats[0, c, 10], ".2f", f"layer 0, {labels[c]}: its upper bound")
        numbers[f"l0_{key}_e_hi"] = Number(stats[0, c, 5], ".2f", f"layer 0, {labels[c]}: upper bound of r_E")
        numbers[f"n_layers_p_over_e_{key}"] = Number(int(np.sum(stats[:, c, 0] > stats[:, c, 5])), "d",
                                                     f"layers where {labels[c]}'s r_P exceeds r_E's upper bound")
        numbers[f"n_layers_p_above_{key}"] = Number(int(np.sum(stats[:, c, 0] > 1 + 2 * stats[:, c, 1])), "d",
                                                    f"layers where {labels[c]}'s r_P is above 1 by more than 2 sd")
    where = np.unravel_index(int(np.argmax(stats[1:, folded, 0])), (L - 1, len(folded))) if L > 1 else None
    if where is not None:
        numbers["later_max_p_folded"] = Number(float(stats[1:, folded, 0].max()), ".2f",
                                               "largest r_P of a gain-folded W_Q, W_K, W_V in layers ≥ 1")
        numbers["later_max_p_folded_layer"] = Number(int(where[0]) + 1, "d", "its layer")
        numbers["later_max_p_folded_matrix"] = Text(labels[folded[where[1]]], "its matrix")
    numbers["sd_max"] = Number(float(stats[:, :, [1, 3]].max()), ".2f",
                               "largest sd of r_P or r_E over random rotations, any layer and matrix")
    rows = tuple((layer, labels[c], stats[layer, c, 0], stats[layer, c, 1], stats[layer, c, 2], stats[layer, c, 4],
                  stats[layer, c, 5], stats[layer, c, 3]) for layer in range(L) for c in range(len(VARIANTS)))
    columns = ("layer", "matrix", "r_P", "sd (rotations)", "r_E", "r_E at least", "r_E at most", "sd (rotations) ")
    table = Table(columns, rows, formats={col: ".2f" for col in columns[2:]})
    layer0 = Table(columns, tuple(row for row in rows if row[0] == 0), table.formats)
    return Result(numbers, {"reading": table, "layer0": layer0}, {"stats": stats})


def plot_energy_reading(result: Result, shape: ModelShape):
    """r_P and r_E of every attention matrix (log colour, 1 = blind to the geometry)."""
    stats = result.arrays["stats"]
    return reading_heatmaps(stats[:, :, [0, 2]], ("$P_c$ (position)", "$E_c$ (tokens)"),
                            "energy-weighted reading $r_X$\n(log scale, 1 = blind)",
                            f"{shape.name}: how strongly each attention matrix reads ($W_O$: writes) "
                            "where $P$'s and $E$'s energy is", shape)


register(
    "attention_energy_reading", "What the attention weights read, weighted by where P's and E's energy is",
    attention_energy_reading,
    needs=("W_pos", *TOKEN_SUBSPACE, "blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.W_V",
           "blocks.*.attn.W_O"),
    family_needs={"gpt2": ("blocks.*.ln1.w",), "bert": ("embed.ln.w", "blocks.*.ln2.w")},  # `input_gain`
    figures={"reading": plot_energy_reading},
)
