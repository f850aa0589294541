"""What decides the helix: the position table's shape across training runs, over training and at the end, against
references of the same shape and GPT-2's own table cut to the same number of positions.

`training_grid` reads the committed histories of the grid's runs (`engine.sources.GRID`: the main recipe at other
contexts and with GPT-2's position noise, and the small runs) and of the main recipe's two seeds. Per run, at every
snapshot and at the end, it measures the table's shape with `toolkit.table_shape` (top-3 and PC1 shares, λ2/λ1, turns around the helix's
own axis, the period where the bulk holds a turn, the Toeplitz share), the top-3 share of the learned change
P − P₀ at the end, the held-out loss, and the loss's and the top-3 share's half-way steps; beside them, the same
numbers for Gaussian random walks and i.i.d. Gaussian tables of each run's shape (seeded draws); how the main
recipe's λ2/λ1 and turns scale with its context, at the last step (`context_scaling`) and at equal exposure per
position (`matched_exposure`: the runs' batches differ at equal tokens per step, so at the last step the rows of a
short context have been trained on more windows), each slope with its 95 % interval and the matched fit's range over
its arbitrary choices and its prediction interval at GPT-2's context; and what fixed sinusoidal positions do to the
held-out and to the training loss against the learned table (`fixed_positions_gap`). A run with fixed positions has
a table that never moves: its shape and loss are reported, not its growth.

`window_shape` cuts a model's own table into every window of the trained runs' context lengths that starts at a
multiple of a stride after row 0 (an outlier in every table) and measures each the same way, so that a trained table
is compared with GPT-2 at the same number of positions (median and range over the windows, not a few of them), and
fits the same scaling over the window lengths; its figure sets the main-size runs beside the windows.
"""

from __future__ import annotations

from math import comb

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import (COUNT_SHARE, EXACT, Accuracy, Number, Result, Table, Text, checked_sample,
                                     period_or_undefined)
from analyses.engine.shapes import ModelShape
from analyses.engine.sources import GRID, GRID_BASE, GRID_GROUP, GRID_LONG, MAIN_RECIPE, model_spec
from analyses.engine.tensors import HISTORY_FILE, RECORD_FILE, read_training_record
from analyses.engine.training import model_dir, run_inputs
from analyses.toolkit import plotting
from analyses.toolkit.helix_period import EDGE
from analyses.toolkit.table_shape import (FORMATS, LABELS, MEASURES, NO_HELIX, half_way_index, pair_ratio, power_law_intervals,
                                          power_law_slope, reference_shapes, run_shapes, shown_turns,
                                          table_shape)
from analyses.toolkit.training import Recipe, learning_rate

MAIN_RUNS = ("kjv-gpt2", "kjv-gpt2-seed1")
"""The main recipe's two seeds (`engine.sources.MAIN_RECIPE`): the reference of the main-size grid runs."""
FIXED_RUN = "kjv-gpt2-sinusoidal"
"""The main recipe with fixed sinusoidal positions: what loss the recipe reaches without a learned table."""
CONTEXT_RUNS = ("kjv-gpt2-ctx128", "kjv-gpt2", "kjv-gpt2-seed1", "kjv-gpt2-ctx512")
"""The main recipe at three contexts, at equal tokens per step (two seeds at 256): how the shape scales with n."""
FIGURE_RUNS = (*CONTEXT_RUNS, "kjv-gpt2-sigma01")
"""The main-size runs, drawn beside a model's own windows."""
LONG_RUNS = ("kjv-gpt2-long", "kjv-gpt2-long-seed1")
"""The main recipe trained four times longer (12,000 steps, the warm-up scaled with them), two seeds: whether more
steps wind the table."""
CAUSE_RUNS = ("kjv-gpt2-poswd0", "kjv-gpt2-poswd1", "kjv-gpt2-drop01", "kjv-gpt2-drop01-seed1", "kjv-gpt2-sigma01",
              "kjv-gpt2-sigma02", "kjv-gpt2-sigma10", *LONG_RUNS)
"""The main recipe with one candidate cause of the table's shape changed: no weight decay on the position table, a
strong one (1.0) on it alone, GPT-2's dropout on the embeddings (0.1; two seeds), the initial position noise (GPT-2's
0.01, GPT-2's 0.02 of every other matrix, and 0.1), and four times the steps (two seeds)."""
HELIX = {"turns": 1.5, "pair_ratio": 0.5}
"""The bar for a table that winds: at least 1.5 turns with λ2/λ1 at least 0.5 at one snapshot (issue 44)."""
CHANGE_WORDS = {"position_init_std": "initial position noise", "n_ctx": "context",
                "position_weight_decay": "weight decay on the position table", "embedding_dropout": "embedding dropout"}
"""How the grid's table names a changed recipe field."""
COMPUTE_ONLY = ("batch", "eval_windows", "threads", "snapshots")
"""Recipe fields a run may change without changing what it trains: the batch and held-out windows of a context run
(set by the context at equal tokens per step), the CPU threads (the order of float sums, not the recipe) and the
number of snapshots (what is recorded, not what is trained)."""
RUNS = (*MAIN_RUNS, *GRID)
RECORDED = Accuracy(basis="exact: read from the committed training record")
EXACT_LOSS = Accuracy(basis="exact: differences of float32 losses read from the committed histories")
GPT2_CONTEXT = 1024
"""GPT-2's context, where the matched context fit's prediction interval is read off."""
TRAIN_BLOCK = 100
"""Steps per block of the paired training-loss difference: its standard error is taken over block means, which
neighbouring steps' correlation does not shrink."""


def run_key(name: str) -> str:
    """The run's prefix in the cited keys: `main`, `main_seed1`, `main_ctx128`, …; the small runs `base`,
    `sigma01`, …, `long_ctx128`."""
    if name.startswith("kjv-gpt2"):
        return "main" + name.removeprefix("kjv-gpt2").replace("-", "_")
    return name.removeprefix("kjv-small-").replace("-", "_") if name != "kjv-small" else "base"


def change(name: str) -> str:
    """What the run changes, in words: a main-size run from the main recipe; a small run from the small base (a run
    at another context: from the small base's longer run)."""
    recipe = model_spec(name).recipe.as_dict()
    if name in MAIN_RUNS:
        return f"main recipe, seed {recipe['seed']}"
    if name.startswith("kjv-gpt2"):
        reference = MAIN_RECIPE.as_dict()
    else:
        reference = (GRID_LONG if recipe["n_ctx"] != GRID_BASE.n_ctx else GRID_BASE).as_dict()
    changed = {k: v for k, v in recipe.items() if reference[k] != v and k not in COMPUTE_ONLY}
    if not changed:
        return "base"
    if changed.get("positions") == "sinusoidal":
        return f"fixed sinusoidal positions, RMS {recipe['position_init_std']:g}"
    words = []
    if "steps" in changed:
        scaled = recipe["warmup"] * reference["steps"] == reference["warmup"] * recipe["steps"]
        words.append(f"{changed.pop('steps'):,} steps ({recipe['steps'] / reference['steps']:g}×"
                     + (", warm-up with them)" if scaled else ")"))
        if scaled:
            changed.pop("warmup", None)
    return ", ".join(words + [f"{CHANGE_WORDS.get(k, k)} {v:g}" if isinstance(v, float) else
                              f"{CHANGE_WORDS.get(k, k)} {v}" for k, v in sorted(changed.items(),
                                                                                 key=lambda kv: kv[0] == "seed")])


