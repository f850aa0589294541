"""Training a small GPT-2 from scratch on CPU, and recording how its position matrix forms.

The model is transformers' `GPT2LMHeadModel` (pre-LayerNorm blocks, learned absolute positions, tanh-GELU MLP,
token embeddings tied to the head), so the saved checkpoint is GPT-2's layout and loads with `from_pretrained`.
Everything here is computation on arrays and torch modules; the engine's `training` module owns the files.

Determinism: one seed fixes the initialisation (torch) and the order of the training windows (numpy); torch runs
with a fixed thread count, deterministic algorithms and no dropout unless the recipe asks for embedding dropout
(drawn from torch's seeded generator), so a rerun on the same machine repeats the run bit for bit, and on another
CPU to within float32 rounding of the first steps (`tests/test_training.py`).

Cost. FLOPs per training token follow Kaplan et al. (2020): C = 6 N + 6 n_layer n_ctx d_model, with N the
parameters of every matrix product (the blocks and the tied head, not the position lookup); the run's throughput
is reported as a fraction of the machine's measured float32 matrix-multiply rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

END_OF_TEXT = "<|endoftext|>"
POSITIONS = ("learned", "sinusoidal")


@dataclass(frozen=True)
class Recipe:
    """Every hyper-parameter of a run. Weight decay is decoupled (AdamW) and applies to the matrices (2-D
    parameters, embeddings included), not to biases or LayerNorm gains; the learning rate rises linearly over
    `warmup` steps and falls along a cosine to zero at `steps`. `positions` is "learned" (a trained table drawn from
    N(0, position_init_std²)) or "sinusoidal" (Vaswani et al.'s table, its entries' RMS scaled to position_init_std,
    never trained: the fixed-positions control). `position_weight_decay` is the decay of the position table alone
    (None: `weight_decay`, as for every matrix); `embedding_dropout` is the dropout on the sum of token and position
    embeddings (GPT-2 trained with 0.1; 0 here by default)."""

    seed: int = 0
    vocab_size: int = 2048
    n_ctx: int = 256
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    batch: int = 16
    steps: int = 3000
    peak_lr: float = 2e-3
    warmup: int = 100
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.1
    clip: float = 1.0
    init_std: float = 0.02
    position_init_std: float = 0.005
    positions: str = "learned"
    position_weight_decay: float | None = None
    embedding_dropout: float = 0.0
    eval_every: int = 100
    eval_windows: int = 32
    snapshots: int = 20
    first_snapshot: int = 10
    threads: int = 2
    held_out: tuple[str, ...] = ("Ruth", "Jonah", "Philippians", "James")

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, got {self.positions!r}")
        if self.position_weight_decay is not None and not self.position_weight_decay >= 0:
            raise ValueError(f"position_weight_decay must be None or ≥ 0, got {self.position_weight_decay!r}")
        if not 0 <= self.embedding_dropout < 1:
            raise ValueError(f"embedding_dropout must be in [0, 1), got {self.embedding_dropout!r}")

    def as_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, recorded: dict) -> Recipe:
        """The recipe a record states (lists back to tuples); a field added since takes its default, which is the
        behaviour the record's run had."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items()})

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.n_ctx

    def snapshot_steps(self) -> np.ndarray:
        """Step 0 (the initialisation) and `snapshots` log-spaced steps from `first_snapshot` to the last."""
        spaced = np.round(np.geomspace(self.first_snapshot, self.steps, self.snapshots)).astype(np.int64)
        return np.unique(np.concatenate([[0], spaced]))

    def eval_steps(self) -> np.ndarray:
        return np.unique(np.concatenate([np.arange(0, self.steps + 1, self.eval_every), self.snapshot_steps()]))


def learning_rate(recipe: Recipe, step: int) -> float:
    """lr at optimiser step `step` (1-based): linear warm-up to the peak, then a cosine to zero."""
    if step <= recipe.warmup:
        return recipe.peak_lr * step / recipe.warmup
    progress = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
    return recipe.peak_lr * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2's pre-tokenisation) of `vocab_size` tokens, `<|endoftext|>` included,
    trained on `texts`; returned as a transformers `GPT2TokenizerFast`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(list(texts), trainer)
    return GPT2TokenizerFast(tokenizer_object=tokenizer, bos_token=END_OF_TEXT, eos_token=END_OF_TEXT,
                             unk_token=END_OF_TEXT, model_max_length=1 << 30)


def token_stream(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """The texts' token ids, each text followed by `<|endoftext|>`, as one int64 stream."""
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text)["input_ids"] + [eot]
    return np.asarray(ids, dtype=np.int64)


def eval_windows(stream: np.ndarray, recipe: Recipe) -> np.ndarray:
    """[eval_windows, n_ctx + 1] consecutive, non-overlapping windows spread evenly over the held-out stream."""
    span = recipe.n_ctx + 1
    available = len(stream) // span
    if available < recipe.eval_windows:
        raise ValueError(f"the held-out text has {available} windows of {span} tokens, fewer than {recipe.eval_windows}")
    chosen = np.linspace(0, available - 1, recipe.eval_windows).round().astype(np.int64)
    return np.stack([stream[i * span:(i + 1) * span] for i in chosen])


