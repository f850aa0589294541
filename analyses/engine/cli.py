"""Command line: `python -m analyses {run,list,status,verify,bench,explain,provenance}`.

    run [NAMES…] [--model M]… [--weights DIR] [--force] [--prune] [--allow-skips]
                                                                    compute what is stale, rebuild the cited files
    list [NAMES…] [--model M]…                                      analyses, what they need, cached status
    status [NAMES…] [--model M]… [--weights DIR]                    check the cache and the cited files
    verify [NAMES…] [--model M]… [--weights DIR]                    recompute in memory, compare at each
                                                                    value's declared accuracy
    bench [--baseline [SCRIPT]] [--repeats N]                       cold and warm runs, per analysis, vs a notebook
    explain KEY [--recompute] [--weights DIR]                       where a cited number comes from: value, accuracy,
                                                                    function and file:line, inputs, freshness
    provenance [--check]                                            write (check) the book's provenance page
    compare MODEL… [--out FILE]                                     the cross-model table of position tables for
                                                                    named models, checkpoint dirs or hub repos

Models default to the report's (gpt2 and all-MiniLM-L6-v2). GPT-2's weights come from
--weights DIR, else $GPT2_WEIGHTS, else the Hugging Face hub; weights named by either must be
usable. GPT-1's position table comes from --weights DIR or $GPT1_WEIGHTS, or the whole model from the hub
(checked against that table where both are at hand). The cache lives in the repository that contains the working directory (or --root DIR,
which must be the repository).

Exit codes: 0 done, or everything fresh (verify: reproduced); 1 (status) something is stale,
orphaned, left over or cited wrongly, the provenance page included (explain: the key's entry is stale;
verify, explain --recompute: a value outside its declared accuracy, or a printed string changed;
provenance --check: the page differs from the cache's); 2 a usage or input error (unknown model,
analysis or key, arguments that plan nothing, unusable weights, a damaged committed run, for every command and
every analysis that reads it, a computed result that would become skipped, a cited entry or model shape that a
targeted run would drop, no repository); 3 (status,
verify) fresh as far as it could be checked, but some model's weights were unavailable (the hub, not
named), so their fingerprints were not checked; 4 an operating-system error (disk full, read-only
files, permissions, an output file that cannot be written); 5 a worker died without its result (killed by a signal: SIGKILL, SIGSEGV);
130 interrupted (SIGINT); 143 terminated (SIGTERM, handled like SIGINT). Every error is one line on
stderr; a closed stdout (`status | head -1`) is not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from analyses.engine.cache import COMMON, Cache, DamagedEntry, RootError, checked_root, find_root, writable, write_output
from analyses.engine.checkpoint import WeightsError, forget_checks
from analyses.engine.registry import UnknownAnalysisError
from analyses.engine.sources import MODELS, REPORT_MODELS, WEIGHTS_ENV, model_spec, named_weights, open_source
from analyses.engine.provenance import UnknownKeyError
from analyses.engine.workers import WorkerDied

EXIT_STALE, EXIT_USAGE, EXIT_UNVERIFIED, EXIT_OS, EXIT_WORKER, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 2, 3, 4, 5, 130, 143


class EmptyPlan(ValueError):
    """Arguments that plan no job at all: a command that would check or compute nothing, and say all is well."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C's KeyboardInterrupt so that it is cleaned up the same way."""


def _terminate(signum, frame):
    raise Terminated