def grid_inputs() -> dict[str, str]:
    """Every run's history and record: what `training_grid` reads."""
    return run_inputs(RUNS, (HISTORY_FILE, RECORD_FILE))


def figure_inputs() -> dict[str, str]:
    """The histories of the main-size runs: what `window_shape` reads for its figure."""
    return run_inputs(FIGURE_RUNS, (HISTORY_FILE,))


def _history(name: str) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(model_dir(name) / HISTORY_FILE))


def training_grid(*, runs: tuple[str, ...], n_draws: int, seed: int, edge: int, level: float) -> Result:
    """The shape of each run's position table at the end and over training, its loss, and the references; the context
    fits' intervals at `level`."""
    numbers: dict[str, Number | Text] = {"n_draws": Number(n_draws, "d", "draws of each reference table"),
                                         "level": Number(level, ".0%", "coverage of the fits' intervals", EXACT)}
    rows, arrays, shapes, batches, tables, devices = [], {}, {}, {}, {}, {}
    for name in runs:
        key, h = run_key(name), _history(name)
        record = read_training_record(model_dir(name) / RECORD_FILE)
        recipe = record["fingerprint"]["recipe"]
        devices[name] = record["machine"].get("gpu") if record["machine"].get("device", "cpu") != "cpu" else None
        trajectory = run_shapes(h["history.W_pos"], edge)
        steps, eval_steps, eval_loss = h["history.steps"], h["history.eval_steps"], h["history.eval_loss"]
        final = dict(zip(MEASURES, trajectory[-1]))
        loss_half = int(eval_steps[half_way_index(eval_loss)])
        numbers |= {f"{key}_{m}": period_or_undefined(final[m], FORMATS[m], f"{name}: {LABELS[m]} at the last step")
                    for m in MEASURES if m != "turns"}
        numbers[f"{key}_turns"] = (Number(final["turns"], FORMATS["turns"], f"{name}: turns at the last step")
                                   if np.isfinite(final["turns"]) else Text(NO_HELIX, f"{name}: no row on the helix"))
        numbers |= _recorded_numbers(name, key, recipe, record, eval_loss, loss_half)
        W = np.asarray(h["history.W_pos"], dtype=np.float64)
        arrays[f"{key}_train_loss"] = np.asarray(h["history.train_loss"])
        numbers |= {f"{key}_rms": Number(float(np.sqrt(np.mean(W[-1] ** 2))), ".3f", f"{name}: RMS of the last table's "
                                                                                     "entries"),
                    f"{key}_centred_rms": Number(float(np.sqrt(np.mean((W[-1] - W[-1].mean(axis=0)) ** 2))), ".3f",
                                                 f"{name}: RMS of its entries less their mean over positions")}
        arrays[f"{key}_eval_steps"], arrays[f"{key}_eval_loss"] = eval_steps, eval_loss
        share_half: int | str = "—"  # a fixed table does not grow
        if recipe.get("positions", Recipe.positions) == Recipe.positions:
            growth = _growth_numbers(name, key, W, trajectory, steps, edge, Recipe.from_dict(recipe))
            numbers |= growth
            share_half = growth[f"{key}_share_half_step"].value
            shapes[key] = (recipe["n_ctx"], recipe["d_model"])
            arrays |= {f"{key}_steps": steps, f"{key}_shape": trajectory,
                       f"{key}_pair_ratio_wo_row0": np.array([pair_ratio(P[1:]) for P in W])}
            batches[name] = recipe["batch"]
        rows.append((key, change(name), recipe["n_ctx"], recipe["steps"], *trajectory[-1][:3],
                     shown_turns(trajectory[-1][3]),
                     final["period"] if np.isfinite(final["period"]) else "undefined", final["toeplitz"],
                     float(eval_loss[-1]), loss_half, share_half))
    main_size = [numbers[f"{run_key(name)}_minutes"].value for name in runs
                 if name.startswith("kjv-gpt2") and devices[name] is None]
    on_gpu = [name for name in runs if devices[name] is not None]
    if on_gpu:
        numbers |= {"gpu_runs": Number(len(on_gpu), "d", "runs trained on a GPU", EXACT),
                    "gpu_name": Text(" and ".join(sorted({devices[name] for name in on_gpu})), "the GPU they trained on"),
                    "gpu_minutes_max": Number(max(numbers[f"{run_key(name)}_minutes"].value for name in on_gpu), ".0f",
                                              "longest run on the GPU (minutes)", RECORDED)}
    learned_main = [run_key(name) for name in runs if name.startswith("kjv-gpt2") and f"{run_key(name)}_shape" in arrays]
    if learned_main:
        numbers |= {"learned_main_runs": Number(len(learned_main), "d", "main-size runs with a learned table"),
                    "rising_main_runs": Number(sum(numbers[f"{k}_rises_after_min"].value
                                                   == numbers[f"{k}_snapshots_after_min"].value > 0 for k in learned_main),
                                               "d", "of them, runs whose λ2/λ1 rises at every snapshot after its minimum")}
    if main_size:
        numbers |= {"main_size_minutes_min": Number(min(main_size), ".0f", "shortest main-size run (minutes)", RECORDED),
                    "main_size_minutes_max": Number(max(main_size), ".0f", "longest main-size run (minutes)", RECORDED)}
    if {FIXED_RUN, *MAIN_RUNS} <= set(runs):
        numbers |= fixed_positions_gap(*(arrays[f"{run_key(name)}_eval_loss"] for name in (FIXED_RUN, *MAIN_RUNS)),
                                       arrays[f"{run_key(FIXED_RUN)}_eval_steps"],
                                       *(arrays[f"{run_key(name)}_train_loss"] for name in (FIXED_RUN, MAIN_RUNS[0])))
    if set(CONTEXT_RUNS) <= set(runs):
        contexts = {name: shapes[run_key(name)][0] for name in CONTEXT_RUNS}
        numbers |= context_scaling({name: arrays[f"{run_key(name)}_shape"][-1] for name in CONTEXT_RUNS}, contexts,
                                   level)
        series = {name: (arrays[f"{run_key(name)}_steps"],
                         {0: arrays[f"{run_key(name)}_shape"][:, MEASURES.index("pair_ratio")],
                          1: arrays[f"{run_key(name)}_pair_ratio_wo_row0"]}) for name in CONTEXT_RUNS}
        numbers |= matched_exposure(series, contexts, {name: batches[name] for name in CONTEXT_RUNS},
                                    {name: Recipe.from_dict(model_spec(name).recipe.as_dict()) for name in CONTEXT_RUNS},
                                    level)
    causes = [name for name in CAUSE_RUNS if name in runs]
    if causes and set(MAIN_RUNS) <= set(runs):
        finals = {name: arrays[f"{run_key(name)}_shape"][-1] for name in (*MAIN_RUNS, *causes)}
        effects = cause_effects({name: finals[name] for name in causes}, tuple(finals[name] for name in MAIN_RUNS))
        numbers |= effects
        tables["causes"] = cause_table(numbers, (*MAIN_RUNS, *causes))
    if set(LONG_RUNS) <= set(runs):
        numbers |= long_training({name: {part: arrays[f"{run_key(name)}_{part}"]
                                         for part in ("steps", "shape", "eval_steps", "eval_loss")}
                                  for name in LONG_RUNS}, MAIN_RECIPE.steps)
    references = {}
    for n, d in sorted(set(shapes.values())):
        draws = reference_shapes((n, d), n_draws, seed, edge)
        references[(n, d)] = draws
        for kind, label in (("walk", "random walk"), ("gaussian", "Gaussian table")):
            for i, m in enumerate(MEASURES):
                values = draws[kind][:, i]
                if np.isfinite(values).all():
                    numbers[f"{kind}{n}x{d}_{m}"] = Number(float(values.mean()), FORMATS[m],
                                                          f"{label} {n} × {d}: mean {LABELS[m]}")
                    numbers[f"{kind}{n}x{d}_{m}_sd"] = Number(float(values.std(ddof=1)), FORMATS[m],
                                                             f"{label} {n} × {d}: sd of {LABELS[m]}")
            means = draws[kind].mean(axis=0)
            rows.append((f"{label}, {n} × {d}", f"mean of {n_draws} draws", n, "—", *means[:3], shown_turns(means[3]),
                         "—", means[5], "—", "—", "—"))
            arrays[f"{kind}{n}x{d}"] = draws[kind]
    columns = ("run", "change", "context", "steps", *(LABELS[m] for m in MEASURES[:4]), LABELS["period"],
               LABELS["toeplitz"], "held-out loss", "loss half-way step", "top-3 half-way step")
    formats = {LABELS[m]: FORMATS[m] for m in MEASURES} | {"held-out loss": ".2f", "steps": ",d"}
    return Result(numbers, {"grid": Table(columns, tuple(rows), formats), **tables}, arrays)


