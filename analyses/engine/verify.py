"""The numerical contract, checked: a fresh computation against the cache, at each value's declared accuracy.

Bitwise identity across processors is not attainable (BLAS kernels sum in different orders), so a
recomputation agrees with the cache when every number, table cell and figure array lies within its
declared accuracy (`results.Accuracy`) of the cached value and every printed string is the same.
`unstable` lists what the contract cannot promise: a cached value whose printed digits a value within
its accuracy would change (it must be printed with fewer digits). `blas_kernels` says which OpenBLAS
kernels computed, so that a check under another kernel (`OPENBLAS_CORETYPE`) can show it ran there.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from analyses.engine.results import Accuracy, Result, format_value, printed_stably, summaries_agree


def _accuracy(spec: dict | None) -> Accuracy:
    return Accuracy(**spec) if isinstance(spec, dict) else Accuracy()


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _cell(text: str):
    """A CSV cell as the value it was written from (ints and floats are written as repr)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def compare(entry: Path, result: Result) -> list[str]:
    """What in the cache entry `entry` a fresh `result` does not reproduce, one sentence each: a number, cell or
    array summary outside its declared accuracy, or a printed string that differs; empty when all agree."""
    problems: list[str] = []
    cached = _read_json(entry / "numbers.json")
    if set(cached) != set(result.numbers):
        problems.append(f"keys differ: cache only {sorted(set(cached) - set(result.numbers))}, "
                        f"recomputed only {sorted(set(result.numbers) - set(cached))}")
    for key in sorted(set(cached) & set(result.numbers)):
        old, new = cached[key], result.numbers[key]
        if new.text != old["text"]:
            problems.append(f"{key} prints {new.text!r}, the cache {old['text']!r} "
                            f"(values {old['value']!r} and {new.value!r})")
        elif _numeric(new.value) and not new.accuracy.agree(old["value"], new.value):
            problems.append(f"{key}: {new.value!r} differs from the cached {old['value']!r} by more than its "
                            f"declared accuracy ±{new.accuracy.tolerance(old['value']):.3g}")
    for name, table in result.tables.items():
        problems += _compare_table(entry, name, table)
    cached_arrays = _read_json(entry / "arrays.json")
    for name, summary in result.array_summaries().items():
        if name not in cached_arrays:
            problems.append(f"array {name} has no cached summary")
        elif not summaries_agree(cached_arrays[name], summary, result.accuracy_of_array(name)):
            problems.append(f"array {name}: summary {summary} differs from the cached {cached_arrays[name]} "
                            f"beyond its declared accuracy")
    return problems


def _compare_table(entry: Path, name: str, table) -> list[str]:
    path = entry / f"{name}.csv"
    if not path.is_file():
        return [f"table {name} is not cached"]
    rows = list(csv.reader(io.StringIO(path.read_text())))
    if tuple(rows[0]) != table.columns or len(rows) - 1 != len(table.rows):
        return [f"table {name}: columns or row count differ"]
    problems = []
    for i, (got, want) in enumerate(zip(rows[1:], table.rows)):
        for column, text, value in zip(table.columns, got, want):
            old = _cell(text)
            accuracy = table.accuracy_of(column, i, value)
            if accuracy is None or not _numeric(old):
                same = str(value) == text
            else:
                fmt = table.formats.get(column)
                same = accuracy.agree(old, value) and (fmt is None or format_value(old, fmt) == format_value(value, fmt))
            if not same:
                problems.append(f"table {name}, row {i + 1}, {column}: {value!r} against the cached {text}")
    return problems


def unstable(entry: Path) -> list[str]:
    """The cached values of an entry whose printed text is not fixed by their declared accuracy (a value
    within the accuracy would print differently), as `key` or `table[row].column`."""
    found = []
    for key, number in _read_json(entry / "numbers.json").items():
        value, fmt = number.get("value"), number.get("format")
        if _numeric(value) and fmt and not printed_stably(value, fmt, _accuracy(number.get("accuracy"))):
            found.append(key)
    for name, columns in _read_json(entry / "tables.json").items():
        rows = list(csv.DictReader(io.StringIO((entry / f"{name}.csv").read_text())))
        for column, spec in columns.items():
            formats = spec.get("format")
            for i, (row, accuracy) in enumerate(zip(rows, spec.get("accuracy") or [])):
                value = _cell(row[column])
                fmt = formats[i] if isinstance(formats, list) else formats
                if fmt and isinstance(value, float) and math.isfinite(value) and not printed_stably(
                        value, fmt, _accuracy(accuracy)):
                    found.append(f"{name}[{i + 1}].{column}")
    return found


def blas_kernels() -> list[str]:
    """The core type of each OpenBLAS loaded in this process (e.g. "Haswell", "Katmai" for Prescott)."""
    from threadpoolctl import threadpool_info

    return sorted({info.get("architecture") or "unknown" for info in threadpool_info()
                   if info.get("internal_api") == "openblas"})


def check(job, cache) -> tuple[list[str], Result | None]:
    """What a job's cache entry does not reproduce, one sentence each (empty: reproduced), and the fresh result
    (None when the job was not run: not cached, or cached as skipped, which must still lack its inputs)."""
    manifest = cache.manifest(job.scope, job.analysis.name)
    if manifest is None:
        return ["not cached"], None
    missing = job.source.missing(job.needs) if job.source else []
    if manifest.get("status") == "skipped" or missing:
        return ([] if manifest.get("status") == "skipped" and missing else [
            f"cached as {manifest.get('status')}, but the inputs are {'missing' if missing else 'present'}"]), None
    source = job.source
    result = job.analysis.run(source.tensors if source else None, source.shape if source else None)
    return compare(cache.entry(job.scope, job.analysis.name), result), result


def recompute(jobs, cache, workers_count: int, on_done) -> None:
    """Recompute each job in memory (one forked worker per job, `workers_count` at a time) and call
    `on_done(job, problems)` with what it does not reproduce of its cache entry (see `check`), or with None for
    a job whose weights are unavailable, which cannot be checked; nothing is written."""
    from analyses.engine import workers

    runnable = [job for job in jobs if not job.unavailable]
    for job in jobs:
        if job.unavailable:
            on_done(job, None)
    by_label = {job.label: job for job in runnable}
    workers.run_all(((job.label, lambda job=job: check(job, cache)[0]) for job in runnable), workers_count,
                    lambda label, problems, _: on_done(by_label[label], problems))
