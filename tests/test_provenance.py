"""Every cited number knows where it came from: the provenance page, its links' data, and `explain`.

Against the committed cache (no weights needed): every key and figure the book cites resolves to a
verified cache entry; the generated page and data are what the cache gives now; each entry names a
function that is defined where it says; each tooltip holds the printed digits and their accuracy in words (the
page it links to holds the key, the unrounded value and the declared accuracy). On a tiny checkpoint: `explain KEY` prints the value, the function with its file and line, the
inputs and the freshness; `--recompute` gives one line of verdict, and catches a value that moved.
The rendered pages are checked in tests/test_rendered.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import make_repository, resealed

from analyses.engine import provenance
from analyses.engine.cache import Cache
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


def _listing() -> str:
    return (REPO / provenance.LISTING).read_text(encoding="utf-8")


def _latex_part(page: str) -> str:
    return page[page.index("```{=latex}"):]


def test_every_cited_key_has_its_tooltip_and_its_own_row(book):
    """A cited number links to its key's row (not to its entry): one id per key, unique, on that key's row."""
    data = json.loads((REPO / provenance.DATA).read_text())
    page = _listing()
    anchors = [data["keys"][key]["anchor"] for key in book.cites.keys]
    assert len(set(anchors)) == len(anchors), "two cited keys share a row"
    for key in book.cites.keys:
        cited, shown = book.cited[key], data["keys"][key]
        assert shown["anchor"] == provenance.key_anchor(key) and page.count(f'<tr id="{shown["anchor"]}">') == 1
        assert shown["title"].startswith(provenance.printed(cited.text).replace("`", "") + ": "), key
        assert key not in shown["title"] and "accuracy" not in shown["title"], f"{key}: its tooltip is not in words"
    for label, shown in data["figures"].items():
        assert shown["anchor"] == book.entries[label].anchor


def test_each_cited_key_is_a_row_of_its_entry_in_both_formats(book):
    """On the web, the key's row (its id, its name, printed value and accuracy) is in its entry's section; in
    print, its line (anchor, name, printed value, accuracy, pages) follows its entry's line."""
    web, pdf = _listing(), _latex_part((REPO / provenance.PAGE).read_text())
    for key in book.cites.keys:
        cited = book.cited[key]
        scope, name, field = key.split(".", 2)
        section = web[web.index(f'<section id="{cited.entry.anchor}">'):].split("</section>")[0]
        row = re.search(rf'<tr id="{provenance.key_anchor(key)}"><td><code>([^<]*)</code></td><td>(.*?)</td>'
                        rf'<td>.*?</td><td title="([^"]*)">([^<]*)</td>', section)
        assert row, f"{key}: no row in its entry's section"
        assert row.group(1) == field and row.group(3) == provenance.accuracy_text(cited.accuracy)
        assert row.group(4) == provenance._short_accuracy(cited.accuracy)
        assert row.group(2) == provenance._html(cited.text)
        entry = pdf.index(rf"\proventry{{\mbox{{{provenance._latex(scope)}.}}{provenance._latex_key(name)}}}")
        line = next(line for line in pdf[entry:].splitlines() if line.startswith(
            rf"\provkey{{{provenance.key_anchor(key)}}}"))
        assert line == (rf"\provkey{{{provenance.key_anchor(key)}}}{{{provenance._latex_key(field)}}}"
                        rf"{{{provenance._latex(cited.text)}}}{{{provenance._latex(provenance._short_accuracy(cited.accuracy))}}}"
                        rf"{{\citedpagesof{{{key}}}}}"), f"{key}: its line in print is {line!r}"


