"""Only the figures the book shows are drawn: the demand is read from the chapters and what they include."""

from __future__ import annotations

from pathlib import Path

from analyses.engine.cache import Cache
from analyses.engine.pipeline import plan, run, select, status
from analyses.engine.report import figures_shown
from analyses.engine.sources import local_source

REPO = Path(__file__).resolve().parents[1]


def _book(root: Path, chapter: str, fragment: str = "") -> Path:
    (root / "report").mkdir(parents=True, exist_ok=True)
    (root / "_quarto.yml").write_text("project: {type: book}\nbook:\n  chapters: [index.qmd, report/a.qmd]\n")
    (root / "index.qmd").write_text("# Preface\n")
    (root / "report" / "a.qmd").write_text(chapter)
    (root / "report" / "part.md").write_text(fragment)
    return root


def test_figures_shown_reads_chapters_and_their_includes(tmp_path):
    root = _book(tmp_path, "![x](_cache/gpt2/helix/phase){#fig-a}\n{{< include part.md >}}\n"
                           "see _cache/gpt2/helix/helix_3d.md and _cache/minilm/similarity/offset.svg",
                 "![y](_cache/minilm/helix/components){#fig-b}")
    assert figures_shown(root) == {"gpt2/helix": {"phase"}, "minilm/helix": {"components"}}
    (root / "report" / "part.md").write_text("{{< include ../_cache/gpt2/helix/helix_3d.md >}}")
    assert figures_shown(root)["gpt2/helix"] == {"phase", "helix_3d.md"}
    assert figures_shown(tmp_path / "elsewhere") is None


def test_the_real_book_shows_each_figure_it_embeds():
    shown = figures_shown(REPO)
    assert "heatmap" in shown["gpt2/position_matrix"] and "norms" in shown["minilm/position_matrix"]


def test_only_shown_figures_are_drawn_and_showing_another_makes_the_entry_stale(tmp_path, tiny_checkpoint):
    root = _book(tmp_path / "repo", "![n](_cache/tiny_gpt2/position_matrix/norms){#fig-n}\n")
    cache = Cache.at(root)
    source = local_source("tiny-gpt2", tiny_checkpoint)
    jobs = plan(select(["position_matrix"]), [source], figures_shown(root))
    run(jobs, cache, progress=False)
    entry = cache.entry("tiny_gpt2", "position_matrix")
    assert (entry / "norms.svg").is_file() and not (entry / "heatmap.svg").exists()
    (root / "report" / "a.qmd").write_text("![n](_cache/tiny_gpt2/position_matrix/norms)\n"
                                           "![h](_cache/tiny_gpt2/position_matrix/heatmap)\n")
    jobs = plan(select(["position_matrix"]), [source], figures_shown(root))
    assert "figures" in status(jobs, cache).jobs[0][1]
    run(jobs, cache, progress=False)
    assert (entry / "heatmap.svg").is_file() and (entry / "heatmap.pdf").is_file()


def test_including_a_text_output_of_an_analysis_draws_all_its_figures(tiny_checkpoint):
    from analyses.engine.pipeline import Job
    from analyses.engine.registry import Analysis

    analysis = Analysis("probe", "Probe", lambda tensors, shape: None, figures={"a": None, "b": None},
                        files={"section.md": None})
    source = local_source("tiny-gpt2", tiny_checkpoint)
    assert Job(analysis, "tiny_gpt2", source, frozenset({"a"})).figures == ("a",)
    assert Job(analysis, "tiny_gpt2", source, frozenset({"section.md"})).figures == ("a", "b")
    assert Job(analysis, "tiny_gpt2", source, None).figures == ("a", "b")
