"""GPT-1 (openai-gpt): its canonical names, the offline position table, the hub's whole checkpoint and their
comparison, and which analyses can read it. Tiny checkpoints written here; never the network."""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from analyses.engine import sources
from analyses.engine.cache import Cache
from analyses.engine.checkpoint import WeightsError, sha256_file
from analyses.engine.pipeline import execute, plan
from analyses.engine.registry import all_analyses, unread_family
from analyses.engine.sources import GPT1_WEIGHTS_ENV, ModelSpec, hub_source, local_source, open_source, read_sums
from conftest import make_repository, write_checkpoint

D, N_CTX, LAYERS, HEADS, VOCAB = 8, 16, 2, 2, 11
TINY_GPT1 = ModelSpec("gpt1", "gpt1", "test-org/tiny-openai-gpt", None,
                      {"family": "openai-gpt", "d_model": D, "n_layers": LAYERS, "n_heads": HEADS, "n_ctx": N_CTX,
                       "d_vocab": VOCAB, "d_mlp": 4 * D})
"""Stands in for `gpt1` (same name, so the same code paths) at a tiny shape, with a test hub repository."""


def gpt1_config() -> dict:
    return {"model_type": "openai-gpt", "n_embd": D, "n_positions": N_CTX, "n_ctx": N_CTX, "n_layer": LAYERS,
            "n_head": HEADS, "vocab_size": VOCAB, "afn": "gelu", "layer_norm_epsilon": 1e-5}


def gpt1_state_dict(rng: np.random.Generator, positions_only: bool = False) -> dict[str, np.ndarray]:
    """A random state dict with transformers' OpenAIGPTModel names (unit tests only: never a cited result)."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    state = {"positions_embed.weight": f(N_CTX, D)}
    if positions_only:
        return state
    state["tokens_embed.weight"] = f(VOCAB, D)
    for i in range(LAYERS):
        state |= {f"h.{i}.attn.c_attn.weight": f(D, 3 * D), f"h.{i}.attn.c_attn.bias": f(3 * D),
                  f"h.{i}.attn.c_proj.weight": f(D, D), f"h.{i}.attn.c_proj.bias": f(D),
                  f"h.{i}.ln_1.weight": f(D), f"h.{i}.ln_1.bias": f(D), f"h.{i}.ln_2.weight": f(D),
                  f"h.{i}.ln_2.bias": f(D), f"h.{i}.mlp.c_fc.weight": f(D, 4 * D), f"h.{i}.mlp.c_fc.bias": f(4 * D),
                  f"h.{i}.mlp.c_proj.weight": f(4 * D, D), f"h.{i}.mlp.c_proj.bias": f(D)}
    return state


@pytest.fixture
def tiny_gpt1(monkeypatch):
    monkeypatch.setitem(sources.MODELS, "gpt1", TINY_GPT1)
    return TINY_GPT1


def _hub_copy(cache: Path, checkpoint: Path, repo: str = TINY_GPT1.hub_repo) -> None:
    """Lay a checkpoint out as huggingface_hub's cache holds a download of `repo`."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    (root / "snapshots" / commit).mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(checkpoint / name, root / "snapshots" / commit / name)


def test_whole_gpt1_maps_its_own_names_to_canonical_ones(tmp_path, tiny_gpt1):
    state = gpt1_state_dict(np.random.default_rng(0))
    source = local_source("gpt1", write_checkpoint(tmp_path / "gpt1", state, gpt1_config()))
    t, shape = source.tensors, source.shape
    assert (shape.family, shape.norm, shape.d_mlp, shape.n_ctx) == ("openai-gpt", "post", 4 * D, N_CTX)
    np.testing.assert_array_equal(t["W_pos"], state["positions_embed.weight"])
    np.testing.assert_array_equal(t["W_E"], state["tokens_embed.weight"])
    c_attn = state["h.1.attn.c_attn.weight"]
    dh = D // HEADS
    for i, q in enumerate("QKV"):  # head h of W_q is columns [i·D + h·dh, i·D + (h+1)·dh) of c_attn
        for h in range(HEADS):
            np.testing.assert_array_equal(t[f"blocks.1.attn.W_{q}"][h], c_attn[:, i * D + h * dh:i * D + (h + 1) * dh])
    np.testing.assert_array_equal(t["blocks.0.ln1.w"], state["h.0.ln_1.weight"])  # ln_1 follows the attention
    np.testing.assert_array_equal(t["blocks.0.mlp.W_out"], state["h.0.mlp.c_proj.weight"])
    assert "ln_final.w" not in t and len(t) == len(state) + 2 * 3 * LAYERS - 2 * LAYERS + 2  # + the token subspace


def test_the_position_table_alone_holds_only_w_pos(tmp_path, tiny_gpt1):
    source = local_source("gpt1", write_checkpoint(tmp_path / "gpt1", gpt1_state_dict(
        np.random.default_rng(0), positions_only=True), gpt1_config()))
    assert list(source.tensors) == ["W_pos"]
    assert source.missing(("W_pos", "W_E", "blocks.*.attn.W_Q")) == ["W_E", "blocks.*.attn.W_Q"]


def test_a_config_of_another_gpt1_shape_is_refused(tmp_path, tiny_gpt1):
    config = gpt1_config() | {"n_positions": 32}
    state = {"positions_embed.weight": np.ones((32, D), dtype=np.float32)}
    with pytest.raises(WeightsError, match="are not gpt1: n_ctx is 32, gpt1 has 16"):
        local_source("gpt1", write_checkpoint(tmp_path / "gpt1", state, config)).shape


