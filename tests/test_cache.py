"""The cache and the pipeline: freshness, invalidation, skipping, atomic replacement, failure paths,
byte-for-byte reruns, and the last link (the cited files rebuilt from the verified cache)."""

from __future__ import annotations

import errno
import json
import os
import stat

import numpy as np
import pytest
import yaml
from conftest import gpt2_config, gpt2_state_dict, write_checkpoint

from analyses.engine import index, registry
from analyses.engine.cache import TIMINGS, Cache, Outputs, RootError, find_root
from analyses.engine.checkpoint import WeightsError
from analyses.engine.fingerprints import input_fingerprint, library_versions
from analyses.engine.pipeline import Job, orphans, plan, run, select, status
from analyses.engine.registry import Analysis, UnknownAnalysisError
from analyses.engine.results import Number, Result, Table, spoken_list
from analyses.engine.sources import local_source, model_spec


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != TIMINGS}


def _outcomes(report):
    return [what for _, what in report.done]


@pytest.fixture
def cache(tmp_path):
    return Cache(tmp_path / "cache", tmp_path / "_variables.yml")


@pytest.fixture
def jobs(tiny_checkpoint):
    src = local_source("tiny-gpt2", tiny_checkpoint)
    return plan(select(["position_matrix", "checkpoint_inventory"]), [src])


def test_run_writes_entries_variables_and_provenance(cache, jobs):
    report = run(jobs, cache, progress=False)
    assert [what.split()[0] for what in _outcomes(report)] == ["ok", "ok"] and report.index_written
    entry = cache.entry("tiny_gpt2", "position_matrix")
    for name in ("numbers.json", "norm_extremes.md", "norm_extremes.csv", "heatmap.svg", "heatmap.pdf",
                 "norms.svg", "norms.pdf", "status.md", "manifest.json"):
        assert (entry / name).is_file(), name
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["status"] == "ok" and set(manifest["outputs"]) == {
        p.name for p in entry.iterdir() if p.name != "manifest.json"}
    assert "wall_time_s" not in manifest  # timings differ per run: kept out of committed files
    assert set(json.loads((cache.root / TIMINGS).read_text())) == {j.label for j in jobs}
    variables = yaml.safe_load(cache.variables.read_text())
    assert variables["tiny_gpt2"]["position_matrix"]["n_positions"] == "16"
    assert variables["tiny_gpt2"]["model"]["d_model"] == "8"
    assert "| `tiny_gpt2` | `position_matrix` | ok |" in cache.provenance.read_text()


def test_generated_files_get_ordinary_permissions(cache, jobs):
    old = os.umask(0o022)
    try:
        run(jobs, cache, progress=False)
    finally:
        os.umask(old)
    for path in (cache.variables, cache.provenance, cache.entry("tiny_gpt2", "position_matrix")):
        assert stat.S_IMODE(path.stat().st_mode) in (0o644, 0o755), path


def test_warm_run_recomputes_nothing_and_takes_no_lock(cache, jobs, monkeypatch):
    run(jobs, cache, progress=False)
    before = _tree(cache.root)
    monkeypatch.setattr(Cache, "locked", lambda self: pytest.fail("a warm run took the lock"))
    report = run(jobs, cache, progress=False)
    assert _outcomes(report) == ["fresh", "fresh"] and not report.wrote
    assert _tree(cache.root) == before
    assert status(jobs, cache).problems == 0


def test_read_only_checkout_with_a_fresh_cache_runs_and_checks(cache, jobs, monkeypatch):
    run(jobs, cache, progress=False)

    def read_only(self):
        raise PermissionError(13, "Permission denied", str(self.root))

    monkeypatch.setattr(Cache, "locked", read_only)  # what locking does in a read-only tree
    assert not run(jobs, cache, progress=False).wrote
    assert status(jobs, cache).problems == 0


