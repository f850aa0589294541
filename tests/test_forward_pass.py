"""The forward pass on text: the numpy forward passes against transformers' own (a tiny random GPT-2 written here,
and the real MiniLM), the signal-subspace, angle, MDS, share and ablation formulas on planted inputs with known
answers, and the whole chapter's pipeline on a tiny GPT-2 with W_E, MLP weights and GPT-2's real tokenizer
(random weights: shapes and statuses only, never a cited number)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import gpt2_config, gpt2_state_dict, make_repository, write_checkpoint

from analyses.engine import sources
from analyses.engine.cache import Cache
from analyses.engine.cli import main
from analyses.engine.registry import all_analyses
from analyses.engine.sources import ModelSpec, WeightSource, open_source
from analyses.forward_pass.logit_lens import decided_state, entropy, log_softmax
from analyses.forward_pass.position_ablation import ablate, sentence_embeddings
from analyses.forward_pass.position_share import chance_share, group_share, regression_share
from analyses.forward_pass.prompts import PROMPTS, PROMPT_WORDS, content_rows, prompt_ids, shuffled
from analyses.forward_pass.text_attention import overlap, uniform_pattern
from analyses.toolkit.forward import (final_norm, forward, hook_names, lm_logits, mean_pool, run_with_cache,
                                      run_with_hooks)
from analyses.toolkit.linalg import top_right_singular_vectors
from analyses.toolkit.signal import (classical_mds, mds_share, mean_angle, noise_edge, projection_distance,
                                     shared_rank, signal_subspace, union_rank)
from analyses.toolkit.subspaces import principal_angles, random_basis
from analyses.toolkit.text import PARAGRAPHS, TEXT, prefix, sentences, words

REPO = Path(__file__).resolve().parents[1]
GPT2_TOKENIZER = ("vocab.json", "merges.txt")
CHAPTER = ("forward_prompts", "signal_subspaces", "position_share", "text_attention", "position_ablation",
           "logit_lens")


def tiny_source(directory: Path, rng: np.random.Generator, **kwargs) -> WeightSource:
    """A tiny random GPT-2 (W_E and MLP included) read through the engine's own source."""
    size = {"d": 8, "n_ctx": 16, "n_layers": 2, "d_vocab": 11} | kwargs
    heads = size.pop("n_heads", 2)
    write_checkpoint(directory, gpt2_state_dict(rng, **size),
                     gpt2_config(size["d"], size["n_ctx"], size["n_layers"], heads, size["d_vocab"]))
    return WeightSource("tiny", "tiny", directory, "a test")


@pytest.fixture(scope="module")
def minilm():
    return open_source("minilm")


