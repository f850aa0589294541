"""What a task that no absolute position helps makes a learned position table grow.

`synthetic_positions` reads the committed runs on the synthetic tasks (`engine.sources.SYNTHETIC`: the token 2, 5,
8 or 12 positions back; the bucket of the distance to a marked token) and measures each table with the definitions
the text runs get (`toolkit.table_shape`: top-3 and PC1 shares, λ2/λ1, turns around the helix's own axis, the
period where the bulk holds a turn, the Toeplitz share), at the last step and at every snapshot; the spectrum of
the top pair (the power of the top two principal coordinates summed, which no rotation within their plane changes:
its two strongest frequencies in cycles per context, with their periods and shares of the pair's power; the first
three components' variance shares, since a near-tie of the third with the pair mixes it into them); the task's held-out loss and accuracy against a uniform guess; and each layer-0 head's
antisymmetric share of its positional query-key form on P's top directions (`toolkit.attention.qk_form` and
`antisymmetric_share`, GPT-2's layer-0 measure in `positional_qk`). Beside them, the same shape numbers for i.i.d.
Gaussian tables of the runs' shape (seeded draws): the null a table's structure must beat.
"""

from __future__ import annotations

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import EXACT, Accuracy, Number, Result, Table, Text, period_or_undefined
from analyses.engine.shapes import ModelShape
from analyses.engine.sources import SYNTHETIC, SYNTHETIC_GROUP, open_source
from analyses.engine.tensors import HISTORY_FILE, RECORD_FILE, read_training_record
from analyses.engine.training import TASK_ACCURACY, model_dir, run_inputs
from analyses.toolkit import plotting
from analyses.toolkit.attention import antisymmetric_share, position_inputs, qk_form
from analyses.toolkit.helix_period import EDGE, principal_coordinates
from analyses.toolkit.linalg import explained_variance_ratio, top_right_singular_vectors
from analyses.toolkit.surrogates import power_spectrum
from analyses.toolkit.synthetic_tasks import SyntheticRecipe, chance_loss
from analyses.toolkit.table_shape import FORMATS, LABELS, MEASURES, NO_HELIX, reference_shapes, run_shapes, shown_turns

RUNS = tuple(SYNTHETIC)
FIGURE_RUNS = ("synth-offsets", "synth-buckets")
"""The runs the figure draws, one per task (the look-back task's second seed is in the table)."""
TASK_WORDS = {"offsets": "look-back task", "buckets": "bucket task"}
"""How the figure names each task."""
SHARED_RECIPE = ("n_layers", "n_heads", "d_model", "n_ctx", "batch", "n_content", "steps")
"""Recipe fields every synthetic run shares, cited once."""
RECORDED = Accuracy(basis="exact: read from the committed training record")
WOUND = 0.5
"""λ2/λ1 from which a snapshot after the ratio's smallest counts as holding a pair (the issue's threshold for a
helix). Before it means nothing: a table near its Gaussian initialisation has λ2/λ1 near 1 and no structure."""
PERIOD_FORMAT = ".1f"
"""The period printed to a tenth of a position: these tables turn in a few positions, GPT-2's in hundreds."""


def run_key(name: str) -> str:
    """The run's prefix in the cited keys: its task (`offsets`, `buckets`)."""
    return name.removeprefix("synth-").replace("-", "_")


def synthetic_inputs() -> dict[str, str]:
    """Every run's history, record and weights: what `synthetic_positions` reads."""
    return run_inputs(RUNS, (HISTORY_FILE, RECORD_FILE, "model.safetensors"))


def pair_spectrum_peaks(P: np.ndarray, n_peaks: int) -> tuple[np.ndarray, np.ndarray]:
    """(cycles, shares): the `n_peaks` frequencies (cycles per context, rfft bins 1 … n/2) where the top two principal
    coordinates' summed power is largest, strongest first, and each one's share of that power over those bins. The
    sum is the same for any orthonormal basis of the pair's plane, so a rotation of PC1 and PC2 within it (two
    near-equal variances) changes nothing."""
    power = power_spectrum(principal_coordinates(P, 2)).sum(axis=1)[1:]
    order = np.argsort(power)[::-1][:n_peaks]
    return order + 1, power[order] / power.sum()