def test_forced_rerun_is_byte_for_byte_identical(cache, jobs):
    run(jobs, cache, progress=False)
    before = _tree(cache.root)
    assert all(what.startswith("ok (forced)") for what in _outcomes(run(jobs, cache, force=True, progress=False)))
    assert _tree(cache.root) == before  # manifests untouched too


def test_outputs_reproduce_in_a_fresh_cache(tmp_path, jobs):
    first, second = Cache(tmp_path / "a", tmp_path / "a.yml"), Cache(tmp_path / "b", tmp_path / "b.yml")
    run(jobs, first, progress=False)
    run(jobs, second, progress=False)
    assert _tree(first.root) == _tree(second.root)


def test_weights_change_makes_entries_stale(cache, jobs, tiny_checkpoint):
    run(jobs, cache, progress=False)
    state = gpt2_state_dict(np.random.default_rng(99), with_wte=False, with_mlp=False)
    write_checkpoint(tiny_checkpoint, state, gpt2_config())
    fresh_jobs = plan([j.analysis for j in jobs], [local_source("tiny-gpt2", tiny_checkpoint)])
    reasons = [reason for _, reason in status(fresh_jobs, cache).jobs]
    assert all("weights" in r for r in reasons)
    rerun = run(fresh_jobs, cache, progress=False)
    assert all(w.startswith("ok (changed since it was computed: weights") for w in _outcomes(rerun))


def test_parameter_code_and_library_changes_make_entry_stale(cache, jobs):
    run(jobs, cache, progress=False)
    job = jobs[0]
    changed = Analysis(**{**job.analysis.__dict__, "params": {**job.analysis.params, "clip_percentile": 95.0}})
    assert "params" in status([Job(changed, job.scope, job.source)], cache).jobs[0][1]
    inputs = job.inputs()
    assert cache.staleness(job.scope, job.analysis.name, {**inputs, "code": "0" * 64}) == \
        "changed since it was computed: code"
    libraries = {**inputs["libraries"], "pillow": "0.0.1"}
    reason = cache.staleness(job.scope, job.analysis.name, {**inputs, "libraries": libraries})
    assert reason.startswith("changed since it was computed: libraries (pillow") and "→ 0.0.1" in reason
    python = {**inputs["libraries"], "python": "2.7.18"}
    assert "python" in cache.staleness(job.scope, job.analysis.name, {**inputs, "libraries": python})


def test_tampered_or_missing_output_is_stale(cache, jobs):
    run(jobs, cache, progress=False)
    entry = cache.entry("tiny_gpt2", "position_matrix")
    (entry / "numbers.json").write_text("{}")
    assert "modified" in status(jobs, cache).jobs[0][1]
    (entry / "numbers.json").unlink()
    assert "missing" in status(jobs, cache).jobs[0][1]
    (entry / "manifest.json").write_text("{truncated")
    assert "no readable manifest" in status(jobs, cache).jobs[0][1]


def _probe_job(checkpoint, needs):
    def needs_tokens(tensors, shape):
        raise AssertionError("must not run without its tensors")

    def section(result, shape):
        raise AssertionError("no text output is drawn for a skipped analysis")

    return Job(Analysis("token_probe", "Token probe", needs_tokens, needs=needs, files={"section.md": section}),
               "tiny_gpt2", local_source("tiny-gpt2", checkpoint))


def test_missing_tensor_is_recorded_as_skipped_with_reason(cache, tiny_checkpoint, monkeypatch):
    job = _probe_job(tiny_checkpoint, ("W_E", "blocks.*.mlp.W_in", "tokenizer"))
    monkeypatch.setattr(Job, "inputs", lambda self: input_fingerprint(self.source.fingerprint, "c" * 64, {},
                                                                      library_versions()))
    run([job], cache, progress=False)
    manifest = cache.manifest("tiny_gpt2", "token_probe")
    assert manifest["status"] == "skipped"
    assert "`tokenizer`, `W_E`, `blocks.*.mlp.W_in`" in manifest["reason"] and "substitute" in manifest["reason"]
    assert "`python -m analyses run token_probe --model tiny-gpt2` where the Hugging Face hub is reachable " \
           "(`test-org/tiny-gpt2`)" in manifest["reason"]
    assert (cache.entry("tiny_gpt2", "token_probe") / "section.md").read_text() == ""  # includable, empty
    status_md = (cache.entry("tiny_gpt2", "token_probe") / "status.md").read_text()
    assert status_md == ("*Token probe: not computed for tiny-gpt2: this edition's checkpoint has no tokenizer, "
                         "token embeddings or MLP weights (@sec-data-weights).*\n")  # one line, in words; the whole
    # reason, tensors by name, is in the manifest


