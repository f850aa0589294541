"""Sources of weights: canonical mapping, bad inputs, the hub path, the packaged MiniLM, the real GPT-2."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import gpt2_config, gpt2_state_dict, write_checkpoint
from safetensors.numpy import save_file

from analyses.engine.checkpoint import WeightsError, read_header, sha256_file
from analyses.engine.shapes import shape_from_config
from analyses.engine.sources import hub_source, local_source, model_spec, open_source, package_source


def test_gpt2_canonical_layout_matches_conv1d_slices(tmp_path, tiny_model):
    state = gpt2_state_dict(np.random.default_rng(1))
    src = local_source("tiny-gpt2", write_checkpoint(tmp_path / "m", state, gpt2_config()))
    t, d, h, dh = src.tensors, 8, 2, 4
    c_attn = state["h.1.attn.c_attn.weight"]
    for i, q in enumerate("QKV"):
        W = t[f"blocks.1.attn.W_{q}"]
        assert W.shape == (h, d, dh)
        # head j's map is columns [i*d + j*dh, i*d + (j+1)*dh) of c_attn
        for j in range(h):
            np.testing.assert_array_equal(W[j], c_attn[:, i * d + j * dh:i * d + (j + 1) * dh])
    np.testing.assert_array_equal(t["blocks.1.attn.W_O"].reshape(d, d), state["h.1.attn.c_proj.weight"])
    np.testing.assert_array_equal(t["blocks.0.attn.b_K"].ravel(), state["h.0.attn.c_attn.bias"][d:2 * d])
    np.testing.assert_array_equal(t["W_pos"], state["wpe.weight"])
    assert len(t) == len(set(t)) and "W_E" in t


def test_tensors_are_read_only_and_missing_ones_are_absent(tiny_checkpoint):
    src = local_source("tiny-gpt2", tiny_checkpoint)
    assert "W_E" not in src.tensors and "blocks.0.mlp.W_in" not in src.tensors
    with pytest.raises(KeyError):
        src.tensors["W_E"]
    with pytest.raises(ValueError):
        src.tensors["W_pos"][0, 0] = 1.0
    assert src.tensors.missing(("W_pos", "blocks.*.attn.W_Q", "W_E", "blocks.*.mlp.W_out")) == [
        "W_E", "blocks.*.mlp.W_out"]


def test_bert_canonical_layout_transposes_linear_weights(tmp_path, monkeypatch):
    from analyses.engine import sources

    spec = sources.ModelSpec("tiny-bert", "tiny_bert", None, None,
                             {"family": "bert", "d_model": 4, "n_layers": 1, "n_heads": 2, "n_ctx": 6})
    monkeypatch.setitem(sources.MODELS, spec.name, spec)
    rng = np.random.default_rng(2)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    state = {"embeddings.position_embeddings.weight": f(6, 4), "embeddings.word_embeddings.weight": f(9, 4),
             "encoder.layer.0.attention.self.query.weight": f(4, 4),
             "encoder.layer.0.attention.output.dense.weight": f(4, 4)}
    config = {"model_type": "bert", "hidden_size": 4, "max_position_embeddings": 6, "num_hidden_layers": 1,
              "num_attention_heads": 2, "vocab_size": 9, "intermediate_size": 16}
    src = local_source("tiny-bert", write_checkpoint(tmp_path / "b", state, config))
    x = rng.standard_normal(4)
    W_Q = src.tensors["blocks.0.attn.W_Q"]  # [head, d_model, d_head]: q_head = x @ W_Q[head]
    q_torch = state["encoder.layer.0.attention.self.query.weight"] @ x  # nn.Linear: W x
    np.testing.assert_allclose(np.concatenate([x @ W_Q[0], x @ W_Q[1]]), q_torch, rtol=1e-5)
    z = rng.standard_normal((2, 2))  # per-head outputs
    out = np.einsum("hd,hdm->m", z, src.tensors["blocks.0.attn.W_O"])
    np.testing.assert_allclose(out, state["encoder.layer.0.attention.output.dense.weight"] @ z.ravel(), rtol=1e-5)
    assert src.shape.norm == "post" and src.shape.d_head == 2


def test_truncated_file_gives_clear_error(tiny_checkpoint):
    path = tiny_checkpoint / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(WeightsError, match="truncated"):
        local_source("tiny-gpt2", tiny_checkpoint).tensors
    path.write_bytes(data[:5])
    with pytest.raises(WeightsError, match="truncated"):
        read_header(path)


def test_corrupted_header_gives_clear_error(tiny_checkpoint):
    path = tiny_checkpoint / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[8:20] = b"\xff" * 12
    path.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="corrupted"):
        read_header(path)


def test_pickle_file_is_not_accepted(tmp_path):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x80\x04\x95" + b"\x00" * 64)  # a pickle's opening bytes
    with pytest.raises(WeightsError):
        read_header(bad)


def test_checksum_mismatch_is_reported(tiny_checkpoint):
    (tiny_checkpoint / "SHA256SUMS").write_text("0" * 64 + "  model.safetensors\n")
    with pytest.raises(WeightsError, match="SHA256SUMS"):
        local_source("tiny-gpt2", tiny_checkpoint).fingerprint


def test_fingerprint_is_sha256_of_files(tiny_checkpoint):
    fp = local_source("tiny-gpt2", tiny_checkpoint).fingerprint
    assert fp["model.safetensors"] == sha256_file(tiny_checkpoint / "model.safetensors")
    assert set(fp) == {"model.safetensors", "config.json"}


def test_missing_directory_and_files(tmp_path, tiny_model):
    with pytest.raises(WeightsError, match="not found"):
        local_source("tiny-gpt2", tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightsError, match="config.json"):
        local_source("tiny-gpt2", tmp_path / "empty").shape


def test_unknown_model_name_lists_known_ones():
    with pytest.raises(WeightsError, match="unknown model 'gpt3'.*gpt2-medium"):
        model_spec("gpt3")


def test_wrong_model_for_directory(tiny_checkpoint):
    with pytest.raises(WeightsError, match="not gpt2-medium.*d_model is 8"):
        local_source("gpt2-medium", tiny_checkpoint).shape


def test_unsupported_model_type():
    with pytest.raises(WeightsError, match="unsupported model_type 'llama'"):
        shape_from_config("x", {"model_type": "llama"})


def _hub_layout(cache, repo, files, commit="0123456789abcdef0123456789abcdef01234567"):
    """Lay files out as huggingface_hub's cache does: snapshots/<commit>/<file> and refs/main."""
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    snap = root / "snapshots" / commit
    snap.mkdir(parents=True)
    for f in files:
        shutil.copy(f, snap / f.name)


