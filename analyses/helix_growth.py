"""Growing a helix: how the position table of a GPT-2 the report trained itself takes shape over training.

For each snapshot P_s of the position table (step s of the run; `history.*` tensors), with X_s = P_s centred
over positions:

* the share of the top three principal components, Σ_{i≤3} σ_i² / Σ σ_i² of X_s, against the same share for
  Gaussian matrices of the same shape (`n_null` seeded draws: i.i.d. entries have no low-rank structure, and the
  share does not depend on their scale);
* the helix period (`toolkit.helix_period`, the definition every chapter cites) over the bulk of the context,
  "undefined" where the bulk holds less than one turn (an angle that has not come round once has no period);
* the Toeplitz share τ of the Gram matrix X_s X_sᵀ (`toolkit.gram`), against the same Gaussian draws;
* the row-norm profile ‖p_n‖ and the share of ‖P_s‖² in the token embeddings' top-k centred directions at the
  same step, divided by the share k/D a random k-dimensional subspace holds on average (its enrichment), with
  its exact standard deviation over random subspaces (`toolkit.subspaces.random_energy_moments`);
* at the last step, the enrichment in the top `token_k` and in the top k at GPT-2's fraction of the width, each
  with its z against random subspaces and a two-sided empirical p from `n_subspaces` seeded random subspaces
  (`toolkit.subspaces.sampled_energy_fractions`; the direction was not fixed beforehand: a table may avoid the
  tokens' leading directions, as GPT-2's does, or seek them);
* the held-out loss at the same step;
* the learned change alone, ΔP_s = P_s − P_0 (the initial noise subtracted): its top-3 share, against the same
  Gaussian draws; |ρ_S|, the Spearman correlation of its first principal coordinate with position, against the
  largest |ρ_S| of the draws' first coordinates; and its size ‖ΔP_s‖ over the initial noise's ‖P_0‖ (both centred).

Four times summarise a run: the start of learning, the first snapshot from which on every learned change's top-3
share exceeds the largest share among the Gaussian draws; the onset of structure, the first snapshot from which on every snapshot's top-3
share exceeds the largest share among the Gaussian draws (the first detectable structure); the structure's
half-way step, the first snapshot whose top-3 share has covered half of its rise from the initialisation to the
end; and the loss's half-way step, the first evaluation at which the held-out loss has fallen by half of its
total fall over the run.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import COUNT_SHARE, EXACT, Accuracy, Number, Result, Table, Text, period_or_undefined
from analyses.engine.shapes import ModelShape
from analyses.engine.tensors import HISTORY_TOKEN_ROWS, TRAINING_RECORD
from analyses.toolkit import plotting
from analyses.toolkit.gram import toeplitz_share
from analyses.toolkit.helix_period import EDGE, bulk_edge, helix_period, principal_coordinates
from analyses.toolkit.linalg import explained_variance_ratio
from analyses.toolkit.table_shape import defined_period, half_way_index
from analyses.toolkit.pvalues import FAMILYWISE_ALPHA, at_floor, floor_bound
from analyses.toolkit.subspaces import energy_fraction, random_energy_moments, sampled_energy_fractions, width_k

HISTORY = ("history.steps", "history.W_pos", "history.E_centred.S", HISTORY_TOKEN_ROWS, "history.train_loss",
           "history.eval_steps", "history.eval_loss")
RECORDED = Accuracy(basis="exact: read from the committed training record, not recomputed")


def top_share(P: np.ndarray, k: int) -> float:
    """Σ_{i≤k} of the explained-variance ratios of P's rows (centred over positions)."""
    return float(explained_variance_ratio(P)[:k].sum())


def position_following(P: np.ndarray) -> float:
    """|ρ_S|: the Spearman correlation of P's first principal coordinate (centred over positions) with position."""
    z = principal_coordinates(P, 1)[:, 0]
    return float(abs(np.corrcoef(np.argsort(np.argsort(z)), np.arange(len(z)))[0, 1]))