def test_interrupted_computation_leaves_previous_entry_intact(cache, jobs, monkeypatch):
    run(jobs, cache, progress=False)
    before = _tree(cache.root)

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("analyses.engine.pipeline.render", boom)  # dies mid-computation
    with pytest.raises(KeyboardInterrupt):
        run([jobs[0]], cache, force=True, progress=False)
    assert _tree(cache.root) == before and not cache.leftovers()


def test_full_disk_while_writing_removes_the_temporary_entry(cache, jobs, monkeypatch):
    run(jobs, cache, progress=False)
    before = _tree(cache.root)
    real = type(cache.root).write_bytes

    def full(self, data):
        if self.name.endswith(".pdf"):
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data)

    monkeypatch.setattr(type(cache.root), "write_bytes", full)
    changed = Analysis(**{**jobs[0].analysis.__dict__, "params": {**jobs[0].analysis.params, "clip_percentile": 90.0}})
    with pytest.raises(OSError, match="No space"):
        run([Job(changed, jobs[0].scope, jobs[0].source)], cache, progress=False)
    assert _tree(cache.root) == before and not cache.leftovers()


def test_crash_between_the_two_renames_is_rolled_back(cache, jobs):
    run(jobs, cache, progress=False)
    entry = cache.entry("tiny_gpt2", "position_matrix")
    before = _tree(entry)
    # state after the old entry was moved aside and before the new one was moved in
    entry.rename(entry.parent / ".old-position_matrix")
    (entry.parent / ".new-position_matrix.abc").mkdir()
    assert len(cache.leftovers()) == 2 and "not computed yet" in status(jobs, cache).jobs[0][1]
    assert _outcomes(run(jobs, cache, progress=False)) == ["fresh", "fresh"]  # restored under the lock
    assert _tree(entry) == before and not cache.leftovers()


def test_write_replaces_whole_entry(cache):
    outputs = Outputs()
    outputs.add_text("a.md", "one")
    inputs = input_fingerprint(None, "c" * 64, {}, library_versions())
    manifest = {"status": "ok", "reason": None, "input": inputs, "shape": None}
    assert cache.write("common", "x", manifest, outputs)
    outputs = Outputs()
    outputs.add_text("b.md", "two")
    assert cache.write("common", "x", manifest, outputs)
    assert sorted(p.name for p in cache.entry("common", "x").iterdir()) == ["b.md", "manifest.json"]
    assert not cache.write("common", "x", manifest, outputs)  # identical: untouched


# ---------------------------------------------------------------------------
# The last link: _variables.yml and provenance.md


def test_hand_edited_variable_is_named_by_status_and_restored_by_run(cache, jobs):
    run(jobs, cache, progress=False)
    text = cache.variables.read_text()
    cache.variables.write_text(text.replace("n_positions: '16'", "n_positions: '17'"))
    problems = status(jobs, cache).index_problems
    assert problems == ["_variables.yml has tiny_gpt2.position_matrix.n_positions = '17', the cache says '16'"]
    report = run(jobs, cache, progress=False)
    assert report.index_written and cache.variables.read_text() == text


