"""Models the report trains itself, as cached jobs: written whole into `models/<name>/`, retrained only on demand.

A trained model's directory holds what transformers' `save_pretrained` writes for a GPT-2 (`config.json`,
`model.safetensors`, the tokenizer files), so `GPT2LMHeadModel.from_pretrained` and this project's sources both
load it; `history.safetensors`, its training history (the position table and the token embeddings' centred
spectrum at each snapshot step, the loss curves); `training.json`, its provenance (recipe, corpus digest, code
digest, machine, throughput); and `SHA256SUMS` over every other file, which every load checks. A run on a
synthetic task (`toolkit.synthetic_tasks.SyntheticRecipe`) is written the same way by the same writer, without a
tokenizer (its ids are the task's), its history holding the held-out accuracy too, its record the task in place of
the corpus.

Staleness. The job's fingerprint is the recipe, the corpus file's SHA-256 and the digest of the code that trains
(`toolkit.training`, the corpus reader, the split and the history's layout; for a synthetic task, the task's module
in place of the corpus). `run` never trains: a stale or missing model is reported by
`status` and `train`, and only `python -m analyses train` (minutes; the recipe states the budget) replaces it.
The new directory is built beside the old one and swapped in at once, so an interrupted run leaves the old model.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

import analyses
from analyses.engine.checkpoint import check_committed, sha256_file
from analyses.engine.tensors import HISTORY_FILE, RECORD_FILE, read_training_record
from analyses.toolkit import corpus, sinusoids, synthetic_tasks, training
from analyses.toolkit.synthetic_tasks import SyntheticRecipe
from analyses.toolkit.training import Recipe

MODELS_DIR = Path(analyses.__file__).resolve().parent.parent / "models"
"""Where trained models are committed: `models/` beside the `analyses` package."""
SUMS = "SHA256SUMS"
TASK_ACCURACY = "history.eval_accuracy"
"""A synthetic run's held-out accuracy (share of scored positions whose argmax is the target) at each evaluation."""


def run_path(name: str) -> Path:
    """Where the committed run `name` lives (or will), unchecked: for training it and for asking whether it exists."""
    return MODELS_DIR / name


def model_dir(name: str) -> Path:
    """The directory of the committed run `name`, checked first against its SHA256SUMS (`checkpoint.check_committed`:
    a WeightsError naming the damaged file and the `git checkout` that restores it): the one way an analysis reads a
    committed run as data, so that nothing is computed from a run that is not the one committed."""
    directory = run_path(name)
    check_committed(name, directory)
    return directory


def run_inputs(runs: tuple[str, ...], files: tuple[str, ...]) -> dict[str, str]:
    """{'models/<run>/<file>': sha256} of the named files of each committed run (an analysis's data)."""
    out = {}
    for name in runs:
        for file in files:
            path = model_dir(name) / file
            if not path.is_file():
                raise ValueError(f"{path} is missing: python -m analyses train --model {name}")
            out[f"models/{name}/{file}"] = sha256_file(path)
    return out


def code_digest(recipe: Recipe) -> str:
    """sha256 over the source of what decides a run's output: the training toolkit, how the corpus is read
    and split, and how the history is written (not the rest of this module, which only files and reports); for a
    run with fixed sinusoidal positions, the sinusoidal table's code as well; for a synthetic task's run, the
    training toolkit, the task's module and the history's layout (no corpus)."""
    digest = hashlib.sha256(inspect.getsource(training).encode())
    if isinstance(recipe, SyntheticRecipe):
        for source in (synthetic_tasks, _history_tensors, _task_history_tensors):
            digest.update(b"\0" + inspect.getsource(source).encode())
        return digest.hexdigest()
    extra = (sinusoids.frequencies, sinusoids.encode, sinusoids.sinusoidal_table) \
        if recipe.positions != Recipe.positions else ()  # not the default, learned, table
    for function in (corpus.checked, corpus.read_books, corpus_split, _history_tensors, *extra):
        digest.update(b"\0" + inspect.getsource(function).encode())
    return digest.hexdigest()