def gaussian_null(shape: tuple[int, int], k: int, n_draws: int, seed: int) -> np.ndarray:
    """[n_draws, 3]: (top-k share, Toeplitz share, |ρ_S| of the first coordinate with position) of i.i.d.
    standard Gaussian matrices of `shape`, centred."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_draws, 3))
    for i in range(n_draws):
        X = rng.standard_normal(shape)
        out[i] = top_share(X, k), toeplitz_share(X - X.mean(axis=0)), position_following(X)
    return out


def learned_change(W: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """For each snapshot after the first, of ΔP_s = P_s − P_0: top-k share, |ρ_S| with position, and size
    ‖ΔP_s‖_F / ‖P_0‖_F (both centred over positions). A snapshot equal to P_0 has no structure: share and ρ_S 0."""
    W = np.asarray(W, dtype=np.float64)
    initial = np.linalg.norm(W[0] - W[0].mean(axis=0))
    changes = W[1:] - W[0]
    size = np.array([np.linalg.norm(d - d.mean(axis=0)) for d in changes])
    return {"share": np.array([top_share(d, k) if n > 0 else 0.0 for d, n in zip(changes, size)]),
            "following": np.array([position_following(d) if n > 0 else 0.0 for d, n in zip(changes, size)]),
            "size": size / initial}


def onset_index(values: np.ndarray, threshold: float) -> int | None:
    """The first index from which on every value exceeds `threshold` (None when the last one does not)."""
    above = values > threshold
    if not above[-1]:
        return None
    below = np.flatnonzero(~above)
    return int(below[-1] + 1) if below.size else 0


def token_directions(history: Mapping[str, np.ndarray], k: int) -> np.ndarray:
    """[S, d_model, k]: E_c's top-k right singular vectors at each snapshot as columns (the history stores rows)."""
    return np.asarray(history[HISTORY_TOKEN_ROWS][:, :k, :], dtype=np.float64).transpose(0, 2, 1)


def trajectory(history: Mapping[str, np.ndarray], k: int, token_k: int, edge: int) -> dict[str, np.ndarray]:
    """Per snapshot: top-k share, helix period, Toeplitz share, row norms, token-subspace enrichment and its exact
    standard deviation over uniformly random token_k-dimensional subspaces (whose mean is 1)."""
    W = np.asarray(history["history.W_pos"], dtype=np.float64)
    V = token_directions(history, token_k)
    D = W.shape[2]
    share, period, tau, enrichment, spread = (np.empty(len(W)) for _ in range(5))
    for s, P in enumerate(W):
        share[s] = top_share(P, k)
        period[s] = helix_period(P, edge)
        tau[s] = toeplitz_share(P - P.mean(axis=0))
        enrichment[s] = energy_fraction(P, V[s], side="output") / (token_k / D)
        spread[s] = random_energy_moments(P, token_k, side="output")[1] / (token_k / D)
    return {"share": share, "period": period, "toeplitz": tau, "enrichment": enrichment,
            "enrichment_sd": spread, "norms": np.linalg.norm(W, axis=2)}