def test_kill_after_the_swap_before_the_index_is_caught_and_repaired(cache, jobs, monkeypatch):
    run(jobs, cache, progress=False)
    write = index.write

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(index, "write", killed)
    changed = Analysis(**{**jobs[0].analysis.__dict__,
                          "params": {**jobs[0].analysis.params, "clip_percentile": 90.0}})
    new_jobs = [Job(changed, jobs[0].scope, jobs[0].source), jobs[1]]
    with pytest.raises(KeyboardInterrupt):
        run(new_jobs, cache, progress=False)  # the entry is swapped in, the index is not
    problems = status(new_jobs, cache).index_problems
    assert any("tiny_gpt2.position_matrix.clip_percentile" in p for p in problems)
    monkeypatch.setattr(index, "write", write)
    assert run(new_jobs, cache, progress=False).index_written
    report = status(new_jobs, cache)
    assert report.problems == 0, (report.jobs, report.index_problems)


def test_orphaned_entry_is_not_cited_listed_and_pruned(cache, jobs):
    run(jobs, cache, progress=False)
    orphan = cache.entry("tiny_gpt2", "retired_analysis")
    orphan.mkdir()
    (orphan / "numbers.json").write_text('{"x": {"value": 1, "text": "1", "description": ""}}')
    (orphan / "manifest.json").write_text(json.dumps({"status": "ok", "input": {"code": "0"}, "outputs": {}}))
    report = status(jobs, cache)
    assert report.orphans == [("tiny_gpt2", "retired_analysis")]
    assert "retired_analysis" not in cache.variables.read_text()
    assert run(jobs, cache, progress=False).pruned == [] and orphan.is_dir()  # only --prune removes
    assert run(jobs, cache, prune=True, progress=False).pruned == [("tiny_gpt2", "retired_analysis")]
    assert not orphan.exists() and status(jobs, cache).problems == 0


def test_an_analysis_in_the_wrong_kind_of_scope_is_an_orphan(cache):
    (cache.root / "common" / "position_matrix").mkdir(parents=True)
    (cache.root / "gpt2" / "thin_shell").mkdir(parents=True)
    (cache.root / model_spec("gpt2").slug / "similarity").mkdir(parents=True)
    assert orphans(cache) == [("common", "position_matrix"), ("gpt2", "thin_shell")]


def test_variables_cite_only_verified_entries(cache, jobs):
    run(jobs, cache, progress=False)
    (cache.entry("tiny_gpt2", "position_matrix") / "norms.svg").write_text("<svg/>")
    fresh = index.build(cache, cache.entries())
    assert "position_matrix" not in fresh.variables and "checkpoint_inventory" in fresh.variables
    assert any("no verified cache entry" in p for p in status(jobs, cache).index_problems)


def test_stale_weights_block_a_run_when_the_weights_are_unavailable(cache, jobs):
    run(jobs, cache, progress=False)
    unavailable = plan([j.analysis for j in jobs], [model_spec("tiny-gpt2")])
    assert all(reason is None for _, reason in status(unavailable, cache).jobs)
    assert [j.label for j in status(unavailable, cache).unverified] == [j.label for j in jobs]
    assert not run(unavailable, cache, progress=False).wrote  # fresh but for the weights: kept
    changed = Analysis(**{**jobs[0].analysis.__dict__, "params": {"clip_percentile": 50.0, "n_extremes": 1}})
    with pytest.raises(WeightsError, match="weights are unavailable: tiny_gpt2/position_matrix"):
        run([Job(changed, "tiny_gpt2", None)], cache, progress=False)


def test_cache_root_is_the_repository_never_the_package(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "report").mkdir(parents=True)
    (repo / "_quarto.yml").write_text("project: {type: book}\n")
    (repo / "report" / "deep").mkdir()
    assert find_root(repo / "report" / "deep") == repo
    assert Cache.at(repo).root == repo / "report" / "_cache"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RootError, match="--root"):
        find_root()


# ---------------------------------------------------------------------------
# Registry and result types