EQUIVALENT_CODE = {
    "236722c458ca838d74ef865b56417023a680f6db3206414c027f6f5341988725": "1b4372810628b32802ec843e169d19263568a729feb6fcfeeff552690836aa9e",
    "d11daeb45623a647041ed9dcbc121bafe5063f2b30dee9ba5ffa93bb58defd4e": "74df6dfd7bf9a72bdecc4c11a3c8378b9d771351731d09565fc118b839388d3f",
    "1b4372810628b32802ec843e169d19263568a729feb6fcfeeff552690836aa9e": "4866dfcb1abcb3dcdc1e9cd8a9e4493fe4d93d449055ea197e7ddf9d9195905d",
}
"""{code digest: the earlier digest it is declared to train identically to}, for edits of the training code that
leave every earlier run's output unchanged, each declared once with its evidence; followed as a chain, so a record
matches any digest reached from the current one. The edits:
- adding `Recipe.positions` (the fixed sinusoidal control; 4866df… → 1b4372…): learned-position runs stay on the
  same path (the new branch is not taken; no random draw moves);
- adding `Recipe.position_weight_decay` and `Recipe.embedding_dropout` (1b4372… → 236722…, and for the fixed
  control's recipe 74df6d… → d11dae…): at their defaults the optimiser's groups and the model are those of before.
Evidence for each: every committed run, trained for its first steps by the code before and after the edit on one
machine (40 steps for the first edit, 10 for the second), gave the same losses, snapshots and weights bit for bit; `tests/test_training.py` reruns the first ten
steps of every run against its record on any machine. Any further edit has a new digest and makes every run stale
again."""


def equivalent_digests(current: str) -> list[str]:
    """The current digest and every earlier one it is declared to train identically to (the chain)."""
    chain = [current]
    while chain[-1] in EQUIVALENT_CODE and EQUIVALENT_CODE[chain[-1]] not in chain:
        chain.append(EQUIVALENT_CODE[chain[-1]])
    return chain


def fingerprint(recipe: Recipe) -> dict:
    """What decides the trained weights: the recipe, the corpus file (a text run's), the training code and the
    libraries' versions (read from their installed metadata: `status` and `run` check it, and must not import torch
    to do so). A synthetic task's recipe states its task whole, so its runs have no corpus part."""
    from importlib.metadata import version

    text = {} if isinstance(recipe, SyntheticRecipe) else {"corpus": corpus.corpus_inputs()}
    return {"recipe": recipe.as_dict(), **text, "code": code_digest(recipe),
            "libraries": {name: version(name) for name in ("torch", "transformers")}}


def _same(key: str, recorded, current, kind: type[Recipe]) -> bool:
    """Whether a recorded part of the fingerprint still holds: a recipe by value, read as the current recipe's
    `kind` (a field added since takes its default), the code by digest or by a declared equivalence, the rest as
    written."""
    if key == "recipe":
        if not isinstance(recorded, dict):
            return False
        try:
            return kind.from_dict(recorded) == kind.from_dict(current)
        except (TypeError, ValueError):
            return False
    if key == "code":
        return recorded is not None and recorded in equivalent_digests(current)
    return recorded == current


GPU_BUILDS = ("torch",)
"""Libraries whose version a run trained on a GPU is not compared by: that machine's CUDA build of torch, which no
CPU machine installs (and which the CPU pin cannot name). Such a run records the version that trained it; its first
ten steps are rerun on CPU against its record instead, on every machine (`tests/test_training.py`)."""