def helix_growth(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, k: int, token_k: int, edge: int,
                 n_null: int, seed: int, shown: int, width_share: float, n_subspaces: int) -> Result:
    """The trajectory of the position table's structure over training, with its Gaussian nulls and the loss."""
    steps = np.asarray(tensors["history.steps"])
    eval_steps, eval_loss = np.asarray(tensors["history.eval_steps"]), np.asarray(tensors["history.eval_loss"])
    lookup = {int(s): i for i, s in enumerate(eval_steps)}
    if any(int(s) not in lookup for s in steps):
        raise ValueError("every snapshot step must have a held-out loss in the history")
    loss = eval_loss[[lookup[int(s)] for s in steps]]
    t = trajectory(tensors, k, token_k, edge)
    null = gaussian_null(tuple(tensors["history.W_pos"].shape[1:]), k, n_null, seed)
    share_max, tau_max, following_max = null.max(axis=0)
    onset = onset_index(t["share"], share_max)
    learned = learned_change(tensors["history.W_pos"], k)
    half, formed = half_way_index(eval_loss), half_way_index(t["share"])
    last = len(steps) - 1
    numbers = {
        "k": Number(k, "d", "principal components in the share"),
        "token_k": Number(token_k, "d", "token directions in the enrichment"),
        "n_snapshots": Number(len(steps), "d", "snapshots of the position table"),
        "n_null": Number(n_null, "d", "Gaussian matrices in the null"),
        "edge": Number(bulk_edge(shape.n_ctx, edge), "d", "positions left out at each end for the helix period"),
        "bulk_last": Number(shape.n_ctx - bulk_edge(shape.n_ctx, edge) - 1, "d", "last position of the period's bulk"),
        "share_init": Number(t["share"][0], ".1%", "top-k share at initialisation"),
        "share_final": Number(t["share"][last], ".1%", "top-k share at the last step"),
        "null_share_max": Number(float(share_max), ".1%", "largest top-k share of the Gaussian draws"),
        "null_share_mean": Number(float(null[:, 0].mean()), ".1%", "mean top-k share of the Gaussian draws"),
        "toeplitz_init": Number(t["toeplitz"][0], ".0%", "Toeplitz share at initialisation"),
        "toeplitz_final": Number(t["toeplitz"][last], ".0%", "Toeplitz share at the last step"),
        "null_toeplitz_max": Number(float(tau_max), ".0%", "largest Toeplitz share of the Gaussian draws"),
        "null_toeplitz_min": Number(float(null[:, 1].min()), ".0%", "smallest Toeplitz share of the Gaussian draws"),
        "toeplitz_min": Number(float(t["toeplitz"].min()), ".0%", "smallest Toeplitz share over training"),
        "toeplitz_min_step": Number(int(steps[int(np.argmin(t["toeplitz"]))]), "d", "the step where it is smallest"),
        "period_final": _period(t["period"][last], shape.n_ctx, edge, "helix period at the last step (tokens per turn)"),
        "enrichment_init": Number(t["enrichment"][0], ".2f", "token-subspace enrichment at initialisation"),
        "enrichment_max": Number(float(t["enrichment"].max()), ".2f", "largest token-subspace enrichment"),
        "enrichment_max_sd": Number(float(t["enrichment_sd"][int(np.argmax(t["enrichment"]))]), ".2f",
                                    "sd of the enrichment over random subspaces at its largest (exact; mean 1)"),
        "enrichment_max_step": Number(int(steps[int(np.argmax(t["enrichment"]))]), "d",
                                      "step of the largest token-subspace enrichment"),
        "norm_first_over_median_final": Number(float(t["norms"][last, 0] / np.median(t["norms"][last])), ".2f",
                                               "row 0's norm over the median row norm, last step"),
        "loss_init": Number(float(eval_loss[0]), ".2f", "held-out loss at initialisation (nats)"),
        "loss_final": Number(float(eval_loss[-1]), ".2f", "held-out loss at the last step (nats)"),
        "loss_half_step": Number(int(eval_steps[half]), "d", "first step with half of the held-out loss's fall"),
        "loss_at_half": Number(float(eval_loss[half]), ".2f", "held-out loss at that step"),
        "share_half_step": Number(int(steps[formed]), "d", "first step with half of the top-k share's rise"),
        "share_at_half": Number(t["share"][formed], ".1%", "top-k share at that step"),
        "loss_at_share_half": Number(float(loss[formed]), ".2f", "held-out loss at that step (nats)"),
        "share_half_vs_loss_half": Text(_order(int(steps[formed]), int(eval_steps[half])),
                                        "whether the structure is half-formed before, at or after the loss's half-way"),
        "share_before_formed": Number(t["share"][formed - 1] if formed else t["share"][0], ".1%",
                                      "top-k share at the snapshot before that step"),
        "step_before_formed": Number(int(steps[formed - 1]) if formed else 0, "d", "the snapshot before that step"),
    }
    numbers |= _learned_numbers(learned, steps, onset, share_max, following_max)
    numbers |= _final_enrichment(tensors, token_k, width_share, n_subspaces, seed)
    if onset is None:
        numbers["onset"] = Text("none", "no snapshot from which on the top-k share stays above the null")
    else:
        numbers |= {"onset_step": Number(int(steps[onset]), "d", "onset of low-rank structure (step)"),
                    "onset_loss": Number(float(loss[onset]), ".2f", "held-out loss at the onset"),
                    "onset_share": Number(t["share"][onset], ".1%", "top-k share at the onset"),
                    "onset_vs_half": Text(_order(int(steps[onset]), int(eval_steps[half])),
                                          "whether the onset comes before, at or after the loss's half-way step")}
    rows = tuple((int(s), float(loss[i]), t["share"][i], t["toeplitz"][i], t["enrichment"][i],
                  _period_cell(t["period"][i], shape.n_ctx, edge) if onset is not None and i >= onset else "—")
                 for i, s in enumerate(steps))
    table = Table(("step", "held-out loss", f"top-{k} share", "Toeplitz share", "token enrichment",
                   "helix period"), rows,
                  formats={"held-out loss": ".2f", f"top-{k} share": ".1%", "Toeplitz share": ".0%",
                           "token enrichment": ".2f", "helix period": ".0f"})
    learned_table = Table(("step", f"top-{k} share of P", f"top-{k} share of P − P₀", "ρ_S with position (abs.)",
                           "‖P − P₀‖ / ‖P₀‖"),
                          tuple((int(steps[i + 1]), t["share"][i + 1], learned["share"][i], learned["following"][i],
                                 learned["size"][i]) for i in range(last)),
                          formats={f"top-{k} share of P": ".1%", f"top-{k} share of P − P₀": ".1%",
                                   "ρ_S with position (abs.)": ".2f", "‖P − P₀‖ / ‖P₀‖": ".2f"})
    picks = np.unique(np.round(np.linspace(0, last, shown)).astype(int))
    coordinates = np.stack([principal_coordinates(np.asarray(tensors["history.W_pos"][i], dtype=np.float64), 2)
                            for i in range(len(steps))])
    arrays = {"steps": steps, "loss": loss, "eval_steps": eval_steps, "eval_loss": eval_loss,
              "train_loss": np.asarray(tensors["history.train_loss"]), "null": null, "picks": picks,
              "coordinates": coordinates, **t}
    arrays |= {f"learned_{key}": value for key, value in learned.items()}
    return Result(numbers, {"trajectory": table, "learned": learned_table}, arrays,
                  {"coordinates": _SIGNS, "picks": EXACT})


