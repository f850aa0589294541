"""What a checkpoint holds: which canonical tensors are present, and how many parameters.

The offline GPT-2 checkpoint is partial (no token embeddings, no MLP matrices), so
every chapter's scope follows from this inventory: an analysis whose tensors are
absent is skipped, with the reason, rather than run on substitutes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table
from analyses.engine.sources import ModelShape
from analyses.engine.tensors import canonical_names

_LAYER = re.compile(r"^blocks\.\d+\.")


def group_name(name: str) -> str:
    """A canonical name with its layer index replaced by L (blocks.3.attn.W_Q -> blocks.L.attn.W_Q)."""
    return _LAYER.sub("blocks.L.", name)


def checkpoint_inventory(tensors: Mapping[str, np.ndarray], shape: ModelShape) -> Result:
    """Present/expected counts of tensors and parameters, and a table of tensor groups."""
    expected = canonical_names(shape)
    present = {name for name in expected if name in tensors}  # derived quantities are not tensors
    groups: dict[str, list[str]] = {}
    for name in expected:
        groups.setdefault(group_name(name), []).append(name)
    rows = []
    n_params = 0
    for group, names in groups.items():
        here = [n for n in names if n in present]
        sizes = [tensors[n].size for n in here]
        n_params += sum(sizes)
        example = "×".join(map(str, tensors[here[0]].shape)) if here else "-"
        rows.append((group, example, f"{len(here)}/{len(names)}", "yes" if len(here) == len(names) else
                     ("no" if not here else "partly")))
    absent = [g for g, _, _, state in rows if state != "yes"]
    numbers = {
        "n_tensors_expected": Number(len(expected), "d", "canonical tensors of a complete checkpoint"),
        "n_tensors_present": Number(len(present), "d", "canonical tensors this checkpoint holds"),
        "n_params_present": Number(int(n_params), ",d", "parameters in the tensors present"),
        "n_groups_absent": Number(len(absent), "d", "tensor groups missing in whole or part"),
    }
    return Result(numbers, {"tensor_groups": Table(("tensor", "shape", "present (layers)", "complete"), rows)})


register("checkpoint_inventory", "What the checkpoint holds", checkpoint_inventory, groups=("first report",))