def state(name: str, recipe: Recipe) -> str:
    """'fresh', 'missing', or 'stale: <why>' for a trained model against its recipe and the current code; a committed
    run that is damaged is a WeightsError (`model_dir`), never an answer. A run trained on a GPU is compared without
    `GPU_BUILDS`."""
    if not run_path(name).exists():
        return "missing"
    record = read_training_record(model_dir(name) / RECORD_FILE)
    recorded, current = record["fingerprint"], fingerprint(recipe)
    if record.get("machine", {}).get("device", "cpu") != "cpu" and isinstance(recorded.get("libraries"), dict):
        recorded = {**recorded, "libraries": {k: v for k, v in recorded["libraries"].items() if k not in GPU_BUILDS}}
        current = {**current, "libraries": {k: v for k, v in current["libraries"].items() if k not in GPU_BUILDS}}
    changed = [key for key in current if not _same(key, recorded.get(key), current[key], type(recipe))]
    return "fresh" if not changed else f"stale: its {', '.join(changed)} changed"


def _machine(threads: int, device: str, gpu: str | None = None) -> dict:
    """The machine that trained a run: its CPU, cores and threads, the device (and the GPU's name where it was one),
    and the CPU's measured matmul rate."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "device": device, **({"gpu": gpu} if gpu else {}),
            "matmul_flops": training.matmul_rate(threads)}


def _history_tensors(result: dict) -> dict[str, np.ndarray]:
    snaps = result["snapshots"]
    return {"history.steps": np.array([s.step for s in snaps], dtype=np.int64),
            "history.W_pos": np.stack([s.W_pos for s in snaps]).astype(np.float32),
            "history.E_centred.S": np.stack([s.E_S for s in snaps]).astype(np.float32),
            "history.E_centred.V": np.stack([s.E_V for s in snaps]).astype(np.float32),
            "history.train_loss": result["train_loss"].astype(np.float32),
            "history.eval_steps": result["eval_steps"],
            "history.eval_loss": result["eval_loss"].astype(np.float32)}


def _task_history_tensors(result: dict) -> dict[str, np.ndarray]:
    """A synthetic run's history: a text run's, and the held-out accuracy at each evaluation step."""
    return {**_history_tensors(result), TASK_ACCURACY: result["eval_accuracy"].astype(np.float32)}


def corpus_split(recipe: Recipe) -> tuple[list[str], list[str], list[str]]:
    """(training books, their texts, held-out texts): every book of the corpus in canonical order, the
    recipe's held-out books set aside."""
    books = corpus.read_books()
    lacking = [b for b in recipe.held_out if b not in books]
    if lacking:
        raise corpus.CorpusError(f"the held-out books {', '.join(lacking)} are not in the corpus")
    names = [b for b in books if b not in recipe.held_out]
    return names, [books[b] for b in names], [books[b] for b in recipe.held_out]


def _progress_bar(name: str, recipe: Recipe, progress: bool):
    """(bar, report): a tqdm bar over the run's steps and the callback that advances it; (None, None) when quiet."""
    if not progress:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=recipe.steps, desc=f"training {name}", unit="step", file=sys.stderr)

    def report(step: int, loss: float, rate: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:,.0f}", refresh=False)

    return bar, report