# ---------------------------------------------------------------------------
# The forward passes against transformers


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-10), ("float32", 1e-4)])
def test_gpt2_forward_matches_transformers(tmp_path, dtype, tol):
    torch = pytest.importorskip("torch")
    from transformers import GPT2LMHeadModel, GPT2Model

    rng = np.random.default_rng(0)
    src = tiny_source(tmp_path / "tiny", rng)
    ids = rng.integers(0, 11, size=(2, 13))
    patterns = [f"blocks.{layer}.attn.hook_pattern" for layer in range(src.shape.n_layers)]
    mine, cache = run_with_cache(src.tensors, src.shape, ids, patterns)
    model = GPT2Model.from_pretrained(str(src.directory), attn_implementation="eager").to(getattr(torch, dtype)).eval()
    with torch.no_grad():
        out = model(torch.tensor(ids), output_hidden_states=True, output_attentions=True)
    hidden = [h.numpy() for h in out.hidden_states]
    assert len(hidden) == mine.hidden.shape[0] == src.shape.n_layers + 1
    for layer in range(src.shape.n_layers):  # transformers' last state has ln_f applied; ours is the residual stream
        np.testing.assert_allclose(mine.hidden[layer], hidden[layer], atol=tol, rtol=tol)
    np.testing.assert_allclose(final_norm(src.tensors, src.shape, mine.hidden[-1]), hidden[-1], atol=tol, rtol=tol)
    for layer, A in enumerate(out.attentions):
        np.testing.assert_allclose(cache[patterns[layer]], A.numpy(), atol=tol)
    head = GPT2LMHeadModel.from_pretrained(str(src.directory), attn_implementation="eager").to(getattr(torch, dtype))
    with torch.no_grad():
        logits = head.eval()(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(lm_logits(src.tensors, src.shape, mine.hidden[-1]), logits, atol=10 * tol, rtol=tol)


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-10), ("float32", 2e-5)])
def test_bert_forward_matches_transformers_on_minilm(minilm, dtype, tol):
    torch = pytest.importorskip("torch")
    from transformers import BertModel

    ids = minilm.tensors.tokenize(prefix(60), special_tokens=True)
    patterns = [f"blocks.{layer}.attn.hook_pattern" for layer in range(minilm.shape.n_layers)]
    mine, cache = run_with_cache(minilm.tensors, minilm.shape, ids, patterns)
    model = BertModel.from_pretrained(str(minilm.directory), attn_implementation="eager").to(getattr(torch, dtype))
    with torch.no_grad():
        out = model.eval()(torch.tensor(ids[None]), output_hidden_states=True, output_attentions=True)
    assert len(out.hidden_states) == mine.hidden.shape[0] == 7
    for layer, h in enumerate(out.hidden_states):
        np.testing.assert_allclose(mine.hidden[layer], h.numpy(), atol=tol)
    for layer, A in enumerate(out.attentions):
        np.testing.assert_allclose(cache[patterns[layer]], A.numpy(), atol=tol)


def test_minilm_sentence_embeddings_match_sentence_transformers(minilm):
    """Mean pooling of the padded, masked batch gives what sentence-transformers' all-MiniLM-L6-v2 gives."""
    st = pytest.importorskip("sentence_transformers")
    docs = list(sentences()[:8])
    reference = st.SentenceTransformer(str(minilm.directory), device="cpu").encode(docs, convert_to_numpy=True)
    ids = [minilm.tensors.tokenize(d, special_tokens=True) for d in docs]
    P = np.asarray(minilm.tensors["W_pos"], dtype=np.float64)
    mine = sentence_embeddings(minilm.tensors, minilm.shape, ids, [P])[0]
    np.testing.assert_allclose(mine, reference, atol=2e-6)
    alone = mean_pool(forward(minilm.tensors, minilm.shape, ids[0]).hidden[-1])  # padding changes nothing
    np.testing.assert_allclose(mine[0], alone[0], atol=1e-12)


# ---------------------------------------------------------------------------
# Marchenko–Pastur edge and signal subspaces


@pytest.mark.parametrize("n, d", [(16, 384), (147, 384), (493, 384), (300, 300), (500, 768)])
def test_pure_noise_keeps_no_component(n, d):
    rng = np.random.default_rng(n + d)
    kept = [signal_subspace(2.5 * rng.standard_normal((n, d))).rank for _ in range(40)]
    assert sum(k > 0 for k in kept) <= 2  # the Tracy–Widom allowance: about one matrix in a hundred
    noise = 2.5 * np.random.default_rng(0).standard_normal((n, d))
    assert signal_subspace(noise).rank == 0
    assert signal_subspace(noise + 50.0 * np.random.default_rng(1).standard_normal(d)).rank == 0  # a shared offset is no signal


@pytest.mark.parametrize("n, d, r", [(147, 384, 3), (493, 384, 7), (16, 384, 2), (400, 120, 5)])
def test_noise_plus_planted_rank_r_keeps_exactly_r(n, d, r):
    rng = np.random.default_rng(r)
    for _ in range(10):
        U, V = random_basis(n, r, rng), random_basis(d, r, rng)
        strength = np.linspace(3.0, 2.0, r) * (np.sqrt(n) + np.sqrt(d))  # well above the edge σ(√n + √d)
        X = rng.standard_normal((n, d)) + U @ np.diag(strength) @ V.T
        sub = signal_subspace(X)
        assert sub.rank == r
        assert np.degrees(principal_angles(sub.basis, V)).max() < 45  # near the spike (random: ~88°), tilted by noise