def layer0_antisymmetric_shares(tensors, shape: ModelShape, n_components: int) -> np.ndarray:
    """Each layer-0 head's ‖(M − Mᵀ)/2‖ / ‖M‖ for M its query-key form on P's top `n_components` right-singular
    directions, the LayerNorm gain folded in (as `positional_qk` measures GPT-2's layer 0)."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    basis = top_right_singular_vectors(P, n_components)
    _, gain, _ = position_inputs(tensors, shape)
    W_Q, W_K = tensors["blocks.0.attn.W_Q"], tensors["blocks.0.attn.W_K"]
    return np.array([antisymmetric_share(qk_form(W_Q[h], W_K[h], gain, basis)) for h in range(shape.n_heads)])


def synthetic_positions(*, runs: tuple[str, ...], n_draws: int, seed: int, edge: int, n_components: int,
                        n_peaks: int) -> Result:
    """The shape of each synthetic run's table at the end and over training, its top pair's frequency, its task
    loss and accuracy, its layer-0 heads' antisymmetric shares, and the Gaussian tables of the same shape."""
    from safetensors.numpy import load_file

    numbers: dict[str, Number | Text] = {
        "n_draws": Number(n_draws, "d", "draws of the Gaussian reference table"),
        "n_components": Number(n_components, "d", "top right-singular directions of P the heads' forms are read on"),
        "wound_threshold": Number(WOUND, ".1f", "λ2/λ1 from which a snapshot counts as holding a cosine–sine pair")}
    rows, arrays, shapes = [], {}, set()
    recipes = {name: SyntheticRecipe.from_dict(read_training_record(model_dir(name) / RECORD_FILE)["fingerprint"]["recipe"])
               for name in runs}
    numbers |= recipe_numbers(list(recipes.values()))
    for name in runs:
        key, recipe = run_key(name), recipes[name]
        h = load_file(str(model_dir(name) / HISTORY_FILE))
        W = np.asarray(h["history.W_pos"], dtype=np.float64)
        trajectory = run_shapes(W, edge)
        final = dict(zip(MEASURES, trajectory[-1]))
        n_ctx = W.shape[1]
        shapes.add(W.shape[1:])
        numbers |= {f"{key}_{m}": period_or_undefined(final[m], FORMATS[m] if m != "period" else PERIOD_FORMAT,
                                                      f"{name}: {LABELS[m]} at the last step")
                    for m in MEASURES if m != "turns"}
        numbers[f"{key}_turns"] = (Number(final["turns"], FORMATS["turns"], f"{name}: turns at the last step")
                                   if np.isfinite(final["turns"]) else Text(NO_HELIX, f"{name}: no row on the helix"))
        cycles, power = pair_spectrum_peaks(W[-1], n_peaks)
        for i, (c, share) in enumerate(zip(cycles, power), start=1):
            numbers[f"{key}_pair_peak{i}_cycles"] = Number(int(c), "d", f"{name}: the top pair's peak {i} in power "
                                                           "(cycles per context)")
            numbers[f"{key}_pair_peak{i}_period"] = Number(n_ctx / int(c), ".1f", f"{name}: its period (positions)")
            numbers[f"{key}_pair_peak{i}_share"] = Number(float(share), ".0%", f"{name}: its share of the pair's power")
        ratios = explained_variance_ratio(W[-1])
        numbers |= {f"{key}_pc{i}_share": Number(float(ratios[i - 1]), ".1%", f"{name}: PC{i}'s share of the variance")
                    for i in (2, 3)}
        ratio = trajectory[:, MEASURES.index("pair_ratio")]
        steps = h["history.steps"]
        lowest = int(np.argmin(ratio))
        wound = lowest + np.flatnonzero(ratio[lowest:] >= WOUND)
        late = steps >= steps[-1] / 2
        numbers |= {
            f"{key}_pair_ratio_min": Number(float(ratio[lowest]), ".2f", f"{name}: smallest λ2/λ1 over the snapshots"),
            f"{key}_pair_ratio_min_step": Number(int(steps[lowest]), ",d", f"{name}: the snapshot where it is smallest"),
            f"{key}_pc1_at_pair_ratio_min": Number(float(trajectory[lowest, MEASURES.index("pc1")]), ".0%",
                                                   f"{name}: PC1's share there")}
        numbers[f"{key}_wound_step"] = (
            Number(int(steps[wound[0]]), ",d", f"{name}: first snapshot after the smallest λ2/λ1 with λ2/λ1 ≥ {WOUND}")
            if len(wound) else Text("never", f"{name}: no snapshot after the smallest λ2/λ1 has λ2/λ1 ≥ {WOUND}"))
        numbers[f"{key}_late_pair_ratio_min"] = Number(float(ratio[late].min()), ".2f",
                                                       f"{name}: smallest λ2/λ1 over the second half's snapshots")
        numbers[f"{key}_late_pair_ratio_max"] = Number(float(ratio[late].max()), ".2f",
                                                       f"{name}: largest λ2/λ1 over the second half's snapshots")
        loss, accuracy = float(h["history.eval_loss"][-1]), float(h[TASK_ACCURACY][-1])
        numbers |= {
            f"{key}_loss": Number(loss, ".2f", f"{name}: held-out task loss at the last step (nats)"),
            f"{key}_accuracy": Number(accuracy, ".1%", f"{name}: held-out accuracy at the last step"),
            f"{key}_chance_loss": Number(chance_loss(recipe), ".2f", f"{name}: loss of a uniform guess (nats)"),
            f"{key}_steps": Number(recipe.steps, ",d", f"{name}: training steps"),
            f"{key}_minutes": Number(read_training_record(model_dir(name) / RECORD_FILE)["run"]["seconds"] / 60, ".0f",
                                     f"{name}: wall time of the run (minutes)", RECORDED)}
        source = open_source(name)
        shares = layer0_antisymmetric_shares(source.tensors, source.shape, n_components)
        for head, share in enumerate(shares):
            numbers[f"{key}_head{head}_antisymmetric"] = Number(float(share), ".2f",
                                                               f"{name}: layer-0 head {head}, ‖(M − Mᵀ)/2‖ / ‖M‖")
        numbers[f"{key}_antisymmetric_max"] = Number(float(shares.max()), ".2f",
                                                     f"{name}: largest layer-0 antisymmetric share")
        numbers[f"{key}_antisymmetric_max_head"] = Number(int(shares.argmax()), "d", f"{name}: the head that has it")
        arrays |= {f"{key}_steps": steps, f"{key}_shape": trajectory, f"{key}_table": W[-1],
                   f"{key}_eval_steps": h["history.eval_steps"], f"{key}_eval_loss": h["history.eval_loss"],
                   f"{key}_eval_accuracy": h[TASK_ACCURACY], f"{key}_antisymmetric": shares}
        rows.append((key, recipe.steps, *trajectory[-1][:3], shown_turns(final["turns"]),
                     final["period"] if np.isfinite(final["period"]) else "undefined", final["toeplitz"],
                     int(cycles[0]), float(power[0]), int(cycles[1]), float(power[1]), loss, accuracy,
                     float(shares.max())))
    for n, d in sorted(shapes):
        draws = reference_shapes((n, d), n_draws, seed, edge)["gaussian"]
        arrays[f"gaussian{n}x{d}"] = draws
        for i, m in enumerate(MEASURES):
            if np.isfinite(draws[:, i]).all():
                numbers[f"gaussian{n}x{d}_{m}"] = Number(float(draws[:, i].mean()), FORMATS[m],
                                                         f"Gaussian table {n} × {d}: mean {LABELS[m]}")
                numbers[f"gaussian{n}x{d}_{m}_max"] = Number(float(draws[:, i].max()), FORMATS[m],
                                                             f"Gaussian table {n} × {d}: largest {LABELS[m]} of the draws")
        means = draws.mean(axis=0)
        rows.append((f"Gaussian table, {n} × {d} (mean of {n_draws})", "—", *means[:3], shown_turns(means[3]), "—",
                     means[5], "—", "—", "—", "—", "—", "—", "—"))
    columns = ("run", "steps", *(LABELS[m] for m in MEASURES[:4]), LABELS["period"], LABELS["toeplitz"],
               "pair's peak 1 (cycles)", "peak 1 share", "peak 2 (cycles)", "peak 2 share", "held-out loss", "accuracy",
               "largest antisymmetric share")
    formats = {LABELS[m]: FORMATS[m] for m in MEASURES} | {LABELS["period"]: PERIOD_FORMAT,
                                                           "peak 1 share": ".0%", "peak 2 share": ".0%",
                                                           "held-out loss": ".2f", "accuracy": ".1%", "steps": ",d",
                                                           "largest antisymmetric share": ".2f"}
    return Result(numbers, {"synthetic": Table(columns, tuple(rows), formats)}, arrays)


