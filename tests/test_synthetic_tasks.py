"""The synthetic tasks and their runs: the generators' closed forms (the offsets target is the token k back, the
buckets label is ⌊(n − m)/width⌋, the masks, no absolute-position shortcut), a few training steps of a tiny recipe
through the engine's writer, the first steps of each committed run rerun against its record, and the analysis's
measures on tables with known answers."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from scipy.stats import chisquare

from analyses.engine import training
from analyses.engine.sources import SYNTHETIC, open_source
from analyses.engine.tensors import HISTORY_FILE, RECORD_FILE
from analyses.toolkit import synthetic_tasks
from analyses.toolkit.synthetic_tasks import IGNORE, SyntheticRecipe, buckets_batch, offsets_batch
from analyses.toolkit.training import learning_rate

OFFSETS = (2, 5, 8, 12)


# ------------------------------------------------------------------------------------------------- the tasks


def test_the_offsets_target_is_the_token_k_back_and_earlier_positions_are_unscored():
    rng = np.random.default_rng(0)
    inputs, targets, mask = offsets_batch(rng, 200, 64, OFFSETS, n_content=64)
    k = np.array(OFFSETS)[inputs[:, 0] - 64]  # the marker at position 0 names the offset
    assert np.all(inputs[:, 1:] < 64) and np.all(inputs[:, 0] >= 64)
    for b in range(200):
        n = np.arange(64)
        np.testing.assert_array_equal(mask[b], n >= k[b] + 1)
        np.testing.assert_array_equal(targets[b, k[b] + 1:], inputs[b, 1:64 - k[b]])
        assert np.all(targets[b, :k[b] + 1] == IGNORE)
    assert np.all(targets[mask] < 64)  # an answer is always content, never the marker


def test_the_bucket_label_is_the_distance_to_the_marker_over_the_width():
    rng = np.random.default_rng(1)
    width, n_ctx = 32, 256
    inputs, targets, mask = buckets_batch(rng, 300, n_ctx, width, n_content=64)
    for b in range(300):
        (m,) = np.flatnonzero(inputs[b] == 64)  # exactly one marker
        n = np.arange(n_ctx)
        np.testing.assert_array_equal(mask[b], n > m)
        np.testing.assert_array_equal(targets[b, m + 1:] - 65, (n[m + 1:] - m) // width)
        assert np.all(targets[b, :m + 1] == IGNORE)
    assert targets[mask].max() == 64 + 1 + (n_ctx - 1) // width  # the last label: bucket 7 of 8


def test_no_absolute_position_helps_the_marker_and_offset_are_uniform():
    """Over many sequences the offset named at position 0 and the marker's position are uniform (χ² p > 0.001), and
    the content is uniform at every position, so a position alone predicts nothing."""
    rng = np.random.default_rng(2)
    inputs, _, _ = offsets_batch(rng, 8000, 32, OFFSETS, n_content=64)
    assert chisquare(np.bincount(inputs[:, 0] - 64, minlength=4)).pvalue > 1e-3
    assert chisquare(np.bincount(inputs[:, 7], minlength=64)).pvalue > 1e-3
    inputs, _, _ = buckets_batch(rng, 25500, 256, 32, n_content=64)
    marker_at = np.nonzero(inputs == 64)[1]
    counts = np.bincount(marker_at, minlength=256)
    assert counts[255] == 0 and chisquare(counts[:255]).pvalue > 1e-3  # 0 … n_ctx − 2: one scored position at least


def test_a_recipe_must_use_its_tasks_vocabulary_and_a_bad_task_is_refused():
    r = SyntheticRecipe.for_task("offsets", offsets=OFFSETS)
    assert r.vocab_size == 64 + 4
    assert SyntheticRecipe.for_task("buckets", n_ctx=256, bucket_width=32).vocab_size == 64 + 1 + 8
    with pytest.raises(ValueError, match="uses 68 ids"):
        SyntheticRecipe(task="offsets", vocab_size=70)
    with pytest.raises(ValueError, match="task must be one of"):
        SyntheticRecipe.for_task("copy")
    with pytest.raises(ValueError, match="offsets must lie"):
        SyntheticRecipe.for_task("offsets", offsets=(0, 3))
    assert SyntheticRecipe.from_dict(r.as_dict()) == r


# ------------------------------------------------------------------------------------------------- training


def test_the_task_loss_and_accuracy_count_the_scored_positions_only():
    """The training loss is the mean of −log softmax at the target over the scored positions (numpy, directly); the
    held-out accuracy is the share of scored positions whose argmax is the target (logits built to be right at
    exactly the first 40 % of them)."""
    import torch
    from types import SimpleNamespace

    from analyses.toolkit.synthetic_tasks import evaluate, masked_loss

    rng = np.random.default_rng(3)
    inputs, targets, mask = offsets_batch(rng, 6, 40, OFFSETS, n_content=64)
    logits = rng.standard_normal((6, 40, 68))
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    expected = -np.take_along_axis(log_p, np.where(mask, targets, 0)[..., None], axis=-1)[..., 0][mask].mean()
    assert float(masked_loss(torch.from_numpy(logits), torch.from_numpy(targets))) == pytest.approx(expected, rel=1e-12)
    right = np.zeros(mask.sum(), dtype=bool)
    right[:int(0.4 * mask.sum())] = True
    built = np.zeros((6, 40, 68), dtype=np.float32)
    rows, cols = np.nonzero(mask)
    built[rows[right], cols[right], targets[mask][right]] = 1.0  # right here, wrong at the other scored positions
    built[rows[~right], cols[~right], (targets[mask][~right] + 1) % 64] = 1.0
    stub = type("Stub", (), {"eval": lambda self: None, "train": lambda self: None,
                             "__call__": lambda self, ids: SimpleNamespace(logits=torch.from_numpy(built))})()
    _, accuracy = evaluate(stub, (inputs, targets, mask))
    assert accuracy == pytest.approx(right.mean())


TINY = dict(n_ctx=32, d_model=32, n_layers=1, n_heads=2, batch=4, steps=6, warmup=2, eval_windows=4, snapshots=3,
            first_snapshot=2, eval_every=2, threads=1)


@pytest.mark.parametrize("task", synthetic_tasks.TASKS)
def test_a_few_steps_train_write_a_checked_run_and_read_back_fresh(task, tmp_path, monkeypatch):
    """Six steps of a tiny recipe: the loss starts near a uniform guess over the vocabulary, the run is written
    whole (checkpoint, history with its accuracy, record, SHA256SUMS, no tokenizer), reads back fresh, and is stale
    once its recipe changes."""
    monkeypatch.setattr(training, "MODELS_DIR", tmp_path)
    recipe = SyntheticRecipe.for_task(task, bucket_width=8, **TINY)
    directory = training.train("tiny", recipe, progress=False)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["config.json", "model.safetensors", HISTORY_FILE, RECORD_FILE, training.SUMS, "generation_config.json"])
    from safetensors.numpy import load_file

    history = load_file(str(directory / HISTORY_FILE))
    assert history["history.train_loss"][0] == pytest.approx(np.log(recipe.vocab_size), rel=0.05)
    np.testing.assert_array_equal(history["history.eval_steps"], recipe.eval_steps())
    assert np.all((history[training.TASK_ACCURACY] >= 0) & (history[training.TASK_ACCURACY] <= 1))
    record = json.loads((directory / RECORD_FILE).read_text())
    assert "corpus" not in record["fingerprint"] and record["corpus"]["task"] == task
    assert training.state("tiny", recipe) == "fresh"
    assert training.state("tiny", dataclasses.replace(recipe, seed=1)) == "stale: its recipe changed"


# --------------------------------------------------------------------------------------- the committed runs


@pytest.mark.parametrize("name", SYNTHETIC)
def test_the_first_steps_of_a_committed_run_rerun_from_the_seed(name):
    """Ten steps retrained from the seed: losses within 1e-4 relative of the recorded ones, position entries within
    2 Σ lr (Adam's first updates are ±lr where a gradient is rounding noise), all but a thousandth within 1e-5."""
    recipe = SYNTHETIC[name]
    source = open_source(name)
    assert training.state(name, recipe) == "fresh"
    steps = 10
    result = synthetic_tasks.train(recipe, stop_after=steps)
    np.testing.assert_allclose(result["train_loss"], source.tensors["history.train_loss"][:steps], rtol=1e-4)
    recorded = source.tensors["history.W_pos"][list(source.tensors["history.steps"]).index(steps)]
    diff = np.abs(result["snapshots"][-1].W_pos - recorded)
    assert diff.max() <= 2 * sum(learning_rate(recipe, s) for s in range(1, steps + 1))
    assert np.mean(diff > 1e-5) < 1e-3
    np.testing.assert_array_equal(source.tensors["history.W_pos"][-1], source.tensors["W_pos"])


# ------------------------------------------------------------------------------------------- the analysis


def test_a_perfect_cosine_sine_table_has_equal_pair_a_known_period_and_its_frequency():
    """P[n] = (cos 2πn/T, sin 2πn/T, 0, …) with T = 32 over 256 positions (8 whole cycles): λ2/λ1 = 1, the top two
    components hold everything, the period is T and the pair's power all at 8 cycles per context, in any frame; an
    ellipse of half the minor axis has λ2/λ1 = 1/4, and a third cycle stronger than that minor axis enters the pair."""
    from analyses.synthetic_positions import pair_spectrum_peaks
    from analyses.toolkit.table_shape import table_shape

    n, T = np.arange(256), 32
    P = np.zeros((256, 64))
    P[:, 0], P[:, 1] = np.cos(2 * np.pi * n / T), np.sin(2 * np.pi * n / T)
    shape = table_shape(P, edge=64)
    assert shape["pair_ratio"] == pytest.approx(1.0, abs=1e-9)
    assert shape["top3"] == pytest.approx(1.0, abs=1e-9) and shape["pc1"] == pytest.approx(0.5, abs=1e-9)
    assert shape["period"] == pytest.approx(T, rel=1e-6)
    assert shape["turns"] == pytest.approx(255 / T, rel=0.01)
    R = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))[0]
    for frame in (np.eye(64), R):
        cycles, shares = pair_spectrum_peaks(P @ frame, n_peaks=1)
        assert cycles[0] == 256 // T and shares[0] == pytest.approx(1.0)
    P[:, 1] *= 0.5
    assert table_shape(P, edge=64)["pair_ratio"] == pytest.approx(0.25, abs=1e-9)
    P[:, 2] = 0.6 * np.cos(2 * np.pi * 3 * n / 256)  # variance 0.18 against the minor axis's 0.125
    cycles, shares = pair_spectrum_peaks(P, n_peaks=2)
    np.testing.assert_array_equal(cycles, [8, 3])
    np.testing.assert_allclose(shares, [0.5 / 0.68, 0.18 / 0.68])


