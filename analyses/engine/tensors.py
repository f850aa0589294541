"""The named tensors of a checkpoint: canonical names, checked lazy loading, and the token subspace.

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
``blocks.L.ln2.w`` / ``.b`` [d_model]                     after (BERT, GPT-1) each sublayer
``blocks.L.mlp.W_in``      [d_model, d_mlp]               also ``b_in`` [d_mlp]
``blocks.L.mlp.W_out``     [d_mlp, d_model]               also ``b_out`` [d_model]
``ln_final.w`` / ``.b``    [d_model]                      GPT-2's final LayerNorm
``E_centred.S``            [k]                            top singular values of E_c
``E_centred.V``            [d_model, k]                   matching right singular vectors
``history.steps``          [S]                            snapshot steps of a training run
``history.W_pos``          [S, n_ctx, d_model]            the position table at each
``history.E_centred.S``    [S, d_model]                   E_c's singular values at each
``history.E_centred.V``    [S, d_model, d_model]          their singular vectors as ROWS
``history.train_loss``     [steps]                        loss of each training step
``history.eval_steps/loss`` [n_eval]                      held-out loss and its steps
=========================  =============================  ==========================

E_c = E − m 1ᵀ is the token-embedding matrix with each token's mean over its dimensions
removed (m_t = mean_j E_tj). Its top right singular vectors span the token subspace of
the residual stream. They are computed from `W_E` when the checkpoint holds it; otherwise
they are read from a rank-k PCA of E_c saved beside the checkpoint (`derived/`), which
`origin` says, since such a file holds only the top directions.

The `history.*` names exist only for a model this project trained (`engine.training`): they are read from
`history.safetensors` beside its checkpoint.

Every tensor is checked against the shape the config implies before it is used, and
for finite values when it is loaded. Weights are raw: nothing is centred or folded
(unlike TransformerLens's default `from_pretrained`), so statistics describe the
checkpoint as published.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import numpy as np

from analyses.engine.checkpoint import FLOATING, SafetensorsFile, WeightsError, plausible_or_raise
from analyses.engine.shapes import ModelShape
from analyses.toolkit.linalg import centred_token_svd, fix_signs


TOKENIZER = "tokenizer"
"""A need that is not a tensor: the model's tokenizer files."""


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
                   "vocab.txt")


DERIVED_TOKEN_PCA = ("derived/wte_pca500_a.npy", "derived/wte_pca500_b.npy")
"""Rank-k PCAs of the row-centred token embeddings (two independent runs) used when `W_E` is absent."""


TOKEN_SUBSPACE = ("E_centred.S", "E_centred.V")

HISTORY_FILE = "history.safetensors"
"""A trained model's history of training (engine.training writes it)."""
HISTORY_TOKEN_ROWS = "history.E_centred.V"
"""E_c's right singular vectors at each snapshot, one per ROW ([S, d_model, d_model]: Vᵀ, where `E_centred.V`
holds them as columns). The writer hands safetensors the eigensolver's column-major V, whose bytes safetensors
writes in memory order; the committed histories hold this layout."""
TRAINING_RECORD = "training_record"
"""A need that is not a tensor: the provenance record (`training.json`) of a model this project trained."""
RECORD_FILE = "training.json"
RECORD_PARTS = ("fingerprint", "corpus", "machine", "run", "final")
"""What a training record holds, each a JSON object (`engine.training` writes it)."""