def test_noise_level_is_estimated_from_the_median():
    rng = np.random.default_rng(3)
    for sigma in (0.1, 1.0, 7.0):
        s = np.linalg.svd(sigma * rng.standard_normal((400, 300)), compute_uv=False)
        edge = noise_edge(s, 400, 300)
        assert edge.sigma == pytest.approx(sigma, rel=0.02)
        assert edge.edge == pytest.approx(edge.sigma * (np.sqrt(400) + np.sqrt(300)))
        assert edge.edge < edge.threshold < 1.05 * edge.edge
        assert s.max() == pytest.approx(edge.edge, rel=0.03)  # the largest noise value sits at the edge


# ---------------------------------------------------------------------------
# Angles, distances, union, MDS


def test_identical_subspaces_have_angles_zero_and_orthogonal_ones_ninety():
    rng = np.random.default_rng(4)
    Q = random_basis(40, 12, rng)
    A, B = Q[:, :5], Q[:, 5:10]
    np.testing.assert_allclose(np.degrees(principal_angles(A, A @ random_basis(5, 5, rng))), 0, atol=1e-6)
    np.testing.assert_allclose(np.degrees(principal_angles(A, B)), 90, atol=1e-9)
    assert mean_angle(A, A @ random_basis(5, 5, rng)) == pytest.approx(0, abs=1e-6)
    assert mean_angle(A, B) == pytest.approx(90) and mean_angle(A, Q[:, :3]) == pytest.approx(0, abs=1e-6)
    assert 0 < mean_angle(A, random_basis(40, 7, rng)) < 90 and np.isnan(mean_angle(A, Q[:, :0]))
    assert projection_distance(A, A) == pytest.approx(0, abs=1e-7)
    assert projection_distance(A, B) == pytest.approx(np.sqrt(5))
    assert projection_distance(A, Q[:, :3]) == pytest.approx(1.0)  # (5 + 3)/2 − 3
    assert union_rank([A, A, B]) == 10 and union_rank([A, Q[:, :3]]) == 5
    tilted = np.cos(np.radians(5)) * Q[:, :1] + np.sin(np.radians(5)) * Q[:, 11:12]
    assert union_rank([Q[:, :1], tilted]) == 2  # the exact union counts two lines 5° apart as two directions
    assert shared_rank([A, A, A]) == 5 and shared_rank([A, B]) == 0 and shared_rank([A, A, B]) == 5


def test_mds_recovers_points_with_known_distances():
    rng = np.random.default_rng(5)
    points = rng.standard_normal((9, 2)) * [3.0, 1.0]
    distances = np.linalg.norm(points[:, None] - points[None], axis=-1)
    coords, eigenvalues = classical_mds(distances, 2)
    np.testing.assert_allclose(np.linalg.norm(coords[:, None] - coords[None], axis=-1), distances, atol=1e-10)
    assert mds_share(eigenvalues, 2) == pytest.approx(1.0)
    line = np.arange(5.0)[:, None]
    coords, eigenvalues = classical_mds(np.abs(line - line.T), 2)
    np.testing.assert_allclose(np.abs(coords[:, 0] - coords[0, 0]), np.arange(5.0), atol=1e-10)
    assert mds_share(eigenvalues, 1) == pytest.approx(1.0)


# ---------------------------------------------------------------------------
# Shares of variance