def build_model(recipe: Recipe, eot: int):
    """A freshly initialised GPT2LMHeadModel: N(0, init_std²) weights (the residual projections scaled by
    1/√(2 n_layers), as GPT-2 does), zero biases, unit LayerNorm gains, and positions N(0, position_init_std²)
    (GPT-2's own code used 0.01; the grid's σ runs compare it with this recipe's 0.005); with fixed sinusoidal
    positions, the sinusoidal table at that RMS, excluded from training (no gradient, so no update and no decay).
    Dropout only on the embeddings, and only where the recipe asks for it (`embedding_dropout`)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=recipe.vocab_size, n_positions=recipe.n_ctx, n_embd=recipe.d_model,
                        n_layer=recipe.n_layers, n_head=recipe.n_heads, resid_pdrop=0.0, embd_pdrop=recipe.embedding_dropout,
                        attn_pdrop=0.0, initializer_range=recipe.init_std, bos_token_id=eot, eos_token_id=eot,
                        tie_word_embeddings=True)
    torch.manual_seed(recipe.seed)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        model.transformer.wpe.weight.normal_(0.0, recipe.position_init_std)
    if recipe.positions == "sinusoidal":
        from analyses.toolkit.sinusoids import sinusoidal_table

        table = sinusoidal_table(recipe.n_ctx, recipe.d_model) * (recipe.position_init_std * math.sqrt(2))
        with torch.no_grad():
            model.transformer.wpe.weight.copy_(torch.from_numpy(table))
        model.transformer.wpe.weight.requires_grad_(False)
    return model


def optimiser(model, recipe: Recipe):
    """AdamW with decoupled decay on the matrices; the position table in a group of its own only when the recipe
    gives it its own decay (otherwise the groups, and so every update, are those of runs from before the option)."""
    import torch

    own = recipe.position_weight_decay is not None
    wpe = model.transformer.wpe.weight
    decay = [p for p in model.parameters() if p.dim() >= 2 and not (own and p is wpe)]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    if own:
        groups.append({"params": [wpe], "weight_decay": recipe.position_weight_decay})
    return torch.optim.AdamW(groups, lr=recipe.peak_lr, betas=recipe.betas)


def matmul_parameters(recipe: Recipe) -> int:
    """N of the FLOP count: each block's attention (4 d²) and MLP (8 d²) matrices and the tied head (V d)."""
    return recipe.n_layers * 12 * recipe.d_model ** 2 + recipe.vocab_size * recipe.d_model


def flops_per_token(recipe: Recipe) -> int:
    """Training FLOPs per token, 6 N + 6 n_layer n_ctx d_model (forward and backward, attention included)."""
    return 6 * matmul_parameters(recipe) + 6 * recipe.n_layers * recipe.n_ctx * recipe.d_model


def matmul_rate(threads: int, size: int = 1024, repeats: int = 20) -> float:
    """The machine's float32 matrix-multiply rate with torch on `threads` threads (FLOP/s), the best of
    `repeats` products of two size × size matrices."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


@dataclass
class Snapshot:
    """What is kept of the model at one step: the position table and the token embeddings' centred spectrum."""

    step: int
    W_pos: np.ndarray
    E_S: np.ndarray
    E_V: np.ndarray


def snapshot(model, step: int) -> Snapshot:
    from analyses.toolkit.linalg import centred_token_svd

    W_pos = model.transformer.wpe.weight.detach().cpu().numpy().copy()
    S, V = centred_token_svd(model.transformer.wte.weight.detach().cpu().numpy())
    return Snapshot(step, W_pos, S, V)


def evaluate(model, windows: np.ndarray) -> float:
    """Mean next-token cross-entropy (nats) over every position of the held-out windows."""
    import torch

    model.eval()
    with torch.no_grad():
        ids = torch.from_numpy(windows).to(next(model.parameters()).device)
        logits = model(ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    model.train()
    return float(loss)


def train(recipe: Recipe, train_stream: np.ndarray, held_out: np.ndarray, eot: int,
          progress: Callable[[int, float, float], None] | None = None, stop_after: int | None = None,
          device: str = "cpu") -> dict:
    """Train a model by `recipe` on windows drawn from `train_stream`; return the model and its history.

    Each step draws `batch` windows of n_ctx + 1 tokens at uniformly random offsets (numpy's default generator
    seeded with the recipe's seed). `stop_after` ends the run early (the reproduction test); `progress` is called
    after each step with (step, loss, tokens per second so far).
    """
    import torch

    torch.set_num_threads(recipe.threads)
    torch.use_deterministic_algorithms(True)
    model = build_model(recipe, eot).to(device)
    opt = optimiser(model, recipe)
    rng = np.random.default_rng(recipe.seed)
    windows = eval_windows(held_out, recipe)
    last = recipe.steps if stop_after is None else min(stop_after, recipe.steps)
    keep, evaluations = set(recipe.snapshot_steps().tolist()), set(recipe.eval_steps().tolist())
    snapshots, eval_log, train_loss = [], [], np.zeros(last, dtype=np.float64)
    span = recipe.n_ctx + 1
    started = time.perf_counter()
    model.train()
    for step in range(0, last + 1):
        if step in keep:
            snapshots.append(snapshot(model, step))
        if step in evaluations:
            eval_log.append((step, evaluate(model, windows)))
        if step == last:
            break
        offsets = rng.integers(0, len(train_stream) - span, size=recipe.batch)
        batch = torch.from_numpy(np.stack([train_stream[o:o + span] for o in offsets])).to(device)
        for group in opt.param_groups:
            group["lr"] = learning_rate(recipe, step + 1)
        logits = model(batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
        opt.step()
        train_loss[step] = loss.item()
        if progress is not None:
            elapsed = time.perf_counter() - started
            progress(step + 1, train_loss[step], (step + 1) * recipe.tokens_per_step / elapsed)
    return {"model": model.cpu(), "snapshots": snapshots, "train_loss": train_loss,
            "eval_steps": np.array([s for s, _ in eval_log], dtype=np.int64),
            "eval_loss": np.array([v for _, v in eval_log], dtype=np.float64),
            "seconds": time.perf_counter() - started}
