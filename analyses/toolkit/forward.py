"""The forward passes of GPT-2 and BERT, written in numpy from the canonical tensors, in float64.

GPT-2 (pre-LN, causal, GELU with the tanh approximation). With h⁰_n = e_{t_n} + p_n,

    a = LN₁(hˡ),  hˡ' = hˡ + Attn(a),  hˡ⁺¹ = hˡ' + MLP(LN₂(hˡ')),   MLP(x) = gelu_tanh(x W_in + b_in) W_out + b_out.

BERT (post-LN, bidirectional, GELU with erf), as in all-MiniLM-L6-v2. With h⁰_n = LN_emb(e_{t_n} + p_n + s_0)
(s_0 the first segment row),

    hˡ' = LN₁(hˡ + Attn(hˡ)),  hˡ⁺¹ = LN₂(hˡ' + MLP(hˡ')).

Attention of head h: A = softmax(q kᵀ / √d_head) over the keys a query may see (j ≤ i for GPT-2; every real,
unpadded key for BERT), q = x W_Q^h + b_Q^h, k = x W_K^h + b_K^h, and Attn(x) = Σ_h A (x W_V^h + b_V^h) W_O^h + b_O.

`forward` returns the hidden states after the embeddings and after each layer (L + 1 states; GPT-2's last one
*before* its final LayerNorm, so that every state is a point of the residual stream, whereas transformers'
GPT2Model applies ln_f to its last returned state). Activations are reached at named hook points, as in
TransformerLens: `hook_embed` (the token rows), `hook_pos_embed` (the position rows), and per layer ℓ
`blocks.ℓ.hook_resid_pre`, `blocks.ℓ.attn.hook_pattern` ([batch, heads, queries, keys]) and
`blocks.ℓ.hook_resid_post`. `run_with_hooks` calls hook(value, name) at the points named, and an array a hook
returns replaces the activation (the ablations replace the position rows, the position-only input the token
rows); `run_with_cache` keeps the activations named. Everything is computed in
float64 from the float32 weights (which float64 holds exactly), so results agree across machines far below
the suite's relative tolerance of 1e-6; `dtype=np.float32` runs the same pass in float32 (about 1e-6 relative,
for statistics over many sequences whose cited digits allow it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import erf

from analyses.toolkit.shape import Shape

Hook = Callable[[np.ndarray, str], "np.ndarray | None"]
"""Called as hook(value, name) at a named hook point; an array it returns replaces the activation."""


@dataclass(frozen=True)
class ForwardPass:
    """hidden: [L + 1, batch, n, D], the residual stream after the embeddings and after each layer."""

    hidden: np.ndarray


def hook_names(shape: Shape) -> list[str]:
    """Every hook point of a model, in the order a forward pass reaches them."""
    per_layer = ("hook_resid_pre", "attn.hook_pattern", "hook_resid_post")
    return ["hook_embed", "hook_pos_embed", *(f"blocks.{layer}.{point}" for layer in range(shape.n_layers)
                                              for point in per_layer)]


def hook_layer(name: str) -> int:
    """The layer of a per-layer hook point: 3 for `blocks.3.attn.hook_pattern`."""
    return int(name.split(".")[1])


def _hooked(hooks: Mapping[str, Sequence[Hook]], name: str, value: np.ndarray) -> np.ndarray:
    for hook in hooks.get(name, ()):
        out = hook(value, name)
        if out is not None:
            value = out
    return value


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """(x − mean) / sqrt(var + eps) · w + b over the last axis (biased variance, as torch.nn.LayerNorm)."""
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps) * w + b


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU: ½x(1 + tanh(√(2/π)(x + 0.044715x³))), computed in place of temporaries, and x³ as x·x·x
    (numpy's float32 power runs a per-element pow about 40 times slower; the two differ by an ulp)."""
    y = x * x
    y *= x
    y *= 0.044715
    y += x
    y *= float(np.sqrt(2.0 / np.pi))  # a Python float keeps float32 input in float32
    np.tanh(y, out=y)
    y += 1.0
    y *= x
    y *= 0.5
    return y


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """BERT's GELU: ½x(1 + erf(x/√2)) (computed in place of temporaries: the MLP's largest array)."""
    y = erf(x * float(np.sqrt(0.5)))  # a Python float keeps float32 input in float32
    y += 1.0
    y *= x
    y *= 0.5
    return y


def in_precision(weights: np.ndarray, dtype) -> np.ndarray:
    """`weights` in the pass's arithmetic precision: the one point where every weight enters a forward pass
    (so that a check of the numerical contract can perturb float32 passes at float32's rounding level)."""
    return np.asarray(weights, dtype=dtype)


def _f64(tensors: Mapping[str, np.ndarray], name: str, dtype=np.float64) -> np.ndarray:
    return in_precision(tensors[name], dtype)


def token_rows(tensors: Mapping[str, np.ndarray], ids: np.ndarray, dtype=np.float64) -> np.ndarray:
    """e_{t} for every id (any shape of ids), float64 (or `dtype`), reading only those rows of W_E."""
    ids = np.asarray(ids)
    return in_precision(tensors["W_E"][ids.ravel()], dtype).reshape(*ids.shape, -1)