def _final_enrichment(history: Mapping[str, np.ndarray], token_k: int, width_share: float, n_subspaces: int,
                      seed: int) -> dict[str, Number | Text]:
    """At the last step, P's energy in E's top-k subspace over chance, for k = token_k ("enrichment_final_*") and k the
    same fraction of the width as GPT-2's cited top 30 (`toolkit.subspaces.width_k`; "width_ratio_final*"): its
    exact sd and z over uniformly random k-subspaces, and the two-sided empirical p from `n_subspaces` of them,
    min(1, 2 min(p_above, p_below)) with p_above = (1 + #{draws ≥ observed}) / (1 + N)."""
    P = np.asarray(history["history.W_pos"][-1], dtype=np.float64)
    D = P.shape[1]
    k = width_k(width_share, D)
    draws = sampled_energy_fractions(P, [token_k, k], n_subspaces, np.random.default_rng(seed), side="output")
    numbers: dict[str, Number | Text] = {
        "width_k": Number(k, "d", f"token directions at {width_share:.4g} of the width"),
        "n_subspaces": Number(n_subspaces, "d", "random subspaces for the empirical p"),
        "alpha": Number(FAMILYWISE_ALPHA, ".2f", "the report's error rate, at which its p-values are read")}
    for key, dimension, column in (("enrichment_final", token_k, draws[:, 0]), ("width_ratio_final", k, draws[:, 1])):
        chance, sd = random_energy_moments(P, dimension, side="output")
        share = energy_fraction(P, token_directions(history, dimension)[-1], side="output")
        nearer = min(1 + np.sum(column >= share), 1 + np.sum(column <= share)) / (1 + n_subspaces)
        numbers |= {
            key: Number(share / chance, ".2f", f"P's energy in E's top {dimension} over chance, last step"),
            f"{key}_sd": Number(sd / chance, ".2f", "its sd over random subspaces (exact; mean 1)"),
            f"{key}_z": Number((share - chance) / sd, ".1f", "its z over random subspaces (exact mean and sd)"),
            f"{key}_p": Text(two_sided_p_text(nearer, n_subspaces),
                             f"two-sided empirical p over {n_subspaces} random subspaces")}
    return numbers


def two_sided_p_text(nearer: float, n_draws: int) -> str:
    """A two-sided empirical p, min(1, 2 p_tail) from the nearer one-sided tail p_tail, as cited: at the floor
    (no draw as far out on that side) the bound 2/(1 + N), rounded up, "p < 0.0002 (9999 draws, two-sided)"."""
    if at_floor(nearer, n_draws):
        return f"p < {floor_bound((n_draws - 1) // 2)} ({n_draws} draws, two-sided)"
    return f"p = {min(1.0, 2 * nearer):.2f}"


