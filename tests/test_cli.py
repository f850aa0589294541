"""The command line, end to end on a tiny checkpoint in a temporary cache."""

from __future__ import annotations

import pytest

from analyses.cli import main


@pytest.fixture
def args(tiny_checkpoint, tmp_path):
    return ["position_matrix", "checkpoint_inventory", "--model", "tiny-gpt2", "--weights", str(tiny_checkpoint),
            "--cache-dir", str(tmp_path / "cache")]


def test_run_status_list(args, capsys, tmp_path):
    assert main(["status", *args]) == 1  # nothing cached yet
    assert "STALE: not computed yet" in capsys.readouterr().out
    assert main(["run", "--quiet", args[0], *args[2:]]) == 0  # position_matrix only
    out = capsys.readouterr().out
    assert "tiny_gpt2/position_matrix" in out and "checkpoint_inventory" not in out
    assert (tmp_path / "cache" / "_variables.yml").is_file()
    assert main(["run", "--quiet", *args]) == 0
    assert main(["status", *args]) == 0
    assert "are fresh" in capsys.readouterr().out
    assert main(["list", *args]) == 0
    assert "needs W_pos" in capsys.readouterr().out


def test_bad_inputs_exit_2_with_one_clear_line(args, capsys, tmp_path):
    assert main(["run", "--model", "gpt3", "--cache-dir", str(tmp_path)]) == 2
    assert "unknown model 'gpt3'" in capsys.readouterr().err
    assert main(["run", "no_such_analysis", *args[2:]]) == 2
    assert "unknown analysis no_such_analysis" in capsys.readouterr().err
    assert main(["run", "--model", "tiny-gpt2", "--weights", str(tmp_path / "nope"), "--cache-dir", str(tmp_path)]) == 2
    assert "weights directory not found" in capsys.readouterr().err
    assert main(["run", "--weights", str(tmp_path), "--cache-dir", str(tmp_path)]) == 2
    assert "choose the model it holds with --model" in capsys.readouterr().err


def test_status_without_weights_checks_the_rest(tmp_path, capsys, tiny_model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    code = main(["status", "position_matrix", "--model", "tiny-gpt2", "--cache-dir", str(tmp_path / "c")])
    captured = capsys.readouterr()
    assert code == 1 and "weights unavailable" in captured.err