def train(name: str, recipe: Recipe, progress: bool = True) -> Path:
    """Train `name` by `recipe` (on the corpus, or on its synthetic task) and swap the finished directory into
    `models/<name>`; returns the directory."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(recipe, SyntheticRecipe) or recipe.embedding_dropout > 0:
        device = "cpu"  # trained where its first steps are rerun, on CPU threads: a synthetic run's own code path, and
        # dropout's masks, which a GPU would draw from its own generator
    if device == "cuda":  # cuBLAS is deterministic only with a fixed workspace, which torch's deterministic mode demands
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    machine = _machine(recipe.threads, device, torch.cuda.get_device_name(0) if device == "cuda" else None)
    stated = fingerprint(recipe)  # before training: the source read now is the code that runs, not a later edit of it
    bar, report = _progress_bar(name, recipe, progress)
    if isinstance(recipe, SyntheticRecipe):
        tokenizer = None
        result = synthetic_tasks.train(recipe, progress=report)
        data = {"task": recipe.task, "generator": "numpy default_rng(seed); held out: default_rng([seed, "
                f"{synthetic_tasks.HELD_OUT_STREAM}])", "held_out_sequences": recipe.eval_windows}
        final = {"held_out_accuracy": float(result["eval_accuracy"][-1])}
    else:
        names, texts, held_texts = corpus_split(recipe)
        tokenizer = training.train_tokenizer(texts, recipe.vocab_size)
        stream, held_out = training.token_stream(tokenizer, texts), training.token_stream(tokenizer, held_texts)
        eot = tokenizer.convert_tokens_to_ids(training.END_OF_TEXT)
        result = training.train(recipe, stream, held_out, eot, progress=report, device=device)
        data = {"package": corpus.PACKAGE, "version": corpus.VERSION, "file": f"{corpus.MODULE}/{corpus.FILE}",
                "sha256": corpus.SHA256, "licence": corpus.LICENCE, "training_books": names,
                "held_out_books": list(recipe.held_out), "training_tokens": int(len(stream)),
                "held_out_tokens": int(len(held_out))}
        final = {}
    if bar is not None:
        bar.close()
    return _write_run(name, recipe, stated, result, tokenizer, data, final, machine)


def _write_run(name: str, recipe: Recipe, stated: dict, result: dict, tokenizer, data: dict, final: dict,
               machine: dict) -> Path:
    """Write a trained run's directory beside `models/<name>` (checkpoint, tokenizer where it has one, history,
    record with the fingerprint `stated` when training began, SHA256SUMS) and swap it in at once; an interruption
    leaves the old directory and nothing else. The fingerprint is taken at the start because `inspect.getsource`
    reads a function's lines from the file as it is now: an edit of the file during a run would shift them, and a
    digest taken at the end would hash the wrong text."""
    from safetensors.numpy import save_file

    final_dir = run_path(name)
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    new = Path(tempfile.mkdtemp(dir=MODELS_DIR, prefix=f".new-{name}."))
    try:
        result["model"].cpu().save_pretrained(new, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(new)
        history = _task_history_tensors(result) if isinstance(recipe, SyntheticRecipe) else _history_tensors(result)
        save_file(history, str(new / HISTORY_FILE))
        seconds = result["seconds"]
        tokens = recipe.steps * recipe.tokens_per_step
        flops = training.flops_per_token(recipe)
        files = {f: sha256_file(new / f) for f in sorted(p.name for p in new.iterdir() if p.is_file())}
        record = {
            "name": name, "fingerprint": stated, "corpus": data, "machine": machine,
            "run": {"seconds": seconds, "tokens": tokens, "tokens_per_second": tokens / seconds,
                    "flops_per_token": flops, "matmul_parameters": training.matmul_parameters(recipe),
                    "parameters": int(sum(p.numel() for p in result["model"].parameters())),
                    "utilisation": flops * tokens / seconds / machine["matmul_flops"]},
            "final": {"train_loss_last_100": float(np.mean(result["train_loss"][-100:])),
                      "held_out_loss": float(result["eval_loss"][-1]), **final},
            "files": files,
        }
        (new / RECORD_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        sums = dict(sorted({**files, RECORD_FILE: sha256_file(new / RECORD_FILE)}.items()))  # the record, hashed once
        (new / SUMS).write_text("".join(f"{digest}  {f}\n" for f, digest in sums.items()), encoding="utf-8")
        for path in new.iterdir():
            path.chmod(0o644)
        new.chmod(0o755)
        if final_dir.exists():
            old = Path(tempfile.mkdtemp(dir=MODELS_DIR, prefix=f".old-{name}."))
            final_dir.rename(old / name)
            new.rename(final_dir)
            shutil.rmtree(old)
        else:
            new.rename(final_dir)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    return final_dir
