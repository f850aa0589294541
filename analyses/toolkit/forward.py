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
GPT2Model applies ln_f to its last returned state) and, on request, the attention patterns. Hooks replace the
position rows (the ablations) or the token rows (zeros: the position-only input). Everything is computed in
float64 from the float32 weights (which float64 holds exactly), so results agree across machines far below
the suite's relative tolerance of 1e-6; `dtype=np.float32` runs the same pass in float32 (about 1e-6 relative,
for statistics over many sequences whose cited digits allow it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.special import erf

from analyses.engine.sources import ModelShape

AttentionHook = Callable[[int, np.ndarray], None]
"""Called as hook(layer, A) with each layer's attention, A of shape [batch, heads, queries, keys]."""


@dataclass(frozen=True)
class ForwardPass:
    """hidden: [L + 1, batch, n, D]; attention: [L, batch, heads, n, n] when kept, else None."""

    hidden: np.ndarray
    attention: np.ndarray | None = None


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """(x − mean) / sqrt(var + eps) · w + b over the last axis (biased variance, as torch.nn.LayerNorm)."""
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps) * w + b


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU: ½x(1 + tanh(√(2/π)(x + 0.044715x³)))."""
    return 0.5 * x * (1.0 + np.tanh(float(np.sqrt(2.0 / np.pi)) * (x + 0.044715 * x**3)))


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """BERT's GELU: ½x(1 + erf(x/√2)) (computed in place of temporaries: the MLP's largest array)."""
    y = erf(x * float(np.sqrt(0.5)))  # a Python float keeps float32 input in float32
    y += 1.0
    y *= x
    y *= 0.5
    return y


def _f64(tensors: Mapping[str, np.ndarray], name: str, dtype=np.float64) -> np.ndarray:
    return np.asarray(tensors[name], dtype=dtype)


def token_rows(tensors: Mapping[str, np.ndarray], ids: np.ndarray, dtype=np.float64) -> np.ndarray:
    """e_{t} for every id (any shape of ids), float64 (or `dtype`), reading only those rows of W_E."""
    ids = np.asarray(ids)
    return np.asarray(tensors["W_E"][ids.ravel()], dtype=dtype).reshape(*ids.shape, -1)


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


def embed(tensors: Mapping[str, np.ndarray], shape: ModelShape, ids: np.ndarray, *,
          positions: np.ndarray | None = None, tokens: np.ndarray | None = None, dtype=np.float64) -> np.ndarray:
    """h⁰ [batch, n, D] for ids [batch, n]; `positions` ([n, D] or [batch, n, D]) replaces p_0 … p_{n−1} and
    `tokens` (same shapes) replaces the token rows (zeros give the position-only input)."""
    ids = np.atleast_2d(np.asarray(ids))
    batch, n = ids.shape
    if n > shape.n_ctx:
        raise ValueError(f"{n} tokens exceed the {shape.n_ctx} positions of {shape.name}")
    d = shape.d_model
    tok = _as_batch(tokens, batch, n, d, "tokens", dtype)
    tok = token_rows(tensors, ids, dtype) if tok is None else tok
    pos = _as_batch(positions, batch, n, d, "positions", dtype)
    pos = position_rows(tensors, n, dtype)[None] if pos is None else pos
    x = tok + pos
    if shape.family == "bert":
        x = x + _f64(tensors, "W_token_type", dtype)[0]
        x = layer_norm(x, _f64(tensors, "embed.ln.w", dtype), _f64(tensors, "embed.ln.b", dtype), shape.ln_eps)
    return x


def attention_layer(tensors: Mapping[str, np.ndarray], shape: ModelShape, layer: int, x: np.ndarray,
                    allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σ_h A_h v_h W_O^h + b_O, A) for input x [batch, n, D]; `allowed` [batch or 1, 1, n, n] marks the keys a
    query may attend to."""
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
    z = (A @ v).transpose(0, 2, 1, 3).reshape(batch, n, h * dh)
    out = z @ _f64(tensors, f"{pre}W_O", dtype).reshape(h * dh, d) + _f64(tensors, f"{pre}b_O", dtype)
    return out, A


