"""The numerical contract, checked: a fresh computation against the cache, at each value's declared accuracy.

Bitwise identity across processors is not attainable (BLAS kernels sum in different orders), so a
recomputation agrees with the cache when every number, table cell and figure array lies within its
declared accuracy (`results.Accuracy`) of the cached value and every printed string is the same.
`unstable` lists what the contract cannot promise: a cached value whose printed digits a value within
its accuracy would change (it must be printed with fewer digits). `blas_kernels` says which OpenBLAS
kernels computed, and `core_types` which ones this processor can run, so that a check under another kernel
(`OPENBLAS_CORETYPE`) can show it ran there.

A declared accuracy is proved, not only tried on the kernels at hand, by `Perturbation`: the recomputation
with every floating-point input (each tensor, each random draw, each weight of a float32 forward pass)
multiplied by 1 + δu, u uniform in [−1, 1]. By backward error analysis a kernel's inner product of n terms
is the exact one of inputs perturbed by up to n·u relative (u the unit roundoff), so another kernel moves a
result as such a perturbation does; δ = 2¹⁰·u covers reductions of about a thousand terms (GPT-2's 1,024
positions, 768 dimensions), and the check asks every declared accuracy to be at least `MARGIN` times the
change observed, room for reductions ten times longer and for kernels nobody here can run.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import math
import os
import platform
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analyses.engine.results import (SUMMARY_STATISTICS, Accuracy, Result, format_value, printed_stably,
                                     summaries_agree)


def _accuracy(spec: dict | None) -> Accuracy:
    return Accuracy(**spec) if isinstance(spec, dict) else Accuracy()


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


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


def _ratio(change: float, tolerance: float) -> float:
    """A change as a fraction of the declared tolerance (0 when none; infinite for any change of an exact value)."""
    if change == 0 or math.isnan(change):
        return 0.0
    return change / tolerance if tolerance > 0 else math.inf


@dataclass
class Comparison:
    """A fresh result against its cache entry: `problems`, one sentence each (empty: reproduced), and `ratios`,
    for every numeric value, where it is (`key`, `table[row].column`, `array.statistic`) → its change as a
    fraction of its declared tolerance."""

    problems: list[str] = field(default_factory=list)
    ratios: dict[str, float] = field(default_factory=dict)

    def beyond(self, margin: float) -> list[str]:
        """The values whose change exceeds 1/`margin` of their declared tolerance, tightest first."""
        return [f"{where} changed by {ratio:.2g} of its declared accuracy (more than 1/{margin:g})"
                for where, ratio in sorted(self.ratios.items(), key=lambda item: -item[1]) if ratio * margin > 1]


def compare(entry: Path, result: Result) -> list[str]:
    """What in the cache entry `entry` a fresh `result` does not reproduce, one sentence each: a number, cell or
    array summary outside its declared accuracy, or a printed string that differs; empty when all agree."""
    return measure(entry, result).problems


def measure(entry: Path, result: Result) -> Comparison:
    """Compare a fresh `result` with the cache entry `entry` (see `Comparison`)."""
    out = Comparison()
    cached = _read_json(entry / "numbers.json")
    if set(cached) != set(result.numbers):
        out.problems.append(f"keys differ: cache only {sorted(set(cached) - set(result.numbers))}, "
                            f"recomputed only {sorted(set(result.numbers) - set(cached))}")
    for key in sorted(set(cached) & set(result.numbers)):
        old, new = cached[key], result.numbers[key]
        if _numeric(new.value) and _numeric(old["value"]):
            out.ratios[key] = _ratio(abs(new.value - old["value"]), new.accuracy.tolerance(old["value"]))
        if new.text != old["text"]:
            out.problems.append(f"{key} prints {new.text!r}, the cache {old['text']!r} "
                                f"(values {old['value']!r} and {new.value!r})")
        elif _numeric(new.value) and not new.accuracy.agree(old["value"], new.value):
            out.problems.append(f"{key}: {new.value!r} differs from the cached {old['value']!r} by more than its "
                                f"declared accuracy ±{new.accuracy.tolerance(old['value']):.3g}")
    for name, table in result.tables.items():
        _compare_table(entry, name, table, out)
    cached_arrays = _read_json(entry / "arrays.json")
    for name, summary in result.array_summaries().items():
        if name not in cached_arrays:
            out.problems.append(f"array {name} has no cached summary")
            continue
        accuracy = result.accuracy_of_array(name)
        if not summaries_agree(cached_arrays[name], summary, accuracy):
            out.problems.append(f"array {name}: summary {summary} differs from the cached {cached_arrays[name]} "
                                f"beyond its declared accuracy")
        tolerance = max(accuracy.abs, accuracy.rel * max(cached_arrays[name].get("scale", 0.0), summary.get("scale", 0.0)))
        for statistic in SUMMARY_STATISTICS:
            if statistic in summary and statistic in cached_arrays[name]:
                out.ratios[f"{name}.{statistic}"] = _ratio(abs(summary[statistic] - cached_arrays[name][statistic]),
                                                           tolerance)
    return out


def _compare_table(entry: Path, name: str, table, out: Comparison) -> None:
    path = entry / f"{name}.csv"
    if not path.is_file():
        out.problems.append(f"table {name} is not cached")
        return
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    if tuple(rows[0]) != table.columns or len(rows) - 1 != len(table.rows):
        out.problems.append(f"table {name}: columns or row count differ")
        return
    before = len(out.problems)
    for i, (got, want) in enumerate(zip(rows[1:], table.rows)):
        for column, text, value in zip(table.columns, got, want):
            old = _cell(text)
            accuracy = table.accuracy_of(column, i, value)
            if accuracy is None or not _numeric(old):
                same = str(value) == text
            else:  # each printed as the book prints it: with the decimals its accuracy fixes (`Table.format_of`)
                old_fmt, fmt = table.format_of(column, i, old), table.format_of(column, i, value)
                out.ratios[f"{name}[{i + 1}].{column}"] = _ratio(abs(value - old), accuracy.tolerance(old))
                same = accuracy.agree(old, value) and (fmt is None or format_value(old, old_fmt) == format_value(value, fmt))
            if not same:
                out.problems.append(f"table {name}, row {i + 1}, {column}: {value!r} against the cached {text}")
    markdown = entry / f"{name}.md"  # what the book includes: the same cells must print the same table (not the
    # per-item rows of CACHED_ROWS, which no chapter includes and whose cells print in full)
    if (len(out.problems) == before and name != ROWS_TABLE and markdown.is_file()
            and markdown.read_text(encoding="utf-8") != table.to_markdown()):
        out.problems.append(f"table {name}: the included {name}.md differs from the recomputed table's")


def unstable(entry: Path) -> list[str]:
    """The cached values of an entry whose printed text is not fixed by their declared accuracy (a value
    within the accuracy would print differently), as `key` or `table[row].column`."""
    found = []
    for key, number in _read_json(entry / "numbers.json").items():
        value, fmt = number.get("value"), number.get("format")
        if _numeric(value) and fmt and not printed_stably(value, fmt, _accuracy(number.get("accuracy"))):
            found.append(key)
    for name, columns in _read_json(entry / "tables.json").items():
        rows = list(csv.DictReader(io.StringIO((entry / f"{name}.csv").read_text(encoding="utf-8"))))
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


UNIT_ROUNDOFF = {np.dtype(np.float64): 2.0**-53, np.dtype(np.float32): 2.0**-24}
MARGIN = 10
"""How many times the largest change a perturbation at rounding level causes a declared accuracy must be."""


@dataclass(frozen=True)
class Perturbation:
    """Every floating-point input x recomputed as x·(1 + δu), u uniform in [−1, 1] from its own seeded stream (the
    draws themselves stay the same), δ = `roundoffs`·u of the precision the input is computed in: tensors and
    random draws in float64, the weights of a float32 forward pass in float32 (see the module's docstring)."""

    roundoffs: float = 2.0**10
    seed: int = 0

    def delta(self, dtype) -> float:
        return self.roundoffs * UNIT_ROUNDOFF[np.dtype(dtype)]

    def apply(self, x, dtype, stream: np.random.Generator):
        """x·(1 + δu) in `dtype` (floating arrays and floats; anything else unchanged)."""
        if isinstance(x, float):
            return x * (1 + self.delta(np.float64) * stream.uniform(-1, 1))
        if not isinstance(x, np.ndarray) or x.dtype.kind != "f":
            return x
        u = stream.uniform(-1, 1, x.shape)
        return (x.astype(dtype) * (1 + self.delta(dtype) * u).astype(dtype)).astype(dtype)

    def stream(self, *key) -> np.random.Generator:
        """A stream of its own for each input, named by `key`."""
        digest = hashlib.sha256(repr(key).encode()).digest()
        return np.random.default_rng([self.seed, int.from_bytes(digest[:8], "little")])

    def tensors(self, tensors):
        return _PerturbedInputs(tensors, self)

    @contextmanager
    def draws_and_passes(self):
        """Within: every generator the analyses make with np.random.default_rng draws perturbed floats (its
        integers, choices and permutations unchanged), and every weight entering a float32 forward pass is perturbed in float32."""
        from analyses.toolkit import forward

        default_rng, in_precision = np.random.default_rng, forward.in_precision
        streams = default_rng([self.seed, 1])

        def perturbed_rng(*args, **kwargs):
            generator = default_rng(*args, **kwargs)
            if not sys._getframe(1).f_globals.get("__name__", "").startswith("analyses."):
                return generator  # a library's own draws (scipy's, say) are not the analyses' inputs
            return _PerturbedGenerator(generator, self, default_rng(streams.integers(2**63)))

        def perturbed_precision(weights, dtype):
            out = in_precision(weights, dtype)
            return self.apply(out, dtype, default_rng(streams.integers(2**63))) if out.dtype == np.float32 else out

        np.random.default_rng, forward.in_precision = perturbed_rng, perturbed_precision
        try:
            yield
        finally:
            np.random.default_rng, forward.in_precision = default_rng, in_precision


class _PerturbedInputs:
    """A model's inputs with every floating-point tensor perturbed in float64 (the same for every read of a name)."""

    def __init__(self, tensors, perturbation: Perturbation):
        self._tensors, self._perturbation, self._seen = tensors, perturbation, {}

    def __getitem__(self, name: str):
        if name not in self._seen:
            self._seen[name] = self._perturbation.apply(self._tensors[name], np.float64, self._perturbation.stream(name))
        return self._seen[name]

    def __contains__(self, name) -> bool:
        return name in self._tensors

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def replicate_token_subspace(self):
        found = self._tensors.replicate_token_subspace()
        return None if found is None else tuple(self._perturbation.apply(x, np.float64, self._perturbation.stream(
            "replicate", i)) for i, x in enumerate(found))

    def __getattr__(self, name):  # the source's account of its tensors: origin, tokenize, decode, training_record
        return getattr(self._tensors, name)


class _PerturbedGenerator:
    """A numpy Generator whose floating-point draws are perturbed (see `Perturbation`); the stream is the same."""

    _FLOAT_DRAWS = frozenset({"standard_normal", "normal", "uniform", "random", "exponential", "standard_exponential"})

    def __init__(self, generator: np.random.Generator, perturbation: Perturbation, stream: np.random.Generator):
        self._generator, self._perturbation, self._stream = generator, perturbation, stream

    def __getattr__(self, name):
        method = getattr(self._generator, name)
        if name not in self._FLOAT_DRAWS:
            return method

        def draw(*args, **kwargs):
            out = method(*args, **kwargs)
            dtype = out.dtype if isinstance(out, np.ndarray) else np.float64
            return self._perturbation.apply(out, dtype, self._stream)
        return draw


CACHED_ROWS, ROWS_TABLE = "cached_rows", "rows"
"""An analysis with a parameter `cached_rows` (registered as None) is checked from its own cached table `rows`: the
check hands that table in ({column: its cells as written}), and the analysis recomputes a fixed sample of the rows and
derives the rest of its result from the cached ones, so that checking a long run costs its sample."""


def cached_rows(entry: Path) -> dict[str, list] | None:
    """{column: values} of the entry's cached table `rows` (None when it has none)."""
    path = entry / f"{ROWS_TABLE}.csv"
    if not path.is_file():
        return None
    header, *rows = csv.reader(io.StringIO(path.read_text(encoding="utf-8")))
    return {column: [_cell(row[i]) for row in rows] for i, column in enumerate(header)}


def _computed(analysis, tensors, shape, entry: Path) -> Result:
    """The analysis run as registered, but handed its cached rows where it takes them (see `CACHED_ROWS`)."""
    if CACHED_ROWS not in analysis.params:
        return analysis.run(tensors, shape)
    params = dict(analysis.params) | {CACHED_ROWS: cached_rows(entry)}
    return analysis.compute(**params) if analysis.scope == "common" else analysis.compute(tensors, shape, **params)


def check(job, cache, perturbation: Perturbation | None = None) -> tuple[Comparison, Result | None]:
    """What a job's cache entry does not reproduce (see `Comparison`; no problems: reproduced), and the fresh result
    (None when the job was not run: not cached, or cached as skipped, which must still lack its inputs). With a
    `perturbation`, the recomputation perturbs its inputs at rounding level, and a value whose change exceeds
    1/`MARGIN` of its declared accuracy is a problem too."""
    from analyses.engine.pipeline import skip_reason, status_note

    manifest = cache.manifest(job.scope, job.analysis.name)
    if manifest is None:
        return Comparison(["not cached"]), None
    entry = cache.entry(job.scope, job.analysis.name)
    untrusted = cache.unverifiable(job.scope, job.analysis.name)
    if untrusted:
        return Comparison([f"the cache entry cannot be trusted: {untrusted}"]), None
    missing = job.source.missing(job.needs) if job.source else []
    if manifest.get("status") == "skipped" or missing:
        if manifest.get("status") != "skipped" or not missing:
            return Comparison([f"cached as {manifest.get('status')}, but the inputs are "
                               f"{'missing' if missing else 'present'}"]), None
        reason = skip_reason(job, missing)
        if manifest.get("reason") != reason:
            return Comparison([f"the cached reason for the skip differs from today's: {reason}"]), None
    note = entry / "status.md"
    if note.is_file() and note.read_text(encoding="utf-8") != status_note(job, manifest):
        return Comparison(["the included status.md differs from the note its manifest gives"]), None
    if manifest.get("status") == "skipped":
        return Comparison(), None
    source = job.source
    tensors = source.tensors if source else None
    if perturbation is None:
        result = _computed(job.analysis, tensors, source.shape if source else None, entry)
    else:
        with perturbation.draws_and_passes():
            result = _computed(job.analysis, perturbation.tensors(tensors) if source else None,
                               source.shape if source else None, entry)
    comparison = measure(entry, result)
    if perturbation is not None:
        comparison.problems += comparison.beyond(MARGIN)
    return comparison, result


def recompute(jobs, cache, workers_count: int, on_done, perturbation: Perturbation | None = None,
              threads: int = 1) -> None:
    """Recompute each job in memory (one forked worker per job, `workers_count` at a time, each with `threads` BLAS
    threads, inputs perturbed when `perturbation` is given) and call `on_done(job, comparison)` with what it does
    not reproduce of its cache entry (see `check`), or with None for a job whose weights are unavailable, which
    cannot be checked; nothing is written."""
    from analyses.engine import workers

    runnable = [job for job in jobs if not job.unavailable]
    for job in runnable:
        job.inputs()  # every input checked before anything is recomputed: a damaged committed run is an error
    for job in jobs:
        if job.unavailable:
            on_done(job, None)
    by_label = {job.label: job for job in runnable}
    workers.run_all(((job.label, lambda job=job: check(job, cache, perturbation)[0]) for job in runnable),
                    workers_count, lambda label, comparison, _: on_done(by_label[label], comparison), threads=threads)


CORE_TYPES = {
    "Prescott": {"pni"}, "Core2": {"ssse3"}, "Penryn": {"sse4_1"}, "Nehalem": {"sse4_2"}, "Barcelona": {"sse4a"},
    "Sandybridge": {"avx"}, "Bulldozer": {"avx", "fma4"}, "Haswell": {"avx2", "fma"}, "Zen": {"avx2", "fma"},
    "SkylakeX": {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"},
    "Cooperlake": {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"},
}
"""x86-64 OpenBLAS core types (`OPENBLAS_CORETYPE`) and the CPU flags their kernels need (Linux's names: `pni` is
SSE3)."""


@functools.cache
def core_types() -> tuple[dict[str, str], dict[str, str]]:
    """The OpenBLAS kernels this processor can run: ({core type: the kernel OpenBLAS reports running}, one per
    distinct kernel) and ({core type: why it is skipped}: flags the processor lacks, a kernel that another name
    already runs, or OpenBLAS not honouring the name)."""
    ran: dict[str, str] = {}
    skipped: dict[str, str] = {}
    if platform.machine() not in ("x86_64", "AMD64"):
        return ran, {"all": f"OpenBLAS core types are chosen by name on x86-64 only (this is {platform.machine()})"}
    flags = _cpu_flags()
    for name, needs in CORE_TYPES.items():
        lacking = sorted(needs - flags)
        if lacking:
            skipped[name] = f"the processor lacks {', '.join(lacking)}"
            continue
        kernel = _kernel_under(name)
        if kernel in ran.values():
            skipped[name] = f"runs the {kernel} kernel, already tried as {next(k for k, v in ran.items() if v == kernel)}"
        elif not kernel:
            skipped[name] = "OpenBLAS does not report a kernel for it"
        else:
            ran[name] = kernel
    return ran, skipped


def _cpu_flags() -> set[str]:
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in info.splitlines() if line.startswith("flags")), set())


def _kernel_under(core_type: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")} | {"OPENBLAS_CORETYPE": core_type}
    probe = subprocess.run([sys.executable, "-c", "import numpy; from analyses.engine.verify import blas_kernels; "
                            "print(','.join(blas_kernels()))"], env=env, capture_output=True, text=True)
    return probe.stdout.strip() if probe.returncode == 0 else ""