def position_rows(tensors: Mapping[str, np.ndarray], n: int, dtype=np.float64) -> np.ndarray:
    """p_0 … p_{n−1}, float64 (or `dtype`) [n, D]."""
    return _f64(tensors, "W_pos", dtype)[:n]


def _as_batch(x: np.ndarray | None, batch: int, n: int, d: int, what: str, dtype=np.float64) -> np.ndarray | None:
    if x is None:
        return None
    x = np.asarray(x, dtype=dtype)
    if x.ndim == 2:
        x = np.broadcast_to(x, (batch, *x.shape))
    if x.shape != (batch, n, d):
        raise ValueError(f"{what} must have shape [{n}, {d}] or [{batch}, {n}, {d}], got {list(x.shape)}")
    return x


def embed(tensors: Mapping[str, np.ndarray], shape: Shape, ids: np.ndarray,
          hooks: Mapping[str, Sequence[Hook]] = {}, dtype=np.float64) -> np.ndarray:
    """h⁰ [batch, n, D] for ids [batch, n], in `dtype`. A hook at `hook_embed` or `hook_pos_embed` that returns
    an array ([n, D] or [batch, n, D]) replaces the token rows (zeros give the position-only input) or
    p_0 … p_{n−1}."""
    ids = np.atleast_2d(np.asarray(ids))
    batch, n = ids.shape
    if n > shape.n_ctx:
        raise ValueError(f"{n} tokens exceed the {shape.n_ctx} positions of {shape.name}")
    d = shape.d_model
    tok = token_rows(tensors, ids, dtype)
    replaced = _hooked(hooks, "hook_embed", tok)
    tok = tok if replaced is tok else _as_batch(replaced, batch, n, d, "hook_embed", dtype)
    pos = position_rows(tensors, n, dtype)[None]
    replaced = _hooked(hooks, "hook_pos_embed", pos)
    pos = pos if replaced is pos else _as_batch(replaced, batch, n, d, "hook_pos_embed", dtype)
    x = tok + pos
    if shape.family == "bert":
        x = x + _f64(tensors, "W_token_type", dtype)[0]
        x = layer_norm(x, _f64(tensors, "embed.ln.w", dtype), _f64(tensors, "embed.ln.b", dtype), shape.ln_eps)
    return x


def attention_layer(tensors: Mapping[str, np.ndarray], shape: Shape, layer: int, x: np.ndarray,
                    allowed: np.ndarray, hooks: Mapping[str, Sequence[Hook]] = {}) -> np.ndarray:
    """Σ_h A_h v_h W_O^h + b_O for input x [batch, n, D]; `allowed` [batch or 1, 1, n, n] marks the keys a
    query may attend to; the pattern A passes the hook point `blocks.{layer}.attn.hook_pattern`."""
    batch, n, d = x.shape
    h, dh = shape.n_heads, shape.d_head
    pre = f"blocks.{layer}.attn."
    dtype = x.dtype

    def project(kind: str) -> np.ndarray:
        W = _f64(tensors, f"{pre}W_{kind}", dtype).transpose(1, 0, 2).reshape(d, h * dh)
        out = x @ W + _f64(tensors, f"{pre}b_{kind}", dtype).reshape(h * dh)
        # contiguous heads: matmul then runs BLAS per head instead of its generic strided loop
        return np.ascontiguousarray(out.reshape(batch, n, h, dh).transpose(0, 2, 1, 3))

    q, k, v = project("Q"), project("K"), project("V")
    A = q @ k.transpose(0, 1, 3, 2)
    A /= np.sqrt(dh)
    if not allowed.all():
        A = np.where(allowed, A, -np.inf)
    A -= A.max(axis=-1, keepdims=True)
    np.exp(A, out=A)
    A /= A.sum(axis=-1, keepdims=True)
    A = _hooked(hooks, f"{pre}hook_pattern", A)
    z = (A @ v).transpose(0, 2, 1, 3).reshape(batch, n, h * dh)
    return z @ _f64(tensors, f"{pre}W_O", dtype).reshape(h * dh, d) + _f64(tensors, f"{pre}b_O", dtype)


def mlp(tensors: Mapping[str, np.ndarray], shape: Shape, layer: int, x: np.ndarray) -> np.ndarray:
    pre = f"blocks.{layer}.mlp."
    act = gelu_tanh if shape.family == "gpt2" else gelu_erf
    inner = act(x @ _f64(tensors, f"{pre}W_in", x.dtype) + _f64(tensors, f"{pre}b_in", x.dtype))
    return inner @ _f64(tensors, f"{pre}W_out", x.dtype) + _f64(tensors, f"{pre}b_out", x.dtype)


