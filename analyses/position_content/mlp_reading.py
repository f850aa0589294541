"""What the first MLP's input weights read: position against token subspaces."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.inputs import ModelInputs
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape
from analyses.position_content.measures import SUBSPACES, enrichment_and_z, subspace_bases, usable_ks
from analyses.toolkit import plotting
from analyses.toolkit.subspaces import random_energy_moments


def mlp_input_gain(tensors: Mapping[str, np.ndarray], shape: ModelShape, layer: int) -> np.ndarray:
    """The LayerNorm gain γ in front of layer `layer`'s MLP: GPT-2's ln_2 of that layer; BERT's attention-output
    LayerNorm of that layer (canonical `ln1`), whose output is what the MLP reads."""
    name = f"blocks.{layer}.ln2.w" if shape.family == "gpt2" else f"blocks.{layer}.ln1.w"
    return np.asarray(tensors[name], dtype=np.float64)


MLP_VARIANTS = ("raw", "γ-folded")


def mlp_position_content(tensors: ModelInputs, shape: ModelShape, *, ks: tuple[int, ...], primary_k: int,
                         curve_k: int) -> Result:
    """Share of each MLP input matrix's reading energy in P's and in E's top-k subspaces, against random ones."""
    L, D = shape.n_layers, shape.d_model
    available = np.asarray(tensors["E_centred.V"]).shape[1]
    ks = usable_ks(ks, available, D)
    curve_k = usable_ks((curve_k,), available, D)[0]
    bases = subspace_bases(tensors, max(*ks, curve_k))
    stats = np.zeros((L, len(MLP_VARIANTS), 2, len(ks), 3))
    for layer in range(L):
        W = np.asarray(tensors[f"blocks.{layer}.mlp.W_in"], dtype=np.float64)
        for v, variant in enumerate(MLP_VARIANTS):
            M = mlp_input_gain(tensors, shape, layer)[:, None] * W if variant == "γ-folded" else W
            stats[layer, v] = enrichment_and_z(M, [bases[name] for name in SUBSPACES], ks, "input")
    # layer 0, gain folded, every k up to curve_k: enrichment and the random band
    M0 = mlp_input_gain(tensors, shape, 0)[:, None] * np.asarray(tensors["blocks.0.mlp.W_in"], dtype=np.float64)
    k_all = np.arange(1, curve_k + 1)
    total = np.sum(M0**2)
    curves = {name: np.cumsum(np.sum((bases[name][:, :curve_k].T @ M0) ** 2, axis=1)) / total / (k_all / D)
              for name in SUBSPACES}
    mean, sd = random_energy_moments(M0, k_all)
    labels = [f"{'diag(γ)' if v == 'γ-folded' else ''}W_in" for v in MLP_VARIANTS]
    p = ks.index(primary_k)
    numbers = {"primary_k": Number(primary_k, "d", "k of the cited values"),
               "token_subspace_origin": Text(tensors.origin("E_centred.V"), "where E's top directions come from")}
    for v, variant in enumerate(MLP_VARIANTS):
        tag = "_raw" if variant == "raw" else ""
        for s, name in enumerate(SUBSPACES):
            n = name.lower()
            for i, k in enumerate(ks):
                numbers[f"l0{tag}_{n}_k{k}"] = Number(stats[0, v, s, i, 1], ".2f",
                                                      f"layer 0, {labels[v]}: enrichment in {name}'s top-{k}")
                numbers[f"l0{tag}_{n}_z_k{k}"] = Number(stats[0, v, s, i, 2], ".1f",
                                                        f"layer 0, {labels[v]}: z in {name}'s top-{k}")
        more_e = stats[:, v, 1, p, 1] > stats[:, v, 0, p, 1]
        numbers[f"n_layers_e_over_p{tag}"] = Number(int(more_e.sum()), "d",
                                                    f"layers whose {labels[v]} reads E's top-{primary_k} more than P's")
        numbers[f"layers_e_over_p{tag}"] = Text(spoken_list(np.nonzero(more_e)[0].tolist()), "those layers")
    numbers["n_layers"] = Number(L, "d", "layers")
    rows = []
    for layer in range(L):
        for v in range(len(MLP_VARIANTS)):
            rows.append((layer, labels[v], *(stats[layer, v, s, i, 1] for s in range(2) for i in range(len(ks))),
                         stats[layer, v, 0, p, 2], stats[layer, v, 1, p, 2]))
    columns = ("layer", "matrix", *(f"{name}: k = {k}" for name in SUBSPACES for k in ks),
               f"z P (k = {primary_k})", f"z E (k = {primary_k})")
    table = Table(columns, tuple(rows), formats={c: (".1f" if c.startswith("z") else ".2f") for c in columns[2:]})
    arrays = {"stats": stats, "ks": np.array(ks), "primary": np.array(primary_k), "curve_P": curves["P"],
              "curve_E": curves["E"], "band": 2 * sd / mean}
    return Result(numbers, {"reading": table}, arrays)


def plot_mlp_reading(result: Result, shape: ModelShape):
    """Layer 0's gain-folded W_in against k; every layer's enrichment at the primary k."""
    a = result.arrays
    k = np.arange(1, a["curve_P"].size + 1)
    fig, (left, right) = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 3.9))
    left.fill_between(k, np.clip(1 - a["band"], 1e-3, None), 1 + a["band"], color="0.85", lw=0,
                      label="random subspaces: 1 ± 2 sd")
    left.axhline(1, color="0.3", lw=0.8, ls="--")
    left.plot(k, a["curve_E"], color="C0", lw=1.5, label="E's top-k (tokens)")
    left.plot(k, a["curve_P"], color="C3", lw=1.5, label="P's top-k (position)")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("k (log scale)")
    left.set_ylabel("enrichment a / (k/D) (log scale)")
    plotting.plain_log_ticks(left.yaxis)
    left.set_title(r"layer 0, diag(γ)$W_{in}$")
    stats, ks, primary = a["stats"], list(a["ks"]), int(a["primary"])
    layers = np.arange(stats.shape[0])
    i = ks.index(primary)
    for s, (name, colour) in enumerate((("P", "C3"), ("E", "C0"))):
        right.plot(layers, stats[:, 1, s, i, 1], "o-", color=colour, label=rf"{name}, diag(γ)$W_{{in}}$")
        right.plot(layers, stats[:, 0, s, i, 1], "x:", color=colour, label=rf"{name}, raw $W_{{in}}$")
    right.axhline(1, color="0.3", lw=0.8, ls="--")
    right.set_yscale("log")
    plotting.plain_log_ticks(right.yaxis)
    right.set_xticks(layers)
    right.set_xlabel("layer")
    right.set_ylabel(f"enrichment at k = {primary} (log scale)")
    right.set_title("every layer's MLP input")
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return fig


register(
    "mlp_position_content", "What the MLP input weights read: position against token subspaces", mlp_position_content,
    needs=("W_pos", "E_centred.V", "blocks.*.mlp.W_in"),
    family_needs={"gpt2": ("blocks.*.ln2.w",), "bert": ("blocks.*.ln1.w",)},  # `mlp_input_gain`
    params={"ks": (10, 30, 100), "primary_k": 30, "curve_k": 100},
    figures={"reading": plot_mlp_reading},
)