def _heads(W_K_top: np.ndarray):
    """Tensors of one layer-0 head reading P's top three directions (the first three axes) with W_Q = I there and
    W_K = `W_K_top` there, unit LayerNorm gain: its form is W_K_topᵀ / √3, up to the basis's signs."""
    from types import SimpleNamespace

    rng = np.random.default_rng(0)
    P = np.zeros((32, 8))
    P[:, :3] = rng.standard_normal((32, 3)) * [3.0, 2.0, 1.0]
    W_Q, W_K = np.zeros((1, 8, 3)), np.zeros((1, 8, 3))
    W_Q[0, :3], W_K[0, :3] = np.eye(3), W_K_top
    tensors = {"W_pos": P, "blocks.0.ln1.w": np.ones(8), "blocks.0.ln1.b": np.zeros(8),
               "blocks.0.attn.W_Q": W_Q, "blocks.0.attn.W_K": W_K}
    return tensors, SimpleNamespace(family="gpt2", ln_eps=1e-5, n_heads=1)


def test_the_antisymmetric_share_of_a_rotating_head_is_one_and_of_a_symmetric_head_zero():
    """The layer-0 measure on heads of known forms: a rotation generator J (1), the identity (0), and I + J
    (‖J‖/‖I + J‖ with J of norm √2 and I of norm √3)."""
    from analyses.synthetic_positions import layer0_antisymmetric_shares

    J = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert layer0_antisymmetric_shares(*_heads(J), n_components=3) == pytest.approx([1.0])
    assert layer0_antisymmetric_shares(*_heads(np.eye(3)), n_components=3) == pytest.approx([0.0], abs=1e-12)
    assert layer0_antisymmetric_shares(*_heads(np.eye(3) + J), n_components=3) == pytest.approx([np.sqrt(2 / 5)])


def test_the_shared_recipe_is_cited_once_and_runs_that_differ_are_refused():
    """Every run's model and batch are one number each, the offsets one text; two runs at different widths have no one
    width to cite."""
    from dataclasses import replace

    from analyses.engine.sources import SYNTHETIC
    from analyses.synthetic_positions import recipe_numbers

    out = recipe_numbers(list(SYNTHETIC.values()))
    assert out["d_model"].value == 64 and out["n_ctx"].value == 256 and out["n_layers"].value == 2
    assert out["positions_millions"].value == pytest.approx(2000 * 32 * 256 / 1e6)
    assert out["offsets"].value == "2, 5, 8 or 12" and out["bucket_width"].value == 32
    wider = replace(SYNTHETIC["synth-offsets"], d_model=128)
    with pytest.raises(ValueError, match="differ in d_model"):
        recipe_numbers([*SYNTHETIC.values(), wider])