def cause_effects(finals: dict[str, np.ndarray], seeds: tuple[np.ndarray, np.ndarray]) -> dict[str, Number | Text]:
    """Each one-change run's last λ2/λ1 (`finals`: {run: its last `table_shape` row}) against the main recipe's two
    seeds: the difference from the seeds' mean in units of the seeds' own difference |s₁ − s₀|, the one scale of chance
    two seeds give (with one degree of freedom it cannot by itself tell a run from chance: at two-sided 5 % a run needs
    about eleven such units); how many runs lie above both seeds; for a cause run twice (`<run>` and `<run>-seed1`),
    how many of its seeds lie above both, against the one-in-six chance that two of four exchangeable runs are the two
    highest; and the change that raises λ2/λ1 most. Turns are
    not scaled so: the seeds' turns differ by less than the angle's arbitrary choices move them."""
    out: dict[str, Number | Text] = {"cause_runs": Number(len(finals), "d", "runs that change one candidate cause", EXACT)}
    for measure in ("pair_ratio",):
        i = MEASURES.index(measure)
        low, high = sorted(float(seed[i]) for seed in seeds)
        gap = high - low
        if not gap > 0:
            raise ValueError(f"the two seeds' {LABELS[measure]} do not differ: no scale of chance")
        out[f"seeds_{measure}_gap"] = Number(gap, FORMATS[measure], f"|seed 1 − seed 0| of the last {LABELS[measure]}")
        above = 0
        for name, final in finals.items():
            value = float(final[i])
            out[f"{run_key(name)}_{measure}_vs_seeds"] = Number(
                (value - (low + high) / 2) / gap, ".1f",
                f"{name}: last {LABELS[measure]} minus the seeds' mean, in units of the seeds' difference")
            above += value > high
        out[f"cause_runs_above_seeds_{measure}"] = Number(above, "d", f"runs whose last {LABELS[measure]} lies above "
                                                                      "both seeds'", EXACT)
    ratio = MEASURES.index("pair_ratio")
    high = max(float(seed[ratio]) for seed in seeds)
    for name in finals:
        if f"{name}-seed1" in finals:
            out[f"{run_key(name)}_seeds_above"] = Number(
                sum(finals[n][ratio] > high for n in (name, f"{name}-seed1")), "d",
                f"{name}: of its two seeds, those whose last λ2/λ1 lies above both of the main recipe's", EXACT)
    out["two_of_four_p"] = Number(1 / comb(4, 2), ".2f", "chance that two given runs are the two highest of four "
                                                         "exchangeable ones (the smallest one-sided p of two seeds "
                                                         "against two)", EXACT)
    most = max(finals, key=lambda name: finals[name][ratio])
    out["cause_most_pair_ratio"] = Text(change(most), "the change whose run ends with the largest λ2/λ1")
    out["cause_most_pair_ratio_key"] = Text(run_key(most), "its run's key")
    return out


def long_training(series: dict[str, dict[str, np.ndarray]], main_steps: int) -> dict[str, Number | Text]:
    """What four times the steps does to the table (`series`: {run: its snapshot "steps", their `table_shape` rows
    "shape", and the held-out loss at "eval_steps"}): the lowest held-out loss and its step (after it the run
    overfits), λ2/λ1 at the last snapshot before it, λ2/λ1 at `main_steps` (where the main recipe's runs end, read
    between snapshots by `ratio_at_step`), its change over the last quarter of training, the largest λ2/λ1 and turns
    from its minimum on, and how many runs reach the bar of a table that winds (`HELIX`) at any snapshot."""
    ratio, turn = MEASURES.index("pair_ratio"), MEASURES.index("turns")
    out: dict[str, Number | Text] = {
        "helix_turns": Number(HELIX["turns"], "g", "the bar of a table that winds: turns", EXACT),
        "helix_pair_ratio": Number(HELIX["pair_ratio"], "g", "the bar of a table that winds: λ2/λ1", EXACT)}
    winding = 0
    for name, s in series.items():
        key, steps, shape = run_key(name), np.asarray(s["steps"]), np.asarray(s["shape"], dtype=np.float64)
        ratios, turns = shape[:, ratio], shape[:, turn]
        lowest = int(np.argmin(ratios))
        best = int(np.argmin(s["eval_loss"]))
        best_step = int(s["eval_steps"][best])
        before = int(np.flatnonzero(steps <= best_step)[-1])
        late = ratio_at_step(steps, ratios, 0.75 * steps[-1])
        out |= {
            f"{key}_best_loss": Number(float(s["eval_loss"][best]), ".2f", f"{name}: lowest held-out loss (nats)"),
            f"{key}_best_loss_step": Number(best_step, ",d", f"{name}: the step of the lowest held-out loss", EXACT),
            f"{key}_best_loss_snapshot": Number(int(steps[before]), ",d",
                                                f"{name}: the last snapshot at or before it", EXACT),
            f"{key}_pair_ratio_at_best_loss": Number(float(ratios[before]), ".3f", f"{name}: λ2/λ1 at that snapshot"),
            f"{key}_pair_ratio_at_main_end": Number(ratio_at_step(steps, ratios, main_steps), ".3f",
                                                    f"{name}: λ2/λ1 at step {main_steps:,}, between snapshots"),
            f"{key}_pair_ratio_late_change": Number(float(ratios[-1] / late - 1), "+.0%",
                                                    f"{name}: change of λ2/λ1 over the last quarter of the steps"),
            f"{key}_pair_ratio_max": Number(float(ratios[lowest:].max()), ".3f",
                                            f"{name}: largest λ2/λ1 from its minimum on"),
            f"{key}_turns_max": Number(float(np.nanmax(turns[lowest:])), FORMATS["turns"],
                                       f"{name}: most turns from the λ2/λ1 minimum on"),
        }
        winding += bool(np.any((turns[lowest:] >= HELIX["turns"]) & (ratios[lowest:] >= HELIX["pair_ratio"])))
    out["long_winding_runs"] = Number(winding, "d", "long runs that reach the bar of a table that winds", EXACT)
    return out