def test_position_only_input_has_position_share_one_and_position_free_zero():
    rng = np.random.default_rng(6)
    n, k, d = 120, 4, 30
    Z = rng.standard_normal((n, k))
    assert regression_share(Z @ rng.standard_normal((k, d)) + 5.0, Z) == pytest.approx(1.0)
    Zc = Z - Z.mean(axis=0)
    G = rng.standard_normal((n, d))
    free = G - Zc @ np.linalg.lstsq(Zc, G - G.mean(axis=0), rcond=None)[0]  # centred columns orthogonal to Z
    assert regression_share(free, Z) == pytest.approx(0.0, abs=1e-12)
    draws = [regression_share(G, rng.permutation(Z)) for _ in range(3000)]
    assert np.mean(draws) == pytest.approx(chance_share(k, n), rel=0.05)  # the stated chance level
    assert chance_share(k, n) == k / (n - 1)


def test_token_identity_share():
    rng = np.random.default_rng(7)
    groups = rng.integers(0, 9, size=200)
    means = rng.standard_normal((9, 16))
    assert group_share(means[groups], groups) == pytest.approx(1.0)
    G = rng.standard_normal((200, 16))
    for g in np.unique(groups):  # every group's mean at the grand mean: identity explains nothing
        G[groups == g] -= G[groups == g].mean(axis=0)
    assert group_share(G, groups) == pytest.approx(0.0, abs=1e-12)


def test_shuffles_keep_the_tokens_and_the_fixed_ends(minilm):
    rng = np.random.default_rng(8)
    ids = prompt_ids(minilm.tensors, minilm.shape, 40)
    out = shuffled(ids, minilm.shape, rng)
    assert out[0] == ids[0] and out[-1] == ids[-1] and sorted(out) == sorted(ids) and (out != ids).any()
    assert content_rows(10, minilm.shape).tolist() == list(range(1, 9))


# ---------------------------------------------------------------------------
# The hook points


def test_hooks_see_and_replace_activations_at_their_named_points(minilm):
    ids = prompt_ids(minilm.tensors, minilm.shape, 20)
    names = hook_names(minilm.shape)
    assert names[:5] == ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", "blocks.0.attn.hook_pattern",
                         "blocks.0.hook_resid_post"]
    plain, cache = run_with_cache(minilm.tensors, minilm.shape, ids, names)
    assert np.array_equal(cache["blocks.2.hook_resid_pre"], plain.hidden[2])
    assert np.array_equal(cache["blocks.2.hook_resid_post"], plain.hidden[3])
    assert cache["blocks.1.attn.hook_pattern"].shape == (1, minilm.shape.n_heads, len(ids), len(ids))
    zeroed = run_with_hooks(minilm.tensors, minilm.shape, ids, [("blocks.3.hook_resid_post", lambda x, name: 0 * x)])
    assert np.array_equal(zeroed.hidden[:4], plain.hidden[:4]) and not zeroed.hidden[4].any()
    with pytest.raises(ValueError, match="no hook point"):
        run_with_hooks(minilm.tensors, minilm.shape, ids, [("blocks.99.hook_resid_pre", lambda x, name: None)])


# ---------------------------------------------------------------------------
# The ablation


def test_ablating_a_zero_subspace_changes_nothing(minilm):
    P = np.asarray(minilm.tensors["W_pos"], dtype=np.float64)
    ablated = ablate(P, np.zeros((P.shape[1], 0)))
    assert np.array_equal(ablated, P)
    ids = prompt_ids(minilm.tensors, minilm.shape, 20)
    plain = forward(minilm.tensors, minilm.shape, ids)
    replaced = run_with_hooks(minilm.tensors, minilm.shape, ids, [("hook_pos_embed", lambda rows, name: ablated[:len(ids)])])
    assert np.array_equal(replaced.hidden, plain.hidden)