def _say(line: str) -> None:
    """Print a line on stdout; once its reader has gone (`status | head -1`), drop the rest silently."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line."""

    def error(self, message: str):
        print(f"error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def _threads(text: str) -> int:
    """A number of BLAS threads: at least 1, at most this machine's cores (more would not be used as printed)."""
    cores = os.cpu_count() or 1
    if not text.isdigit() or not 1 <= int(text) <= cores:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {cores} (this machine's cores), "
                                         f"got {text if len(text) <= 20 else text[:20] + '…'!r}")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m analyses", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", action="append", metavar="M",
                        help=f"model name (repeatable); default: {', '.join(REPORT_MODELS)}")
    common.add_argument("--weights", type=Path, metavar="DIR",
                        help=f"local directory with the model's weights (for gpt2 also ${WEIGHTS_ENV}, "
                             "for gpt1 $GPT1_WEIGHTS)")
    common.add_argument("--root", type=Path, metavar="DIR",
                        help="the report repository whose report/_cache and _variables.yml to use "
                             "(default: the one containing the working directory)")
    common.add_argument("names", nargs="*", help="analyses (default: all)")
    run = sub.add_parser("run", parents=[common], help="compute stale analyses and rebuild the cited files")
    run.add_argument("--force", action="store_true", help="recompute even when the cache is fresh")
    run.add_argument("--prune", action="store_true", help="remove cache entries that no analysis owns")
    run.add_argument("--jobs", type=_positive, metavar="N",
                     help="analyses computed side by side (default: one per core)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--allow-skips", action="store_true",
                     help="record a computed result as skipped when its inputs went missing (else an error)")
    run.add_argument("--provenance", action="store_true",
                     help="then write the provenance page from the cache, as `provenance` does (the book's pre-render "
                          "step: one process for both)")
    sub.add_parser("list", parents=[common], help="list analyses, their needs and cached status")
    sub.add_parser("status", parents=[common], help="exit non-zero unless the cache and the cited files are fresh")
    verify = sub.add_parser("verify", parents=[common], help="recompute in memory (nothing is written) and compare "
                                                             "with the cache at each value's declared accuracy")
    verify.add_argument("--jobs", type=_positive, metavar="N", help="analyses computed side by side (default: one per core)")
    verify.add_argument("--perturb", action="store_true",
                        help="perturb every floating-point input at rounding level and require each declared accuracy "
                             "to be at least 10 times the change (see engine.verify.Perturbation)")
    verify.add_argument("--threads", type=_threads, default=1, metavar="N",
                        help="BLAS threads per analysis (default 1, as the cache was written)")
    verify.add_argument("--ratios", type=Path, metavar="FILE",
                        help="write every value's change as a fraction of its declared accuracy (JSON)")
    explain = sub.add_parser("explain", help="where a cited number comes from (its analysis, code, inputs)")
    explain.add_argument("key", help="a key of _variables.yml, as cited: {{< var KEY >}}, e.g. gpt2.helix.period")
    explain.add_argument("--recompute", action="store_true",
                         help="recompute its analysis in memory and compare with the cache at the declared accuracy")
    explain.add_argument("--weights", type=Path, metavar="DIR", help=f"the model's weights (for gpt2 also ${WEIGHTS_ENV})")
    explain.add_argument("--root", type=Path, metavar="DIR", help="the report repository (default: the working one)")
    provenance = sub.add_parser("provenance", help="write the book's provenance page and its links' data from the cache")
    provenance.add_argument("--check", action="store_true", help="write nothing; exit 1 if either file is out of date")
    provenance.add_argument("--root", type=Path, metavar="DIR", help="the report repository (default: the working one)")
    compare = sub.add_parser("compare", help="the report's cross-model table of position tables for any models: "
                                             "names it knows, checkpoint directories or hub repositories owner/name")
    compare.add_argument("models", nargs="+", metavar="MODEL", help="a model name, a checkpoint directory or owner/name")
    compare.add_argument("--out", type=Path, metavar="FILE", help="also write the table there (.csv: full precision; "
                                                                  "otherwise markdown)")
    train = sub.add_parser("train", help="train the models the report trains itself (minutes each; never done by run)")
    train.add_argument("--model", action="append", metavar="M",
                       help=f"model to train (repeatable); default: {', '.join(TRAINED)}")
    train.add_argument("--force", action="store_true", help="retrain even when the committed model is fresh")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    bench = sub.add_parser("bench", help="time cold and warm runs, per analysis too, with peak memory")
    bench.add_argument("--baseline", nargs="?", type=Path, const=BASELINE, metavar="SCRIPT",
                       help=f"also time the notebook-style script against the same subset (default: {BASELINE})")
    bench.add_argument("--weights", type=Path, metavar="DIR", help=f"GPT-2's weights for the baseline "
                                                                   f"(default: ${WEIGHTS_ENV})")
    bench.add_argument("--repeats", type=_positive, default=3, metavar="N", help="runs per figure (median)")
    bench.add_argument("--root", type=Path, metavar="DIR",
                       help="the repository whose book (which figures) and last timings (which order) the runs use")
    return parser


def _root(args) -> Path:
    """The repository: --root, which must be one, or the one containing the working directory."""
    return checked_root(args.root) if args.root is not None else find_root()


def _cache(args) -> Cache:
    return Cache.at(_root(args))