def cause_table(numbers: dict, runs: tuple[str, ...]) -> Table:
    """One row per run: the change, the last λ2/λ1 and its smallest over training (with the step), turns, PC1's share,
    the held-out loss and the last λ2/λ1 against the seeds (blank for the seeds themselves)."""
    rows = []
    for name in runs:
        key = run_key(name)
        vs = numbers.get(f"{key}_pair_ratio_vs_seeds")
        rows.append((change(name), numbers[f"{key}_pair_ratio"].value, numbers[f"{key}_pair_ratio_min"].value,
                     numbers[f"{key}_pair_ratio_min_step"].value, numbers[f"{key}_turns"].value,
                     numbers[f"{key}_pc1"].value, numbers[f"{key}_loss"].value, "—" if vs is None else vs.value))
    columns = ("change", "λ2/λ1, last", "λ2/λ1, smallest", "at step", "turns", "PC1 share", "held-out loss",
               "λ2/λ1 against the seeds")
    return Table(columns, tuple(rows), {"λ2/λ1, last": ".3f", "λ2/λ1, smallest": ".3f", "at step": ",d",
                                        "turns": FORMATS["turns"], "PC1 share": ".1%", "held-out loss": ".2f",
                                        "λ2/λ1 against the seeds": ".1f"})


def _growth_numbers(name: str, key: str, W: np.ndarray, trajectory: np.ndarray, steps: np.ndarray,
                    edge: int, recipe: Recipe) -> dict[str, Number]:
    """How a learned table grew: where λ2/λ1 is smallest over the snapshots (PC1's share and the learning rate there)
    and how many of the snapshots after it rise from the one before (a ramp that kept straightening would have none),
    the top-3 share and λ2/λ1 of what was learned, P − P₀ (what the shape of P says once a large initial noise is set
    aside), and the first snapshot with half of the top-3 share's rise."""
    ratio = MEASURES.index("pair_ratio")
    lowest = int(np.argmin(trajectory[:, ratio]))
    after = np.diff(trajectory[lowest:, ratio])
    learned = table_shape(W[-1] - W[0], edge)
    return {
        f"{key}_pair_ratio_min": Number(float(trajectory[lowest, ratio]), ".3f",
                                        f"{name}: smallest λ2/λ1 over the snapshots"),
        f"{key}_pair_ratio_min_step": Number(int(steps[lowest]), ",d", f"{name}: the snapshot where it is smallest"),
        f"{key}_lr_at_pair_ratio_min": Number(learning_rate(recipe, max(int(steps[lowest]), 1)) / recipe.peak_lr, ".0%",
                                              f"{name}: the learning rate there, as a share of its peak"),
        f"{key}_pair_ratio_rise": Number(float(trajectory[-1, ratio] / trajectory[lowest, ratio] - 1), ".0%",
                                         f"{name}: how far λ2/λ1 at the last step lies above its smallest"),
        f"{key}_snapshots_after_min": Number(len(after), "d", f"{name}: snapshots after the smallest λ2/λ1", EXACT),
        f"{key}_rises_after_min": Number(int(np.sum(after > 0)), "d",
                                         f"{name}: of them, those whose λ2/λ1 is above the snapshot's before", EXACT),
        f"{key}_pc1_at_pair_ratio_min": Number(float(trajectory[lowest, MEASURES.index("pc1")]), ".1%",
                                               f"{name}: PC1's share at that snapshot"),
        f"{key}_learned_top3": Number(learned["top3"], ".1%", f"{name}: top-3 share of P − P₀ at the last step"),
        f"{key}_learned_pair_ratio": Number(learned["pair_ratio"], ".3f", f"{name}: λ2/λ1 of P − P₀ at the last step"),
        f"{key}_share_half_step": Number(int(steps[half_way_index(trajectory[:, 0])]), "d",
                                         f"{name}: first snapshot with half of the top-3 share's rise"),
    }


def _recorded_numbers(name: str, key: str, recipe: dict, record: dict, eval_loss: np.ndarray,
                      loss_half: int) -> dict[str, Number]:
    """A run's recipe, held-out loss and wall time, as cited numbers."""
    return {
        f"{key}_n_ctx": Number(recipe["n_ctx"], "d", f"{name}: context (positions)"),
        f"{key}_steps": Number(recipe["steps"], ",d", f"{name}: training steps"),
        f"{key}_tokens_millions": Number(recipe["steps"] * recipe["batch"] * recipe["n_ctx"] / 1e6, ".1f",
                                         f"{name}: training tokens (millions), the budget its results are measured at"),
        f"{key}_d_model": Number(recipe["d_model"], "d", f"{name}: width"),
        f"{key}_n_layers": Number(recipe["n_layers"], "d", f"{name}: layers"),
        f"{key}_warmup": Number(recipe["warmup"], "d", f"{name}: warm-up steps"),
        f"{key}_position_init_std": Number(recipe["position_init_std"], "g",
                                           f"{name}: σ of the initial positions (a fixed table: its entries' RMS)"),
        f"{key}_weight_decay": Number(recipe["weight_decay"], "g", f"{name}: decoupled weight decay on the matrices"),
        f"{key}_position_weight_decay": Number(recipe["weight_decay"] if recipe.get("position_weight_decay") is None
                                               else recipe["position_weight_decay"], "g",
                                               f"{name}: weight decay on the position table"),
        f"{key}_embedding_dropout": Number(recipe.get("embedding_dropout", 0.0), "g",
                                           f"{name}: dropout on the sum of token and position embeddings"),
        f"{key}_loss": Number(float(eval_loss[-1]), ".2f", f"{name}: held-out loss at the last step (nats)"),
        f"{key}_train_loss": Number(record["final"]["train_loss_last_100"], ".2f",
                                    f"{name}: training loss, mean of the last 100 steps (nats)", RECORDED),
        f"{key}_loss_half_step": Number(loss_half, "d", f"{name}: first step with half of the held-out loss's fall"),
        f"{key}_minutes": Number(record["run"]["seconds"] / 60, ".0f", f"{name}: wall time of the run (minutes)",
                                 RECORDED),
        f"{key}_epochs": Number(recipe["steps"] * recipe["batch"] * recipe["n_ctx"] / record["corpus"]["training_tokens"],
                                ".0f", f"{name}: passes over its training text (tokens trained on / tokens in it)",
                                RECORDED),
    }


