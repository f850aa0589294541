"""`python -m analyses compare`: the cross-model table for named models, checkpoint directories and hub
repositories, on tiny checkpoints written here (never the network)."""

from __future__ import annotations

import csv
import io
import os
import shutil
import stat

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


# ---------------------------------------------------------------------------
# Issue 47: what `compare` reads is checked, and what it writes is written as named


def _with_sums(directory):
    from analyses.engine.checkpoint import sha256_file

    (directory / "SHA256SUMS").write_text("".join(f"{sha256_file(directory / f)}  {f}\n"
                                                  for f in ("config.json", "model.safetensors")))
    return directory


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_table_that_differs_from_its_checksums_is_refused(two_checkpoints, capsys):
    """Issue 47, 2: row 0 ×20 under the original SHA256SUMS printed `row 0 / median 21.00` and exited 0."""
    from safetensors.numpy import load_file, save_file

    _, gpt1 = two_checkpoints
    _with_sums(gpt1)
    assert main(["compare", str(gpt1)]) == 0
    table = load_file(str(gpt1 / "model.safetensors"))
    table["positions_embed.weight"][0] *= 20
    save_file(table, str(gpt1 / "model.safetensors"))
    assert main(["compare", str(gpt1)]) == 2
    captured = capsys.readouterr()
    assert "do not match SHA256SUMS" in _one_line(captured.err) and "21.00" not in captured.out


def test_a_committed_run_named_by_its_directory_is_checked_as_run_checks_it(tmp_path, monkeypatch, capsys):
    from analyses.engine import training

    models = tmp_path / "models"
    shutil.copytree(training.MODELS_DIR / "kjv-small", models / "kjv-small")
    monkeypatch.setattr(training, "MODELS_DIR", models)
    path = models / "kjv-small" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 1
    path.write_bytes(bytes(data))
    assert main(["compare", str(models / "kjv-small")]) == 2
    assert "`git checkout -- models/kjv-small`" in _one_line(capsys.readouterr().err)


def _table(tmp_path, P: np.ndarray):
    n, d = P.shape
    return write_checkpoint(tmp_path / f"table-{n}", {"positions_embed.weight": P.astype(np.float32)},
                            {"model_type": "openai-gpt", "n_embd": d, "n_positions": n, "n_layer": 2, "n_head": 2,
                             "vocab_size": 11})


@pytest.mark.parametrize("P, expect", [
    (np.full((24, 8), 0.5), "every row the same"),
    (np.random.default_rng(0).standard_normal((1, 8)), "needs at least 3 positions"),
    (np.random.default_rng(0).standard_normal((2, 8)), "needs at least 3 positions"),
])
def test_a_degenerate_table_is_one_line(tmp_path, capsys, P, expect):
    """Issue 47, 10: `nan%` with warnings and exit 0, or a ValueError traceback."""
    assert main(["compare", str(_table(tmp_path, P))]) == 2
    captured = capsys.readouterr()
    assert expect in _one_line(captured.err) and not captured.out


def test_a_model_named_twice_gets_its_rows_once(two_checkpoints, monkeypatch, capsys):
    _, gpt1 = two_checkpoints
    assert main(["compare", str(gpt1), str(gpt1) + "/"]) == 0
    assert capsys.readouterr().out.count("| tiny-gpt1 |") == 2


def test_an_empty_name_is_refused(capsys):
    assert main(["compare", ""]) == 2
    assert "an empty model name" in _one_line(capsys.readouterr().err)


def test_out_through_a_symlink_writes_its_target(two_checkpoints, tmp_path, capsys):
    """Issue 47, 6: the link stays a link, its target gets the table."""
    gpt2, _ = two_checkpoints
    target, link = tmp_path / "target.md", tmp_path / "link.md"
    target.write_text("old\n")
    link.symlink_to(target)
    assert main(["compare", str(gpt2), "--out", str(link)]) == 0
    assert link.is_symlink() and target.read_text() == capsys.readouterr().out


def test_out_into_a_fifo_streams_into_it(two_checkpoints, tmp_path, capsys):
    import threading

    gpt2, _ = two_checkpoints
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert main(["compare", str(gpt2), "--out", str(fifo)]) == 0
    reader.join(10)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and received[0].decode() == capsys.readouterr().out


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_out_to_a_full_device_is_an_os_error_and_the_node_stays(two_checkpoints, tmp_path, capsys):
    """The issue's `--out /dev/full` as root, on a twin of /dev/full made here (never the system's own)."""
    gpt2, _ = two_checkpoints
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    assert main(["compare", str(gpt2), "--out", str(full)]) == 4
    assert _one_line(capsys.readouterr().err) == f"error: No space left on device: {full}"
    assert stat.S_ISCHR(full.lstat().st_mode)


@pytest.mark.parametrize("where, expect", [("dir", "Is a directory"), ("absent/table.md", "No such file or directory")])
def test_an_unwritable_out_is_refused_first_naming_it(two_checkpoints, tmp_path, capsys, monkeypatch, where, expect):
    """The error names the file the user named (never a temporary file) and comes before any model is read."""
    from analyses.engine import compare

    gpt2, _ = two_checkpoints
    (tmp_path / "dir").mkdir()
    monkeypatch.setattr(compare, "open_any", lambda *a: pytest.fail("a model was read before --out was checked"))
    assert main(["compare", str(gpt2), "--out", str(tmp_path / where)]) == 4
    line = _one_line(capsys.readouterr().err)
    assert expect in line and line.endswith(f": {tmp_path / where}")
    assert (tmp_path / "dir").is_dir() and sorted(p.name for p in (tmp_path / "dir").iterdir()) == []
