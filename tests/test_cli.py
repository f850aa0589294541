"""The command line, end to end on a tiny checkpoint in a temporary repository: one line per error,
documented exit codes, nothing left behind on failure."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_repository

from analyses.engine import cli
from analyses.engine.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def root(tmp_path):
    return make_repository(tmp_path / "repo")


@pytest.fixture
def args(tiny_checkpoint, root):
    return ["position_matrix", "checkpoint_inventory", "--model", "tiny-gpt2", "--weights", str(tiny_checkpoint),
            "--root", str(root)]


def test_run_status_list(args, capsys, root):
    assert main(["status", *args]) == cli.EXIT_STALE  # nothing cached yet
    assert "STALE: not computed yet" in capsys.readouterr().out
    assert main(["run", "--quiet", args[0], *args[2:]]) == 0  # position_matrix only
    out = capsys.readouterr().out
    assert "tiny_gpt2/position_matrix" in out and "checkpoint_inventory" not in out
    assert (root / "_variables.yml").is_file() and (root / "report" / "_cache" / "provenance.md").is_file()
    assert main(["run", "--quiet", *args]) == 0
    assert main(["status", *args]) == 0
    assert "are fresh" in capsys.readouterr().out
    assert main(["list", *args]) == 0
    assert "needs W_pos" in capsys.readouterr().out


def test_status_names_a_hand_edited_variable(args, capsys, root):
    assert main(["run", "--quiet", *args]) == 0
    variables = root / "_variables.yml"
    variables.write_text(variables.read_text().replace("d_model: '8'", "d_model: '9'"))
    capsys.readouterr()
    assert main(["status", *args]) == cli.EXIT_STALE
    assert "tiny_gpt2.model.d_model = '9', the cache says '8'" in capsys.readouterr().out


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_bad_inputs_exit_2_with_one_clear_line(args, capsys, tmp_path, root):
    assert main(["run", "--model", "gpt3", "--root", str(root)]) == cli.EXIT_USAGE
    assert "unknown model 'gpt3'" in _one_line(capsys.readouterr().err)
    assert main(["run", "no_such_analysis", *args[2:]]) == cli.EXIT_USAGE
    assert "unknown analysis no_such_analysis" in _one_line(capsys.readouterr().err)
    nowhere = ["--model", "tiny-gpt2", "--weights", str(tmp_path / "nope"), "--root", str(root)]
    assert main(["run", *nowhere]) == cli.EXIT_USAGE
    assert "weights directory not found" in _one_line(capsys.readouterr().err)
    assert main(["status", *nowhere]) == cli.EXIT_USAGE  # an explicit --weights must exist, for status too
    assert "weights directory not found" in _one_line(capsys.readouterr().err)
    assert main(["run", "--weights", str(tmp_path), "--root", str(root)]) == cli.EXIT_USAGE
    assert "choose the model it holds with --model" in _one_line(capsys.readouterr().err)
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--frobnicate"])
    assert exit_info.value.code == cli.EXIT_USAGE
    assert "unrecognized arguments: --frobnicate" in _one_line(capsys.readouterr().err)


def test_no_repository_is_a_usage_error(args, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["status", *args[:-2]]) == cli.EXIT_USAGE
    assert "not inside the report's repository" in _one_line(capsys.readouterr().err)


def test_status_without_weights_checks_the_rest(tmp_path, capsys, tiny_model, monkeypatch, args):
    assert main(["run", "--quiet", *args]) == 0
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    capsys.readouterr()
    code = main(["status", "position_matrix", "checkpoint_inventory", "--model", "tiny-gpt2", "--root", args[-1]])
    captured = capsys.readouterr()
    assert code == cli.EXIT_UNVERIFIED and "weights unavailable" in captured.err
    assert "(weights not checked)" in captured.out


def test_interrupt_and_os_errors_are_one_line_and_leave_nothing(args, capsys, root, monkeypatch):
    assert main(["run", "--quiet", *args]) == 0
    before = sorted(p.relative_to(root) for p in root.rglob("*") if p.name != ".timings.json")

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("analyses.engine.pipeline.render", interrupt)
    capsys.readouterr()
    assert main(["run", "--quiet", "--force", *args]) == cli.EXIT_INTERRUPTED
    assert "interrupted" in _one_line(capsys.readouterr().err)

    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(root / "report"))

    monkeypatch.setattr("analyses.engine.pipeline.render", disk_full)
    assert main(["run", "--quiet", "--force", *args]) == cli.EXIT_OS
    assert "No space left on device" in _one_line(capsys.readouterr().err)
    after = sorted(p.relative_to(root) for p in root.rglob("*") if p.name != ".timings.json")
    assert after == before


def test_module_entry_point_runs_in_the_repository():
    done = subprocess.run([sys.executable, "-m", "analyses", "list", "thin_shell"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "common/thin_shell" in done.stdout


def test_jobs_must_be_a_positive_number(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--jobs", "0"])
    assert exit_info.value.code == cli.EXIT_USAGE
    assert "expected a whole number of at least 1, got '0'" in _one_line(capsys.readouterr().err)