def _learned_numbers(learned: dict[str, np.ndarray], steps: np.ndarray, onset: int | None, share_max: float,
                     following_max: float) -> dict[str, Number | Text]:
    """The learned change's numbers: at the first snapshot after step 0, up to the table's onset, and the snapshots
    from which on its share and its position-following stay above every Gaussian draw (indices into steps[1:])."""
    later = steps[1:]
    numbers = {
        "learned_first_step": Number(int(later[0]), "d", "first snapshot after initialisation"),
        "learned_share_first": Number(learned["share"][0], ".1%", "top-k share of P − P₀ at that snapshot"),
        "learned_following_first": Number(learned["following"][0], ".2f",
                                          "|ρ_S| of P − P₀'s first coordinate with position there"),
        "learned_size_first": Number(learned["size"][0], ".2f", "‖P − P₀‖ / ‖P₀‖ there"),
        "null_following_max": Number(float(following_max), ".2f", "largest |ρ_S| of the Gaussian draws"),
        "learned_share_min": Number(float(learned["share"].min()), ".1%", "smallest top-k share of P − P₀"),
    }
    start = onset_index(learned["share"], share_max)
    numbers |= ({"learning_start": Text("none", "no snapshot from which on P − P₀'s top-k share stays above the null")}
                if start is None else
                {"learning_start_step": Number(int(later[start]), "d",
                                               "first snapshot from which on P − P₀'s top-k share stays above every draw")})
    follows = onset_index(learned["following"], following_max)
    if follows is not None:
        numbers["following_step"] = Number(int(later[follows]), "d",
                                           "first snapshot from which on P − P₀'s |ρ_S| stays above every draw")
        if follows > 0:
            lowest = int(np.argmin(learned["following"][:follows]))
            numbers |= {"learned_following_min": Number(float(learned["following"][lowest]), ".2f",
                                                        "smallest |ρ_S| of P − P₀ before that snapshot"),
                        "learned_following_min_step": Number(int(later[lowest]), "d", "the step where it is smallest")}
    if onset is not None and onset > 0:
        early = learned["share"][:onset]
        numbers |= {"learned_share_early_min": Number(float(early.min()), ".1%",
                                                      "smallest top-k share of P − P₀ up to the onset of structure"),
                    "learned_share_early_max": Number(float(early.max()), ".1%",
                                                      "largest top-k share of P − P₀ up to the onset of structure"),
                    "learned_size_at_onset": Number(learned["size"][onset - 1], ".2f",
                                                    "‖P − P₀‖ / ‖P₀‖ at the onset of structure")}
    return numbers


def _holds_a_turn(period: float, n_ctx: int, edge: int) -> bool:
    """Whether the bulk holds at least one turn at `period` tokens per turn (else the period is undefined)."""
    return bool(np.isfinite(defined_period(period, n_ctx, bulk_edge(n_ctx, edge))))


def _period(period: float, n_ctx: int, edge: int, description: str) -> Number | Text:
    return period_or_undefined(defined_period(period, n_ctx, bulk_edge(n_ctx, edge)), ".0f", description)


def _period_cell(period: float, n_ctx: int, edge: int) -> float | str:
    return period if _holds_a_turn(period, n_ctx, edge) else "undefined"


def _order(a: int, b: int) -> str:
    return "before" if a < b else "at" if a == b else "after"


_SIGNS = Accuracy(rel=1e-9, basis="float64 principal coordinates, each axis signed by its largest entry")