def test_analyses_that_read_blocks_or_text_do_not_read_gpt1():
    """Only analyses that read tensors as weights run on GPT-1; those written for GPT-2's or BERT's blocks (a
    LayerNorm, family-specific needs, a tokenizer) get a need no source meets. GPT-2 and BERT keep theirs."""
    analyses = all_analyses()
    for name in ("helix", "low_rank", "toeplitz_gram", "attention_spectra", "token_position_sum"):
        assert analyses[name].reads_family("openai-gpt"), name
    for name in ("positional_attention", "corpus_states", "forward_prompts", "mlp_position_content"):
        assert not analyses[name].reads_family("openai-gpt"), name
        assert unread_family("openai-gpt") in analyses[name].needs_for("openai-gpt")
    for analysis in analyses.values():
        for family in ("gpt2", "bert"):
            assert unread_family(family) not in analysis.needs_for(family)


def test_gpt1_is_recorded_as_skipped_with_the_reason(tmp_path, tiny_gpt1):
    """On the whole tiny GPT-1, positional attention (written for GPT-2's and BERT's LayerNorms) is a stated skip;
    the inventory of its tensors is computed, every canonical tensor present."""
    source = local_source("gpt1", write_checkpoint(tmp_path / "gpt1", gpt1_state_dict(np.random.default_rng(0)),
                                                   gpt1_config()))
    cache = Cache.at(make_repository(tmp_path / "repo"))
    registry = all_analyses()
    jobs = {job.analysis.name: job for job in plan([registry["positional_attention"], registry["checkpoint_inventory"]],
                                                  [source])}
    skipped = execute(jobs["positional_attention"], cache, jobs["positional_attention"].inputs())
    assert skipped["status"] == "skipped"
    assert "LayerNorm after each sublayer, causal" in skipped["reason"] and "lacks" not in skipped["reason"]
    assert execute(jobs["checkpoint_inventory"], cache, jobs["checkpoint_inventory"].inputs())["status"] == "ok"
    numbers = json.loads((cache.entry(source.slug, "checkpoint_inventory") / "numbers.json").read_text())
    assert numbers["n_groups_absent"]["value"] == 0


@pytest.fixture
def table_and_hub(tmp_path, tiny_gpt1, monkeypatch):
    """The offline table (named by $GPT1_WEIGHTS) and a whole checkpoint in a test HF cache with the same table."""
    state = gpt1_state_dict(np.random.default_rng(1))
    table = write_checkpoint(tmp_path / "table", {"positions_embed.weight": state["positions_embed.weight"]},
                             gpt1_config())
    whole = write_checkpoint(tmp_path / "whole", state, gpt1_config())
    monkeypatch.setenv(GPT1_WEIGHTS_ENV, str(table))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(sources, "hub_source", functools.partial(hub_source, cache_dir=tmp_path / "hf"))
    return table, whole, tmp_path / "hf"


def test_without_the_hub_the_offline_table_is_the_source(table_and_hub):
    table, _, _ = table_and_hub
    source = open_source("gpt1")
    assert source.directory == table.resolve() and list(source.tensors) == ["W_pos"]


def test_the_hub_checkpoint_is_used_whole_when_its_table_equals_the_offline_one(table_and_hub):
    table, whole, cache = table_and_hub
    _hub_copy(cache, whole)
    source = open_source("gpt1")
    assert "hub" in source.origin and "W_E" in source.tensors and "blocks.1.mlp.W_in" in source.tensors
    np.testing.assert_array_equal(source.tensors["W_pos"], local_source("gpt1", table).tensors["W_pos"])


def test_a_hub_table_that_differs_from_the_offline_one_is_an_error(table_and_hub):
    _, whole, cache = table_and_hub
    state = gpt1_state_dict(np.random.default_rng(1))
    state["positions_embed.weight"][5, 3] += np.float32(1e-6)  # one value, in its last bits
    _hub_copy(cache, write_checkpoint(whole.parent / "altered", state, gpt1_config()))
    with pytest.raises(WeightsError, match=r"differs from Hugging Face hub.*1 values differ"):
        open_source("gpt1")


@pytest.fixture(scope="module")
def gpt1_weights() -> Path:
    value = os.environ.get(GPT1_WEIGHTS_ENV)
    if not value:
        pytest.skip(f"${GPT1_WEIGHTS_ENV} is not set: no real GPT-1 position table to check")
    return Path(value)


def test_real_gpt1_table_matches_its_checksums_and_its_readme(gpt1_weights):
    """The shared files against their SHA256SUMS, and the values its README states."""
    listed = read_sums(gpt1_weights / "SHA256SUMS")
    assert set(listed) == {"model.safetensors", "config.json"}
    for name, digest in listed.items():
        assert sha256_file(gpt1_weights / name) == digest
    source = open_source("gpt1")
    P = source.tensors["W_pos"]
    assert P.shape == (512, 768) and source.shape.family == "openai-gpt"
    np.testing.assert_allclose(P[0, :3], [-0.00032641, -0.01188554, 0.00150986], atol=5e-9)
    norms = np.linalg.norm(P.astype(np.float64), axis=1)
    assert (int(norms.argmin()), int(norms.argmax())) == (13, 494)


def test_a_whole_local_checkpoint_is_used_as_it_is(table_and_hub, monkeypatch):
    _, whole, cache = table_and_hub
    _hub_copy(cache, whole)
    monkeypatch.setenv(GPT1_WEIGHTS_ENV, str(whole))
    source = open_source("gpt1")
    assert source.directory == whole.resolve() and "W_E" in source.tensors