def test_the_print_listing_has_no_heading_and_each_hash_once(book):
    """In the PDF the appendix is one listing: no heading per entry (the table of contents lists the appendix
    alone), each entry's code hash printed once, each model's shared inputs once."""
    page = (REPO / provenance.PAGE).read_text()
    assert re.findall(r"^#+ ", page, re.M) == ["# "], "a heading in the appendix besides its title"
    pdf = _latex_part(page)
    listed = [entry for label, entry in book.entries.items() if label in {
        book.cited[k].entry.label for k in book.cites.keys} | set(book.cites.figures)]
    codes = Counter(entry.code[:provenance.HASH_DIGITS] for entry in listed if entry.code)
    assert codes and all(pdf.count(code) == n for code, n in codes.items()), "a code hash not once per entry"
    for scope in {entry.scope for entry in listed}:
        weights = {entry.inputs.get("model.safetensors") for entry in listed if entry.scope == scope}
        if len(weights) == 1 and None not in weights and sum(e.scope == scope for e in listed) > 1:
            assert pdf.count(weights.pop()[:provenance.HASH_DIGITS]) == 1, f"{scope}: its weights' hash repeated"
    lines = [line for line in pdf.splitlines() if line.startswith("\\provkey")]
    assert len(lines) == len(book.cites.keys) and not any(code in line for line in lines for code in codes)


def test_latex_text_escapes_every_special():
    text = provenance._latex(r"63.28% of a_b, $x$ {y} #1 ^2 ~ \ & `code_x`")
    assert re.search(r"(?<!\\)[%$#&_{}^~]", re.sub(r"\\(texttt|textbackslash|hspace)\{[^}]*\}|\\[\^~]\{\}", "", text)
                     .replace("\\texttt{", "").replace("}", "")) is None, text
    assert r"\texttt{code\_x}" in text and r"\%" in text and r"\textbackslash{}" in text
    long = provenance._latex("51a4d6ed5592001b9386e2f292d3953132a2662240eb8ad08533d625f1259717")
    assert long.count(r"\hspace{0pt}") == 5, "a 64-digit hash can break in its column"
    assert provenance._latex_key("a_b/c") == r"\texttt{a\_\penalty200{}b/\penalty200{}c}"


def test_short_accuracy_in_print():
    assert provenance._short_accuracy({"rel": 1e-9, "abs": 0.0}) == "±1e-9 rel."
    assert provenance._short_accuracy({"rel": 1e-7, "abs": 1e-6}) == "±1e-7 rel. or ±1e-6"
    assert provenance._short_accuracy({"rel": 0.0, "abs": 5e-5}) == "±5e-5"
    assert provenance._short_accuracy({"rel": 0.0, "abs": 0.0}) == "exact"
    assert provenance._short_accuracy(None) == "text"
    assert provenance._short_accuracy({"rel": 0.0, "abs": 0.0, "basis": "a bound from the draws"}) == "bound"


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
    assert all((root / path).is_file() for path in (provenance.PAGE, provenance.LISTING, provenance.DATA))
    assert main(["provenance", "--check", "--root", str(root)]) == 0


def _book_citing(root: Path, key: str) -> None:
    """Make the tiny repository a book of one chapter that cites `key`."""
    (root / "_quarto.yml").write_text("project: {type: book}\nbook:\n  chapters: [report/chapter.qmd]\n")
    (root / "report" / "chapter.qmd").write_text(f"# A chapter\n\nThe mean norm is {{{{< var {key} >}}}}.\n")


