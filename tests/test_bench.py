"""The benchmark's measurements: wall time and peak memory of a process tree, and the per-analysis table."""

from __future__ import annotations

import sys

import pytest

from analyses.engine import bench

ALLOCATE = ("import numpy, time; block = numpy.ones({mb} * 2**20 // 8); time.sleep(0.4)")


def test_peak_memory_counts_the_workers_of_a_run():
    """A parent that starts a child holding 120 MB: the peak covers the child, not only the parent."""
    child = ALLOCATE.format(mb=120)
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}], check=True)"
    timing = bench.timed([sys.executable, "-c", parent])
    assert timing.wall >= 0.4 and 120 <= timing.peak_mb < 400


def test_a_failing_command_stops_the_benchmark():
    with pytest.raises(SystemExit, match="exit code 3"):
        bench.timed([sys.executable, "-c", "raise SystemExit(3)"])


def test_table_lists_each_job_slowest_first_with_a_sum():
    text = bench.table({"gpt2/a": {"wall": 1.0, "cpu": 0.9, "peak_mb": 100.0},
                        "gpt2/b": {"wall": 2.5, "cpu": 2.4, "peak_mb": 300.0}})
    lines = text.splitlines()
    assert lines[1].startswith("gpt2/b") and lines[2].startswith("gpt2/a")
    assert lines[-1].split()[1:] == ["3.50", "3.30"]


def test_the_groups_the_bench_times_are_registered():
    from analyses.engine.registry import group

    assert set(group(bench.SUBSET)) == {"position_matrix", "similarity", "shuffle_nulls", "helix", "low_rank",
                                        "attention_spectra"}
    assert len(group(bench.FIRST_REPORT)) == 18 and set(group(bench.SUBSET)) <= set(group(bench.FIRST_REPORT))


def test_render_timings_are_skipped_without_quarto(monkeypatch, tmp_path):
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    assert bench.render_timings(tmp_path) == {}


def test_render_timings_time_each_render_in_the_repository(monkeypatch, tmp_path):
    """Each render is `quarto render ARGS` run in the repository, its median over the repeats."""
    fake = tmp_path / "quarto"
    fake.write_text("#!/bin/sh\necho \"$PWD $*\" >> calls.txt\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bench.shutil, "which", lambda name: str(fake))
    timings = bench.render_timings(tmp_path, repeats=2)
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert list(timings) == list(bench.RENDERS) and len(calls) == 2 * len(bench.RENDERS)
    assert calls[0] == f"{tmp_path} render --to html" and calls[-1].endswith(f"render {bench.ONE_CHAPTER} --to html")
