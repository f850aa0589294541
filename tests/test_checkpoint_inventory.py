"""The inventory of a checkpoint, counted by hand for a tiny partial GPT-2 (no W_E, no MLP matrices)."""

from __future__ import annotations

from analyses.checkpoint_inventory import checkpoint_inventory
from analyses.engine.sources import local_source


def test_partial_checkpoint_counts_and_groups(tiny_checkpoint):
    """d = 8, n_ctx = 16, 2 layers: 4 global + 16 per layer = 36 canonical tensors, of which W_E and the two
    MLP matrices of each layer (5) are absent. Parameters present: W_pos 128, ln_final 16, and per layer
    Q/K/V 192 + biases 24, W_O 64 + b_O 8, two LayerNorms 32, MLP biases 32 + 8 = 360."""
    source = local_source("tiny-gpt2", tiny_checkpoint)
    result = checkpoint_inventory(source.tensors, source.shape)
    numbers = {k: v.value for k, v in result.numbers.items()}
    assert numbers == {"n_tensors_expected": 36, "n_tensors_present": 31, "n_params_present": 128 + 16 + 2 * 360,
                       "n_groups_absent": 3}
    complete = dict(zip(result.tables["tensor_groups"].column("tensor"),
                        result.tables["tensor_groups"].column("complete")))
    assert complete["W_E"] == "no" and complete["blocks.L.mlp.W_in"] == "no" and complete["blocks.L.mlp.W_out"] == "no"
    assert complete["W_pos"] == "yes" and complete["blocks.L.mlp.b_in"] == "yes"
    assert [g for g, c in complete.items() if c != "yes"] == ["W_E", "blocks.L.mlp.W_in", "blocks.L.mlp.W_out"]