def test_code_hash_covers_modules_the_analysis_uses():
    analysis = select(["position_matrix"])[0]
    used = registry.modules_hashed("analyses.position_matrix")
    assert {"analyses.position_matrix", "analyses.toolkit.plotting", "analyses.engine.results",
            "analyses.engine.sources"} <= used
    assert {"analyses.engine.cache", "analyses.engine.pipeline", "analyses.engine.index"} <= used  # shape bytes
    assert "analyses.engine.cli" not in used and "analyses.similarity" not in used
    assert len(analysis.code_hash()) == 64


def test_code_hash_changes_with_a_used_module_and_not_with_an_unrelated_one(monkeypatch):
    analysis = select(["position_matrix"])[0]
    before = analysis.code_hash()
    original = registry._source

    def edited(target):
        return lambda name: original(name) + ("# an edit\n" if name == target else "")

    for target, changes in (("analyses.toolkit.plotting", True), ("analyses.engine.cache", True),
                            ("analyses.similarity", False), ("analyses.engine.cli", False)):
        monkeypatch.setattr(registry, "_source", edited(target))
        assert (analysis.code_hash() != before) == changes, target
    monkeypatch.setattr(registry, "_source", original)
    assert analysis.code_hash() == before


def test_topics_are_found_by_where_they_live():
    topics = registry.topic_modules()
    assert "analyses.position_matrix" in topics and "analyses.similarity" in topics
    assert "analyses.position_content.norms" in topics  # a topic may be a subpackage
    assert not [t for t in topics if t.startswith(("analyses.engine", "analyses.toolkit", "analyses._"))]
    assert {a.module for a in select()} <= set(topics)


def test_result_types_validate_and_format():
    assert Number(0.90391, ".1%").text == "90.4%"
    assert [spoken_list(x) for x in ([], [3], [3, 4], [3, 4, 7])] == ["none", "3", "3 and 4", "3, 4 and 7"]
    assert Number(34812.0, "sci2").text == "3.48e4"
    assert Number(np.float32(1.5), ".2f").value == 1.5
    with pytest.raises(TypeError):
        Number("3.4")
    with pytest.raises(ValueError):
        Number(1.0, "not-a-format")
    table = Table(("k", "value"), [(1, 0.123456789), (2, -1.5)], formats={"value": ".3f"})
    assert table.to_markdown().splitlines()[2] == "| 1 | 0.123 |"
    assert table.to_csv().splitlines()[1] == "1,0.123456789"
    with pytest.raises(ValueError):
        Table(("a", "b"), [(1,)])


def test_non_finite_numbers_are_refused():
    with pytest.raises(ValueError, match="finite"):
        Number(float("nan"))
    with pytest.raises(ValueError, match="finite"):
        Number(float("inf"), ".2f")
    assert Result().numbers == {}


def test_unknown_analysis_name_is_an_error():
    with pytest.raises(UnknownAnalysisError, match="unknown analysis nope"):
        select(["nope"])


def test_markdown_tables_write_symbols_the_pdf_font_lacks_as_math():
    table = Table(("σ_max", "‖M‖"), [("diag(γ)W_Q", 1.0)])
    lines = table.to_markdown().splitlines()
    assert lines[0] == "| $\\sigma$_max | $\\|$M$\\|$ |"
    assert lines[2].startswith("| diag($\\gamma$)W_Q |")
    assert "σ_max" in table.to_csv()  # reviewers' CSV keeps the plain text