def mlp(tensors: Mapping[str, np.ndarray], shape: ModelShape, layer: int, x: np.ndarray) -> np.ndarray:
    pre = f"blocks.{layer}.mlp."
    act = gelu_tanh if shape.family == "gpt2" else gelu_erf
    inner = act(x @ _f64(tensors, f"{pre}W_in", x.dtype) + _f64(tensors, f"{pre}b_in", x.dtype))
    return inner @ _f64(tensors, f"{pre}W_out", x.dtype) + _f64(tensors, f"{pre}b_out", x.dtype)


def allowed_keys(shape: ModelShape, n: int, key_mask: np.ndarray | None = None) -> np.ndarray:
    """[batch or 1, 1, n, n] booleans: causal for GPT-2; for BERT every key, or the unpadded ones of `key_mask`."""
    if shape.family == "gpt2":
        if key_mask is not None:
            raise ValueError("padding is implemented for BERT only (GPT-2's runs here are unpadded)")
        return np.tril(np.ones((n, n), dtype=bool))[None, None]
    if key_mask is None:
        return np.ones((1, 1, n, n), dtype=bool)
    key_mask = np.atleast_2d(np.asarray(key_mask, dtype=bool))
    return np.broadcast_to(key_mask[:, None, None, :], (key_mask.shape[0], 1, n, n))


def forward(tensors: Mapping[str, np.ndarray], shape: ModelShape, ids: np.ndarray, *,
            positions: np.ndarray | None = None, tokens: np.ndarray | None = None,
            key_mask: np.ndarray | None = None, keep_attention: bool = False,
            attention_hook: AttentionHook | None = None, dtype=np.float64) -> ForwardPass:
    """Hidden states after the embeddings and after each layer, for token ids [n] or [batch, n].

    `positions`/`tokens` replace the position or token rows (see `embed`); `key_mask` [batch, n] marks BERT's
    real (unpadded) tokens; `attention_hook(layer, A)` sees every layer's attention (e.g. to reduce it
    without keeping it); `keep_attention` returns all of it ([L, batch, heads, n, n]: memory grows as n²);
    `dtype` is the arithmetic's precision (float64 by default).
    """
    ids = np.atleast_2d(np.asarray(ids))
    x = embed(tensors, shape, ids, positions=positions, tokens=tokens, dtype=dtype)
    allowed = allowed_keys(shape, ids.shape[1], key_mask)
    states, patterns = [x], []
    eps = shape.ln_eps
    for layer in range(shape.n_layers):
        ln = lambda name, y: layer_norm(y, _f64(tensors, f"blocks.{layer}.{name}.w", dtype),  # noqa: E731
                                        _f64(tensors, f"blocks.{layer}.{name}.b", dtype), eps)
        if shape.family == "gpt2":
            out, A = attention_layer(tensors, shape, layer, ln("ln1", x), allowed)
            x = x + out
            x = x + mlp(tensors, shape, layer, ln("ln2", x))
        else:
            out, A = attention_layer(tensors, shape, layer, x, allowed)
            x = ln("ln1", x + out)
            x = ln("ln2", x + mlp(tensors, shape, layer, x))
        if attention_hook is not None:
            attention_hook(layer, A)
        if keep_attention:
            patterns.append(A)
        states.append(x)
    return ForwardPass(np.stack(states), np.stack(patterns) if keep_attention else None)


def final_norm(tensors: Mapping[str, np.ndarray], shape: ModelShape, h: np.ndarray) -> np.ndarray:
    """GPT-2's ln_f applied to residual-stream states h [..., D]."""
    return layer_norm(np.asarray(h, dtype=np.float64), _f64(tensors, "ln_final.w"), _f64(tensors, "ln_final.b"),
                      shape.ln_eps)


def lm_logits(tensors: Mapping[str, np.ndarray], shape: ModelShape, h: np.ndarray,
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