def test_ablation_removes_the_subspace_and_the_control_moves_the_same_amount():
    rng = np.random.default_rng(9)
    P = rng.standard_normal((50, 20)) @ np.diag(np.linspace(5, 0.1, 20))
    B = top_right_singular_vectors(P, 3)
    ablated = ablate(P, B)
    np.testing.assert_allclose(ablated @ B, 0, atol=1e-12)
    R = random_basis(20, 3, rng)
    control = ablate(P, B, R)
    np.testing.assert_allclose(np.linalg.norm(control - P, axis=1), np.linalg.norm(ablated - P, axis=1))
    np.testing.assert_allclose((control - P) - (control - P) @ R @ R.T, 0, atol=1e-12)  # the change lies in span R
    np.testing.assert_allclose((control - P) @ R, -(P @ B))  # the same coordinates, moved to R


def test_text_overlap_is_one_for_identical_patterns_and_uniform_rows_sum_to_one():
    A = uniform_pattern(6, causal=True)
    np.testing.assert_allclose(A.sum(axis=1), 1)
    assert overlap(A, A, np.arange(6)) == pytest.approx(1.0)
    B = np.eye(6)
    assert overlap(B, np.roll(B, 1, axis=1), np.arange(6)) == 0.0


# ---------------------------------------------------------------------------
# The text and the prompts


def test_text_is_long_enough_and_prompts_fit(minilm):
    assert len(words()) == sum(len(p.split()) for p in PARAGRAPHS) and prefix(len(words())) == TEXT
    assert len(minilm.tensors.tokenize(prefix(PROMPT_WORDS[-1]), special_tokens=True)) <= minilm.shape.n_ctx
    paragraph_tokens = sum(len(minilm.tensors.tokenize(p)) for p in PARAGRAPHS)
    assert paragraph_tokens >= 1024


def test_gpt2_prompt_lengths(gpt2_weights):
    tensors = open_source("gpt2").tensors
    lengths = [len(tensors.tokenize(prefix(n))) for n in PROMPT_WORDS]
    assert lengths == [15, 150, 500]
    assert sum(len(tensors.tokenize(p)) for p in PARAGRAPHS) >= 1024


# ---------------------------------------------------------------------------
# The whole chapter's pipeline on tiny GPT-2 checkpoints


TINY_LM = ModelSpec("tiny-gpt2-lm", "tiny_gpt2_lm", "test-org/tiny-gpt2-lm", None,
                    {"family": "gpt2", "d_model": 16, "n_layers": 2, "n_heads": 2, "n_ctx": 512})


def tiny_lm_checkpoint(directory: Path, gpt2_tokenizer: Path, full: bool = True) -> Path:
    rng = np.random.default_rng(10)
    state = gpt2_state_dict(rng, d=16, n_ctx=512, n_layers=2, d_vocab=50257, with_wte=full, with_mlp=full)
    write_checkpoint(directory, state, gpt2_config(16, 512, 2, 2, 50257))
    for name in GPT2_TOKENIZER:
        shutil.copy(gpt2_tokenizer / name, directory / name)
    return directory


@pytest.fixture
def tiny_lm(monkeypatch):
    monkeypatch.setitem(sources.MODELS, TINY_LM.name, TINY_LM)
    return TINY_LM