def _jobs(args):
    """Plan jobs, each model once (however often, or by whichever alias, it is named). Weights that were
    named (--weights, $GPT2_WEIGHTS), ship in a package or are committed here (a trained model) must open;
    only a model from the hub that cannot be reached is planned without its weights (named in the warnings)."""
    from analyses.engine.pipeline import plan, select
    from analyses.engine.report import figures_shown

    root = _root(args)
    analyses = select(args.names)
    models = list(dict.fromkeys(model_spec(model).name for model in args.model or REPORT_MODELS))
    if args.weights is not None and len(models) != 1:
        raise WeightsError("--weights names one directory: choose the model it holds with --model")
    sources, warnings = [], []
    for model in models:
        try:
            source = open_source(model, args.weights)
            source.shape, source.fingerprint, source.tensors  # fail now, with one clear message
            sources.append(source)
        except WeightsError as exc:
            named = args.weights is not None or named_weights(model) is not None
            if named or model_spec(model).package or model_spec(model).recipe is not None:  # committed here too
                raise
            warnings.append(f"{model}: weights unavailable, checked without them ({exc})")
            sources.append(model_spec(model))
    jobs = plan(analyses, sources, figures_shown(root))
    if not jobs:
        limited = [f"{m} gets only the analyses of the {' and '.join(model_spec(m).groups)} group"
                   for m in models if model_spec(m).groups]
        raise EmptyPlan(f"nothing to do: {', '.join(a.name for a in analyses)} runs on none of the models "
                                   f"named ({', '.join(models)})" + (f"; {'; '.join(limited)}" if limited else ""))
    return jobs, warnings


BASELINE = Path("../shared/bench/seed_style.py")
"""The source documents' notebook way of working, relative to the repository."""


def _bench(args) -> int:
    from analyses.engine.bench import main as bench

    root = _root(args)
    script, weights = None, None
    if args.baseline is not None:
        script = args.baseline if args.baseline.is_absolute() else (root / args.baseline).resolve()
        weights = args.weights or (Path(os.environ[WEIGHTS_ENV]) if os.environ.get(WEIGHTS_ENV) else None)
        if not script.is_file():
            raise RootError(f"no baseline script at {script}")
        if weights is None:
            raise WeightsError(f"the baseline needs GPT-2's weights: --weights DIR or ${WEIGHTS_ENV}=DIR")
    return bench(root, script, weights, args.repeats)


TRAINED = tuple(m.name for m in MODELS.values() if m.recipe is not None)
"""The models the report trains itself (`python -m analyses train`)."""


def _trained_states(models) -> list[tuple[str, str]]:
    """(model, state) for each trained model among `models` whose committed run is not fresh."""
    from analyses.engine import training

    specs = [model_spec(m) for m in models]
    states = [(spec.name, training.state(spec.name, spec.recipe)) for spec in specs if spec.recipe is not None]
    return [(name, state) for name, state in states if state != "fresh"]


def _train(args) -> int:
    from analyses.engine import training

    names = list(dict.fromkeys(model_spec(m).name for m in args.model or TRAINED))
    untrainable = [n for n in names if model_spec(n).recipe is None]
    if untrainable:
        raise WeightsError(f"{', '.join(untrainable)} is not trained by this project; trained models: "
                           f"{', '.join(TRAINED)}")
    for name in names:
        spec = model_spec(name)
        state = training.state(name, spec.recipe)
        if state == "fresh" and not args.force:
            _say(f"{name}: fresh (its recipe, corpus and code are those recorded); --force retrains it")
            continue
        _say(f"{name}: {state}; training ({spec.recipe.steps:,} steps)")
        directory = training.train(name, spec.recipe, progress=not args.quiet)
        _say(f"{name}: written to {directory}; now run `python -m analyses run`")
    return 0


def _run(args) -> int:
    from analyses.engine.pipeline import run

    jobs, warnings = _jobs(args)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for name, state in _trained_states({job.source.name for job in jobs if job.source is not None}):
        print(f"warning: the committed {name} is {state}: its results describe the committed run; "
              f"`python -m analyses train --model {name}` retrains it", file=sys.stderr)
    report = run(jobs, _cache(args), force=args.force, prune=args.prune, progress=not args.quiet,
                 workers_count=args.jobs, allow_skips=args.allow_skips)
    for job, what in report.done:
        _say(f"{job.label:45s} {what}")
    for scope, name in report.pruned:
        _say(f"{scope}/{name:40s} removed (no analysis owns it)")
    if report.index_written:
        _say("_variables.yml and provenance.md rebuilt from the cache")
    if not args.provenance:
        return 0
    whole = not (args.names or args.model or args.weights) and not any(job.unavailable for job in jobs)
    return _write_provenance(_root(args), verified=whole and not report.wrote)


