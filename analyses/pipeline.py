"""Runs registered analyses on models and keeps the cache fresh.

For each (scope, analysis) pair the pipeline computes the input fingerprint
(weights sha256, code hash, parameters, library versions). A fresh entry is left
alone; a stale or missing one is recomputed, or recorded as skipped, with the
reason, when the checkpoint lacks a tensor the analysis needs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass

from analyses.cache import COMMON, Cache, input_fingerprint, result_outputs
from analyses.plotting import render
from analyses.registry import Analysis, all_analyses
from analyses.results import Result
from analyses.sources import ModelSpec, WeightSource


@dataclass(frozen=True)
class Job:
    """One analysis on one scope (a model's slug, or `common`)."""

    analysis: Analysis
    scope: str
    source: WeightSource | None

    @property
    def label(self) -> str:
        return f"{self.scope}/{self.analysis.name}"

    def inputs(self) -> dict:
        weights = self.source.fingerprint if self.source else None
        return input_fingerprint(weights, self.analysis.code_hash(), dict(self.analysis.params))


def select(names: Iterable[str] = ()) -> list[Analysis]:
    """The named analyses (all when none are named); an unknown name is an error that lists the known ones."""
    registry = all_analyses()
    names = list(names)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise KeyError(f"unknown analysis {', '.join(unknown)}; known: {', '.join(registry)}")
    return [registry[n] for n in names] if names else list(registry.values())


def plan(analyses: list[Analysis], sources: list[WeightSource | ModelSpec]) -> list[Job]:
    """Every (analysis, scope) pair: model analyses once per model, common ones once.

    A ModelSpec in place of a source stands for a model whose weights are unavailable:
    its jobs can be checked for staleness (weights aside) but not run.
    """
    jobs = [Job(a, s.slug, s if isinstance(s, WeightSource) else None)
            for s in sources for a in analyses if a.scope == "model"]
    return jobs + [Job(a, COMMON, None) for a in analyses if a.scope == "common"]


def _status_md(job: Job, manifest: dict) -> str:
    where = f" for {job.source.name}" if job.source else ""
    if manifest["status"] == "skipped":
        return (f"::: {{.callout-warning}}\n## Not computed: {job.analysis.title}{where}\n\n"
                f"{manifest['reason']}\n:::\n")
    weights = (f" from weights `sha256:{job.source.fingerprint['model.safetensors'][:12]}`"
               if job.source else "")
    return (f"*Computed{where}{weights} by analysis `{job.analysis.name}` "
            f"(code `{manifest['input']['code'][:12]}`).*\n")


def execute(job: Job, cache: Cache, inputs: dict) -> dict:
    """Compute one job (or record it as skipped) and write its cache entry; returns the manifest.

    `inputs` is the job's fingerprint, computed once by the caller.
    """
    start = time.perf_counter()
    manifest = {"analysis": job.analysis.name, "title": job.analysis.title, "scope": job.scope,
                "model": job.source.name if job.source else None,
                "shape": job.source.shape.as_dict() if job.source else None, "input": inputs}
    missing = job.source.tensors.missing(job.analysis.needs) if job.source else []
    if missing:
        manifest.update(status="skipped", reason=(
            f"This checkpoint of {job.source.name} does not contain {', '.join(f'`{m}`' for m in missing)}, "
            "which this analysis needs; it was not run on a substitute. Point the pipeline at a full checkpoint "
            "(e.g. from the Hugging Face hub) to compute it."))
        outputs = result_outputs(Result(), {}, {})
    else:
        tensors, shape = (job.source.tensors, job.source.shape) if job.source else (None, None)
        result = job.analysis.run(tensors, shape)
        figures = {name: render(fn(result, shape)) for name, fn in job.analysis.figures.items()}
        files = {name: fn(result, shape) for name, fn in job.analysis.files.items()}
        outputs = result_outputs(result, figures, files)
        manifest.update(status="ok", reason=None)
    outputs.add_text("status.md", _status_md(job, manifest))
    manifest["wall_time_s"] = round(time.perf_counter() - start, 3)
    cache.write(job.scope, job.analysis.name, manifest, outputs)
    return manifest


def run(jobs: list[Job], cache: Cache, force: bool = False, progress: bool = True) -> list[tuple[Job, str]]:
    """Bring every job's entry up to date; returns (job, what happened) pairs."""
    from tqdm import tqdm

    done = []
    with cache.locked():
        bar = tqdm(jobs, unit="analysis", disable=not progress, file=sys.stderr)
        for job in bar:
            bar.set_description(job.label)
            inputs = job.inputs()
            reason = "forced" if force else cache.staleness(job.scope, job.analysis.name, inputs)
            if reason is None:
                done.append((job, "fresh"))
                continue
            manifest = execute(job, cache, inputs)
            done.append((job, f"{manifest['status']} ({reason})"))
            cache.write_index()
        if not (cache.variables.exists() and (cache.root / "provenance.md").exists()):
            cache.write_index()
    return done


def status(jobs: list[Job], cache: Cache) -> list[tuple[Job, str | None]]:
    """(job, why it is stale, or None when fresh) for every job.

    A model job without a source (weights unavailable) is checked on everything but the weights.
    """
    return [(job, cache.staleness(job.scope, job.analysis.name, job.inputs(), check_weights=job.source is not None))
            for job in jobs]