def read_training_record(path: Path) -> dict:
    """A trained model's provenance record, checked: JSON holding every part of RECORD_PARTS (WeightsError else)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WeightsError(f"{path.parent} has no {RECORD_FILE}: train it with `python -m analyses train`") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WeightsError(f"{path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise WeightsError(f"{path} is nested too deeply to be a training record") from None
    if not isinstance(record, dict) or not all(isinstance(record.get(k), dict) for k in RECORD_PARTS):
        raise WeightsError(f"{path} is not a training record (it lacks {', '.join(RECORD_PARTS[:-1])} or "
                           f"{RECORD_PARTS[-1]})")
    return record


def _history_shapes(shape: ModelShape, snapshots: int, steps: int, evals: int) -> dict[str, tuple[int, ...]]:
    d = shape.d_model
    return {"history.steps": (snapshots,), "history.W_pos": (snapshots, shape.n_ctx, d),
            "history.E_centred.S": (snapshots, d), "history.E_centred.V": (snapshots, d, d),
            "history.train_loss": (steps,), "history.eval_steps": (evals,), "history.eval_loss": (evals,)}


def read_history_header(path: Path, shape: ModelShape) -> SafetensorsFile:
    """The history file, its every name present with the shape the config implies (WeightsError otherwise)."""
    file = SafetensorsFile(path)
    header = file.header
    try:
        sizes = (header["history.steps"]["shape"][0], header["history.train_loss"]["shape"][0],
                 header["history.eval_steps"]["shape"][0])
    except (KeyError, IndexError, TypeError):
        raise WeightsError(f"{path} is not a training history: it lacks history.steps, history.train_loss "
                           "or history.eval_steps") from None
    for name, want in _history_shapes(shape, *sizes).items():
        got = tuple(header[name]["shape"]) if name in header else None
        if got != want:
            raise WeightsError(f"{path}: {name} has shape {list(got) if got else 'none'}, the model implies {list(want)}")
    return file


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


def _openai_gpt_rules(shape: ModelShape) -> dict[str, Rule]:
    """Canonical name -> Rule for GPT-1 (`openai-gpt`): GPT-2's Conv1D blocks under its own names
    (`tokens_embed`, `positions_embed`), with `ln_1` after the attention and `ln_2` after the MLP, as BERT's
    ln1 and ln2 are (post-LN), and no final LayerNorm."""
    rules = {k: r for k, r in _gpt2_rules(shape).items() if not k.startswith("ln_final.")}
    rules["W_pos"] = Rule(("positions_embed.weight",), rules["W_pos"].shapes, _same)
    rules["W_E"] = Rule(("tokens_embed.weight",), rules["W_E"].shapes, _same)
    return rules


_RULES = {"gpt2": _gpt2_rules, "bert": _bert_rules, "openai-gpt": _openai_gpt_rules}


def canonical_names(shape: ModelShape) -> list[str]:
    """Every canonical tensor name a complete checkpoint of this family and shape holds."""
    return list(_RULES[shape.family](shape))


_RAW_PREFIXES = ("transformer.", "bert.", "model.")


def expand(pattern: str, n_layers: int) -> list[str]:
    """A need as canonical names: `blocks.*.` stands for every layer."""
    return [pattern.replace("*", str(layer)) for layer in range(n_layers)] if "*" in pattern else [pattern]


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


class Tensors(Mapping):
    """Read-only, lazy mapping from canonical names to float32 numpy arrays (derived quantities: float64).

    Only the tensors the checkpoint actually holds are keys; a missing one raises KeyError, so an
    analysis can never run on a substitute. Shapes are checked against the config when the mapping is
    made (from the file's header, reading no data); values are checked for NaN and inf when loaded.
    """

    def __init__(self, file: SafetensorsFile, shape: ModelShape, directory: Path | None = None):
        raw: dict[str, str] = {}
        for name in sorted(file.names()):
            short = next((name[len(p):] for p in _RAW_PREFIXES if name.startswith(p)), name)
            if short in raw:  # which copy to read would be a guess: refused, never chosen
                raise WeightsError(f"{file.path} holds {short!r} twice, as {raw[short]!r} and {name!r}: "
                                   "which one is the model's is not decidable")
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
        history = directory / HISTORY_FILE if directory else None
        self._history = read_history_header(history, shape) if history and history.is_file() else None
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
        if name in self._history_names():
            return f"`{HISTORY_FILE}`, the history this project recorded while training the model"
        raise KeyError(name)

    def replicate_token_subspace(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(S, V) of the second, independent PCA run beside the first, when the subspace comes from such files."""
        if self._derived_source is None:
            return None
        others = [f for f in self._derived_files if f.is_file() and f != self._derived_source]
        return read_token_pca(others[0], self._shape.d_model) if others else None

    def _history_names(self) -> tuple[str, ...]:
        return tuple(self._history.header) if self._history is not None else ()

    def _history_tensor(self, name: str) -> np.ndarray:
        if name not in self._loaded:
            data = self._history.load(name)
            self._loaded[name] = data if name.endswith("steps") else plausible_or_raise(
                np.asarray(data, dtype=np.float64 if "loss" in name else np.float32), f"{self._history.path}: {name}")
            self._loaded[name].flags.writeable = False
        return self._loaded[name]

    def __getitem__(self, name: str) -> np.ndarray:
        if name in TOKEN_SUBSPACE and self._has_token_subspace():
            return self._token_subspace()[name]
        if name in self._history_names():
            return self._history_tensor(name)
        rule = self._rules[name]
        out = np.ascontiguousarray(rule.convert(*(self._raw_tensor(r) for r in rule.raw)))
        out.flags.writeable = False
        return out

    def __iter__(self) -> Iterator[str]:
        yield from self._rules
        if self._has_token_subspace():
            yield from TOKEN_SUBSPACE
        yield from self._history_names()

    def __len__(self) -> int:
        return len(self._rules) + (len(TOKEN_SUBSPACE) if self._has_token_subspace() else 0) + len(
            self._history_names())

    def __contains__(self, name) -> bool:
        return name in self._rules or (name in TOKEN_SUBSPACE and self._has_token_subspace()) or (
            name in self._history_names()) or (name == TRAINING_RECORD and self._record_path() is not None)

    def _record_path(self) -> Path | None:
        path = self._directory / RECORD_FILE if self._directory is not None else None
        return path if path is not None and path.is_file() else None

    @cached_property
    def _record(self) -> dict:
        path = self._record_path()
        if path is None:
            raise KeyError(TRAINING_RECORD)
        return read_training_record(path)

    def training_record(self) -> dict:
        """The provenance record of a model this project trained (KeyError `training_record` for any other)."""
        return self._record

    def preload(self, needed: tuple[str, ...]) -> None:
        """Read now the raw tensors and the token subspace behind the names `needed` holds (those this
        checkpoint has), without converting them: processes forked afterwards share these copies."""
        for pattern in needed:
            for name in expand(pattern, self._shape.n_layers):
                if name in TOKEN_SUBSPACE and self._has_token_subspace():
                    self._token_subspace()
                elif name in self._history_names():
                    self._history_tensor(name)
                elif name in self._rules:
                    for raw in self._rules[name].raw:
                        self._raw_tensor(raw)

    def check(self, needed: tuple[str, ...]) -> None:
        """Read and check now (WeightsError naming the tensor) the raw tensors behind the names `needed` holds,
        `W_E` for the token subspace, computing nothing from them (`status` checks the weights as `run` would)."""
        for pattern in needed:
            for name in expand(pattern, self._shape.n_layers):
                read = "W_E" if name in TOKEN_SUBSPACE else name
                if name in self._history_names():
                    self._history_tensor(name)
                elif read in self._rules:
                    for raw in self._rules[read].raw:
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
        files = []
        if self._derived_source is not None and any(n in TOKEN_SUBSPACE for n in needed):
            files += [f for f in self._derived_files if f.is_file()]
        if self._history is not None and any(n.startswith("history.") for n in needed):
            files.append(self._history.path)
        if TRAINING_RECORD in needed and self._record_path() is not None:
            files.append(self._record_path())
        return files