def _status(args) -> int:
    from analyses.engine.pipeline import status

    jobs, warnings = _jobs(args)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    cache = _cache(args)
    report = status(jobs, cache)
    for job, reason in report.jobs:
        manifest = cache.manifest(job.scope, job.analysis.name) or {}
        state = manifest.get("status", "missing") if reason is None else f"STALE: {reason}"
        if reason is None and job.unavailable:
            state += " (weights not checked)"
        extra = f"  [needs {', '.join(job.analysis.needs) or 'no weights'}]" if args.command == "list" else ""
        _say(f"{job.label:45s} {state}{extra}")
    if args.command == "list":
        return 0
    for scope, name in report.orphans:
        _say(f"{scope}/{name:40s} ORPHAN: no analysis owns it (remove with `run --prune`)")
    for path in report.leftovers:
        _say(f"{path:45s} LEFTOVER of an interrupted write (the next `run` removes it)")
    for problem in report.index_problems:
        _say(f"STALE: {problem}")
    pages = _outdated_pages(cache.variables.parent)
    for path in pages:
        _say(f"STALE: {path} differs from the cache (the pre-render step, or `python -m analyses provenance`, "
             "rewrites it)")
    trained = _trained_states({job.source.name for job in jobs if job.source is not None})
    for name, state in trained:
        _say(f"{name:45s} {state.upper() if state == 'missing' else 'STALE: ' + state[len('stale: '):]}: "
             f"`python -m analyses train --model {name}`")
    if report.problems or trained or pages:
        _say(f"{report.problems + len(trained) + len(pages)} problems: run `python -m analyses run`"
             + (" --prune" if report.orphans else "") + (" after `train`" if trained else "")
             + (" and `python -m analyses provenance`" if pages else ""))
        return EXIT_STALE
    if report.unverified:
        _say(f"fresh, but {len(report.unverified)} results were not checked against their weights (unavailable)")
        return EXIT_UNVERIFIED
    _say(f"all {len(jobs)} cached results and the cited files are fresh")
    return 0


def _outdated_pages(root: Path) -> list[str]:
    """The book's provenance page and its links' data where they differ from the cache (none if the book has no
    such page)."""
    from analyses.engine import provenance

    return provenance.outdated(root, provenance.Provenance.of(root)) if provenance.in_book(root) else []


def _verify(args) -> int:
    from analyses.engine import verify, workers

    if args.ratios is not None:
        writable(args.ratios)  # before the recomputation, not after it
    jobs, warnings = _jobs(args)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    perturbation = verify.Perturbation() if args.perturb else None
    print(f"BLAS kernel: {', '.join(verify.blas_kernels()) or 'no OpenBLAS loaded'}, {args.threads} thread(s)"
          + (f"; inputs perturbed by 1 + δu, δ = {perturbation.delta('float64'):.2g} (float64), "
             f"{perturbation.delta('float32'):.2g} (float32), margin {verify.MARGIN}" if perturbation else ""),
          flush=True)
    failed, unchecked, ratios = [], [], {}

    def done(job, comparison) -> None:
        if comparison is None:
            unchecked.append(job.label)
            problems = ["not checked: the model's weights are unavailable"]
        else:
            problems = comparison.problems
            ratios.update({f"{job.label}:{where}": ratio for where, ratio in comparison.ratios.items()})
            if problems:
                failed.append(job.label)
        tightest = max(comparison.ratios.items(), key=lambda item: item[1], default=None) if comparison else None
        largest = f" (largest change {tightest[1]:.2g} of the accuracy, {tightest[0]})" if tightest and tightest[1] else ""
        print(f"{job.label:45s} {'; '.join(problems) if problems else 'reproduced' + largest}", flush=True)

    verify.recompute(jobs, _cache(args), args.jobs or workers.cores(), done, perturbation, args.threads)
    if args.ratios is not None:
        ordered = sorted(ratios.items(), key=lambda item: -item[1])
        write_output(args.ratios, (json.dumps({where: ratio if ratio != float("inf") else "an exact value changed"
                                                for where, ratio in ordered}, indent=1) + "\n").encode("utf-8"))
    if failed:
        print(f"{len(failed)} of {len(jobs)} results not reproduced at their declared accuracy")
        return EXIT_STALE
    if unchecked:
        print(f"reproduced, but {len(unchecked)} results were not checked (weights unavailable)")
        return EXIT_UNVERIFIED
    print(f"all {len(jobs)} results reproduced at their declared accuracy")
    return 0