def test_fingerprinted_libraries_are_pinned_by_the_lock_and_installed_as_pinned():
    """Every distribution in a fingerprint has an exact pin in requirements.lock, and the installed version is
    that pin: otherwise two machines set up the documented way could disagree about what is stale."""
    import re
    from pathlib import Path

    lock = Path(__file__).resolve().parents[1] / "requirements.lock"
    pins = {re.sub(r"[-_.]+", "-", name).lower(): version for name, version in
            re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", lock.read_text(), flags=re.M)}
    versions = library_versions(("torch", "transformers", "tokenizers"))
    versions.pop("python")
    assert {name: (pins.get(name), v) for name, v in versions.items() if pins.get(name) != v} == {}


def test_cited_values_stay_strings_for_a_yaml_1_2_reader(cache, tmp_path):
    """Quarto reads _variables.yml as YAML 1.2, where a plain 6.68e5 is the number 668000 and 1e-4 a float:
    every value that looks like a number must be written quoted, the rest may stay plain."""
    outputs = Outputs()
    numbers = {"sci": "6.68e5", "small": "1e-4", "zero": "0.00e0", "int": "12", "pct": "90.4%", "word": "none",
               "boolean": "true", "empty": "", "neg": "-0.5", "list": "3, 4 and 7"}
    outputs.add_json("numbers.json", {k: {"value": v, "text": v, "description": ""} for k, v in numbers.items()})
    manifest = {"status": "ok", "reason": None, "input": input_fingerprint(None, "c" * 64, {}, library_versions()),
                "shape": None}
    cache.write("common", "x", manifest, outputs)
    text = index.build(cache, [("common", "x")]).variables
    for key in ("sci", "small", "zero", "int", "boolean", "empty", "neg"):
        assert f"{key}: '{numbers[key]}'" in text, key
    assert "pct: 90.4%" in text and "word: none" in text and "list: 3, 4 and 7" in text
    assert yaml.safe_load(text)["common"]["x"] == {"status": "ok", **numbers}


def test_family_needs_are_checked_only_for_their_family(cache, tiny_checkpoint):
    def reads(tensors, shape):
        return Result({"n": Number(1, "d")})

    source = local_source("tiny-gpt2", tiny_checkpoint)
    analysis = Analysis("family_probe", "Family probe", reads, needs=("W_pos",),
                        family_needs={"bert": ("embed.ln.w",), "gpt2": ("blocks.*.ln1.w",)})
    job = Job(analysis, "tiny_gpt2", source)
    assert job.needs == ("W_pos", "blocks.*.ln1.w")
    run([job], cache, progress=False)
    assert cache.manifest("tiny_gpt2", "family_probe")["status"] == "ok"  # BERT's embed.ln.w is not asked for
    gpt2_only = Analysis("gpt2_probe", "GPT-2 probe", reads, family_needs={"gpt2": ("W_E",)})
    run([Job(gpt2_only, "tiny_gpt2", source)], cache, progress=False)
    assert cache.manifest("tiny_gpt2", "gpt2_probe")["status"] == "skipped"


def test_variables_hold_only_what_the_book_cites(cache, jobs):
    """With a book beside the cache, _variables.yml holds the keys its chapters and appendices cite (through their
    includes too), nothing else; a newly cited key makes the file stale until the next run adds it."""
    root = cache.variables.parent
    (root / "_quarto.yml").write_text("book:\n  chapters: [index.qmd]\n  appendices: [details.qmd]\n")
    (root / "index.qmd").write_text("Positions: {{< var tiny_gpt2.position_matrix.n_positions >}}.\n")
    (root / "details.qmd").write_text("{{< include part.md >}}\n")
    (root / "part.md").write_text("Width {{< var tiny_gpt2.model.d_model >}}.\n")
    run(jobs, cache, progress=False)
    assert yaml.safe_load(cache.variables.read_text()) == {
        "tiny_gpt2": {"position_matrix": {"n_positions": "16"}, "model": {"d_model": "8"}}}
    assert "| `tiny_gpt2` | `checkpoint_inventory` | ok |" in cache.provenance.read_text()  # every entry
    (root / "index.qmd").write_text("{{< var tiny_gpt2.position_matrix.n_positions >}} and "
                                    "{{< var tiny_gpt2.position_matrix.status >}}\n")
    assert any("lacks tiny_gpt2.position_matrix.status" in p for p in status(jobs, cache).index_problems)
    assert run(jobs, cache, progress=False).index_written
    assert yaml.safe_load(cache.variables.read_text())["tiny_gpt2"]["position_matrix"]["status"] == "ok"
    assert not status(jobs, cache).index_problems