def test_whole_chapter_runs_on_a_full_tiny_gpt2(tmp_path, tiny_lm, gpt2_weights, capsys):
    weights = tiny_lm_checkpoint(tmp_path / "tiny", gpt2_weights)
    root = make_repository(tmp_path / "repo")
    assert main(["run", "--quiet", *CHAPTER, "--model", tiny_lm.name, "--weights", str(weights),
                 "--root", str(root)]) == 0
    out = capsys.readouterr().out
    cache = Cache.at(root)
    for name in CHAPTER:
        manifest = cache.manifest(tiny_lm.slug, name)
        assert manifest["status"] == "ok", (name, manifest.get("reason"))
        assert f"{tiny_lm.slug}/{name}" in out
    entry = lambda name: cache.entry(tiny_lm.slug, name)  # noqa: E731
    numbers = lambda name: json.loads((entry(name) / "numbers.json").read_text())  # noqa: E731
    prompts = numbers("forward_prompts")
    assert [prompts[f"{p}_tokens"]["value"] for p in PROMPTS] == [15, 150, 500]
    ids = (entry("forward_prompts") / "token_ids.csv").read_text().splitlines()
    assert len(ids) == 1 + 15 + 150 + 500 and ids[1] == "short,0,21129"  # "Anyone", id 21129 in GPT-2's vocabulary
    states = (entry("signal_subspaces") / "states.csv").read_text().splitlines()
    assert len(states) == 1 + 3 * 3  # three prompts, embeddings + two layers
    signal = numbers("signal_subspaces")
    assert signal["long_union_rank"]["value"] <= 16 and signal["long_possible"]["value"] == 16
    assert numbers("text_attention")["n_heads"]["value"] == 4
    assert numbers("text_attention")["layer0_check"]["value"] < 1e-12
    assert 0 <= numbers("position_share")["pos_emb"]["value"] <= 1
    ablation = numbers("position_ablation")
    assert ablation["k"]["value"] == 3 and "sentence_cos_top_mean" not in ablation  # no sentence embedding for GPT-2
    lens = numbers("logit_lens")
    assert lens["today_tokens"]["value"] == 5 and lens["einstein_tokens"]["value"] == 9
    assert len(lens["today_generated_ids"]["value"].split()) == 3
    assert (entry("logit_lens") / "top.csv").read_text().count("\n") == 11
    for name in CHAPTER[1:]:  # numbers and figures only: the chapter holds the prose
        assert not (entry(name) / "section.md").exists()
        figures = all_analyses()[name].figures
        assert figures and all((entry(name) / f"{f}.{ext}").is_file() for f in figures for ext in ("svg", "pdf"))
        assert not any(re.search(r"\bnan\b", n["text"]) for n in numbers(name).values())  # no missing value printed


def test_partial_tiny_gpt2_records_every_forward_analysis_as_skipped(tmp_path, tiny_lm, gpt2_weights):
    weights = tiny_lm_checkpoint(tmp_path / "tiny", gpt2_weights, full=False)
    root = make_repository(tmp_path / "repo")
    assert main(["run", "--quiet", *CHAPTER, "--model", tiny_lm.name, "--weights", str(weights),
                 "--root", str(root)]) == 0
    cache = Cache.at(root)
    assert cache.manifest(tiny_lm.slug, "forward_prompts")["status"] == "ok"  # the tokenizer alone suffices
    for name in CHAPTER[1:]:
        manifest = cache.manifest(tiny_lm.slug, name)
        assert manifest["status"] == "skipped"
        assert "`W_E`" in manifest["reason"] and f"python -m analyses run {name} --model {tiny_lm.name}" in manifest["reason"]
        assert (cache.entry(tiny_lm.slug, name) / "status.md").read_text().startswith("*")  # the one-line note


def test_committed_cache_skips_the_logit_lens_for_minilm_and_offline_gpt2():
    cache = Cache.at(REPO)
    minilm = cache.manifest("minilm", "logit_lens")
    assert minilm["status"] == "skipped" and "`lm_head`" in minilm["reason"]
    gpt2 = cache.manifest("gpt2", "logit_lens")
    assert gpt2["status"] == "skipped" and "`W_E`" in gpt2["reason"]
    for name in CHAPTER[1:-1]:
        assert cache.manifest("minilm", name)["status"] == "ok"
        assert cache.manifest("gpt2", name)["status"] == "skipped"