def _explain(args) -> int:
    from analyses.engine import provenance

    root = _root(args)
    book = provenance.Provenance.of(root)
    cited = provenance.resolve(book.cited, args.key)
    for line in provenance.describe(cited, book.cites.keys.get(args.key)):
        _say(line)
    entry = cited.entry
    args.names = [] if entry.name == "model" else [entry.name]
    args.model = [next(m.name for m in MODELS.values() if m.slug == entry.scope)] if entry.scope != COMMON else None
    jobs, warnings = _jobs(args)
    job = next((j for j in jobs if j.scope == entry.scope), None)
    if job is None or job.unavailable:
        _say(f"  fresh       not checked: {'; '.join(warnings) or 'the weights are unavailable'}")
        return EXIT_UNVERIFIED
    if entry.name == "model":
        changed = [f for f, digest in entry.inputs.items() if job.source.fingerprint.get(f) != digest]
        reason = f"changed since it was cached: {', '.join(changed)}" if changed else None
    else:
        reason = _cache(args).staleness(job.scope, entry.name, job.inputs())
    _say(f"  fresh       {'yes: its inputs, code and libraries are those recorded' if reason is None else 'STALE: ' + reason}")
    if not args.recompute:
        return 0 if reason is None else EXIT_STALE
    verdict, code = provenance.recompute(cited, job, _cache(args))
    _say(f"verdict: {verdict}")
    return code


def _provenance(args) -> int:
    return _write_provenance(_root(args), check=args.check)


def _write_provenance(root: Path, check: bool = False, verified: bool = False) -> int:
    """Write the book's provenance page and its links' data from the cache (with `check`: write nothing, exit 1
    when either is out of date). `verified`: a run just found every entry of the report fresh, so that when nothing
    the files are built from changed since they were last built (`provenance.unchanged`), they are left as they are."""
    from analyses.engine import provenance

    if verified and provenance.unchanged(root):
        _say("provenance: unchanged since it was last built from the cache")
        return 0
    book = provenance.Provenance.of(root)
    missing = book.unresolved()
    if missing:
        raise provenance.UnknownKeyError(f"the book cites what no verified cache entry holds: {', '.join(missing[:5])}"
                                         + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    if check:
        stale = provenance.outdated(root, book)
        for path in stale:
            _say(f"STALE: {path} differs from the cache (run `python -m analyses provenance`)")
        return EXIT_STALE if stale else 0
    for path in provenance.write(root, book):
        _say(f"{path} rebuilt from the cache")
    provenance.stamp(root)
    return 0


def main(argv: list[str] | None = None) -> int:
    if hasattr(sys.stdout, "reconfigure"):  # a terminal that cannot show ± or → gets \xb1, not a traceback
        sys.stdout.reconfigure(errors="backslashreplace")
    previous = signal.signal(signal.SIGTERM, _terminate)
    forget_checks()  # each command checks the committed runs it reads afresh
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _compare(args) -> int:
    from analyses.engine.compare import compare

    print(compare(args.models, args.out), end="")
    return 0


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "bench":
            return _bench(args)
        if args.command == "verify":
            return _verify(args)
        if args.command == "train":
            return _train(args)
        if args.command == "compare":
            return _compare(args)
        if args.command in ("explain", "provenance"):
            return _explain(args) if args.command == "explain" else _provenance(args)
        return _run(args) if args.command == "run" else _status(args)
    except (WeightsError, RootError, DamagedEntry, EmptyPlan) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (UnknownAnalysisError, UnknownKeyError) as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    except WorkerDied as exc:
        print(f"error: {exc}; its cache entry is unchanged", file=sys.stderr)
        return EXIT_WORKER
    except KeyboardInterrupt as exc:
        what, code = ("terminated", EXIT_TERMINATED) if isinstance(exc, Terminated) else ("interrupted",
                                                                                           EXIT_INTERRUPTED)
        kept = "the committed models are unchanged" if args.command == "train" else "the cache keeps its previous entries"
        worker = getattr(exc, "worker", None)  # the signal reached that worker alone
        where = f" (the worker computing {worker} got {'SIGTERM' if code == EXIT_TERMINATED else 'SIGINT'})" \
            if worker else ""
        print(f"{what}{where}: {kept} (nothing is left half-written)", file=sys.stderr)
        return code
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_OS