def fixed_positions_gap(fixed: np.ndarray, main: np.ndarray, seed1: np.ndarray, steps: np.ndarray,
                        fixed_train: np.ndarray, main_train: np.ndarray) -> dict[str, Number]:
    """Held-out loss of the fixed-positions run minus the learned runs': at the last step against each seed (seed 0 is
    paired: the same initialisation elsewhere and the same training windows); the widest gap and where it narrows
    most after it; and over the second half of training, the mean gap to the seeds' mean, how many evaluations find
    the fixed run behind both seeds, and the seeds' own difference there (mean and largest |seed 1 − seed 0|),
    the scale of chance that two seeds give. The three runs are evaluated at the same steps. Beside it, the same
    second half on the training windows, where seed 0 is paired step by step (`fixed_train` and `main_train`: the
    training loss of optimiser steps 1 … S): the mean of fixed − learned and its standard error over blocks of
    `TRAIN_BLOCK` steps, which tells a cost in fit (a gap on the training text too) from one in generalisation."""
    fixed, main, seed1 = (np.asarray(v, dtype=np.float64) for v in (fixed, main, seed1))
    if not fixed.shape == main.shape == seed1.shape == np.shape(steps):
        raise ValueError("the fixed and the learned runs were not evaluated at the same steps")
    if np.shape(fixed_train) != np.shape(main_train):
        raise ValueError("the fixed and the learned runs were not trained for the same steps")
    gap = fixed - main
    widest = int(np.argmax(gap))
    narrowest = widest + int(np.argmin(gap[widest:]))
    late = np.asarray(steps) >= steps[-1] / 2
    seeds = np.abs(seed1 - main)[late]

    def number(value: float | int, fmt: str, text: str) -> Number:
        return Number(value, fmt, f"held-out loss, {text}", EXACT_LOSS)

    return {"sinusoidal_loss_gap": number(float(gap[-1]), ".3f", "fixed sinusoidal minus learned positions (seed 0), "
                                                                 "last step (nats)"),
            "sinusoidal_loss_gap_seed1": number(float(fixed[-1] - seed1[-1]), ".3f", "fixed sinusoidal minus learned "
                                                                                      "positions (seed 1), last step (nats)"),
            "seed_loss_gap": number(float(abs(seed1[-1] - main[-1])), ".3f", "|seed 1 − seed 0| of the main recipe, "
                                                                             "last step (nats)"),
            "sinusoidal_loss_gap_max": number(float(gap[widest]), ".3f", "largest gap of fixed over learned (seed 0) "
                                                                         "over training (nats)"),
            "sinusoidal_loss_gap_max_step": number(int(steps[widest]), ",d", "the step of the largest gap"),
            "sinusoidal_loss_gap_narrowest": number(float(gap[narrowest]), ".3f", "smallest gap after the largest (nats)"),
            "sinusoidal_loss_gap_narrowest_step": number(int(steps[narrowest]), ",d", "the step of that smallest gap"),
            "late_from_step": number(int(steps[late][0]), ",d", "first evaluation of the second half of training"),
            "late_evaluations": number(int(late.sum()), "d", "evaluations in the second half of training"),
            "sinusoidal_late_gap": number(float(np.mean(fixed[late] - (main[late] + seed1[late]) / 2)), ".3f",
                                          "fixed minus the learned seeds' mean, averaged over the second half (nats)"),
            "sinusoidal_late_behind": number(int(np.sum((fixed > np.maximum(main, seed1))[late])), "d",
                                             "evaluations of the second half with the fixed run above both seeds"),
            "seed_late_gap": number(float(seeds.mean()), ".3f", "|seed 1 − seed 0| averaged over the second half (nats)"),
            "seed_late_gap_max": number(float(seeds.max()), ".3f", "largest |seed 1 − seed 0| in the second half (nats)"),
            **paired_training_gap(fixed_train, main_train, steps[-1] / 2)}


