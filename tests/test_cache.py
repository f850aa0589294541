"""The cache: freshness, invalidation, skipping, atomic replacement, byte-for-byte reruns."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import gpt2_config, gpt2_state_dict, write_checkpoint

from analyses import registry
from analyses.cache import Cache, Outputs, input_fingerprint
from analyses.pipeline import Job, plan, run, select, status
from analyses.registry import Analysis
from analyses.results import Number, Table, spoken_list
from analyses.sources import local_source


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def cache(tmp_path):
    return Cache(tmp_path / "cache", tmp_path / "_variables.yml")


@pytest.fixture
def jobs(tiny_checkpoint):
    src = local_source("tiny-gpt2", tiny_checkpoint)
    return plan(select(["position_matrix", "checkpoint_inventory"]), [src])


def test_run_writes_entries_variables_and_provenance(cache, jobs):
    done = run(jobs, cache, progress=False)
    assert [what.split()[0] for _, what in done] == ["ok", "ok"]
    entry = cache.entry("tiny_gpt2", "position_matrix")
    for name in ("numbers.json", "norm_extremes.md", "norm_extremes.csv", "heatmap.svg", "heatmap.pdf",
                 "norms.svg", "norms.pdf", "status.md", "manifest.json"):
        assert (entry / name).is_file(), name
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["status"] == "ok" and set(manifest["outputs"]) == {
        p.name for p in entry.iterdir() if p.name != "manifest.json"}
    variables = yaml.safe_load(cache.variables.read_text())
    assert variables["tiny_gpt2"]["position_matrix"]["n_positions"] == "16"
    assert variables["tiny_gpt2"]["model"]["d_model"] == "8"
    assert "tiny_gpt2 | position_matrix | ok" in (cache.root / "provenance.md").read_text()


def test_warm_run_recomputes_nothing(cache, jobs):
    run(jobs, cache, progress=False)
    before = _tree(cache.root)
    assert [what for _, what in run(jobs, cache, progress=False)] == ["fresh", "fresh"]
    assert _tree(cache.root) == before
    assert all(reason is None for _, reason in status(jobs, cache))


def test_forced_rerun_is_byte_for_byte_identical(cache, jobs):
    run(jobs, cache, progress=False)
    before = _tree(cache.root)
    assert all(what.startswith("ok (forced)") for _, what in run(jobs, cache, force=True, progress=False))
    assert _tree(cache.root) == before  # manifests (and their wall times) untouched too


def test_outputs_reproduce_in_a_fresh_cache(tmp_path, jobs):
    first, second = Cache(tmp_path / "a", tmp_path / "a.yml"), Cache(tmp_path / "b", tmp_path / "b.yml")
    run(jobs, first, progress=False)
    run(jobs, second, progress=False)
    strip = lambda tree: {k: v for k, v in tree.items() if not k.endswith(("manifest.json", "provenance.md"))}  # noqa: E731
    assert strip(_tree(first.root)) == strip(_tree(second.root))


def test_weights_change_makes_entries_stale(cache, jobs, tiny_checkpoint):
    run(jobs, cache, progress=False)
    state = gpt2_state_dict(np.random.default_rng(99), with_wte=False, with_mlp=False)
    write_checkpoint(tiny_checkpoint, state, gpt2_config())
    fresh_jobs = plan([j.analysis for j in jobs], [local_source("tiny-gpt2", tiny_checkpoint)])
    reasons = [reason for _, reason in status(fresh_jobs, cache)]
    assert all("weights" in r for r in reasons)
    rerun = run(fresh_jobs, cache, progress=False)
    assert all(w.startswith("ok (changed since it was computed: weights") for _, w in rerun)


def test_parameter_and_code_change_make_entry_stale(cache, jobs):
    run(jobs, cache, progress=False)
    job = jobs[0]
    changed = Analysis(**{**job.analysis.__dict__, "params": {**job.analysis.params, "clip_percentile": 95.0}})
    assert "params" in status([Job(changed, job.scope, job.source)], cache)[0][1]
    inputs = job.inputs()
    assert cache.staleness(job.scope, job.analysis.name, {**inputs, "code": "0" * 64}) == \
        "changed since it was computed: code"


def test_code_hash_covers_modules_the_analysis_uses():
    analysis = select(["position_matrix"])[0]
    used = registry._modules_used(__import__("analyses.position_matrix", fromlist=["x"]))
    assert {"analyses.position_matrix", "analyses.plotting", "analyses.results", "analyses.sources"} <= used
    assert "analyses.cli" not in used and len(analysis.code_hash()) == 64


def test_tampered_or_missing_output_is_stale(cache, jobs):
    run(jobs, cache, progress=False)
    entry = cache.entry("tiny_gpt2", "position_matrix")
    (entry / "numbers.json").write_text("{}")
    assert "modified" in status(jobs, cache)[0][1]
    (entry / "numbers.json").unlink()
    assert "missing" in status(jobs, cache)[0][1]
    (entry / "manifest.json").write_text("{truncated")
    assert "no readable manifest" in status(jobs, cache)[0][1]


def test_missing_tensor_is_recorded_as_skipped_with_reason(cache, tiny_checkpoint, monkeypatch):
    def needs_tokens(tensors, shape):
        raise AssertionError("must not run without its tensors")

    analysis = Analysis("token_probe", "Token probe", needs_tokens, needs=("W_E", "blocks.*.mlp.W_in"))
    job = Job(analysis, "tiny_gpt2", local_source("tiny-gpt2", tiny_checkpoint))
    monkeypatch.setattr(Job, "inputs", lambda self: input_fingerprint(self.source.fingerprint, "c" * 64, {}))
    run([job], cache, progress=False)
    manifest = cache.manifest("tiny_gpt2", "token_probe")
    assert manifest["status"] == "skipped"
    assert "`W_E`, `blocks.*.mlp.W_in`" in manifest["reason"] and "substitute" in manifest["reason"]
    status_md = (cache.entry("tiny_gpt2", "token_probe") / "status.md").read_text()
    assert "callout-warning" in status_md and "W_E" in status_md
    variables = yaml.safe_load(cache.variables.read_text())
    assert variables["tiny_gpt2"]["token_probe"]["status"] == "skipped"


def test_interrupted_write_leaves_previous_entry_intact(cache, jobs, monkeypatch):
    run(jobs, cache, progress=False)
    before = _tree(cache.root)

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    job = jobs[0]
    monkeypatch.setattr("analyses.pipeline.render", boom)  # dies mid-computation
    with pytest.raises(KeyboardInterrupt):
        run([job], cache, force=True, progress=False)
    assert _tree(cache.root) == before


def test_crash_between_the_two_renames_is_rolled_back(cache, jobs):
    run(jobs, cache, progress=False)
    entry = cache.entry("tiny_gpt2", "position_matrix")
    before = _tree(entry)
    # state after the old entry was moved aside and before the new one was moved in
    entry.rename(entry.parent / ".old-position_matrix")
    (entry.parent / ".new-position_matrix.abc").mkdir()
    with cache.locked():
        pass
    assert _tree(entry) == before
    assert not list(entry.parent.glob(".new-*")) and not list(entry.parent.glob(".old-*"))


def test_write_replaces_whole_entry(cache):
    outputs = Outputs()
    outputs.add_text("a.md", "one")
    inputs = input_fingerprint(None, "c" * 64, {})
    manifest = {"status": "ok", "reason": None, "input": inputs, "shape": None}
    assert cache.write("common", "x", manifest, outputs)
    outputs = Outputs()
    outputs.add_text("b.md", "two")
    assert cache.write("common", "x", manifest, outputs)
    assert sorted(p.name for p in cache.entry("common", "x").iterdir()) == ["b.md", "manifest.json"]
    assert not cache.write("common", "x", manifest, outputs)  # identical: untouched


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


def test_unknown_analysis_name_is_an_error():
    with pytest.raises(KeyError, match="unknown analysis nope"):
        select(["nope"])


def test_markdown_tables_write_symbols_the_pdf_font_lacks_as_math():
    table = Table(("σ_max", "‖M‖"), [("diag(γ)W_Q", 1.0)])
    lines = table.to_markdown().splitlines()
    assert lines[0] == "| $\\sigma$_max | $\\|$M$\\|$ |"
    assert lines[2].startswith("| diag($\\gamma$)W_Q |")
    assert "σ_max" in table.to_csv()  # reviewers' CSV keeps the plain text