def training_run(tensors, shape: ModelShape) -> Result:
    """The committed run's recipe, corpus, machine, throughput and losses, cited from its training record."""
    record = tensors.training_record()
    recipe, corpus, machine, run = (record["fingerprint"]["recipe"], record["corpus"], record["machine"],
                                    record["run"])
    numbers = {f"recipe_{key}": Number(value, "d" if isinstance(value, int) else "g", f"recipe: {key}", RECORDED)
               for key, value in recipe.items() if isinstance(value, (int, float)) and not isinstance(value, bool)}
    numbers |= {
        "beta1": Number(recipe["betas"][0], "g", "AdamW β₁", RECORDED),
        "beta2": Number(recipe["betas"][1], "g", "AdamW β₂", RECORDED),
        "held_out_books": Text(", ".join(recipe["held_out"]), "books held out of training"),
        "training_books": Number(len(corpus["training_books"]), "d", "books trained on"),
        "training_tokens": Number(corpus["training_tokens"], ",d", "tokens of training text"),
        "held_out_tokens": Number(corpus["held_out_tokens"], ",d", "tokens of held-out text"),
        "corpus_sha256": Text(corpus["sha256"], "SHA-256 of the corpus file"),
        "code_sha256": Text(record["fingerprint"]["code"], "SHA-256 of the training code"),
        "torch": Text(record["fingerprint"]["libraries"]["torch"], "torch version of the run"),
        "cpu": Text(machine["cpu"], "processor of the run"),
        "device": Text(machine["device"], "device the run used"),
        "threads": Number(machine["threads"], "d", "threads of the run", RECORDED),
        "minutes": Number(run["seconds"] / 60, ".1f", "wall time of the run (minutes)", RECORDED),
        "tokens": Number(run["tokens"], ",d", "tokens seen in training", RECORDED),
        "epochs": Number(run["tokens"] / corpus["training_tokens"], ".1f", "passes over the training text", RECORDED),
        "tokens_per_second": Number(run["tokens_per_second"], ",.0f", "training throughput", RECORDED),
        "parameters": Number(run["parameters"], ",d", "parameters of the model", RECORDED),
        "flops_per_token": Number(run["flops_per_token"], ",d", "training FLOPs per token (6N + 6 L T d)", RECORDED),
        "matmul_gflops": Number(machine["matmul_flops"] / 1e9, ".0f", "measured float32 matmul rate (GFLOP/s)",
                                RECORDED),
        "utilisation": Number(run["utilisation"], ".0%", "training FLOP rate over the matmul rate", RECORDED),
        "train_loss_final": Number(record["final"]["train_loss_last_100"], ".2f",
                                   "mean training loss of the last 100 steps (nats)", RECORDED),
    }
    return Result(numbers)


def plot_trajectory(result: Result, shape: ModelShape):
    """Top-3 share, Toeplitz share, token enrichment and held-out loss against the training step (log x)."""
    a = result.arrays
    steps = np.maximum(a["steps"], 1)
    fig, axes = plotting.subplots(2, 2, figsize=(plotting.MAX_WIDTH, 5.0), sharex=True)
    panels = ((axes[0, 0], "share", f"top-{result.numbers['k'].text} share", a["null"][:, 0]),
              (axes[0, 1], "toeplitz", "Toeplitz share τ", a["null"][:, 1]),
              (axes[1, 0], "enrichment", "token-subspace energy / chance", None))
    formed, half = result.numbers["share_half_step"].value, result.numbers["loss_half_step"].value
    for ax, key, label, null in panels:
        ax.plot(steps, a[key], marker="o", ms=3, color="C0")
        if null is not None:
            ax.axhspan(null.min(), null.max(), color="0.85", label="Gaussian null (range)")
            ax.legend(loc="upper left", fontsize=plotting.MIN_FONT)
        if key == "enrichment":
            ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_ylabel(label)
    ax = axes[1, 1]
    ax.plot(np.maximum(np.arange(1, len(a["train_loss"]) + 1), 1), a["train_loss"], color="0.7", lw=0.5,
            label="training")
    ax.plot(np.maximum(a["eval_steps"], 1), a["eval_loss"], color="C1", label="held-out")
    ax.set_ylabel("loss (nats)")
    ax.legend(loc="upper right", fontsize=plotting.MIN_FONT)
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.axvline(formed, color="C3", lw=0.8, ls=":")
        ax.axvline(half, color="0.4", lw=0.8, ls="--")
    for ax in axes[1]:
        ax.set_xlabel("training step (log; step 0 drawn at 1)")
    return fig


