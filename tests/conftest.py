"""Shared fixtures: the real weights (when available) and tiny checkpoints the tests write themselves."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from analyses.engine import sources
from analyses.engine.cache import Cache, Outputs
from analyses.engine.sources import WEIGHTS_ENV, ModelSpec

TINY = {"d_model": 8, "n_ctx": 16, "n_layers": 2, "n_heads": 2, "d_vocab": 11}


class Given(dict):
    """Arrays handed to an analysis directly, as the engine's `ModelInputs`: no source, no second token PCA
    (unless given), no tokenizer."""

    def __init__(self, tensors, replicate=None, origin="given directly to the analysis"):
        super().__init__(tensors)
        self._replicate, self._origin = replicate, origin

    def origin(self, name: str) -> str:
        return self._origin.format(name=name)

    def replicate_token_subspace(self):
        return self._replicate

    def tokenize(self, text: str, special_tokens: bool = False):
        raise KeyError("tokenizer")

    def decode(self, ids):
        raise KeyError("tokenizer")

    def training_record(self) -> dict:
        raise KeyError("training_record")


def gpt2_state_dict(rng: np.random.Generator, d=8, n_ctx=16, n_layers=2, d_vocab=11,
                    with_wte: bool = True, with_mlp: bool = True) -> dict[str, np.ndarray]:
    """A random GPT-2-layout state dict (unit tests only: never a cited result)."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    state = {"wpe.weight": f(n_ctx, d), "ln_f.weight": f(d), "ln_f.bias": f(d)}
    if with_wte:
        state["wte.weight"] = f(d_vocab, d)
    for i in range(n_layers):
        state |= {f"h.{i}.attn.c_attn.weight": f(d, 3 * d), f"h.{i}.attn.c_attn.bias": f(3 * d),
                  f"h.{i}.attn.c_proj.weight": f(d, d), f"h.{i}.attn.c_proj.bias": f(d),
                  f"h.{i}.ln_1.weight": f(d), f"h.{i}.ln_1.bias": f(d), f"h.{i}.ln_2.weight": f(d),
                  f"h.{i}.ln_2.bias": f(d), f"h.{i}.mlp.c_fc.bias": f(4 * d), f"h.{i}.mlp.c_proj.bias": f(d)}
        if with_mlp:
            state |= {f"h.{i}.mlp.c_fc.weight": f(d, 4 * d), f"h.{i}.mlp.c_proj.weight": f(4 * d, d)}
    return state


def gpt2_config(d=8, n_ctx=16, n_layers=2, n_heads=2, d_vocab=11) -> dict:
    return {"model_type": "gpt2", "n_embd": d, "n_positions": n_ctx, "n_layer": n_layers, "n_head": n_heads,
            "vocab_size": d_vocab, "n_inner": None}


def make_repository(path: Path) -> Path:
    """An empty report repository (what `--root` must name): `_quarto.yml` with a `report/` folder beside it."""
    (path / "report").mkdir(parents=True, exist_ok=True)
    (path / "_quarto.yml").write_text("project: {type: book}\n")
    return path