def allowed_keys(shape: Shape, n: int, key_mask: np.ndarray | None = None) -> np.ndarray:
    """[batch or 1, 1, n, n] booleans: causal for GPT-2; for BERT every key, or the unpadded ones of `key_mask`."""
    if shape.family == "gpt2":
        if key_mask is not None:
            raise ValueError("padding is implemented for BERT only (GPT-2's runs here are unpadded)")
        return np.tril(np.ones((n, n), dtype=bool))[None, None]
    if key_mask is None:
        return np.ones((1, 1, n, n), dtype=bool)
    key_mask = np.atleast_2d(np.asarray(key_mask, dtype=bool))
    return np.broadcast_to(key_mask[:, None, None, :], (key_mask.shape[0], 1, n, n))


def forward(tensors: Mapping[str, np.ndarray], shape: Shape, ids: np.ndarray, *,
            key_mask: np.ndarray | None = None, dtype=np.float64) -> ForwardPass:
    """Hidden states after the embeddings and after each layer, for token ids [n] or [batch, n]; `key_mask`
    [batch, n] marks BERT's real (unpadded) tokens; `dtype` is the arithmetic's precision (float64 by default)."""
    return run_with_hooks(tensors, shape, ids, (), key_mask=key_mask, dtype=dtype)


def run_with_hooks(tensors: Mapping[str, np.ndarray], shape: Shape, ids: np.ndarray,
                   fwd_hooks: Sequence[tuple[str, Hook]], *, key_mask: np.ndarray | None = None,
                   dtype=np.float64) -> ForwardPass:
    """`forward`, calling each (name, hook) of `fwd_hooks` at its hook point (see `hook_names`), in order."""
    known = set(hook_names(shape))
    hooks: dict[str, list[Hook]] = {}
    for name, hook in fwd_hooks:
        if name not in known:
            raise ValueError(f"{shape.name} has no hook point {name!r}")
        hooks.setdefault(name, []).append(hook)
    ids = np.atleast_2d(np.asarray(ids))
    x = embed(tensors, shape, ids, hooks, dtype)
    allowed = allowed_keys(shape, ids.shape[1], key_mask)
    states = []
    eps = shape.ln_eps
    for layer in range(shape.n_layers):
        x = _hooked(hooks, f"blocks.{layer}.hook_resid_pre", x)
        states.append(x)
        ln = lambda name, y: layer_norm(y, _f64(tensors, f"blocks.{layer}.{name}.w", dtype),  # noqa: E731
                                        _f64(tensors, f"blocks.{layer}.{name}.b", dtype), eps)
        if shape.family == "gpt2":
            x = x + attention_layer(tensors, shape, layer, ln("ln1", x), allowed, hooks)
            x = x + mlp(tensors, shape, layer, ln("ln2", x))
        else:
            x = ln("ln1", x + attention_layer(tensors, shape, layer, x, allowed, hooks))
            x = ln("ln2", x + mlp(tensors, shape, layer, x))
        x = _hooked(hooks, f"blocks.{layer}.hook_resid_post", x)
    states.append(x)
    return ForwardPass(np.stack(states))


def run_with_cache(tensors: Mapping[str, np.ndarray], shape: Shape, ids: np.ndarray, names: Sequence[str], *,
                   key_mask: np.ndarray | None = None, dtype=np.float64) -> tuple[ForwardPass, dict[str, np.ndarray]]:
    """`forward`, and the activations at the hook points `names`, by name (each pattern is [batch, heads, n, n]:
    memory grows as n²)."""
    cache: dict[str, np.ndarray] = {}

    def keep(value: np.ndarray, name: str) -> None:
        cache[name] = value

    return run_with_hooks(tensors, shape, ids, [(name, keep) for name in names], key_mask=key_mask,
                          dtype=dtype), cache


def final_norm(tensors: Mapping[str, np.ndarray], shape: Shape, h: np.ndarray) -> np.ndarray:
    """GPT-2's ln_f applied to residual-stream states h [..., D]."""
    return layer_norm(np.asarray(h, dtype=np.float64), _f64(tensors, "ln_final.w"), _f64(tensors, "ln_final.b"),
                      shape.ln_eps)


def lm_logits(tensors: Mapping[str, np.ndarray], shape: Shape, h: np.ndarray,
              unembed: np.ndarray | None = None) -> np.ndarray:
    """GPT-2's next-token logits ln_f(h) W_Eᵀ (the unembedding is tied to W_E) for states h [..., D].

    Applied to an intermediate state this is the logit lens. `unembed` ([d_vocab, D] float64) saves
    converting W_E again when called many times.
    """
    W = _f64(tensors, "W_E") if unembed is None else unembed
    return final_norm(tensors, shape, h) @ W.T


def mean_pool(last: np.ndarray, key_mask: np.ndarray | None = None) -> np.ndarray:
    """Sentence embeddings as sentence-transformers' all-MiniLM-L6-v2 makes them: the mean of the last hidden
    states over the real tokens ([CLS] and [SEP] included), divided by its norm. last: [batch, n, D]."""
    last = np.asarray(last, dtype=np.float64)
    mask = np.ones(last.shape[:2]) if key_mask is None else np.asarray(key_mask, dtype=np.float64)
    pooled = (last * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