def paired_training_gap(fixed: np.ndarray, main: np.ndarray, from_step: float) -> dict[str, Number]:
    """Training loss of the fixed run minus the learned seed 0's on the same windows, optimiser steps ≥ `from_step`
    (entry i is step i + 1): the mean, and its standard error sd(block means)/√blocks over whole blocks of
    `TRAIN_BLOCK` steps."""
    gap = (np.asarray(fixed, dtype=np.float64) - np.asarray(main, dtype=np.float64))[np.arange(1, len(fixed) + 1)
                                                                                   >= from_step]
    blocks = gap[:len(gap) // TRAIN_BLOCK * TRAIN_BLOCK].reshape(-1, TRAIN_BLOCK).mean(axis=1)
    if len(blocks) < 2:
        raise ValueError(f"a standard error over blocks needs at least {2 * TRAIN_BLOCK} steps")
    return {"sinusoidal_train_late_gap": Number(float(gap.mean()), ".4f", "training loss, fixed minus learned (seed 0) "
                                                "on the same windows, mean over the second half (nats)", EXACT_LOSS),
            "sinusoidal_train_late_gap_se": Number(float(blocks.std(ddof=1) / np.sqrt(len(blocks))), ".4f",
                                                   f"its standard error over blocks of {TRAIN_BLOCK} steps (nats)",
                                                   EXACT_LOSS),
            "train_block_steps": Number(TRAIN_BLOCK, "d", "steps per block of that standard error", EXACT),
            "train_late_steps": Number(len(gap), ",d", "training steps in the second half", EXACT)}


def context_scaling(finals: dict[str, np.ndarray], contexts: dict[str, int], level: float = 0.95) -> dict[str, Number]:
    """How the main recipe's shape scales with its context at the last step: b of λ2/λ1 ∝ n^b, with its interval at
    `level`, and of turns ∝ n^b over the context runs (`power_law_slope`; each seed a point). A table of fixed period
    bends more the longer it is (λ2/λ1 rising towards 1); one that spreads the same shape over any context gives
    b = 0. At the last step the runs' rows have seen different numbers of windows (`matched_exposure` matches them)."""
    n = np.array([contexts[name] for name in finals])
    fit = power_law_intervals(n, np.array([final[MEASURES.index("pair_ratio")] for final in finals.values()]),
                              GPT2_CONTEXT, level)
    what = f"the main recipe at {len(set(n))} contexts, last step"
    return {"context_pair_ratio_slope": Number(fit["b"], ".2f", f"b of λ2/λ1 ∝ context^b, {what}"),
            "context_pair_ratio_slope_low": Number(fit["b_low"], ".2f", "its confidence interval: low end"),
            "context_pair_ratio_slope_high": Number(fit["b_high"], ".2f", "its confidence interval: high end"),
            "context_turns_slope": Number(power_law_slope(n, np.array([final[MEASURES.index("turns")]
                                                                       for final in finals.values()]))[0], ".2f",
                                          f"b of turns ∝ context^b, {what}")}


def ratio_at_step(steps: np.ndarray, ratios: np.ndarray, step: float) -> float:
    """λ2/λ1 at `step`, interpolated between the log-spaced snapshots linearly in log λ2/λ1 against log step."""
    steps, ratios = np.asarray(steps, dtype=np.float64), np.asarray(ratios, dtype=np.float64)
    kept = steps > 0
    if not steps[kept][0] <= step <= steps[-1]:
        raise ValueError(f"step {step:g} is outside the snapshots {steps[kept][0]:g} … {steps[-1]:g}")
    return float(np.exp(np.interp(np.log(step), np.log(steps[kept]), np.log(ratios[kept]))))


def matched_exposure(series: dict[str, tuple[np.ndarray, dict[int, np.ndarray]]], contexts: dict[str, int],
                     batches: dict[str, int], recipes: dict[str, Recipe], level: float = 0.95) -> dict[str, Number]:
    """The context fit at equal exposure per position. A run of batch B has trained each row on B windows per step, so
    at equal tokens per step a short context's rows have seen more windows by the last step. Each run is read at the
    step where steps × batch equals the smallest last exposure over the runs (`ratio_at_step`; `series`: {run: (the
    snapshot steps, {first row: λ2/λ1 of rows first … at each snapshot})}, row 0 kept and dropped): b of λ2/λ1 ∝ n^b
    with its interval at `level`, its range over the fit's arbitrary choices (`context_slope_variants`), and its
    prediction interval at GPT-2's context; the steps matched, and the learning rate at the shortest context's, since matching
    exposure reads the runs at different points of their schedules."""
    windows = min(int(steps[-1]) * batches[name] for name, (steps, _) in series.items())
    matched = {name: windows / batches[name] for name in series}
    ratios = {first: {name: ratio_at_step(steps, by_row[first], matched[name]) for name, (steps, by_row) in series.items()}
              for first in (0, 1)}
    n = np.array([contexts[name] for name in series])
    fit = power_law_intervals(n, np.array(list(ratios[0].values())), GPT2_CONTEXT, level)
    slopes = context_slope_variants(ratios, contexts)
    shortest = min(series, key=contexts.get)
    out = {"context_matched_windows": Number(windows, ",d", "windows per position at which the context runs are "
                                             "matched (the smallest last steps × batch)", EXACT),
           "context_matched_slope": Number(fit["b"], ".2f", "b of λ2/λ1 ∝ context^b at equal windows per position"),
           "context_matched_slope_low": Number(fit["b_low"], ".2f", "its confidence interval: low end"),
           "context_matched_slope_high": Number(fit["b_high"], ".2f", "its confidence interval: high end"),
           "context_matched_slope_min": Number(float(slopes.min()), ".2f", "smallest b over the fit's variants"),
           "context_matched_slope_max": Number(float(slopes.max()), ".2f", "largest b over the fit's variants"),
           "context_matched_variants": Number(len(slopes), "d", "variants of the matched fit", EXACT),
           "context_matched_at_gpt2": Number(fit["at"], ".3f", f"the matched fit's λ2/λ1 at {GPT2_CONTEXT} positions"),
           "context_matched_at_gpt2_low": Number(fit["at_low"], ".3f", "its prediction interval: low end"),
           "context_matched_at_gpt2_high": Number(fit["at_high"], ".3f", "its prediction interval: high end"),
           "context_matched_lr_shortest": Number(learning_rate(recipes[shortest], round(matched[shortest]))
                                                 / recipes[shortest].peak_lr, ".0%", "the learning rate at the "
                                                 "shortest context's matched step, as a share of its peak")}
    for name in series:
        out[f"{run_key(name)}_matched_step"] = Number(round(matched[name]), ",d", f"{name}: its matched step", EXACT)
        out[f"{run_key(name)}_matched_pair_ratio"] = Number(ratios[0][name], ".3f", f"{name}: λ2/λ1 there")
    return out


def context_slope_variants(ratios: dict[int, dict[str, float]], contexts: dict[str, int]) -> np.ndarray:
    """b of λ2/λ1 ∝ n^b over the context runs for each variant of the fit's arbitrary choices: row 0 (an outlier in
    every trained table) kept or dropped (`ratios`: {first row: {run: λ2/λ1}}), and no run or one left out (a seed,
    or a context's only run)."""
    slopes = []
    for by_run in ratios.values():
        for left_out in (None, *by_run):
            kept = [name for name in by_run if name != left_out]
            slopes.append(power_law_slope(np.array([contexts[k] for k in kept]), np.array([by_run[k] for k in kept]))[0])
    return np.array(slopes)


def window_starts(n: int, length: int, first_row: int, stride: int) -> np.ndarray:
    """The first rows of every window of `length` rows of a table of n rows that starts at first_row + k·stride."""
    return np.arange(first_row, n - length + 1, stride)


def window_slope_variants(lengths: list[int], strides: tuple[int, ...], by_row: dict[int, dict[int, np.ndarray]]) -> np.ndarray:
    """b of λ2/λ1 ∝ length^b over P's windows for each variant of the windows' arbitrary choices: the stride between
    starts (every multiple of the smallest, whose windows the others subsample), whether row 0 may start one, and the
    mean or the median over the windows of a length. `by_row`: {first row: {length: λ2/λ1 of its windows at the
    smallest stride}}."""
    base = min(strides)
    if any(stride % base for stride in strides):
        raise ValueError(f"every stride must be a multiple of the smallest, {base}")
    slopes = []
    for ratios in by_row.values():
        for stride in strides:
            for statistic in (np.mean, np.median):
                values = [statistic(ratios[L][::stride // base]) for L in lengths]
                slopes.append(power_law_slope(np.array(lengths), np.array(values))[0])
    return np.array(slopes)


ROW_COLUMNS = ("positions", "first row", *MEASURES)
"""The per-window table `rows` of `window_shape`: each window's length and first row, and its measures (a window from
row 0, measured for the fit's variants only, has λ2/λ1 alone)."""


def windows_measured(P: np.ndarray, length: int, starts: np.ndarray, measure, cached: dict, n_sample: int) -> np.ndarray:
    """`measure(window)` (a row of values) for each window of `length` rows at `starts`; with `cached` rows ({(length,
    first row): values}), only `checked_sample` of them is measured and the rest is read from the cache."""
    sample = checked_sample(len(starts), n_sample) if cached else set(range(len(starts)))
    return np.array([measure(P[s:s + length]) if i in sample or (length, int(s)) not in cached
                     else cached[(length, int(s))] for i, s in enumerate(starts)], dtype=np.float64)


def final_shapes(runs: tuple[str, ...], edge: int) -> tuple[np.ndarray, np.ndarray]:
    """(contexts [R], `table_shape` of each run's last table [R, len(MEASURES)])."""
    contexts = np.array([model_spec(name).recipe.n_ctx for name in runs])
    return contexts, np.array([run_shapes(_history(name)["history.W_pos"][-1:], edge)[0] for name in runs])


def window_shape(tensors, shape: ModelShape, *, lengths: tuple[int, ...], stride: int, first_row: int,
                 untrained_rows: int, edge: int, runs: tuple[str, ...], variant_strides: tuple[int, ...],
                 n_sample: int, cached_rows: dict | None) -> Result:
    """`table_shape` of every window of each length in `lengths` cut from the model's trained rows that starts at
    first_row + k·stride (row 0, an outlier in every table, left out with first_row 1), and of all trained rows:
    median, smallest and largest over the windows of a length; b of the mean turns and of the mean λ2/λ1 ∝ length^b
    over the lengths (the fit of the context runs, `context_scaling`), and the latter's range over
    `window_slope_variants` (strides `variant_strides`, row 0 in or out, mean or median). Beside them the last tables
    of the main-size `runs`, trained at those lengths: for the figure, and for each of the context runs the share of
    the windows of its length that are straighter (a smaller λ2/λ1). Every window's measures are the table `rows`;
    with `cached_rows` (that table as cached, which the recomputation check hands in) only `n_sample` windows of each
    length and each first row are measured again, and the rest of the result follows from the rows."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    cached = {} if cached_rows is None else {
        (int(L), int(s)): [cached_rows[m][i] for m in MEASURES]
        for i, (L, s) in enumerate(zip(cached_rows["positions"], cached_rows["first row"]))}

    def shape_of(window):
        numbers = table_shape(window, edge)
        return [numbers[m] for m in MEASURES]

    def ratio_only(window):
        return [pair_ratio(window) if m == "pair_ratio" else float("nan") for m in MEASURES]

    n = len(P) - untrained_rows
    numbers: dict[str, Number | Text] = {"n_trained": Number(n, "d", "trained rows measured", EXACT),
                                         "stride": Number(stride, "d", "rows between the starts of two windows", EXACT),
                                         "first_row": Number(first_row, "d", "the first row a window may start at", EXACT)}
    measured = [L for L in lengths if L + first_row <= n - stride]  # at least two windows
    rows, arrays, windows = [], {"window_lengths": np.array([*measured, n])}, []
    for length in [*measured, n]:
        starts = window_starts(n, length, first_row, stride) if length < n else np.array([0])
        values = windows_measured(P, length, starts, shape_of, cached, n_sample)
        windows += [(length, int(s), *v) for s, v in zip(starts, values.tolist())]
        key = "whole" if length == n else f"w{length}"
        arrays[key], arrays[f"{key}_starts"] = values, starts
        if length == n:
            numbers |= {f"whole_{m}": Number(float(values[0, i]), FORMATS[m], f"{LABELS[m]}, all {n} trained rows")
                        for i, m in enumerate(MEASURES) if np.isfinite(values[0, i])}
            rows.append((length, 1, "whole", *(_cell(values[:, i]) for i in range(len(MEASURES)))))
            continue
        numbers[f"{key}_windows"] = Number(len(starts), "d", f"windows of {length}", EXACT)
        for i, m in enumerate(MEASURES):
            column = values[:, i]
            if m == "period" or not np.isfinite(column).all():
                continue
            numbers |= {f"{key}_{m}_median": Number(float(np.median(column)), FORMATS[m],
                                                    f"{LABELS[m]}, median over the windows of {length}"),
                        f"{key}_{m}_min": Number(float(column.min()), FORMATS[m], f"{LABELS[m]}, smallest window of {length}"),
                        f"{key}_{m}_max": Number(float(column.max()), FORMATS[m], f"{LABELS[m]}, largest window of {length}")}
        for label, statistic in (("median", np.median), ("smallest", np.min), ("largest", np.max)):
            rows.append((length, len(starts), label, *(_cell(values[:, i], statistic) for i in range(len(MEASURES)))))
    if len(measured) >= 2:
        for m in ("turns", "pair_ratio"):
            means = [arrays[f"w{L}"][:, MEASURES.index(m)].mean() for L in measured]
            if not np.isfinite(means).all():  # a window with no helix has no turns to average
                continue
            numbers[f"{m}_slope"] = Number(power_law_slope(np.array(measured), np.array(means))[0], ".2f",
                                           f"b of the mean {LABELS[m]} over every window ∝ window length^b, windows of "
                                           f"{measured[0]}–{measured[-1]}")
        ratio = MEASURES.index("pair_ratio")
        by_row = {first_row: {L: arrays[f"w{L}"][:, ratio] for L in measured}, 0: {}}
        for L in measured:  # the windows from row 0, at the smallest stride of the variants
            starts = window_starts(n, L, 0, min(variant_strides))
            values = windows_measured(P, L, starts, ratio_only, cached, n_sample)
            by_row[0][L] = values[:, ratio]
            windows += [(L, int(s), *v) for s, v in zip(starts, values.tolist())]
        slopes = window_slope_variants(measured, variant_strides, by_row)
        numbers |= {"pair_ratio_slope_min": Number(float(slopes.min()), ".2f", "smallest b of λ2/λ1 ∝ window "
                                                   "length^b over the windows' variants"),
                    "pair_ratio_slope_max": Number(float(slopes.max()), ".2f", "largest b of λ2/λ1 ∝ window "
                                                   "length^b over the windows' variants"),
                    "slope_variants": Number(len(slopes), "d", "variants of the windows' fit", EXACT),
                    "variant_strides": Text(", ".join(map(str, variant_strides[:-1])) + f" or {variant_strides[-1]}"
                                            if len(variant_strides) > 1 else str(variant_strides[0]),
                                            "the strides between windows' starts that the fit's variants take")}
    arrays["runs_n_ctx"], arrays["runs_shape"] = final_shapes(runs, edge)
    arrays["runs_position_init_std"] = np.array([model_spec(name).recipe.position_init_std for name in runs])
    for name, context, final in zip(runs, arrays["runs_n_ctx"], arrays["runs_shape"]):
        if name in CONTEXT_RUNS and f"w{context}" in arrays:
            ratios = arrays[f"w{context}"][:, MEASURES.index("pair_ratio")]
            numbers[f"{run_key(name)}_straighter_windows"] = Number(
                float(np.mean(ratios < final[MEASURES.index("pair_ratio")])), ".0%",
                f"share of the windows of {context} with a smaller λ2/λ1 than {name}'s last table", COUNT_SHARE)
    columns = ("positions", "windows", "over the windows", *(LABELS[m] for m in MEASURES))
    return Result(numbers, {"windows": Table(columns, tuple(rows), {LABELS[m]: FORMATS[m] for m in MEASURES}),
                            "rows": Table(ROW_COLUMNS, tuple(windows))}, arrays)


def _cell(column: np.ndarray, statistic=np.median) -> float | str:
    """A table cell of `statistic` over the windows; a period defined in only some windows says in how many."""
    defined = np.isfinite(column)
    if defined.all():
        return float(statistic(column))
    return "undefined" if not defined.any() else f"defined in {int(defined.sum())} of {len(column)}"


def plot_grid(result: Result, shape: ModelShape | None):
    """PC1's share and λ2/λ1 of each run's table against the training step (the small runs in grey), with the
    random walks' means."""
    a = result.arrays
    fig, axes = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 4.2), sharex=True)
    caused = {run_key(name) for name in CAUSE_RUNS} - {run_key(name) for name in FIGURE_RUNS}
    keys = [k.removesuffix("_shape") for k in a if k.endswith("_shape") and k.removesuffix("_shape") not in caused]
    main = [k for k in keys if k.startswith("main")]
    for ax, measure in zip(axes, ("pc1", "pair_ratio")):
        i = MEASURES.index(measure)
        for key in keys:
            small = key not in main
            ax.plot(np.maximum(a[f"{key}_steps"], 1), a[f"{key}_shape"][:, i], marker=None if small else "o", ms=2.5,
                    lw=0.8 if small else 1, color="0.7" if small else f"C{main.index(key)}",
                    label=("small runs" if key == next(k for k in keys if k not in main) else None) if small else key)
        for k, style in (("walk256x128", "--"), ("walk256x64", ":")):
            if k in a:
                ax.axhline(a[k][:, i].mean(), color="0.4", lw=0.8, ls=style, label=f"random walk {k.removeprefix('walk')}")
        ax.set_xscale("log")
        ax.set_xlabel("training step (log; step 0 at 1)")
        ax.set_ylabel(LABELS[measure])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=4, fontsize=plotting.MIN_FONT)
    return fig


def plot_causes(result: Result, shape: ModelShape | None):
    """λ2/λ1 and turns of the table against the training step: the main recipe's two seeds and each run of its length
    that changes one candidate cause (a cause's second seed in its colour, dashed)."""
    a = result.arrays
    fig, axes = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 4.0), sharex=True)
    runs = [name for name in (*MAIN_RUNS, *CAUSE_RUNS) if f"{run_key(name)}_shape" in a and name not in LONG_RUNS]
    causes = list(dict.fromkeys(name.removesuffix("-seed1") for name in runs if name not in MAIN_RUNS))
    for ax, measure in zip(axes, ("pair_ratio", "turns")):
        i = MEASURES.index(measure)
        for name in runs:
            key = run_key(name)
            colour = "0.15" if name in MAIN_RUNS else f"C{causes.index(name.removesuffix('-seed1'))}"
            ax.plot(np.maximum(a[f"{key}_steps"], 1), a[f"{key}_shape"][:, i], marker="o", ms=2.5, lw=1,
                    color=colour, ls="--" if name.endswith("-seed1") else "-", label=change(name))
        ax.set_xscale("log")
        ax.set_xlabel("training step (log; step 0 at 1)")
        ax.set_ylabel(LABELS[measure])
    axes[0].set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=plotting.MIN_FONT)
    return fig


