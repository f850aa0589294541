"""Jobs side by side in forked children: results, errors and measures come back; scheduling does not
change a byte of the cache."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from analyses.engine import workers
from analyses.engine.cache import TIMINGS, Cache
from analyses.engine.pipeline import plan, run, select
from analyses.engine.sources import local_source


def _collect(tasks, jobs):
    out = {}
    workers.run_all(tasks, jobs, lambda label, value, measure: out.__setitem__(label, (value, measure)))
    return out


def test_children_return_values_and_their_own_measures():
    def allocate():
        block = np.ones(40_000_000 // 8)  # 40 MB touched in the child only
        return float(block.sum())

    out = _collect([("sum", allocate), ("pid", os.getpid), ("sleep", lambda: time.sleep(0.2) or "slept")], jobs=2)
    assert out["sum"][0] == 5_000_000.0 and out["sleep"][0] == "slept"
    assert out["pid"][0] != os.getpid()  # ran in a child
    assert out["sum"][1].peak_mb > 40 and out["sleep"][1].wall >= 0.2 and out["sleep"][1].cpu < 0.2


def test_at_most_n_children_run_at_once():
    start = time.perf_counter()
    _collect([(str(i), lambda: time.sleep(0.3)) for i in range(4)], jobs=2)
    elapsed = time.perf_counter() - start
    assert 0.55 < elapsed < 1.1  # two rounds of two, not four at once nor one after another


def test_a_childs_exception_is_raised_in_the_parent_with_its_traceback():
    def fail():
        raise ValueError("bad formula")

    with pytest.raises(ValueError, match="bad formula") as error:
        _collect([("ok", lambda: 1), ("broken", fail)], jobs=1)
    assert any("in the worker that ran broken" in note and "fail" in note for note in error.value.__notes__)


def test_blas_runs_on_one_thread_in_the_children():
    from threadpoolctl import threadpool_info

    out = _collect([("threads", lambda: [pool["num_threads"] for pool in threadpool_info()])], jobs=1)
    assert out["threads"][0] and set(out["threads"][0]) == {1}


def test_parallel_and_serial_runs_write_the_same_bytes(tmp_path, tiny_checkpoint):
    jobs = plan(select(["position_matrix", "sinusoidal_vs_learned", "checkpoint_inventory"]),
                [local_source("tiny-gpt2", tiny_checkpoint)])
    trees = []
    for n in (1, 2):
        cache = Cache(tmp_path / f"c{n}", tmp_path / f"v{n}.yml")
        run(jobs, cache, progress=False, workers_count=n)
        trees.append({p.relative_to(cache.root).as_posix(): p.read_bytes() for p in sorted(cache.root.rglob("*"))
                      if p.is_file() and p.name not in (".lock", TIMINGS)})
        assert set(cache.timings()) == {job.label for job in jobs}
    assert trees[0] == trees[1]


def test_the_longest_job_of_the_last_run_starts_first(tmp_path, tiny_checkpoint, monkeypatch):
    jobs = plan(select(["position_matrix", "checkpoint_inventory"]), [local_source("tiny-gpt2", tiny_checkpoint)])
    cache = Cache(tmp_path / "c", tmp_path / "v.yml")
    cache.record_timings({"tiny_gpt2/checkpoint_inventory": {"wall": 9.0, "cpu": 9.0, "peak_mb": 1.0},
                          "tiny_gpt2/position_matrix": {"wall": 1.0, "cpu": 1.0, "peak_mb": 1.0}})
    order = []
    real = workers.run_all

    def spy(tasks, jobs_count, on_done, prelude=None):
        tasks = list(tasks)
        order.extend(label for label, _ in tasks)
        return real(tasks, jobs_count, on_done, prelude)

    monkeypatch.setattr(workers, "run_all", spy)
    run(jobs, cache, progress=False)
    assert order == ["tiny_gpt2/checkpoint_inventory", "tiny_gpt2/position_matrix"]


def test_the_prelude_runs_beside_the_first_child_and_later_children_inherit_it():
    state = {}

    def prelude():
        state["loaded_by"] = os.getpid()

    out = {}
    workers.run_all([("first", lambda: state.get("loaded_by")), ("second", lambda: state.get("loaded_by"))], 1,
                    lambda label, value, measure: out.__setitem__(label, value), prelude=prelude)
    assert out == {"first": None, "second": os.getpid()}
