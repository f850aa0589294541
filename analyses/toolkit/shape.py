"""What the toolkit reads of a model's shape: a protocol that the engine's ModelShape (or any object with these
attributes) satisfies, so the toolkit needs no engine module."""

from __future__ import annotations

from typing import Protocol


class Shape(Protocol):
    """A model's dimensions, as the shared helpers read them."""

    @property
    def name(self) -> str: ...

    @property
    def family(self) -> str: ...  # "gpt2" or "bert"

    @property
    def d_model(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_layers(self) -> int: ...

    @property
    def n_heads(self) -> int: ...

    @property
    def d_head(self) -> int: ...

    @property
    def ln_eps(self) -> float: ...