def test_the_tracy_widom_quantile_is_the_99th_percentile_of_f1():
    """F₁(s) = det(I − A_s) with A_s(x, y) = Ai(x + y + s) on L²(0, ∞) (Ferrari & Spohn 2005), by Gauss–Legendre
    quadrature (Bornemann 2010): the allowance's constant is its 99th percentile."""
    from scipy.special import airy

    from analyses.toolkit.signal import TW_Q99

    x, w = np.polynomial.legendre.leggauss(80)
    x, w = (x + 1) * 8.0, w * 8.0

    def f1(s: float) -> float:
        root = np.sqrt(w)
        return float(np.linalg.det(np.eye(x.size) - root[:, None] * airy(x[:, None] + x[None, :] + s)[0] * root[None, :]))

    assert f1(TW_Q99) == pytest.approx(0.99, abs=2e-5)
    assert f1(0.9793) == pytest.approx(0.95, abs=1e-4)  # a second tabulated value, as a check of the quadrature


def test_entropy_and_the_state_where_the_top_token_settles():
    assert entropy(np.zeros(50257)) == pytest.approx(np.log(50257))
    assert entropy(np.array([0.0, -np.inf, -np.inf])) == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(np.exp(log_softmax(np.array([1.0, 2.0, 3.0]))).sum(), 1.0)
    assert decided_state(np.array([5, 7, 5, 5])) == 2
    assert decided_state(np.array([5, 5, 5])) == 0 and decided_state(np.array([1, 2, 3])) == 2


@pytest.mark.parametrize("chapter, claim, key", [
    ("appendix-claims.qmd", "padova-union-rank", "kjv_gpt2.signal_subspaces.long_union_rank"),
    ("appendix-claims.qmd", "padova-distant", "kjv_gpt2.text_attention.n_farther_on_text"),
    ("appendix-claims.qmd", "padova-logit-lens", "kjv_gpt2.logit_lens.einstein_entropy_last"),
    ("appendix-claims.qmd", "simon-mlp", "kjv_gpt2.mlp_position_content.l0_e_k30"),
])
def test_where_gpt2_cannot_answer_the_trained_gpt2_gives_its_row(chapter, claim, key):
    """Issue 37, item 5: a claim that the offline GPT-2 cannot test, but the small GPT-2 trained here can, cites
    the trained model's measurement in its row."""
    text = (Path(__file__).resolve().parents[1] / "report" / chapter).read_text()
    row = next(line for line in text.splitlines()  # the claim's table row, not the summary's inline mention
               if line.startswith("|") and (f'claim="{claim}' in line or f' {claim}"' in line))
    assert f"{{{{< var {key} >}}}}" in row


def test_the_chapter_summary_cites_one_estimator_within_the_trained_length():
    """Issue 37, item 7: MiniLM's long prompt runs past the positions it was fine-tuned on, with another estimator
    than the corpus windows; the summary cites the corpus alone, and the prompt's section says why."""
    text = (Path(__file__).resolve().parents[1] / "report" / "forward-pass.qmd").read_text()
    summary = text.split("\n\n")[1]
    assert summary.startswith("**In short.**")
    assert "position_share." not in summary and "minilm.corpus_states.pos_last" in summary
    share_section = text[text.index("{#sec-forward-share}"):]
    assert "{{< var minilm.corpus_states.trained >}}" in share_section[:3000]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpt2s_gelu_is_torchs_tanh_gelu_in_the_inputs_precision_and_leaves_its_input_alone(dtype):
    """`gelu_tanh` against torch's GELU(approximate="tanh") in float64 (transformers' gelu_new): within a few ulps
    in the input's precision over a range that covers the MLP's pre-activations, in that dtype, the input unchanged."""
    import torch

    from analyses.toolkit.forward import gelu_tanh

    x = np.linspace(-12, 12, 100_001).astype(dtype)
    kept = x.copy()
    y = gelu_tanh(x)
    expected = torch.nn.functional.gelu(torch.from_numpy(x.astype(np.float64)), approximate="tanh").numpy()
    assert y.dtype == dtype and np.array_equal(x, kept)
    # 1 + tanh(…) cancels for negative x, so the error is a few ulps of x, not of the (tiny) result there
    assert np.all(np.abs(y - expected) <= 4 * np.finfo(dtype).eps * (np.abs(expected) + np.abs(x)))
