"""A model's shape: the dimensions an analysis needs to know, read from its config.json and checked."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from analyses.engine.checkpoint import WeightsError


@dataclass(frozen=True)
class ModelShape:
    """The dimensions an analysis needs to know, read from the model's config.json."""

    name: str
    family: str  # "gpt2", "openai-gpt" (GPT-1) or "bert"
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


ACTIVATIONS = {"gpt2": ("activation_function", "gelu_new", ("gelu_new", "gelu_pytorch_tanh")),
               "bert": ("hidden_act", "gelu", ("gelu",))}
"""Per family whose blocks the forward pass computes: the config key of the MLP's activation, its default, and the
values that name the function it computes (GPT-2's GELU with the tanh approximation, BERT's with erf); any other
is refused."""


def shape_from_config(name: str, config, path: Path | str = "config.json") -> ModelShape:
    """Read a GPT-2, GPT-1 (openai-gpt) or BERT config.json (already parsed) into a ModelShape, checking every key it uses."""
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
    elif kind == "openai-gpt":  # GPT-1: GPT-2's Conv1D layout, LayerNorm after each sublayer, no final one
        d = v("n_embd")
        shape = ModelShape(name, "openai-gpt", d, v("n_positions"), v("n_layer"), v("n_head"),
                           v("vocab_size", minimum=2), 4 * d, "post", 0,
                           v("layer_norm_epsilon", kind=float, default=1e-5))
        heads_key = "n_head"
    else:
        raise WeightsError(f"unsupported model_type {kind!r} in {path} of {name}; expected 'gpt2', 'openai-gpt' or 'bert'")
    key, default, implemented = ACTIVATIONS.get(shape.family, (None, None, None))
    if implemented is not None and config.get(key, default) not in implemented:
        raise WeightsError(f"{path}: {key} {json.dumps(config.get(key))} is not implemented by the forward pass, "
                           f"which computes {implemented[0]} for {shape.family}")
    if shape.d_model % shape.n_heads:
        raise WeightsError(f"{path}: the width {shape.d_model} is not divisible by {heads_key}={shape.n_heads}")
    return shape
