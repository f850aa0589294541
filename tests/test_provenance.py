"""Every cited number knows where it came from: the provenance page, its links' data, and `explain`.

Against the committed cache (no weights needed): every key and figure the book cites resolves to a
verified cache entry; the generated page and data are what the cache gives now; each entry names a
function that is defined where it says; each tooltip holds the key, the unrounded value and the declared
accuracy. On a tiny checkpoint: `explain KEY` prints the value, the function with its file and line, the
inputs and the freshness; `--recompute` gives one line of verdict, and catches a value that moved.
The rendered pages are checked in tests/test_rendered.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from conftest import make_repository

from analyses.engine import provenance
from analyses.engine import cli
from analyses.engine.cli import main
from analyses.engine.registry import Analysis

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def book() -> provenance.Provenance:
    return provenance.Provenance.of(REPO)


def test_every_cited_key_and_figure_resolves_to_a_verified_entry(book):
    assert book.cites.keys, "no {{< var >}} found in the book's chapters"
    assert book.cites.figures, "no cached figure found in the book's chapters"
    assert not book.unresolved(), f"cited, but in no verified cache entry: {book.unresolved()}"


def test_the_committed_page_and_data_are_the_caches(book):
    stale = provenance.outdated(REPO, book)
    assert not stale, f"{stale} differ from the cache: run `python -m analyses provenance`"


def test_each_entry_names_the_function_where_it_is_defined(book):
    for entry in book.entries.values():
        line = (REPO / entry.file).read_text().splitlines()[entry.line - 1]
        name = entry.function.rsplit(".", 1)[1]
        assert re.match(rf"\s*def {name}\(", line), f"{entry.label}: {entry.where} is {line!r}, not def {name}"


def test_every_cited_key_has_its_tooltip_and_anchor(book):
    data = json.loads((REPO / provenance.DATA).read_text())
    page = (REPO / provenance.PAGE).read_text()
    for key in book.cites.keys:
        cited, shown = book.cited[key], data["keys"][key]
        assert shown["anchor"] == cited.entry.anchor and f"{{#{shown['anchor']} " in page
        assert shown["title"].startswith(f"{key} = ")
        assert provenance.accuracy_text(cited.accuracy) in shown["title"]
        if isinstance(cited.value, float):
            assert repr(cited.value) in shown["title"], f"{key}: the unrounded value is not in its tooltip"
    for label, shown in data["figures"].items():
        assert shown["anchor"] == book.entries[label].anchor


def test_each_cited_key_is_in_its_entrys_table_in_both_formats(book):
    page = (REPO / provenance.PAGE).read_text()
    for key in book.cites.keys:
        assert f'data-key="{key}"' in page, f"{key}: no row with its pages in the PDF appendix"
        section = page[page.index(f"{{#{book.cited[key].entry.anchor} "):]
        assert f"| `{key.split('.', 2)[2]}` |" in section.split("\n## ")[0], f"{key}: not in its entry's table"


def test_accuracy_in_words():
    assert provenance.accuracy_text({"rel": 0.0, "abs": 0.0, "basis": "exact"}) == "exact"
    assert provenance.accuracy_text({"rel": 1e-9, "abs": 0.0}) == "±1e-09 relative"
    assert provenance.accuracy_text({"rel": 0.0, "abs": 0.001}) == "±0.001"
    assert provenance.accuracy_text(None).startswith("none")


# --- the command line, on a tiny checkpoint -------------------------------------------------------------

@pytest.fixture
def cached(tiny_checkpoint, tmp_path):
    root = make_repository(tmp_path / "repo")
    where = ["--weights", str(tiny_checkpoint), "--root", str(root)]
    assert main(["run", "--quiet", "position_matrix", "--model", "tiny-gpt2", *where]) == 0
    return where


def test_explain_prints_value_function_inputs_and_freshness(cached, capsys):
    capsys.readouterr()
    assert main(["explain", "tiny_gpt2.position_matrix.norm_mean", *cached]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tiny_gpt2.position_matrix.norm_mean = ")
    assert re.search(r"value\s+\d+\.\d{6,}", out), "no unrounded value"
    assert "±1e-09 relative" in out
    assert re.search(r"analyses\.position_matrix\.\w+\s+\(analyses/position_matrix\.py:\d+\)", out)
    assert re.search(r"input\s+model\.safetensors\s+sha256 [0-9a-f]{64}", out)
    assert "fresh       yes" in out


def test_explain_recompute_gives_one_line_of_verdict(cached, capsys):
    capsys.readouterr()
    assert main(["explain", "tiny_gpt2.position_matrix.norm_mean", "--recompute", *cached]) == 0
    verdicts = [line for line in capsys.readouterr().out.splitlines() if line.startswith("verdict:")]
    assert len(verdicts) == 1 and verdicts[0].startswith("verdict: reproduced: tiny_gpt2.position_matrix.norm_mean")


def test_explain_recompute_catches_a_value_that_moved(cached, capsys, monkeypatch):
    run = Analysis.run

    def moved(self, tensors, shape):
        result = run(self, tensors, shape)
        number = result.numbers["norm_mean"]
        result.numbers["norm_mean"] = dataclasses.replace(number, value=number.value * (1 + 1e-7))
        return result

    monkeypatch.setattr(Analysis, "run", moved)
    capsys.readouterr()
    assert main(["explain", "tiny_gpt2.position_matrix.norm_mean", "--recompute", *cached]) == cli.EXIT_STALE
    out = capsys.readouterr().out
    assert "verdict: NOT REPRODUCED: norm_mean" in out and "declared accuracy" in out


def test_explain_an_unknown_key_is_one_line_and_exit_2(cached, capsys):
    capsys.readouterr()
    assert main(["explain", "tiny_gpt2.position_matrix.no_such_key", *cached]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown key 'tiny_gpt2.position_matrix.no_such_key'")
    assert "tiny_gpt2.position_matrix." in err.split(";", 1)[1], "no keys of the same entry suggested"


def test_provenance_check_and_write(cached, tmp_path, capsys):
    root = tmp_path / "repo"
    assert main(["provenance", "--check", "--root", str(root)]) == cli.EXIT_STALE
    assert main(["provenance", "--root", str(root)]) == 0
    assert (root / provenance.PAGE).is_file() and (root / provenance.DATA).is_file()
    assert main(["provenance", "--check", "--root", str(root)]) == 0
