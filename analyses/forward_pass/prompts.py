"""The prompts cut from the project's text, their token ids, and what every forward-pass analysis shares."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from analyses.engine.inputs import ModelInputs
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text
from analyses.engine.sources import ModelShape
from analyses.toolkit.text import PARAGRAPHS, TITLE, prefix, sentences, words


PROMPTS = ("short", "medium", "long")


PROMPT_WORDS = (13, 131, 444)
"""Words of the text in each prompt: 15, 150 and 500 GPT-2 tokens (MiniLM: 16, 147 and 493 with [CLS], [SEP])."""


LAYER_NEEDS = ("attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "attn.b_Q", "attn.b_K", "attn.b_V", "attn.b_O",
               "ln1.w", "ln1.b", "ln2.w", "ln2.b", "mlp.W_in", "mlp.b_in", "mlp.W_out", "mlp.b_out")


NEEDS = ("tokenizer", "W_E", "W_pos", *(f"blocks.*.{name}" for name in LAYER_NEEDS))


FAMILY_NEEDS = {"bert": ("W_token_type", "embed.ln.w", "embed.ln.b")}
"""What `toolkit.forward` reads: every tensor of the model, the tokenizer, and BERT's embedding LayerNorm."""


LIBRARIES = ("transformers", "tokenizers")
"""The tokenizer's libraries: their versions decide the token ids."""


def prompt_ids(tensors, shape: ModelShape, n_words: int) -> np.ndarray:
    """The model's token ids of the text's first `n_words` words, with the model's own special tokens; for a causal
    model whose context is shorter, its first n_ctx tokens (it reads a prefix exactly as it reads the whole)."""
    ids = tensors.tokenize(prefix(n_words), special_tokens=True)
    if len(ids) > shape.n_ctx and shape.family == "gpt2":
        return ids[:shape.n_ctx]
    if len(ids) > shape.n_ctx:
        raise ValueError(f"the prompt of {n_words} words has {len(ids)} tokens; {shape.name} has {shape.n_ctx} positions")
    return ids


def content_rows(n: int, shape: ModelShape) -> np.ndarray:
    """The positions the statistics use: all but the first (and BERT's final [SEP])."""
    return np.arange(1, n - 1) if shape.family == "bert" else np.arange(1, n)


def shuffled(ids: np.ndarray, shape: ModelShape, rng: np.random.Generator) -> np.ndarray:
    """The same tokens with those on the content rows in a random order (first token, and BERT's [SEP], stay)."""
    out = np.array(ids)
    rows = content_rows(len(ids), shape)
    out[rows] = rng.permutation(out[rows])
    return out


def state_labels(n_layers: int) -> list[str]:
    """'embeddings', 'layer 0', …: what each hidden state comes after."""
    return ["embeddings", *(f"layer {layer}" for layer in range(n_layers))]


def decode(tensors: ModelInputs, ids) -> list[str]:
    """Each id as its text, through the model's tokenizer; the id itself where no tokenizer is at hand (ids are
    always cached beside the strings)."""
    try:
        return tensors.decode(ids)
    except KeyError:
        return [str(int(i)) for i in ids]


def shown(token: str) -> str:
    """A token for a markdown table or text: quoted and escaped (JSON), as code, with pipes and backticks made safe."""
    return "`" + json.dumps(token, ensure_ascii=False).replace("`", "'").replace("|", "¦") + "`"


def forward_prompts(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, prompt_words: tuple[int, ...]) -> Result:
    """The text, the prompts cut from it and their exact token ids (a table of every id). The text's length is
    counted paragraph by paragraph, without special tokens (the whole text exceeds MiniLM's 512 positions)."""
    all_ids = np.concatenate([tensors.tokenize(paragraph) for paragraph in PARAGRAPHS])
    numbers = {
        "title": Text(TITLE, "title of the project's text"),
        "text_words": Number(len(words()), "d", "words in the text"),
        "text_paragraphs": Number(len(PARAGRAPHS), "d", "paragraphs in the text"),
        "text_sentences": Number(len(sentences()), "d", "sentences in the text"),
        "text_tokens": Number(len(all_ids), "d", "tokens of the text's paragraphs, without special tokens"),
        "text_distinct": Number(len(np.unique(all_ids)), "d", "distinct token ids in the whole text"),
        "n_ctx": Number(shape.n_ctx, "d", "positions of the model"),
    }
    rows, id_rows = [], []
    for name, n_words in zip(PROMPTS, prompt_words):
        ids = prompt_ids(tensors, shape, n_words)
        tail = " ".join(words(prefix(n_words))[-5:])
        numbers |= {
            f"{name}_words": Number(n_words, "d", f"words in the {name} prompt"),
            f"{name}_tokens": Number(len(ids), "d", f"tokens (positions) of the {name} prompt"),
            f"{name}_distinct": Number(len(np.unique(ids)), "d", f"distinct token ids in the {name} prompt"),
            f"{name}_end": Text(f"… {tail}", f"the last words of the {name} prompt"),
        }
        rows.append((name, n_words, len(ids), len(np.unique(ids)), " ".join(map(str, ids[:3])) + " …", f"… {tail}"))
        id_rows += [(name, position, int(token)) for position, token in enumerate(ids)]
    tables = {
        "prompts": Table(("prompt", "words", "tokens", "distinct ids", "first ids", "ends with"), tuple(rows)),
        "token_ids": Table(("prompt", "position", "token id"), tuple(id_rows)),
    }
    return Result(numbers, tables)


register(
    "forward_prompts", "The project's text, the prompts and their token ids", forward_prompts,
    needs=("tokenizer",), libraries=LIBRARIES, params={"prompt_words": PROMPT_WORDS},
)
