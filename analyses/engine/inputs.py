"""What the engine hands an analysis besides the model's shape: the canonical tensors by name, and what their
source knows of them. The engine's `tensors.Tensors` is such an object; an analysis types its `tensors` as
`ModelInputs` when it asks the source more than a tensor (a plain `Mapping` of arrays otherwise)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import numpy as np


class ModelInputs(Protocol):
    """Read-only canonical tensors by name, with the source's account of them."""

    def __getitem__(self, name: str) -> np.ndarray: ...

    def __contains__(self, name: object) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def __len__(self) -> int: ...

    def origin(self, name: str) -> str:
        """In words, where a name's values come from (for a report's caveats)."""

    def replicate_token_subspace(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(S, V) of a second, independent run of the token PCA, where the token subspace comes from such files."""

    def tokenize(self, text: str, special_tokens: bool = False) -> np.ndarray:
        """The model's token ids for `text`; KeyError('tokenizer') when the checkpoint has no tokenizer."""

    def training_record(self) -> dict:
        """The provenance record of a model this project trained; KeyError('training_record') for any other."""

    def decode(self, ids) -> list[str]:
        """Each id as its text; KeyError('tokenizer') when the checkpoint has no tokenizer."""