def plot_long(result: Result, shape: ModelShape | None):
    """λ2/λ1, turns and the held-out loss against the training step: the main recipe's two seeds and the same recipe
    trained four times longer (seed 1 dashed)."""
    a = result.arrays
    fig, axes = plotting.subplots(1, 3, figsize=(plotting.MAX_WIDTH, 3.1), sharex=True)
    for ax, measure in zip(axes, ("pair_ratio", "turns", "loss")):
        for name in (*MAIN_RUNS, *LONG_RUNS):
            key = run_key(name)
            if f"{key}_shape" not in a:
                continue
            style = dict(color="C3" if name in LONG_RUNS else "0.15", ls="--" if name.endswith("-seed1") else "-",
                         lw=1, label=change(name))
            if measure == "loss":
                ax.plot(a[f"{key}_eval_steps"], a[f"{key}_eval_loss"], **style)
            else:
                kept = a[f"{key}_steps"] > 0
                ax.plot(a[f"{key}_steps"][kept], a[f"{key}_shape"][kept, MEASURES.index(measure)], marker="o", ms=2.5,
                        **style)
        ax.set_xlabel("training step")
        ax.set_ylabel("held-out loss (nats)" if measure == "loss" else LABELS[measure])
    axes[0].set_yscale("log")
    axes[2].set_ylim(top=min(axes[2].get_ylim()[1], 5.0))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=plotting.MIN_FONT)
    return fig


