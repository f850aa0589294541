"""`python -m analyses compare`: the cross-model table of position tables for any models the user names.

Each argument is a model the report knows (`gpt2`, `gpt2-medium`, `gpt1`, `minilm`, …, opened as `run` opens
it), a local checkpoint directory (a `config.json` of a GPT-2, GPT-1 or BERT, and a `model.safetensors`), or
a Hugging Face hub repository `owner/name` of such a model (downloaded into the HF cache; offline, the cache
alone). Every model with a learned position table gets the rows of the report's comparison
(`toolkit.position_profile`): its whole table, its windows of 512 positions where it is longer, and the
sinusoidal table of each shape. A front end: nothing is cached or cited, and the report's own table holds the
models available offline.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np

from analyses.engine import training
from analyses.engine.cache import writable, write_output
from analyses.engine.checkpoint import WeightsError
from analyses.engine.results import format_value
from analyses.engine.sources import ALIASES, MODELS, HUB_FILES, WeightSource, _reachable, _truthy, open_source
from analyses.toolkit.position_profile import FORMATS, HEADERS, STATISTICS, compared_tables, profile

COLUMNS = ("model", "table", "positions", "width", *(HEADERS[s] for s in STATISTICS))


def open_any(name: str, cache_dir: Path | str | None = None) -> WeightSource:
    """A known model by name, a checkpoint directory, or a hub repository `owner/name` (WeightsError otherwise). A
    committed run's directory is read as that run, checked as `run` checks it; any other directory with a
    SHA256SUMS is checked against it before a number is computed."""
    if not name.strip():
        raise WeightsError("an empty model name: name a model, a checkpoint directory or a hub repository owner/name")
    if name in MODELS or name in ALIASES:
        source = open_source(name)
    elif (path := Path(name).expanduser()).is_dir():
        directory = path.resolve()
        committed = directory.parent == training.MODELS_DIR.resolve() and directory.name in MODELS
        source = open_source(directory.name) if committed else WeightSource(directory.name, directory.name, directory,
                                                                            "a local directory")
    elif name.count("/") == 1 and not path.exists() and not name.startswith((".", "/", "~")):
        source = _hub_checkpoint(name, cache_dir)
    else:
        raise WeightsError(f"{name!r} is neither a known model ({', '.join(MODELS)}), a checkpoint directory, "
                           "nor a hub repository owner/name")
    source.check_sums()
    return source


def _hub_checkpoint(repo: str, cache_dir: Path | str | None) -> WeightSource:
    from huggingface_hub import hf_hub_download

    offline = _truthy(os.environ.get("HF_HUB_OFFLINE")) or not _reachable()
    try:
        paths = [Path(hf_hub_download(repo, f, cache_dir=cache_dir, local_files_only=offline)) for f in HUB_FILES]
    except Exception as exc:  # offline, unreachable, missing repo or file: one message for all
        where = "offline and not in the HF cache" if offline else "could not be downloaded"
        raise WeightsError(f"{repo}: {where} ({type(exc).__name__})") from None
    return WeightSource(repo, repo.replace("/", "_"), paths[0].parent, f"Hugging Face hub, {repo}")


MIN_POSITIONS, MIN_WIDTH = 3, 2
"""The smallest table the comparison profiles: three components of the centred table, two coordinates to turn in."""


def rows(source: WeightSource) -> list[tuple]:
    """The comparison's rows for one model: (model, table, positions, width, *statistics); a table too small or too
    degenerate for every statistic to be a number is a WeightsError."""
    if "W_pos" not in source.tensors:
        raise WeightsError(f"{source.name} ({source.origin}) has no learned position table")
    P = np.asarray(source.tensors["W_pos"], dtype=np.float64)
    if len(P) < MIN_POSITIONS or P.shape[1] < MIN_WIDTH:
        raise WeightsError(f"{source.name}'s position table is {len(P)} × {P.shape[1]}: the comparison needs at least "
                           f"{MIN_POSITIONS} positions of {MIN_WIDTH} dimensions")
    out = []
    for label, X in compared_tables(P).values():
        with np.errstate(all="ignore"):
            try:
                stats = profile(X)
            except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
                raise WeightsError(f"{source.name}'s position table ({label}) cannot be profiled: {exc}") from None
        undefined = [HEADERS[s] for s in STATISTICS if not np.isfinite(stats[s])]
        if undefined:
            raise WeightsError(f"{source.name}'s position table ({label}) is degenerate: its {', '.join(undefined)} "
                               "is not a number")
        out.append((source.name, label, len(X), X.shape[1], *(stats[s] for s in STATISTICS)))
    return out


def _cells(row: tuple) -> list[str]:
    fixed = [str(v) for v in row[:4]]
    return fixed + [format_value(v, FORMATS[s]) for s, v in zip(STATISTICS, row[4:])]


def markdown(table: list[tuple]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|:---|:---|" + "---:|" * (len(COLUMNS) - 2)]
    return "\n".join(lines + ["| " + " | ".join(_cells(row)) + " |" for row in table]) + "\n"


def csv_text(table: list[tuple]) -> str:
    """Full precision, for further work."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([*row[:4], *(repr(float(v)) if isinstance(v, float) else v for v in row[4:])] for row in table)
    return out.getvalue()


def compare(names: list[str], out: Path | None = None) -> str:
    """The table for every named model, as markdown; also written to `out` (`.csv`: full precision; else markdown),
    as `cache.write_output` writes a file the user names. `out` is checked first and every model opened and profiled
    before anything is written, so an unusable one leaves no half-written file; a model named twice (by any of its
    names) gets its rows once."""
    if out is not None:
        writable(out)
    sources = {}
    for name in names:
        source = open_any(name)
        sources.setdefault((source.name, str(source.directory)), source)
    table = [row for source in sources.values() for row in rows(source)]
    text = markdown(table)
    if out is not None:
        write_output(out, (csv_text(table) if out.suffix == ".csv" else text).encode("utf-8"))
    return text