def plot_snapshots(result: Result, shape: ModelShape):
    """PC1 against PC2 of the position table at a few snapshots, coloured by position."""
    a = result.arrays
    picks = a["picks"]
    cols = 4
    rows = int(np.ceil(len(picks) / cols))
    fig, axes = plotting.subplots(rows, cols, figsize=(plotting.MAX_WIDTH, 1.75 * rows + 0.6))
    n = np.arange(a["coordinates"].shape[1])
    for ax, i in zip(np.ravel(axes), picks):
        Z = a["coordinates"][i]
        ax.plot(Z[:, 0], Z[:, 1], color="0.8", lw=0.5)
        ax.scatter(Z[:, 0], Z[:, 1], c=n, cmap=plotting.POSITION, s=3)
        ax.set_title(f"step {int(a['steps'][i]):,}", fontsize=plotting.MIN_FONT + 1)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_aspect("equal", adjustable="datalim")
    for ax in np.ravel(axes)[len(picks):]:
        ax.set_axis_off()
    return fig


def plot_norms(result: Result, shape: ModelShape):
    """The row-norm profile ‖p_n‖ at each snapshot, coloured by step."""
    a = result.arrays
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 3.2))
    colours = plotting.pyplot().get_cmap(plotting.SEQUENTIAL)(np.linspace(0, 1, len(a["steps"])))
    for norms, colour, step in zip(a["norms"], colours, a["steps"]):
        ax.plot(norms, color=colour, lw=0.8, label=f"{int(step):,}" if step in a["steps"][a["picks"]] else None)
    ax.set_yscale("log")
    ax.set_xlabel("position")
    ax.set_ylabel("row norm ‖p_n‖ (log)")
    ax.legend(title="step", ncols=4, fontsize=plotting.MIN_FONT, title_fontsize=plotting.MIN_FONT, loc="upper right")
    return fig


def growth_slider_html(result: Result, shape: ModelShape) -> str:
    """A markdown fragment: PC1 against PC2 of every snapshot behind a slider (plotly; deterministic bytes)."""
    import re

    import plotly.graph_objects as go

    a = result.arrays
    n = np.arange(a["coordinates"].shape[1])
    fig = go.Figure()
    for i, step in enumerate(a["steps"]):
        Z = np.round(a["coordinates"][i], 4)
        fig.add_trace(go.Scatter(x=Z[:, 0], y=Z[:, 1], mode="lines+markers", visible=i == len(a["steps"]) - 1,
                                 text=[f"position {p}" for p in n], hoverinfo="text",
                                 line={"color": "rgb(200,200,200)", "width": 1},
                                 marker={"size": 4, "color": n, "colorscale": "Plasma",
                                         "colorbar": {"title": {"text": "position"}}},
                                 name=f"step {int(step)}"))
    steps = [{"method": "update", "label": f"{int(s):,}",
              "args": [{"visible": [j == i for j in range(len(a["steps"]))]},
                       {"title": {"text": f"step {int(s):,}: held-out loss {a['loss'][i]:.2f}, "
                                          f"top-3 share {a['share'][i]:.1%}"}}]}
             for i, s in enumerate(a["steps"])]
    last = len(a["steps"]) - 1
    fig.update_layout(sliders=[{"active": last, "steps": steps, "currentvalue": {"prefix": "step "}, "pad": {"t": 40}}],
                      title={"text": steps[last]["args"][1]["title"]["text"]},
                      xaxis={"title": {"text": "PC1"}}, yaxis={"title": {"text": "PC2"}, "scaleanchor": "x"},
                      height=560, margin={"l": 10, "r": 10, "t": 50, "b": 40}, showlegend=False,
                      template="plotly_white")
    div_id = "growth-" + re.sub(r"[^a-z0-9]+", "-", shape.name.lower()).strip("-")
    html = fig.to_html(full_html=False, include_plotlyjs="_assets/plotly.min.js", div_id=div_id)
    return f"```{{=html}}\n{html}\n```\n"


register(
    "helix_growth", "How the position table forms over training", helix_growth,
    needs=HISTORY, params={"k": 3, "token_k": 10, "edge": EDGE, "n_null": 50, "seed": 0, "shown": 8,
                           "width_share": 30 / 768,  # GPT-2's cited top 30, as a fraction of the width
                           "n_subspaces": 9999},
    figures={"trajectory": plot_trajectory, "snapshots": plot_snapshots, "norms": plot_norms},
    files={"growth_slider.md": growth_slider_html}, groups=("position table",),
)

register("training_run", "The training run of a model the report trained", training_run, needs=(TRAINING_RECORD,),
         groups=("position table",))
