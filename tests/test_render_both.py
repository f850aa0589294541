"""`make report`'s render script (report/_scripts/render-both.sh), with a stand-in `quarto` on PATH: the pre-render
step runs once, then both formats render side by side without it, each line of progress prefixed with its format;
the PDF lands in _book/ beside the website; a failed format is named in one last line on stderr (exit 1) while the
other still finishes; nothing is left in the scratch directory. The real render is checked by tests/test_rendered.py,
which renders the book through the same script."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "report" / "_scripts" / "render-both.sh"

FAKE_QUARTO = """#!/usr/bin/env bash
# A stand-in for `quarto render --to FORMAT`: logs how it was called, writes the format's output into _book/.
format="$3"
echo "$format ANALYSES_PRERENDERED=${ANALYSES_PRERENDERED:-} in $(basename "$PWD")" >> "$CALLS"
echo "rendering $format"
if [ "$format" = "${FAIL:-}" ]; then echo "ERROR: $format went wrong"; exit 3; fi
mkdir -p _book
if [ "$format" = html ]; then echo "<html></html>" > _book/index.html; else echo "%PDF" > _book/Book.pdf; fi
echo "Output created: _book"
"""


@pytest.fixture
def project(tmp_path) -> dict:
    """A project with the book's files, the render script, a pre-render step that logs its runs, and a fake quarto."""
    root = tmp_path / "project"
    (root / "report" / "_scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "report" / "_scripts" / SCRIPT.name)
    (root / "report" / "_scripts" / "pre-render.sh").write_text('echo "pre-render: once" >> "$CALLS"\n')
    for name in ("_quarto.yml", "_variables.yml", "index.qmd", "references.bib"):
        (root / name).write_text("")
    (root / "report" / "chapter.qmd").write_text("# A chapter\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    quarto = bin_dir / "quarto"
    quarto.write_text(FAKE_QUARTO)
    quarto.chmod(quarto.stat().st_mode | stat.S_IXUSR)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
                        "TMPDIR": str(scratch)}
    return {"root": root, "env": env, "calls": tmp_path / "calls", "scratch": scratch}


def render(project: dict, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(project["root"] / "report" / "_scripts" / SCRIPT.name)],
                          env=project["env"] | env, capture_output=True, text=True, timeout=60)


def test_both_formats_render_once_each_after_one_pre_render_and_the_pdf_lands_beside_the_website(project):
    run = render(project)
    assert run.returncode == 0, run.stderr
    calls = project["calls"].read_text().splitlines()
    assert calls[0] == "pre-render: once" and sorted(calls[1:]) == [
        "html ANALYSES_PRERENDERED=1 in project", "pdf ANALYSES_PRERENDERED=1 in book"]  # the PDF in its own copy
    assert "[html] rendering html" in run.stdout and "[pdf] rendering pdf" in run.stdout
    assert (project["root"] / "_book" / "index.html").is_file() and (project["root"] / "_book" / "Book.pdf").is_file()
    assert run.stdout.rstrip().endswith("make report: the website and _book/Book.pdf are rendered.")
    assert not any(project["scratch"].iterdir()), "the scratch copy was left behind"


@pytest.mark.parametrize("failing, name, other", [("pdf", "PDF", "index.html"), ("html", "website", "Book.pdf")])
def test_a_failed_format_is_named_in_one_line_and_the_other_still_finishes(project, failing, name, other):
    run = render(project, FAIL=failing)
    assert run.returncode == 1
    assert run.stderr.splitlines()[-1] == f"make report: the {name} failed first (quarto exit 3): ERROR: {failing} went wrong"
    book = project["root"] / "_book"
    if failing == "pdf":
        assert (book / other).is_file() and not list(book.glob("*.pdf"))
    else:  # the PDF rendered in its copy, and is not moved into a book whose website failed
        assert not (book / "Book.pdf").exists()
    assert not any(project["scratch"].iterdir())


def test_a_failed_pre_render_step_renders_nothing(project):
    (project["root"] / "report" / "_scripts" / "pre-render.sh").write_text(
        'echo "pre-render: the analyses failed; not rendering." >&2\nexit 1\n')
    run = render(project)
    assert run.returncode == 1 and run.stderr.splitlines()[-1] == "pre-render: the analyses failed; not rendering."
    assert not project["calls"].exists() and not (project["root"] / "_book").exists()
