"""Synthetic sequence tasks that a position table must serve, and training a small GPT-2 on them.

Two tasks, each drawn whole from a seeded numpy generator, so that no absolute position helps:

* `offsets` (exact look-back): every token is uniform over `n_content` content ids except position 0, a marker
  id naming one offset k drawn uniformly from `offsets`; the target at position n is the input token at n − k, and
  positions n ≤ k (where n − k is the marker or before it) are unscored. The model must attend exactly k back,
  for several k, at every position.
* `buckets` (coarse distance): uniform content tokens and one marker id at a position m uniform over
  0 … n_ctx − 2; the target at every later position n is the label of the distance's bucket, ⌊(n − m)/width⌋, each
  label an output id of its own; positions n ≤ m are unscored. The model must tell distances apart over the whole
  context, but only to within a bucket.

Unscored targets hold IGNORE (torch's `ignore_index`). The model, its optimiser and its schedule are the text runs'
(`toolkit.training`: `build_model`, `optimiser`, `learning_rate`, `snapshot`); only the data and the loss differ.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from analyses.toolkit.training import Recipe, build_model, learning_rate, optimiser, snapshot

TASKS = ("offsets", "buckets")
IGNORE = -100
"""The target of an unscored position (torch's default `ignore_index`)."""
HELD_OUT_STREAM = 1
"""The held-out sequences come from the generator seeded (seed, HELD_OUT_STREAM), the training batches from seed."""


def vocabulary_size(task: str, n_content: int, n_offsets: int, n_ctx: int, bucket_width: int) -> int:
    """Ids a task uses: the content ids, then its markers (one per offset, or one), then (buckets) its labels."""
    if task == "offsets":
        return n_content + n_offsets
    return n_content + 1 + bucket_count(n_ctx, bucket_width)


def bucket_count(n_ctx: int, width: int) -> int:
    """Buckets of distances 1 … n_ctx − 1 at `width` positions each: ⌊(n_ctx − 1)/width⌋ + 1."""
    return (n_ctx - 1) // width + 1


@dataclass(frozen=True)
class SyntheticRecipe(Recipe):
    """A text recipe's model, optimiser and schedule, trained on a synthetic task instead of text: `task` (one of
    TASKS), its `offsets` (the look-back distances of `offsets`), `n_content` content ids, and `bucket_width`
    (positions per distance bucket of `buckets`). `vocab_size` must be the task's (`for_task` fills it in);
    `eval_windows` is the number of held-out sequences; the text fields `held_out` are unused."""

    task: str = "offsets"
    offsets: tuple[int, ...] = (2, 5, 8, 12)
    n_content: int = 64
    bucket_width: int = 32

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.task == "offsets" and not (self.offsets and all(0 < k < self.n_ctx - 1 for k in self.offsets)):
            raise ValueError(f"offsets must lie in 1 … {self.n_ctx - 2}, got {self.offsets!r}")
        if self.task == "buckets" and not 0 < self.bucket_width < self.n_ctx:
            raise ValueError(f"bucket_width must lie in 1 … {self.n_ctx - 1}, got {self.bucket_width!r}")
        needed = vocabulary_size(self.task, self.n_content, len(self.offsets), self.n_ctx, self.bucket_width)
        if self.vocab_size != needed:
            raise ValueError(f"the {self.task} task uses {needed} ids, but vocab_size is {self.vocab_size}")

    @classmethod
    def for_task(cls, task: str, **fields) -> SyntheticRecipe:
        """The recipe with `vocab_size` the task's own."""
        defaults = {f: getattr(cls, f) for f in ("offsets", "n_content", "bucket_width", "n_ctx")}
        given = {**defaults, **fields}
        vocab = vocabulary_size(task, given["n_content"], len(given["offsets"]), given["n_ctx"], given["bucket_width"])
        return cls(task=task, vocab_size=vocab, **fields)


def offsets_batch(rng: np.random.Generator, batch: int, n_ctx: int, offsets: tuple[int, ...],
                  n_content: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, targets, mask), each [batch, n_ctx]: marker n_content + i at position 0 for offset k = offsets[i]
    (i uniform), uniform content elsewhere; target[n] = inputs[n − k] where n > k, IGNORE elsewhere."""
    inputs = rng.integers(0, n_content, size=(batch, n_ctx))
    which = rng.integers(0, len(offsets), size=batch)
    inputs[:, 0] = n_content + which
    k = np.asarray(offsets, dtype=np.int64)[which][:, None]
    n = np.arange(n_ctx)[None, :]
    mask = n > k
    back = np.take_along_axis(inputs, np.maximum(n - k, 0), axis=1)
    return inputs, np.where(mask, back, IGNORE), mask


def buckets_batch(rng: np.random.Generator, batch: int, n_ctx: int, width: int,
                  n_content: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, targets, mask), each [batch, n_ctx]: uniform content with the marker n_content at m (uniform over
    0 … n_ctx − 2); target[n] = n_content + 1 + ⌊(n − m)/width⌋ where n > m, IGNORE elsewhere."""
    inputs = rng.integers(0, n_content, size=(batch, n_ctx))
    m = rng.integers(0, n_ctx - 1, size=batch)
    inputs[np.arange(batch), m] = n_content
    distance = np.arange(n_ctx)[None, :] - m[:, None]
    mask = distance > 0
    return inputs, np.where(mask, n_content + 1 + distance // width, IGNORE), mask


def task_batch(recipe: SyntheticRecipe, rng: np.random.Generator, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch of the recipe's task."""
    if recipe.task == "offsets":
        return offsets_batch(rng, batch, recipe.n_ctx, recipe.offsets, recipe.n_content)
    return buckets_batch(rng, batch, recipe.n_ctx, recipe.bucket_width, recipe.n_content)


def held_out_batch(recipe: SyntheticRecipe) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The `eval_windows` held-out sequences, from a generator of their own (never a training batch)."""
    return task_batch(recipe, np.random.default_rng([recipe.seed, HELD_OUT_STREAM]), recipe.eval_windows)


def masked_loss(logits, targets):
    """Mean cross-entropy (nats) over the scored positions (targets ≠ IGNORE)."""
    import torch

    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             ignore_index=IGNORE)


def evaluate(model, held: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[float, float]:
    """(loss, accuracy) over the scored positions of the held-out batch; accuracy: the argmax is the target."""
    import torch

    inputs, targets, mask = held
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(inputs)).logits
        loss = float(masked_loss(logits, torch.from_numpy(targets)))
        correct = (logits.argmax(-1).numpy() == targets)[mask]
    model.train()
    return loss, float(correct.mean())


def train(recipe: SyntheticRecipe, progress: Callable[[int, float, float], None] | None = None,
          stop_after: int | None = None) -> dict:
    """Train a model by `recipe` on its task; return the model and its history, as `toolkit.training.train` does
    for text (plus `eval_accuracy`). Each step draws a fresh batch from numpy's generator seeded with the recipe's
    seed; torch's seed fixes the initialisation."""
    import torch

    torch.set_num_threads(recipe.threads)
    torch.use_deterministic_algorithms(True)
    model = build_model(recipe, eot=recipe.n_content)
    opt = optimiser(model, recipe)
    rng = np.random.default_rng(recipe.seed)
    held = held_out_batch(recipe)
    last = recipe.steps if stop_after is None else min(stop_after, recipe.steps)
    keep, evaluations = set(recipe.snapshot_steps().tolist()), set(recipe.eval_steps().tolist())
    snapshots, eval_log, train_loss = [], [], np.zeros(last, dtype=np.float64)
    started = time.perf_counter()
    model.train()
    for step in range(0, last + 1):
        if step in keep:
            snapshots.append(snapshot(model, step))
        if step in evaluations:
            eval_log.append((step, *evaluate(model, held)))
        if step == last:
            break
        inputs, targets, _ = task_batch(recipe, rng, recipe.batch)
        for group in opt.param_groups:
            group["lr"] = learning_rate(recipe, step + 1)
        loss = masked_loss(model(torch.from_numpy(inputs)).logits, torch.from_numpy(targets))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
        opt.step()
        train_loss[step] = loss.item()
        if progress is not None:
            progress(step + 1, train_loss[step], (step + 1) * recipe.tokens_per_step / (time.perf_counter() - started))
    return {"model": model, "snapshots": snapshots, "train_loss": train_loss,
            "eval_steps": np.array([s for s, _, _ in eval_log], dtype=np.int64),
            "eval_loss": np.array([v for _, v, _ in eval_log], dtype=np.float64),
            "eval_accuracy": np.array([a for _, _, a in eval_log], dtype=np.float64),
            "seconds": time.perf_counter() - started}


def chance_loss(recipe: SyntheticRecipe) -> float:
    """The loss of a uniform guess over the task's answers (content ids, or bucket labels), in nats."""
    answers = recipe.n_content if recipe.task == "offsets" else bucket_count(recipe.n_ctx, recipe.bucket_width)
    return math.log(answers)