def test_the_pre_render_rebuild_is_skipped_only_while_nothing_it_reads_changed(cached, tmp_path, capsys):
    """After a run that found everything fresh, the provenance files are left as they are while no byte they are
    built from (chapters, cache entries, code) nor of the files themselves changed; any such change rebuilds them,
    and `provenance` itself always rebuilds."""
    root = tmp_path / "repo"
    _book_citing(root, "tiny_gpt2.position_matrix.norm_mean")
    assert cli._write_provenance(root) == 0 and (root / provenance.STAMP).is_file()
    capsys.readouterr()
    written = {path: (root / path).read_bytes() for path in (provenance.PAGE, provenance.LISTING, provenance.DATA)}
    assert cli._write_provenance(root, verified=True) == 0
    assert capsys.readouterr().out == "provenance: unchanged since it was last built from the cache\n"

    (root / provenance.DATA).write_text("{}\n")  # a generated file edited by hand
    assert cli._write_provenance(root, verified=True) == 0
    assert "report/provenance.json rebuilt from the cache" in capsys.readouterr().out
    assert (root / provenance.DATA).read_bytes() == written[provenance.DATA]

    _book_citing(root, "tiny_gpt2.position_matrix.norm_max")  # the chapter cites another key
    assert cli._write_provenance(root, verified=True) == 0
    assert "report/provenance.json rebuilt" in capsys.readouterr().out
    assert "norm_max" in (root / provenance.DATA).read_text()

    resealed(Cache.at(root), "tiny_gpt2", "position_matrix", lambda manifest, files: files.update(
        {"numbers.json": files["numbers.json"].replace(b'"norm_max"', b'"norm_max" ', 1)}))  # same numbers, new bytes
    assert provenance.digest(root) != (root / provenance.STAMP).read_text().strip()
    (root / provenance.STAMP).write_text("0" * 64 + "\n")  # a stamp of other inputs: rebuilt (nothing differs)
    assert cli._write_provenance(root, verified=True) == 0 and capsys.readouterr().out == ""
    assert provenance.unchanged(root)
    assert cli._write_provenance(root) == 0 and capsys.readouterr().out == ""  # `provenance` builds, finds all equal
    assert not provenance.unchanged(tmp_path / "elsewhere")  # no stamp: never unchanged


def test_run_skips_the_rebuild_only_when_it_checked_the_whole_report_fresh(tiny_checkpoint, tmp_path, monkeypatch):
    """`run --provenance` (the pre-render step) hands `verified` only after a run of every model and analysis of the
    report that wrote nothing: a run limited to some, or one that computed something, rebuilds."""
    from analyses.engine import pipeline, sources

    root = make_repository(tmp_path / "repo")
    select = pipeline.select
    monkeypatch.setattr(pipeline, "select", lambda names=None: select(names or ["position_matrix"]))  # all of a tiny report
    monkeypatch.setattr(cli, "REPORT_MODELS", ("tiny-gpt2",))
    monkeypatch.setitem(sources.WEIGHTS_ENVS, "tiny-gpt2", "TINY_GPT2_WEIGHTS")
    monkeypatch.setenv("TINY_GPT2_WEIGHTS", str(tiny_checkpoint))
    handed = []
    monkeypatch.setattr(cli, "_write_provenance", lambda root, check=False, verified=False: handed.append(verified) or 0)
    for argv in (["run"], ["run"], ["run", "position_matrix"], ["run", "--model", "tiny-gpt2"]):
        assert main([*argv, "--quiet", "--provenance", "--root", str(root)]) == 0
    assert handed == [False, True, False, False]


def test_a_stamp_that_cannot_be_written_only_means_the_next_step_builds_again(cached, tmp_path, capsys, monkeypatch):
    """A read-only checkout (root ignores permissions, so the write is refused here): the files are checked as
    before, exit 0, nothing printed on stderr, and no stamp is left to skip the next build."""
    import errno

    root = tmp_path / "repo"
    _book_citing(root, "tiny_gpt2.position_matrix.norm_mean")
    assert cli._write_provenance(root) == 0
    (root / provenance.STAMP).unlink()
    write = provenance.atomic_write

    def read_only_stamp(path, data):
        if Path(path).name == provenance.STAMP.name:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        write(path, data)
    monkeypatch.setattr(provenance, "atomic_write", read_only_stamp)
    capsys.readouterr()
    for _ in range(2):
        assert cli._write_provenance(root, verified=True) == 0
        assert capsys.readouterr() == ("", "") and not (root / provenance.STAMP).exists()