def plot_context(result: Result, shape: ModelShape | None):
    """λ2/λ1 and turns against the number of positions: the model's own windows (each window a dot, their mean a
    line) and the main-size runs' last tables, trained at those contexts."""
    a = result.arrays
    fig, axes = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 3.4))
    lengths = a["window_lengths"]
    windows = [(int(L), f"w{L}" if L != lengths[-1] else "whole") for L in lengths]
    for ax, measure in zip(axes, ("pair_ratio", "turns")):
        i = MEASURES.index(measure)
        for length, key in windows:
            ax.plot(np.full(len(a[key]), length), a[key][:, i], "o", ms=2.5, color="0.6", mec="none",
                    label="one window of the table" if length == windows[0][0] else None)
        ax.plot([L for L, _ in windows], [a[k][:, i].mean() for _, k in windows], "-", color="0.2", lw=1,
                label="mean of the windows; last: whole table")
        n, values = a["runs_n_ctx"], a["runs_shape"][:, i]
        context = a["runs_position_init_std"] == MAIN_RECIPE.position_init_std  # the others change the noise
        ax.plot(n[context], values[context], "o", color="C3", ms=4, label="trained at that context")
        ax.plot(n[~context], values[~context], "s", mfc="none", color="C0", ms=5, label="trained, σ 0.01")
        ax.set_xscale("log", base=2)
        ax.set_xticks([L for L, _ in windows], [str(L) for L, _ in windows])
        ax.set_xlabel("positions")
        ax.set_ylabel(LABELS[measure])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=plotting.MIN_FONT)
    return fig


register("training_grid", "What decides the helix: shape across training runs", training_grid, scope="common",
         params={"runs": RUNS, "n_draws": 20, "seed": 0, "edge": EDGE, "level": 0.95},
         data=grid_inputs, figures={"grid": plot_grid, "causes": plot_causes, "long": plot_long}, groups=(GRID_GROUP,))

register("window_shape", "The table's shape in windows of the trained runs' contexts", window_shape, needs=("W_pos",),
         params={"lengths": (128, 256, 512), "stride": 8, "first_row": 1, "untrained_rows": 1, "edge": EDGE,
                 "runs": FIGURE_RUNS, "variant_strides": (8, 16, 32), "n_sample": 3, "cached_rows": None},
         data=figure_inputs, figures={"context": plot_context})
