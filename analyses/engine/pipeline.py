"""Runs registered analyses on models and keeps the cache, and the files the report cites, fresh.

For each (scope, analysis) pair the pipeline computes the input fingerprint (the files it
reads, its code hash, parameters and library versions). A fresh entry is left alone; a stale
or missing one is recomputed, or recorded as skipped, with the reason, when the checkpoint
lacks a tensor the analysis needs (never in place of a computed result, unless allowed). At the end of every run `_variables.yml` and
`provenance.md` are rebuilt from the verified cache whenever they differ from it. Nothing is
locked or written when nothing needs writing.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

import yaml

from analyses.engine import index, workers
from analyses.engine.cache import COMMON, Cache, DamagedEntry, result_outputs
from analyses.engine.checkpoint import WeightsError
from analyses.engine.fingerprints import input_fingerprint, library_versions
from analyses.engine.registry import Analysis, UnknownAnalysisError, all_analyses, unread_family
from analyses.engine.report import cited_keys
from analyses.engine.results import Result
from analyses.engine.sources import MODELS, WEIGHTS_ENVS, ModelSpec, WeightSource
from analyses.engine.tensors import TRAINING_RECORD
from analyses.toolkit.plotting import render


@dataclass(frozen=True)
class Job:
    """One analysis on one scope (a model's slug, or `common`); `source` is None for common analyses
    and for a model whose weights are unavailable (its jobs can be checked, weights aside, not run)."""

    analysis: Analysis
    scope: str
    source: WeightSource | None
    shown: frozenset[str] | None = None
    """The figures the book embeds (None: no book, so every figure); see `figures`."""

    @property
    def label(self) -> str:
        return f"{self.scope}/{self.analysis.name}"

    @property
    def needs(self) -> tuple[str, ...]:
        return self.analysis.needs_for(self.source.shape.family) if self.source else self.analysis.needs

    @property
    def figures(self) -> tuple[str, ...]:
        """The figures to draw: those the book shows; all where there is no book or where the book includes a
        text output of the analysis (which may embed any of its figures)."""
        names = tuple(self.analysis.figures)
        if self.shown is None or self.shown & set(self.analysis.files):
            return names
        return tuple(name for name in names if name in self.shown)

    @property
    def unavailable(self) -> bool:
        return self.analysis.scope == "model" and self.source is None

    def inputs(self) -> dict:
        weights = self.source.fingerprint_for(self.needs) if self.source else None
        try:
            data = dict(self.analysis.data()) if self.analysis.data else None
        except ValueError as exc:  # a missing or altered data file: an input error, like unusable weights
            raise WeightsError(f"{self.label}: {exc}") from None
        return input_fingerprint(weights, self.analysis.code_hash(), dict(self.analysis.params),
                                 library_versions(self.analysis.libraries), self.figures, data)


def select(names: Iterable[str] = ()) -> list[Analysis]:
    """The named analyses (all when none are named); an unknown name is an error that lists the known ones."""
    registry = all_analyses()
    names = list(names)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise UnknownAnalysisError(f"unknown analysis {', '.join(unknown)}; known: {', '.join(registry)}")
    return [registry[n] for n in names] if names else list(registry.values())


def plan(analyses: list[Analysis], sources: list[WeightSource | ModelSpec],
         shown: Mapping[str, frozenset[str]] | None = None) -> list[Job]:
    """Every (analysis, scope) pair: model analyses once per model, common ones once.

    A ModelSpec in place of a source stands for a model whose weights are unavailable. `shown` is what the
    book embeds (`report.figures_shown`); None draws every figure.
    """
    def job(analysis: Analysis, scope: str, source: WeightSource | None) -> Job:
        return Job(analysis, scope, source,
                   None if shown is None else shown.get(f"{scope}/{analysis.name}", frozenset()))

    jobs = [job(a, s.slug, s if isinstance(s, WeightSource) else None)
            for s in sources for a in analyses if a.scope == "model" and MODELS[s.name].runs(a.groups)]
    return jobs + [job(a, COMMON, None) for a in analyses if a.scope == "common"]


def owner() -> Callable[[str, str], bool]:
    """Whether a registered analysis owns the entry `scope/name` (runs in that kind of scope, on that model)."""
    registry = all_analyses()
    models = {spec.slug: spec for spec in MODELS.values()}

    def owned(scope: str, name: str) -> bool:
        analysis = registry.get(name)
        return analysis is not None and (scope == COMMON if analysis.scope == "common" else
                                         scope in models and models[scope].runs(analysis.groups))

    return owned


def orphans(cache: Cache) -> list[tuple[str, str]]:
    """Entries on disk that no registered analysis owns: an unknown analysis, an unknown model, or an
    analysis cached in the wrong kind of scope. They are never cited; `run --prune` removes them."""
    owned = owner()
    return [(scope, name) for scope, name in cache.entries() if not owned(scope, name)]


def _rebuilt_index(cache: Cache) -> index.Index:
    """_variables.yml and provenance.md as the verified cache and the book's citations make them."""
    return index.build(cache, cited_entries(cache), cited_keys(cache.variables.parent))


def cited_entries(cache: Cache) -> list[tuple[str, str]]:
    """The entries the report may cite: every entry on disk that a registered analysis owns."""
    stray = set(orphans(cache))
    return [entry for entry in cache.entries() if entry not in stray]


NOTICE = "@sec-data-weights"
"""The one place the book says what each checkpoint holds, which every note of a skipped analysis points to."""


MODEL_WORDS = {"gpt2": "GPT-2", "gpt1": "GPT-1", "all-MiniLM-L6-v2": "MiniLM", "kjv-gpt2": "the model trained here",
               "kjv-gpt2-seed1": "the second seed of the model trained here"}
"""A model as the book's prose names it (a note of a skipped analysis is read in a chapter); others by their id."""

TENSOR_WORDS = (("tokenizer", "tokenizer"), ("W_E", "token embeddings"), ("blocks.*.mlp.", "MLP weights"), ("blocks.*.attn.", "attention weights"),
                ("lm_head", "output layer"), ("E_centred.", "principal components of the token embeddings"))
"""What a checkpoint tensor is, in words (by prefix), where a note of a skipped analysis says what its checkpoint lacks."""


def status_note(job: Job, manifest: dict) -> str:
    """The status.md a chapter includes where an analysis's results would be: nothing when it was computed (where a
    number comes from is told by its link, its figure's caption and the provenance appendix, not in the reading
    text); one line in the reader's words when it was skipped ("not computed for GPT-2: this edition's checkpoint has
    no MLP weights"), pointing to the book's one notice of what each checkpoint holds (the whole reason, with the
    tensors by name and the command that computes it, is in the manifest, `explain` and the provenance appendix)."""
    if manifest["status"] != "skipped":
        return ""
    missing = job.source.missing(job.needs)
    if unread_family(job.source.shape.family) in missing:
        why = "the report reads no blocks of its design"
    elif MODELS[job.source.name].recipe is None and all(m.startswith("history.") or m == TRAINING_RECORD
                                                        for m in missing):
        why = "only a model trained here has a training history"
    else:
        words = list(dict.fromkeys(next((w for prefix, w in TENSOR_WORDS if m.startswith(prefix)), "other weights")
                                   for m in missing))
        why = "this edition's checkpoint has no " + (" or ".join([", ".join(words[:-1]), words[-1]]) if len(words) > 1
                                                    else words[0])
    model = MODEL_WORDS.get(job.source.name, job.source.name)
    return f"*{job.analysis.title}: not computed for {model}: {why} ({NOTICE}).*\n"


def skip_reason(job: Job, missing: list[str]) -> str:
    """Why a job was not run, and the command that runs it where the missing inputs exist."""
    model, repo = job.source.name, MODELS[job.source.name].hub_repo
    if MODELS[model].recipe is None and all(m.startswith("history.") or m == TRAINING_RECORD for m in missing):
        return (f"This analysis reads a training run's history ({', '.join(f'`{m}`' for m in missing)}), which only "
                f"a model this project trains itself records (`python -m analyses train`); {model} was trained "
                "elsewhere, and no history of its training is published.")
    family = job.source.shape.family
    if unread_family(family) in missing:
        return (f"This analysis reads the blocks of GPT-2 (LayerNorm before each sublayer) or BERT (after each, "
                f"bidirectional), or runs them on text; {model}'s blocks ({family}: LayerNorm after each sublayer, "
                "causal, no final LayerNorm) are neither, and no reading of them is written, so it was not run."
                + (f" The checkpoint, from {job.source.origin}, also lacks "
                   f"{', '.join(f'`{m}`' for m in missing if m != unread_family(family))}."
                   if len(missing) > 1 else ""))
    unset = f", with `${WEIGHTS_ENVS[model]}` unset" if model == "gpt2" else ""
    where = (f"where the Hugging Face hub is reachable (`{repo}`{unset}), or with `--weights DIR` naming a full "
             "local checkpoint" if repo else "with `--weights DIR` naming a full checkpoint")
    return (f"This checkpoint of {model}, from {job.source.origin}, does not contain "
            f"{', '.join(f'`{m}`' for m in missing)}, which this analysis needs; it was not run on a substitute. "
            f"To compute it, run `python -m analyses run {job.analysis.name} --model {model}` {where}.")


def execute(job: Job, cache: Cache, inputs: dict) -> dict:
    """Compute one job (or record it as skipped) and write its cache entry; returns the manifest.

    `inputs` is the job's fingerprint, computed once by the caller.
    """
    manifest = {"analysis": job.analysis.name, "title": job.analysis.title, "scope": job.scope,
                "model": job.source.name if job.source else None,
                "shape": job.source.shape.as_dict() if job.source else None, "input": inputs}
    missing = job.source.missing(job.needs) if job.source else []
    if missing:
        manifest.update(status="skipped", reason=skip_reason(job, missing))
        # declared text outputs exist, empty, so that a chapter can include them whether or not it ran
        outputs = result_outputs(Result(), {}, dict.fromkeys(job.analysis.files, ""))
    else:
        tensors, shape = (job.source.tensors, job.source.shape) if job.source else (None, None)
        result = job.analysis.run(tensors, shape)
        # the book's figures must print readably; without a book (a test's repository) every figure is drawn, unchecked
        figures = {name: render(job.analysis.figures[name](result, shape), check=job.shown is not None)
                   for name in job.figures}
        files = {name: fn(result, shape) for name, fn in job.analysis.files.items()}
        outputs = result_outputs(result, figures, files)
        manifest.update(status="ok", reason=None)
    outputs.add_text("status.md", status_note(job, manifest))
    cache.write(job.scope, job.analysis.name, manifest, outputs)
    return manifest


@dataclass
class RunReport:
    """What a run did: each job's outcome, the orphans it removed, whether it rewrote the cited files."""

    done: list[tuple[Job, str]] = field(default_factory=list)
    pruned: list[tuple[str, str]] = field(default_factory=list)
    index_written: bool = False
    wrote: bool = False


def _stale(jobs: list[Job], cache: Cache, force: bool) -> tuple[dict[str, dict], dict[str, str]]:
    """Each job's fingerprint and, for those that need computing, why."""
    inputs, reasons = {}, {}
    for job in jobs:
        if job.unavailable:
            reason = cache.staleness(job.scope, job.analysis.name, {**job.inputs(), "weights": None},
                                     check_weights=False)
        else:
            inputs[job.label] = job.inputs()
            reason = "forced" if force else cache.staleness(job.scope, job.analysis.name, inputs[job.label])
            if reason is None and job.source is not None and \
                    cache.manifest(job.scope, job.analysis.name)["shape"] != job.source.shape.as_dict():
                reason = "its manifest's shape differs from the weights' config"
            recorded = (cache.manifest(job.scope, job.analysis.name) or {"input": {}})["input"].get("weights")
            if reason is not None and job.source is not None and (force or recorded != inputs[job.label]["weights"]):
                job.source.tensors.check(job.needs)  # weights not yet read: refused here, by status as by run
        if reason is not None:
            reasons[job.label] = reason
    return inputs, reasons


def _refuse_downgrades(jobs: list[Job], cache: Cache) -> None:
    """A WeightsError, naming the inputs, when a stale job would be recorded as skipped although its cached
    entry was computed: an input that went missing must not silently replace cited results by a skip."""
    lost = [(job, job.source.missing(job.needs)) for job in jobs if job.source is not None]
    lost = [(job, missing) for job, missing in lost
            if missing and (cache.manifest(job.scope, job.analysis.name) or {}).get("status") == "ok"]
    if lost:
        job, missing = lost[0]
        more = f" (and {len(lost) - 1} more results)" if len(lost) > 1 else ""
        raise WeightsError(f"{job.label} was computed, but the weights in {job.source.directory} lack "
                           f"{', '.join(missing)}{more}; refusing to replace computed results by skips "
                           "(pass --allow-skips to record them as skipped)")


def _refuse_dropping_citations(jobs: list[Job], cache: Cache) -> None:
    """A DamagedEntry when `_variables.yml` cites an entry of a registered analysis that this run does not compute
    and whose files are damaged or gone: rebuilding the cited files would drop its values without a word."""
    disk = index.on_disk(cache)
    try:
        cited = index.read_yaml(disk.variables) if disk is not None else None
    except yaml.YAMLError:
        return
    running, owned = {(job.scope, job.analysis.name) for job in jobs}, owner()
    dropped = [(scope, name, node) for scope, entries in (cited.items() if isinstance(cited, dict) else ())
               if isinstance(entries, dict) for name, node in entries.items()
               if name != "model" and (scope, name) not in running and owned(scope, name)]
    damaged = [(scope, name, node, cache.unverifiable(scope, name)) for scope, name, node in dropped]
    damaged = [item for item in damaged if item[3] is not None]
    if damaged:
        scope, name, node, why = damaged[0]
        entry = cache.entry(scope, name)
        state = f"is damaged ({why})" if entry.is_dir() else "is missing"
        model = next((f" --model {spec.name}" for spec in MODELS.values() if spec.slug == scope), "")
        values = len(node) - 1 if isinstance(node, dict) else 0  # its keys but `status`
        more = f" (and {len(damaged) - 1} more entries)" if len(damaged) > 1 else ""
        raise DamagedEntry(f"{entry.relative_to(cache.variables.parent)} {state} and this run does not recompute it, "
                           f"so its {values} cited values would be dropped from _variables.yml{more}; recompute it: "
                           f"`python -m analyses run {name}{model}`")


def _refuse_dropping_model_keys(jobs: list[Job], inputs: dict[str, dict], reasons: dict[str, str],
                                cache: Cache) -> None:
    """A DamagedEntry when `_variables.yml` cites a model's shape (`<scope>.model.*`) and this run would leave the
    scope's entries recording different weights or shapes: the rebuilt file cites a shape only where all agree
    (`index.build`), so a targeted run on other weights would drop it without a word."""
    disk = index.on_disk(cache)
    try:
        cited = index.read_yaml(disk.variables) if disk is not None else None
    except yaml.YAMLError:
        return
    computing = {(job.scope, job.analysis.name): job for job in jobs
                 if job.source is not None and job.label in reasons and job.label in inputs}
    for scope in sorted({scope for scope, _ in computing}):
        if not isinstance(cited, dict) or not isinstance(cited.get(scope), dict) or "model" not in cited[scope]:
            continue
        nodes = {}
        for entry in [*cited_entries(cache), *computing]:
            if entry[0] != scope or entry in nodes:
                continue
            job, manifest = computing.get(entry), cache.manifest(*entry)
            if job is not None:
                nodes[entry] = index.model_node(job.source.shape.as_dict(), inputs[job.label]["weights"])
            elif manifest is not None and manifest.get("shape") and cache.unverifiable(*entry) is None:
                nodes[entry] = index.model_node(manifest["shape"], manifest["input"].get("weights"))
        if len({json.dumps(node, sort_keys=True) for node in nodes.values()}) > 1:
            model = next(job.source.name for job in computing.values() if job.scope == scope)
            others = sorted(name for (s, name) in nodes if s == scope and (s, name) not in computing)
            raise DamagedEntry(f"this run computes {scope} from other weights than its other results ({', '.join(others[:3])}"
                               f"{', …' if len(others) > 3 else ''}) were, so _variables.yml would drop the cited "
                               f"{scope}.model keys; recompute them all: `python -m analyses run --model {model}`")


def run(jobs: list[Job], cache: Cache, force: bool = False, prune: bool = False, progress: bool = True,
        workers_count: int | None = None, allow_skips: bool = False) -> RunReport:
    """Bring every job's entry up to date, then the cited files; take the lock only if something changes.

    Stale jobs run in forked children, `workers_count` at a time (default: one per core), longest first.
    A job whose model's weights are unavailable must already be fresh on everything but the weights;
    otherwise nothing is done and a WeightsError says which results need the weights. Unless `allow_skips`,
    a computed result is never recorded as skipped because an input went missing (a WeightsError instead).
    """
    from tqdm import tqdm

    report = RunReport()
    inputs, reasons = _stale(jobs, cache, force)
    blocked = [job.label for job in jobs if job.unavailable and job.label in reasons]
    if blocked:
        raise WeightsError(f"{len(blocked)} cached results need recomputing but their model's weights are "
                           f"unavailable: {', '.join(blocked[:4])}{', …' if len(blocked) > 4 else ''}")
    if not allow_skips:
        _refuse_downgrades([job for job in jobs if job.label in reasons], cache)
    _refuse_dropping_citations(jobs, cache)
    _refuse_dropping_model_keys(jobs, inputs, reasons, cache)
    stray = orphans(cache) if prune else []
    fresh_index = _rebuilt_index(cache) if not reasons and not stray else None
    if fresh_index is not None and not cache.leftovers() and not index.differences(index.on_disk(cache), fresh_index):
        report.done = [(job, "fresh") for job in jobs]
        return report
    report.wrote = True
    with cache.locked():
        _, reasons = _stale(jobs, cache, force)  # another writer may have finished some meanwhile
        previous = cache.timings()
        todo = sorted((job for job in jobs if job.label in reasons), key=lambda job: -previous.get(job.label, 0.0))
        if todo:
            _prepare()
        bar = tqdm(total=len(todo), unit="analysis", disable=not progress or not todo, file=sys.stderr)
        outcomes, measures = {}, {}

        def done(label: str, manifest: dict, measure: workers.Measure) -> None:
            outcomes[label] = f"{manifest['status']} ({reasons[label]})"
            measures[label] = measure
            bar.set_description(label)
            bar.update()

        try:
            workers.run_all(((job.label, partial(execute, job, cache, inputs[job.label])) for job in todo),
                            workers_count or workers.cores(), done, prelude=partial(_preload, todo[1:]))
        except workers.WorkerDied:
            cache.recover()  # what the dead worker was writing: its entry stays as it was
            raise
        bar.close()
        report.done = [(job, outcomes.get(job.label, "fresh")) for job in jobs]
        for scope, name in stray:
            cache.remove(scope, name)
        report.pruned = stray
        fresh = _rebuilt_index(cache)
        if index.differences(index.on_disk(cache), fresh):
            index.write(cache, fresh)
            report.index_written = True
        if measures:
            cache.record_timings({label: vars(m) for label, m in measures.items()})
    return report


def _prepare() -> None:
    """Import what every computing child needs once, before the children are forked from this process."""
    import scipy.linalg  # noqa: F401
    import scipy.stats  # noqa: F401

    from analyses.toolkit.plotting import pyplot

    pyplot()


def _preload(jobs: list[Job]) -> None:
    """Load, once in this process, what the jobs still to be forked read (tensors, token subspaces,
    tokenizers): each child then shares it instead of loading or computing its own copy."""
    needs: dict[int, tuple[WeightSource, set[str]]] = {}
    for job in jobs:
        if job.source is not None and not job.source.missing(job.needs):
            needs.setdefault(id(job.source), (job.source, set()))[1].update(job.needs)
    for source, names in needs.values():
        source.preload(tuple(sorted(names)))


@dataclass
class StatusReport:
    """Each job's staleness, the orphans on disk, what is wrong with the cited files, and what interrupted
    writes left behind (each one a problem: `run` removes them)."""

    jobs: list[tuple[Job, str | None]]
    orphans: list[tuple[str, str]]
    index_problems: list[str]
    leftovers: list[str]

    @property
    def unverified(self) -> list[Job]:
        """Fresh jobs whose weights could not be checked (unavailable)."""
        return [job for job, reason in self.jobs if reason is None and job.unavailable]

    @property
    def problems(self) -> int:
        return (sum(reason is not None for _, reason in self.jobs) + len(self.orphans) + len(self.index_problems)
                + len(self.leftovers))


def status(jobs: list[Job], cache: Cache) -> StatusReport:
    """Staleness of every job (weights unchecked where unavailable), orphans, and the cited files against
    a rebuild from the verified cache."""
    _, reasons = _stale(jobs, cache, force=False)
    problems = index.differences(index.on_disk(cache), _rebuilt_index(cache))
    problems += [f"_variables.yml cites {job.label}, which is stale" for job in jobs
                 if job.label in reasons and cache.unverifiable(job.scope, job.analysis.name) is None]
    return StatusReport([(job, reasons.get(job.label)) for job in jobs], orphans(cache), problems,
                        [str(p.relative_to(cache.variables.parent)) for p in cache.leftovers()])