def recipe_numbers(recipes: list[SyntheticRecipe]) -> dict[str, Number | Text]:
    """The model and batch every synthetic run shares (an error where they differ), the look-back task's offsets and
    the bucket task's bucket width."""
    numbers: dict[str, Number | Text] = {}
    for field in SHARED_RECIPE:
        values = {getattr(r, field) for r in recipes}
        if len(values) != 1:
            raise ValueError(f"the synthetic runs differ in {field}: {sorted(values)}")
        numbers[field] = Number(values.pop(), ",d", f"every synthetic run's {field}", EXACT)
    first = recipes[0]
    numbers["positions_millions"] = Number(first.steps * first.batch * first.n_ctx / 1e6, ".1f",
                                           "positions each synthetic run trained on (millions)", EXACT)
    for task, field in (("offsets", "offsets"), ("buckets", "bucket_width")):
        values = {getattr(r, field) for r in recipes if r.task == task}
        if len(values) > 1:
            raise ValueError(f"the {task} runs differ in {field}: {sorted(values)}")
        if values:
            value = values.pop()
            numbers[field] = (Text(", ".join(map(str, value[:-1])) + f" or {value[-1]}", "the look-back distances")
                              if field == "offsets" else Number(value, "d", "positions per distance bucket", EXACT))
    return numbers


