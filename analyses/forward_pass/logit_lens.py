"""The logit lens and greedy generation."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text
from analyses.engine.sources import ModelShape
from analyses.forward_pass.prompts import (FAMILY_NEEDS, LIBRARIES, NEEDS, PROMPTS, PROMPT_WORDS, decode, prompt_ids,
                                           shown, state_labels)
from analyses.toolkit import plotting
from analyses.toolkit.forward import forward, lm_logits


LENS_SHOWN = 5
"""Tokens listed per state in the lens table (the top `top_k` are listed for the last slides prompt)."""


SLIDES_PROMPTS = (("today", "Today we can go to"), ("einstein", "Einstein is best known for the theory of"))
"""The two prompts of @padova2025frog whose generation, logits and entropies the slides report (inputs only)."""


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def entropy(logits: np.ndarray) -> np.ndarray:
    """H = −Σ p log p in nats of softmax(logits) over the last axis."""
    logp = log_softmax(logits)
    p = np.exp(logp)
    return -np.where(p > 0, p * np.where(p > 0, logp, 0.0), 0.0).sum(axis=-1)


def decided_state(top1: np.ndarray) -> int:
    """The first state from which the top-1 token stays what it is after the last state."""
    same = top1 == top1[-1]
    return int(len(same) - np.argmin(same[::-1])) if not same.all() else 0


def logit_lens(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, prompt_words: tuple[int, ...],
               slides_prompts: tuple[tuple[str, str], ...], top_k: int, n_generate: int, chunk: int) -> Result:
    """For each prompt and each state ℓ, the next-token distribution softmax(ln_f(h_ℓ) W_Eᵀ) at the last position
    (the logit lens; after the last layer it is the model's own output): its entropy (nats; bits = nats / ln 2) and
    top-k tokens. At the last state also the mean entropy over all positions. Greedy generation of `n_generate`
    tokens from the slides' prompts and the short prompt, with the top-5 raw logits of every step."""
    W = np.asarray(tensors["W_E"], dtype=np.float64)
    top_table = None
    prompts = [(name, prompt_ids(tensors, shape, n_words)) for name, n_words in zip(PROMPTS, prompt_words)]
    prompts += [(name, tensors.tokenize(text, special_tokens=True)) for name, text in slides_prompts]
    labels = state_labels(shape.n_layers)
    numbers = {"top_k": Number(top_k, "d", "tokens listed per state"),
               "n_generate": Number(n_generate, "d", "tokens generated greedily")}
    lens_rows, generation_rows, arrays = [], [], {}
    for name, ids in prompts:
        H = forward(tensors, shape, ids).hidden[:, 0]  # [states, n, D]
        logits = lm_logits(tensors, shape, H[:, -1], W)  # [states, vocab]
        logp = log_softmax(logits)
        ent = entropy(logits)
        top = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
        last_all = np.concatenate([entropy(lm_logits(tensors, shape, H[-1, i:i + chunk], W))
                                   for i in range(0, len(ids), chunk)])
        decided = decided_state(top[:, 0])
        words_top = decode(tensors, top[:, 0])
        numbers |= {
            f"{name}_tokens": Number(len(ids), "d", f"tokens of the {name} prompt"),
            f"{name}_entropy_last": Number(ent[-1], ".3f", f"{name}: entropy (nats) of the next token after the last layer"),
            f"{name}_entropy_last_bits": Number(ent[-1] / np.log(2), ".3f", f"{name}: the same in bits"),
            f"{name}_entropy_first": Number(ent[0], ".2f", f"{name}: entropy (nats) read from the embeddings"),
            f"{name}_entropy_max": Number(ent.max(), ".2f", f"{name}: largest entropy (nats) over the states"),
            f"{name}_mean_entropy": Number(last_all.mean(), ".3f", f"{name}: mean over all positions of the entropy (nats) "
                                                                   "after the last layer"),
            f"{name}_mean_entropy_bits": Number(last_all.mean() / np.log(2), ".3f", f"{name}: the same in bits"),
            f"{name}_top1": Text(shown(words_top[-1]), f"{name}: the model's most likely next token"),
            f"{name}_top1_id": Number(int(top[-1, 0]), "d", f"{name}: its id"),
            f"{name}_top1_prob": Number(float(np.exp(logp[-1, top[-1, 0]])), ".4f", f"{name}: its probability"),
            f"{name}_decided": Text(labels[decided], f"{name}: the state from which that token stays on top"),
        }
        for s, label in enumerate(labels):
            words_k = decode(tensors, top[s, :LENS_SHOWN])
            lens_rows.append((name, label, ent[s], ent[s] / np.log(2), float(np.exp(logp[s, top[s, 0]])),
                              " ".join(shown(w) for w in words_k), " ".join(map(str, top[s, :LENS_SHOWN]))))
        arrays[f"{name}_entropy"] = ent
        if name == slides_prompts[-1][0]:  # the slides list the top ten of this prompt
            probs = np.exp(logp[-1, top[-1]])
            rows = tuple((j + 1, int(i), shown(w), float(p)) for j, (i, w, p) in
                         enumerate(zip(top[-1], decode(tensors, top[-1]), probs)))
            numbers |= {f"{name}_top{j + 1}_prob": Number(float(p), ".4f", f"{name}: probability of the {j + 1}th token")
                        for j, p in enumerate(probs)}
            numbers[f"{name}_top_sum"] = Number(float(probs.sum()), ".4f", f"{name}: probability of the top {top_k}")
            top_table = Table(("rank", "id", "token", "probability"), rows, formats={"probability": ".4f"})
    generate = [(name, ids) for name, ids in prompts if name in {n for n, _ in slides_prompts} | {PROMPTS[0]}]
    for name, ids in generate:
        out = list(ids)
        for step in range(1, n_generate + 1):
            h = forward(tensors, shape, np.array(out)).hidden[-1, 0, -1]
            logits = lm_logits(tensors, shape, h, W)
            order = np.argsort(-logits, kind="stable")[:5]
            words_5 = decode(tensors, order)
            generation_rows.append((name, step, shown(words_5[0]), int(order[0]),
                                    " ".join(f"{shown(w)} {logits[i]:.3f}" for w, i in zip(words_5, order)),
                                    " ".join(map(str, order))))
            for j, i in enumerate(order):
                numbers[f"{name}_step{step}_logit{j + 1}"] = Number(float(logits[i]), ".3f",
                                                                    f"{name}: logit of the {j + 1}th token at step {step}")
                numbers[f"{name}_step{step}_id{j + 1}"] = Number(int(i), "d", f"{name}: its id")
            out.append(int(order[0]))
        continuation = out[len(ids):]
        numbers[f"{name}_generated"] = Text(shown("".join(decode(tensors, continuation))),
                                            f"{name}: the greedy continuation")
        numbers[f"{name}_generated_ids"] = Text(" ".join(map(str, continuation)), f"{name}: its ids")
    tables = {
        "lens": Table(("prompt", "after", "entropy (nats)", "entropy (bits)", "p(top 1)", "top tokens", "ids"),
                      tuple(lens_rows), formats={"entropy (nats)": ".3f", "entropy (bits)": ".3f", "p(top 1)": ".4f"}),
        "generation": Table(("prompt", "step", "token", "id", "top-5 logits", "top-5 ids"), tuple(generation_rows)),
    }
    if top_table is not None:
        tables["top"] = top_table
    arrays["labels"] = np.array(labels)
    arrays["prompts"] = np.array([name for name, _ in prompts])
    return Result(numbers, tables, arrays)


def plot_entropy(result: Result, shape: ModelShape):
    """Entropy of the next-token distribution read from each state (the last state: the model's own)."""
    a = result.arrays
    labels = list(a["labels"])
    states = np.arange(len(labels))
    fig, ax = plotting.subplots(figsize=(6.4, 3.4), layout="constrained")
    for c, name in enumerate(a["prompts"]):
        ax.plot(states, a[f"{name}_entropy"], "o-", ms=3, color=f"C{c}", label=str(name))
    ax.set_xticks(states, ["E", *range(len(labels) - 1)])
    ax.set_xlabel("state read (E: embeddings, ℓ: after layer ℓ)")
    ax.set_ylabel("entropy of the next token (nats)")
    ax.legend(fontsize=8)
    return fig


register(
    "logit_lens", "The logit lens and greedy generation", logit_lens,
    # GPT-2's output head is W_E (tied) after ln_f; BERT has no LM head: the need `lm_head`, which no BERT checkpoint
    # of this pipeline provides, records the sentence encoder as skipped for that reason
    needs=NEEDS, family_needs={"gpt2": ("ln_final.w", "ln_final.b"), "bert": (*FAMILY_NEEDS["bert"], "lm_head")},
    libraries=LIBRARIES,
    params={"prompt_words": PROMPT_WORDS, "slides_prompts": SLIDES_PROMPTS, "top_k": 10, "n_generate": 3, "chunk": 64},
    figures={"entropy": plot_entropy},
)