def write_checkpoint(directory: Path, state: dict, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    return directory


TINY_SPEC = ModelSpec("tiny-gpt2", "tiny_gpt2", "test-org/tiny-gpt2", None,
                      {"family": "gpt2", "d_model": 8, "n_layers": 2, "n_heads": 2, "n_ctx": 16})
"""A tiny GPT-2-shaped model (hub repo test-org/tiny-gpt2) that tests register."""


@pytest.fixture
def tiny_model(monkeypatch):
    """Register TINY_SPEC, 'tiny-gpt2', for the test's duration."""
    monkeypatch.setitem(sources.MODELS, TINY_SPEC.name, TINY_SPEC)
    return TINY_SPEC


@pytest.fixture
def tiny_checkpoint(tmp_path, tiny_model) -> Path:
    """A partial tiny GPT-2 checkpoint (no wte, no MLP matrices), like the offline GPT-2 small."""
    rng = np.random.default_rng(0)
    return write_checkpoint(tmp_path / "tiny", gpt2_state_dict(rng, with_wte=False, with_mlp=False), gpt2_config())


def real_gpt2_weights() -> tuple[Path | None, str]:
    """(the real GPT-2 small directory from $GPT2_WEIGHTS, or None and why not)."""
    value = os.environ.get(WEIGHTS_ENV)
    if not value:
        return None, f"${WEIGHTS_ENV} is not set: no real GPT-2 weights to check against"
    path = Path(value)
    if not (path / "model.safetensors").is_file():
        return None, f"${WEIGHTS_ENV}={value} holds no model.safetensors"
    return path, ""


@pytest.fixture(scope="session")
def gpt2_weights() -> Path:
    """The real GPT-2 small directory from $GPT2_WEIGHTS; tests that need it skip, saying why, when unset."""
    path, why = real_gpt2_weights()
    if path is None:
        pytest.skip(why)
    return path


def pytest_configure(config):
    """The signal tests (test_hostile.py) need Ctrl-C deliverable: a shell that starts the suite in the background
    (`make test &`, nohup) ignores SIGINT, and ignored signals stay ignored in every process the tests start."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


BACKGROUND = ("test_rendered", "test_cached_numbers")
"""The modules whose tests wait for a job started at collection (the book's render; the perturbed recomputation of
every cached result), in the order they run, after every other test."""


BACKGROUND_NICENESS = 10
"""How much lower the background jobs run than the tests (`os.nice`). The tests are one chain of work: at a lower
priority the jobs take the core it leaves, and every core once it has finished. Measured on 2 cores (2026-11-27):
the suite took 17 min 44 s so, 18 min 26 s with the render at the tests' priority (it then slowed the chain), and
20 min 48 s before the recomputation ran in the background."""


def in_background() -> None:
    """A background job's `preexec_fn`: it runs at `BACKGROUND_NICENESS`."""
    os.nice(BACKGROUND_NICENESS)


def _waits_for(item) -> int:
    return next((i + 1 for i, name in enumerate(BACKGROUND) if item.module.__name__.endswith(name)), 0)


def pytest_collection_modifyitems(session, config, items):
    """The tests that wait for a background job run last, so that every other test runs while the jobs do."""
    items.sort(key=_waits_for)


def pytest_collection_finish(session):
    """As soon as the tests are collected, start the jobs that tests collected will wait for: the book's render
    (minutes, mostly on one core; it needs the real GPT-2 weights) and the perturbed recomputation (minutes, on every
    core). They run beside the tests that do not need them."""
    weights, _ = real_gpt2_weights()
    for item in session.items:
        module = item.module
        if module.__name__.endswith("test_rendered") and weights is not None:
            module.start_render(weights)
        if module.__name__.endswith("test_cached_numbers") and "perturbed_pass" in item.fixturenames:
            module.start_perturbed_pass()


def resealed(cache: Cache, scope: str, name: str, edit) -> None:
    """Edit an entry's files and write it back as the engine does (each output's sha256 and the manifest's seal
    recomputed), so that only a comparison with a recomputation can tell. `edit(manifest, files)` changes them in
    place."""
    entry = cache.entry(scope, name)
    manifest = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
    files = {f: (entry / f).read_bytes() for f in manifest["outputs"]}
    edit(manifest, files)
    manifest = {k: v for k, v in manifest.items() if k not in ("outputs", "seal")}
    cache.write(scope, name, manifest, Outputs(files))


INCLUDE = re.compile(r"\{\{<\s*include\s+(\S+)\s*>\}\}")
CACHED = "\x00"
"""Marks, where `expand` is asked to, the text included from the cache (tables and notes the analyses write)."""


def expand(path: Path, seen: tuple = (), mark_cached: bool = False) -> str:
    """A source's text with every {{< include >}} replaced by the included text, as the book prints it; with
    `mark_cached`, the text included from the report's cache between two CACHED marks."""
    def include(match: re.Match) -> str:
        target = (path.parent / match.group(1)).resolve()
        if not target.is_file() or target in seen:
            return ""
        text = expand(target, (*seen, path), mark_cached)
        return f"{CACHED}{text}{CACHED}" if mark_cached and "_cache" in target.parts else text
    return INCLUDE.sub(include, path.read_text(encoding="utf-8"))
