"""Command line: `python -m analyses {run,list,status,bench}`.

    run [NAMES…] [--model M]… [--weights DIR] [--force]   compute what is stale, write the cache
    list [NAMES…] [--model M]…                            analyses, what they need, cached status
    status [NAMES…] [--model M]… [--weights DIR]          exit 1 when anything is stale or missing
    bench                                                 time a cold and a warm run, peak memory

Models default to the report's (gpt2 and all-MiniLM-L6-v2). GPT-2's weights come
from --weights DIR, else $GPT2_WEIGHTS, else the Hugging Face hub.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analyses.cache import DEFAULT_ROOT, DEFAULT_VARIABLES, Cache
from analyses.checkpoint import WeightsError
from analyses.sources import REPORT_MODELS, WEIGHTS_ENV, model_spec, open_source


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m analyses", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", action="append", metavar="M",
                        help=f"model name (repeatable); default: {', '.join(REPORT_MODELS)}")
    common.add_argument("--weights", type=Path, metavar="DIR",
                        help=f"local directory with the model's weights (for gpt2 also ${WEIGHTS_ENV})")
    common.add_argument("--cache-dir", type=Path, metavar="DIR",
                        help="cache directory (default: report/_cache; _variables.yml is then written inside it)")
    common.add_argument("names", nargs="*", help="analyses (default: all)")
    run = sub.add_parser("run", parents=[common], help="compute stale analyses and write the cache")
    run.add_argument("--force", action="store_true", help="recompute even when the cache is fresh")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    sub.add_parser("list", parents=[common], help="list analyses, their needs and cached status")
    sub.add_parser("status", parents=[common], help="exit 1 when any cached result is stale or missing")
    sub.add_parser("bench", help="time a cold and a warm run of every analysis, with peak memory")
    return parser


def _cache(args) -> Cache:
    if args.cache_dir is None:
        return Cache(DEFAULT_ROOT, DEFAULT_VARIABLES)
    return Cache(args.cache_dir, args.cache_dir / "_variables.yml")


def _jobs(args, need_weights: bool):
    """Plan jobs; with need_weights=False a model whose weights are unavailable is planned without them."""
    from analyses.pipeline import plan, select

    analyses = select(args.names)
    models = args.model or list(REPORT_MODELS)
    if args.weights is not None and len(models) != 1:
        raise WeightsError("--weights names one directory: choose the model it holds with --model")
    sources, warnings = [], []
    for model in models:
        try:
            source = open_source(model, args.weights)
            source.shape, source.fingerprint  # fail now, with one clear message, not midway through a run
            sources.append(source)
        except WeightsError as exc:
            if need_weights:
                raise
            warnings.append(f"{model}: weights unavailable, checked without them ({exc})")
            sources.append(model_spec(model))
    return plan(analyses, sources), warnings


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "bench":
            from analyses.bench import main as bench

            return bench()
        if args.command == "run":
            from analyses.pipeline import run

            jobs, _ = _jobs(args, need_weights=True)
            for job, what in run(jobs, _cache(args), force=args.force, progress=not args.quiet):
                print(f"{job.label:45s} {what}")
            return 0
        from analyses.pipeline import status

        jobs, warnings = _jobs(args, need_weights=False)
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        cache = _cache(args)
        stale = 0
        for job, reason in status(jobs, cache):
            manifest = cache.manifest(job.scope, job.analysis.name) or {}
            state = manifest.get("status", "missing") if reason is None else f"STALE: {reason}"
            stale += reason is not None
            needs = ", ".join(job.analysis.needs) or "no weights"
            extra = f"  [needs {needs}]" if args.command == "list" else ""
            print(f"{job.label:45s} {state}{extra}")
        if args.command == "status":
            print(f"{stale} of {len(jobs)} cached results stale or missing" if stale else
                  f"all {len(jobs)} cached results are fresh")
            return 1 if stale else 0
        return 0
    except (WeightsError, KeyError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