def plot_components(result: Result, shape: ModelShape | None):
    """Each task's last table: its top three principal coordinates against position (left) and PC2 against PC1
    (right), coloured by position."""
    a = result.arrays
    keys = [run_key(name) for name in FIGURE_RUNS if f"{run_key(name)}_table" in a]
    fig, axes = plotting.subplots(len(keys), 2, figsize=(plotting.MAX_WIDTH, 2.6 * len(keys)), squeeze=False,
                                  gridspec_kw={"width_ratios": (2.2, 1)})
    for (left, right), key in zip(axes, keys):
        Z = principal_coordinates(a[f"{key}_table"], 3)
        n = np.arange(len(Z))
        for i in range(3):
            left.plot(n, Z[:, i], lw=0.8, color=f"C{i}", label=f"PC{i + 1}")
        left.set_xlabel("position")
        left.set_ylabel(f"{TASK_WORDS[key]}: coordinate")
        left.legend(fontsize=plotting.MIN_FONT, ncols=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
        points = right.scatter(Z[:, 0], Z[:, 1], c=n, cmap=plotting.POSITION, s=4)
        right.plot(Z[:, 0], Z[:, 1], lw=0.3, color="0.6")
        right.set_xlabel("PC1")
        right.set_ylabel("PC2")
        right.set_aspect("equal", adjustable="datalim")
        plotting.colorbar(fig, points, right, "position")
    return fig


register("synthetic_positions", "What a task that needs offset-invariant attention grows in the position table",
         synthetic_positions, scope="common",
         params={"runs": RUNS, "n_draws": 10, "seed": 0, "edge": EDGE, "n_components": 3, "n_peaks": 2},
         data=synthetic_inputs, figures={"components": plot_components}, groups=(SYNTHETIC_GROUP,))