def test_hub_source_reads_the_hf_cache_offline(tmp_path, tiny_checkpoint, monkeypatch):
    cache = tmp_path / "hf"
    _hub_layout(cache, "test-org/tiny-gpt2", [tiny_checkpoint / "config.json", tiny_checkpoint / "model.safetensors"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = hub_source("tiny-gpt2", cache_dir=cache)
    assert src.shape.d_model == 8
    np.testing.assert_array_equal(src.tensors["W_pos"], local_source("tiny-gpt2", tiny_checkpoint).tensors["W_pos"])
    assert "hub" in src.origin


def test_hub_source_offline_and_not_cached_says_what_to_do(tmp_path, tiny_model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(WeightsError, match=r"offline \(HF_HUB_OFFLINE.*--weights DIR"):
        hub_source("tiny-gpt2", cache_dir=tmp_path / "empty-cache")


def test_hub_source_refuses_packaged_model():
    with pytest.raises(WeightsError, match="not loaded from the hub"):
        hub_source("minilm")


def test_env_variable_selects_local_gpt2(tmp_path, monkeypatch):
    monkeypatch.setenv("GPT2_WEIGHTS", str(tmp_path / "absent"))
    with pytest.raises(WeightsError, match="not found"):
        open_source("gpt2")


def test_minilm_from_package():
    src = package_source("minilm")
    shape = src.shape
    assert (shape.family, shape.d_model, shape.n_ctx, shape.n_layers, shape.n_heads) == ("bert", 384, 512, 6, 12)
    assert src.tensors["W_pos"].shape == (512, 384)
    assert src.tensors["blocks.5.attn.W_Q"].shape == (12, 384, 32)
    assert src.tensors.missing(("W_E", "blocks.*.mlp.W_in")) == []


def test_real_gpt2_matches_published_fingerprints(gpt2_weights):
    """Values the weights' README publishes: checksums, one raw entry, tokenizer ids."""
    src = open_source("gpt2", gpt2_weights)
    sums = dict(reversed(line.split()) for line in (gpt2_weights / "SHA256SUMS").read_text().splitlines())
    assert src.fingerprint["model.safetensors"] == sums["model.safetensors"]
    # h.0.attn.c_attn.weight[0, :3] = W_Q of layer 0, head 0, input dim 0, first three head dims
    np.testing.assert_allclose(src.tensors["blocks.0.attn.W_Q"][0, 0, :3], [-0.4738, -0.2614, -0.0978], atol=5e-5)
    assert src.tensors["W_pos"].shape == (1024, 768)
    assert "W_E" not in src.tensors
    assert src.tensors.tokenize("Hello my name is Adam").tolist() == [15496, 616, 1438, 318, 7244]
    assert src.missing(("tokenizer",)) == []


def test_config_with_bad_json(tiny_checkpoint):
    (tiny_checkpoint / "config.json").write_text("{not json")
    with pytest.raises(WeightsError, match="not valid JSON"):
        local_source("tiny-gpt2", tiny_checkpoint).shape


def test_header_entry_with_wrong_size_is_corruption(tmp_path):
    path = tmp_path / "x.safetensors"
    save_file({"a": np.zeros((2, 2), np.float32)}, str(path))
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header["a"]["shape"] = [3, 3]
    raw = json.dumps(header).encode().ljust(n)
    path.write_bytes(data[:8] + raw + data[8 + n:])
    with pytest.raises(WeightsError, match="corrupted"):
        read_header(path)


# ---------------------------------------------------------------------------
# Validation: shapes implied by the config, finite values, well-formed configs


@pytest.mark.parametrize("wpe_shape", [(16, 4), (12, 8)])
def test_tensor_of_the_wrong_shape_is_refused(tmp_path, tiny_model, wpe_shape):
    state = gpt2_state_dict(np.random.default_rng(0), with_wte=False, with_mlp=False)
    state["wpe.weight"] = np.ones(wpe_shape, np.float32)
    src = local_source("tiny-gpt2", write_checkpoint(tmp_path / "m", state, gpt2_config()))
    with pytest.raises(WeightsError, match=rf"'wpe.weight' has shape \[{wpe_shape[0]}, {wpe_shape[1]}\], "
                                           r"but the config of tiny-gpt2 implies \[16, 8\]"):
        src.tensors


def test_attention_matrix_of_the_wrong_shape_is_refused(tmp_path, tiny_model):
    state = gpt2_state_dict(np.random.default_rng(0), with_wte=False, with_mlp=False)
    state["h.1.attn.c_attn.weight"] = np.ones((8, 16), np.float32)
    src = local_source("tiny-gpt2", write_checkpoint(tmp_path / "m", state, gpt2_config()))
    with pytest.raises(WeightsError, match=r"'h.1.attn.c_attn.weight' has shape \[8, 16\].*implies \[8, 24\]"):
        src.tensors


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_when_loaded(tmp_path, tiny_model, bad):
    state = gpt2_state_dict(np.random.default_rng(0), with_wte=False, with_mlp=False)
    state["wpe.weight"][3, 5] = bad
    src = local_source("tiny-gpt2", write_checkpoint(tmp_path / "m", state, gpt2_config()))
    np.testing.assert_array_equal(src.tensors["blocks.0.ln1.w"], state["h.0.ln_1.weight"])  # others still load
    with pytest.raises(WeightsError, match=r"tensor 'wpe.weight' holds 1 non-finite values \(NaN or inf\)"):
        src.tensors["W_pos"]


@pytest.mark.parametrize("config, message", [
    ([1, 2, 3], "must hold a JSON object, not a list"),
    ({k: v for k, v in gpt2_config().items() if k != "n_embd"}, "lacks the key 'n_embd'"),
    ({**gpt2_config(), "n_embd": "8"}, "'n_embd' must be a positive integer within [1, 1e+07], got \"8\""),
    ({**gpt2_config(), "n_head": 0}, "'n_head' must be a positive integer within [1, 1e+07], got 0"),
    ({**gpt2_config(), "n_head": 3}, "not divisible by n_head=3"),
    ({**gpt2_config(), "layer_norm_epsilon": "tiny"}, "'layer_norm_epsilon' must be a positive number"),
])
def test_bad_config_is_a_weights_error_naming_file_and_key(tiny_checkpoint, config, message):
    (tiny_checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match="config.json") as error:
        local_source("tiny-gpt2", tiny_checkpoint).shape
    assert message in str(error.value)


def test_config_epsilon_and_defaults_are_read():
    shape = shape_from_config("x", {**gpt2_config(), "layer_norm_epsilon": 1e-6})
    assert (shape.ln_eps, shape.d_mlp, shape.n_token_types) == (1e-6, 32, 0)
    bert = shape_from_config("y", {"model_type": "bert", "hidden_size": 4, "max_position_embeddings": 6,
                                   "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 9,
                                   "intermediate_size": 16})
    assert (bert.ln_eps, bert.n_token_types) == (1e-12, 2)  # transformers' BertConfig defaults


# ---------------------------------------------------------------------------
# The token subspace: from W_E when present, else from a saved PCA of it


def _sklearn_style_pca(E: np.ndarray, k: int) -> np.ndarray:
    """What `PCA(k).fit_transform(E.T)` returns: the dimensions are samples and each token (a feature) is
    centred over them, so T = U_k S_k for E_cᵀ = U S Vᵀ, E_c = E − (row means)."""
    X = E.T - E.T.mean(axis=0)
    U, S, _ = np.linalg.svd(X, full_matrices=False)
    return (U[:, :k] * S[:k]).astype(np.float32)


def test_token_subspace_from_w_e_and_from_a_derived_pca_agree(tmp_path, tiny_model):
    rng = np.random.default_rng(5)
    state = gpt2_state_dict(rng, d_vocab=11, with_wte=True, with_mlp=False)
    state["wte.weight"] = (rng.standard_normal((11, 8)) * np.linspace(3, 0.2, 8)).astype(np.float32)
    full = local_source("tiny-gpt2", write_checkpoint(tmp_path / "full", state, gpt2_config()))
    S, V = full.tensors["E_centred.S"], full.tensors["E_centred.V"]
    assert "computed from the full token embeddings" in full.tensors.origin("E_centred.V")
    np.testing.assert_allclose(V.T @ V, np.eye(8), atol=1e-10)
    E = state["wte.weight"].astype(np.float64)
    centred = E - E.mean(axis=1, keepdims=True)
    # through the Gram matrix: exact to about √ε·σ_max (centring makes the last value exactly zero)
    np.testing.assert_allclose(S, np.linalg.svd(centred, compute_uv=False), rtol=1e-10, atol=1e-6)

    partial = {k: v for k, v in state.items() if k != "wte.weight"}
    directory = write_checkpoint(tmp_path / "partial", partial, gpt2_config())
    (directory / "derived").mkdir()
    np.save(directory / "derived" / "wte_pca500_a.npy", _sklearn_style_pca(E, 5))
    derived = local_source("tiny-gpt2", directory)
    assert "W_E" not in derived.tensors and derived.tensors.missing(("E_centred.V",)) == []
    assert "rank-5 PCA" in derived.tensors.origin("E_centred.V")
    np.testing.assert_allclose(derived.tensors["E_centred.S"], S[:5], rtol=1e-5)
    np.testing.assert_allclose(derived.tensors["E_centred.V"], V[:, :5], atol=1e-5)  # same sign convention
    assert "derived/wte_pca500_a.npy" in derived.fingerprint_for(("E_centred.V",))
    assert "derived/wte_pca500_a.npy" not in derived.fingerprint_for(("W_pos",))


def test_token_subspace_is_missing_without_w_e_or_a_derived_file(tiny_checkpoint):
    src = local_source("tiny-gpt2", tiny_checkpoint)
    assert src.missing(("E_centred.V", "W_pos")) == ["E_centred.V"]
    assert "E_centred.V" not in src.tensors


def test_a_derived_file_that_is_not_a_pca_is_refused(tiny_checkpoint):
    (tiny_checkpoint / "derived").mkdir()
    not_orthogonal = np.ones((8, 3), np.float32) + np.arange(8, dtype=np.float32)[:, None]  # rows differ
    np.save(tiny_checkpoint / "derived" / "wte_pca500_a.npy", not_orthogonal)
    with pytest.raises(WeightsError, match="not orthogonal"):
        local_source("tiny-gpt2", tiny_checkpoint).tensors["E_centred.V"]
    np.save(tiny_checkpoint / "derived" / "wte_pca500_a.npy", np.ones((7, 3), np.float32))
    with pytest.raises(WeightsError, match=r"has shape \[7, 3\]"):
        local_source("tiny-gpt2", tiny_checkpoint).tensors["E_centred.V"]


def test_real_gpt2_token_subspace_comes_from_the_derived_pca(gpt2_weights):
    src = open_source("gpt2", gpt2_weights)
    S, V = src.tensors["E_centred.S"], src.tensors["E_centred.V"]
    assert V.shape == (768, 500) and np.all(np.diff(S) <= 0)
    replicate = src.tensors.replicate_token_subspace()
    assert replicate is not None
    np.testing.assert_allclose(replicate[0][:100], S[:100], rtol=1e-4)  # README: top 100 agree to 1e-5


def test_minilm_tokenizer_adds_its_special_tokens_on_request():
    tensors = package_source("minilm").tensors
    plain, special = tensors.tokenize("hello world"), tensors.tokenize("hello world", special_tokens=True)
    assert special.tolist() == [101, *plain.tolist(), 102]  # [CLS] … [SEP] in BERT's uncased vocabulary


def test_a_checkpoint_without_tokenizer_files_cannot_tokenize(tiny_checkpoint):
    src = local_source("tiny-gpt2", tiny_checkpoint)
    assert src.missing(("tokenizer", "W_pos")) == ["tokenizer"]
    with pytest.raises(KeyError):
        src.tensors.tokenize("hello")


def test_preload_reads_what_is_named_and_skips_what_is_absent(tiny_checkpoint):
    src = local_source("tiny-gpt2", tiny_checkpoint)
    src.preload(("W_pos", "blocks.*.attn.W_Q", "W_E", "tokenizer"))  # W_E and the tokenizer are absent: no error
    # W_pos and each layer's fused attention weight (W_Q's slice of it), nothing else
    assert sorted(src.tensors._loaded) == ["h.0.attn.c_attn.weight", "h.1.attn.c_attn.weight", "wpe.weight"]


def test_preload_of_the_tokenizer_makes_it_ready(gpt2_weights):
    from analyses.engine.sources import local_source as source

    src = source("gpt2", gpt2_weights)
    assert "_tokenizer" not in vars(src.tensors)
    src.preload(("tokenizer",))
    assert "_tokenizer" in vars(src.tensors)
