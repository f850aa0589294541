"""`python -m analyses compare`: the cross-model table for named models, checkpoint directories and hub
repositories, on tiny checkpoints written here (never the network)."""

from __future__ import annotations

import csv
import io
import shutil

import numpy as np
import pytest
from conftest import gpt2_config, gpt2_state_dict, write_checkpoint

from analyses.engine.cli import main
from analyses.toolkit.linalg import explained_variance_ratio


@pytest.fixture
def two_checkpoints(tmp_path):
    rng = np.random.default_rng(0)
    gpt2 = write_checkpoint(tmp_path / "tiny-gpt2", gpt2_state_dict(rng, with_mlp=False), gpt2_config())
    gpt1 = write_checkpoint(tmp_path / "tiny-gpt1", {"positions_embed.weight": rng.standard_normal((24, 8)).astype(
        np.float32)}, {"model_type": "openai-gpt", "n_embd": 8, "n_positions": 24, "n_layer": 2, "n_head": 2,
                       "vocab_size": 11})
    return gpt2, gpt1


def _read_csv(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_every_named_checkpoint_gets_its_rows(two_checkpoints, tmp_path, capsys):
    gpt2, gpt1 = two_checkpoints
    out = tmp_path / "table.csv"
    assert main(["compare", str(gpt2), str(gpt1), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("| tiny-gpt2 |") == 2 and printed.count("| tiny-gpt1 |") == 2
    rows = _read_csv(out)
    assert [(r["model"], r["positions"]) for r in rows] == [("tiny-gpt2", "16"), ("tiny-gpt2", "16"),
                                                            ("tiny-gpt1", "24"), ("tiny-gpt1", "24")]
    from safetensors.numpy import load_file

    P = load_file(str(gpt1 / "model.safetensors"))["positions_embed.weight"].astype(np.float64)
    ratios = explained_variance_ratio(P)  # an independent recomputation of two of the statistics
    assert float(rows[2]["top-3 share"]) == pytest.approx(ratios[:3].sum(), rel=1e-12)
    assert float(rows[2]["row 0 / median"]) == pytest.approx(
        np.linalg.norm(P[0]) / np.median(np.linalg.norm(P, axis=1)), rel=1e-12)
    assert rows[3]["table"] == "sinusoidal, 24 × 8"


def test_a_hub_repository_is_read_from_the_hf_cache_offline(two_checkpoints, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    gpt2, _ = two_checkpoints
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = tmp_path / "hf" / "models--test-org--tiny"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    (root / "snapshots" / commit).mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(gpt2 / name, root / "snapshots" / commit / name)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["compare", "test-org/tiny"]) == 0
    assert capsys.readouterr().out.count("| test-org/tiny |") == 2


def test_a_checkpoint_without_a_position_table_is_an_error_and_nothing_is_written(two_checkpoints, tmp_path, capsys):
    gpt2, _ = two_checkpoints
    state = gpt2_state_dict(np.random.default_rng(1))
    del state["wpe.weight"]
    rotary = write_checkpoint(tmp_path / "no-positions", state, gpt2_config())
    out = tmp_path / "table.md"
    assert main(["compare", str(gpt2), str(rotary), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no learned position table" in err and not out.exists()


@pytest.mark.parametrize("name, message", [("./absent", "neither a known model"),
                                           ("test-org/absent", "offline and not in the HF cache")])
def test_an_unknown_name_is_one_line_and_exit_2(name, message, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["compare", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
