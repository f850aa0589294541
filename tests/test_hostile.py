"""What a hostile user tried (issues 19 and 34), each case with its documented outcome: the exit code, one line on
stderr, no cited byte changed, nothing left behind. Every case works on a copy of a small computed repository
(a tiny synthetic GPT-2 checkpoint, `position_matrix` and `checkpoint_inventory`), or on a copy of the committed
trained models that the engine is pointed at; none writes into the checkout."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import TINY_SPEC, gpt2_config, gpt2_state_dict, make_repository, write_checkpoint
from safetensors.numpy import save_file

from analyses.engine import cache as cache_module
from analyses.engine import cli, sources, workers
from analyses.engine.cache import TIMINGS, Cache
from analyses.engine.checkpoint import WeightsError
from analyses.engine.cli import main
from analyses.engine.pipeline import Job, run
from analyses.engine.registry import Analysis
from analyses.engine.results import Result
from analyses.engine.sources import WEIGHTS_ENV, local_source, open_source

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
NAMES = ["position_matrix", "checkpoint_inventory"]
DRIVER = """
import os, sys, time
sys.path.insert(0, {tests!r})
from conftest import TINY_SPEC
from analyses.engine import pipeline, sources
sources.MODELS[TINY_SPEC.name] = TINY_SPEC
if os.environ.get("SLOW_MARKER"):  # each computation announces itself, then takes a minute
    def slow(*args, **kwargs):
        open(os.environ["SLOW_MARKER"] + "." + str(os.getpid()), "w").close()
        time.sleep(60)
    pipeline.render = slow
from analyses.engine.cli import main
sys.exit(main(sys.argv[1:]))
""".format(tests=str(REPO / "tests"))
"""`python -m analyses` with the tiny model registered (optionally with slow computations), for subprocesses."""


def _state(**changes) -> dict:
    state = gpt2_state_dict(np.random.default_rng(0), with_wte=False, with_mlp=False)
    return {**state, **changes}


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A repository with both analyses computed on a tiny checkpoint: made once, copied by each test."""
    base = tmp_path_factory.mktemp("template")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sources.MODELS, TINY_SPEC.name, TINY_SPEC)
        write_checkpoint(base / "tiny", _state(), gpt2_config())
        root = make_repository(base / "repo")
        assert main(["run", "--quiet", *NAMES, "--model", "tiny-gpt2", "--weights", str(base / "tiny"),
                     "--root", str(root)]) == 0
    return base


@pytest.fixture
def repo(template, tmp_path, tiny_model, capsys):
    base = tmp_path / "t"
    shutil.copytree(template, base, symlinks=True)
    capsys.readouterr()
    root, weights = base / "repo", base / "tiny"
    return SimpleNamespace(root=root, weights=weights, cache=Cache.at(root),
                           args=[*NAMES, "--model", "tiny-gpt2", "--weights", str(weights), "--root", str(root)])


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under the repository with its bytes (None for a directory), the uncommitted timings aside."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*")) if p.name != TIMINGS}


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def call(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(capsys, repo, *argv, expect: str, code: int = cli.EXIT_USAGE) -> None:
    """`run` with these arguments fails with `code` and one line containing `expect`, changes nothing, and
    leaves no hidden file (a lock, a temporary) beside the uncommitted timings."""
    before = tree(repo.root)
    got, _, err = call(capsys, "run", "--quiet", *argv)
    assert got == code and expect in one_line(err), err
    assert tree(repo.root) == before
    assert {p.name for p in repo.root.rglob(".*")} <= {TIMINGS}


# ---------------------------------------------------------------------------
# 1. A manifest is as checked as the files it lists


def test_an_edited_manifest_is_recomputed_never_cited(repo, capsys):
    path = repo.cache.entry("tiny_gpt2", "position_matrix") / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shape"]["n_ctx"] = 2048
    path.write_text(json.dumps(manifest))
    variables = repo.cache.variables.read_bytes()
    code, out, _ = call(capsys, "status", *repo.args)
    assert code == cli.EXIT_STALE and "manifest was modified after it was written" in out
    assert "2048" not in out
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0
    assert repo.cache.variables.read_bytes() == variables and "2048" not in variables.decode()
    assert call(capsys, "status", *repo.args)[0] == 0


def test_a_resealed_manifest_with_another_shape_is_stale(repo, capsys):
    """A forger who also recomputes the seal: the shape is checked against the weights' config."""
    path = repo.cache.entry("tiny_gpt2", "position_matrix") / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shape"]["n_ctx"] = 2048
    manifest[cache_module.SEAL] = cache_module._seal(manifest)
    path.write_text(json.dumps(manifest))
    code, out, _ = call(capsys, "status", *repo.args)
    assert code == cli.EXIT_STALE and "shape differs from the weights' config" in out
    variables = repo.cache.variables.read_bytes()
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0
    assert repo.cache.variables.read_bytes() == variables


def test_cited_shape_needs_every_entry_to_agree(repo):
    from analyses.engine import index

    path = repo.cache.entry("tiny_gpt2", "checkpoint_inventory") / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shape"]["n_ctx"] = 2048
    manifest[cache_module.SEAL] = cache_module._seal(manifest)
    path.write_text(json.dumps(manifest))
    built = index.build(repo.cache, repo.cache.entries()).variables
    assert "n_ctx" not in built and "2048" not in built


@pytest.mark.parametrize("manifest", [{"input": 5}, {"input": {"code": "x"}, "outputs": {}}, [1, 2], "{"])
def test_a_manifest_of_the_wrong_structure_is_unreadable_and_recomputed(repo, capsys, manifest):
    path = repo.cache.entry("tiny_gpt2", "position_matrix") / "manifest.json"
    path.write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    code, out, err = call(capsys, "status", *repo.args)
    assert code == cli.EXIT_STALE and "no readable manifest" in out and not err
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0
    assert call(capsys, "status", *repo.args)[0] == 0


# ---------------------------------------------------------------------------
# 2. Config values are checked against the tensors and sane bounds


@pytest.mark.parametrize("change, expect", [
    ({"vocab_size": 1}, "'vocab_size' must be a positive integer within [2,"),
    ({"layer_norm_epsilon": 3.0}, "'layer_norm_epsilon' must be a positive number within"),
    ({"n_inner": 10 ** 9}, "'n_inner' must be a positive integer within"),
    ({"n_positions": 2048}, "n_ctx is 2048, tiny-gpt2 has 16"),
    ({"activation_function": "relu"}, 'activation_function "relu" is not implemented by the forward pass'),
])
def test_a_bad_config_value_is_refused(repo, capsys, change, expect):
    (repo.weights / "config.json").write_text(json.dumps({**gpt2_config(), **change}))
    refused(capsys, repo, *repo.args, expect=expect)


def test_a_known_models_cited_sizes_are_checked(tmp_path):
    config = {**gpt2_config(768, 1024, 12, 12, 50257), "vocab_size": 50000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match="d_vocab is 50000, gpt2 has 50257"):
        local_source("gpt2", tmp_path).shape


# ---------------------------------------------------------------------------
# 3. A computed result never silently becomes "skipped"


def test_a_missing_tensor_does_not_turn_computed_results_into_skips(repo, capsys):
    state = _state()
    del state["wpe.weight"]
    save_file(state, str(repo.weights / "model.safetensors"))
    refused(capsys, repo, *repo.args, expect="tiny_gpt2/position_matrix was computed, but the weights in")
    assert call(capsys, "status", *repo.args)[0] == cli.EXIT_STALE  # not "all fresh"
    assert call(capsys, "run", "--quiet", "--allow-skips", *repo.args)[0] == 0  # asked for: recorded as skipped
    assert repo.cache.manifest("tiny_gpt2", "position_matrix")["status"] == "skipped"


def _tokenizer_job(weights: Path) -> Job:
    analysis = Analysis("tokenized", "Tokenized", lambda tensors, shape: Result(), needs=("tokenizer",))
    return Job(analysis, "tiny_gpt2", local_source("tiny-gpt2", weights))


def test_a_missing_or_partial_tokenizer_is_an_error_not_a_skip(repo):
    cache = Cache(repo.root / "other", repo.root / "other.yml")
    for name in ("vocab.json", "merges.txt"):
        (repo.weights / name).write_text("{}")
    run([_tokenizer_job(repo.weights)], cache, progress=False)
    assert cache.manifest("tiny_gpt2", "tokenized")["status"] == "ok"
    (repo.weights / "merges.txt").unlink()
    with pytest.raises(WeightsError, match="tokenizer in .* is incomplete: it has vocab.json but lacks merges.txt"):
        run([_tokenizer_job(repo.weights)], cache, progress=False)
    (repo.weights / "vocab.json").unlink()
    with pytest.raises(WeightsError, match="was computed, but the weights in .* lack tokenizer"):
        run([_tokenizer_job(repo.weights)], cache, progress=False)
    assert cache.manifest("tiny_gpt2", "tokenized")["status"] == "ok"


# ---------------------------------------------------------------------------
# 4. Implausible weights are refused, naming the tensor and why


@pytest.mark.parametrize("wpe, expect", [
    (np.ones((16, 8), dtype=np.int32), "'wpe.weight' is stored as I32"),
    (np.where(np.eye(16, 8) > 0, 3e38, 0.5).astype(np.float32), "holds a value of 3e+38"),
    (np.zeros((16, 8), dtype=np.float32), "'wpe.weight' is all zeros"),
    (np.full((16, 8), np.nan, dtype=np.float32), "non-finite values"),
])
def test_implausible_weights_are_refused(repo, capsys, wpe, expect):
    save_file(_state(**{"wpe.weight": wpe}), str(repo.weights / "model.safetensors"))
    refused(capsys, repo, *repo.args, "--force", expect=expect)  # nothing left, .lock included


# ---------------------------------------------------------------------------
# 5. Unusable $GPT2_WEIGHTS is an error, as through --weights


def _garbage(directory: Path) -> None:
    (directory / "model.safetensors").write_bytes(b"not a safetensors file at all")


def _wrong_sum(directory: Path) -> None:
    (directory / "SHA256SUMS").write_text("0" * 64 + "  model.safetensors\n")


def _wrong_config(directory: Path) -> None:
    (directory / "config.json").write_text(json.dumps(gpt2_config()))  # a tiny model is not gpt2


@pytest.mark.parametrize("spoil", [_garbage, _wrong_sum, _wrong_config, None])
@pytest.mark.parametrize("command", ["run", "status"])
def test_unusable_gpt2_weights_from_the_environment_exit_2(repo, capsys, monkeypatch, spoil, command):
    directory = repo.root.parent / "gpt2"
    shutil.copytree(repo.weights, directory)
    (directory / "config.json").write_text(json.dumps(gpt2_config(768, 1024, 12, 12, 50257)))
    if spoil is None:
        directory = directory.with_name("gtp2")  # a mistyped path
    else:
        spoil(directory)
    monkeypatch.setenv(WEIGHTS_ENV, str(directory))
    before = tree(repo.root)
    code, _, err = call(capsys, command, "position_matrix", "--model", "gpt2", "--root", str(repo.root))
    assert code == cli.EXIT_USAGE and one_line(err).startswith("error: ")
    assert tree(repo.root) == before


# ---------------------------------------------------------------------------
# 6. Nothing is left behind, and what was left is reported and removed


def test_a_leftover_temporary_fails_status_and_run_removes_it(repo, capsys):
    strays = [repo.root / "._variables.yml.abc123.tmp", repo.cache.root / ".provenance.md.x.tmp",
              repo.cache.root / "tiny_gpt2" / ".new-position_matrix.x"]
    strays[0].write_text("half")
    strays[1].write_text("half")
    strays[2].write_text("a file, not a directory")
    code, out, _ = call(capsys, "status", *repo.args)
    assert code == cli.EXIT_STALE and out.count("LEFTOVER") == 3
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0
    assert not any(p.exists() for p in strays)
    assert call(capsys, "status", *repo.args)[0] == 0


def test_a_file_in_place_of_an_entry_does_not_wedge_runs(repo, capsys):
    entry = repo.cache.entry("tiny_gpt2", "position_matrix")
    shutil.rmtree(entry)
    entry.write_text("not an entry")
    assert call(capsys, "status", *repo.args)[0] == cli.EXIT_STALE
    for _ in range(2):
        assert call(capsys, "run", "--quiet", *repo.args)[0] == 0
    assert entry.is_dir() and call(capsys, "status", *repo.args)[0] == 0


MUTATIONS = ("_exchange", "_remove")
"""The cache's own file-system steps of a write, after each of which a kill is simulated."""


@pytest.mark.parametrize("step", range(1, 5))
def test_a_write_killed_at_any_step_never_leaves_the_entry_missing(repo, monkeypatch, step):
    """SIGKILL (os._exit: no cleanup runs) after each rename or removal of a write: the entry is always there,
    complete (what `quarto render` includes before its pre-render step can repair anything)."""
    cache, count = repo.cache, [0]

    def killing(function):
        def wrapper(*args, **kwargs):
            result = function(*args, **kwargs)
            count[0] += 1
            if count[0] == step:
                os._exit(9)
            return result
        return wrapper

    pid = os.fork()
    if pid == 0:
        try:
            for name in MUTATIONS:
                monkeypatch.setattr(cache_module, name, killing(getattr(cache_module, name)))
            monkeypatch.setattr(Path, "rename", killing(Path.rename))
            manifest = {k: v for k, v in cache.manifest("tiny_gpt2", "checkpoint_inventory").items()
                        if k not in ("outputs", cache_module.SEAL)}
            outputs = cache_module.Outputs()
            outputs.add_text("numbers.json", "{}\n")
            cache.write("tiny_gpt2", "checkpoint_inventory", {**manifest, "title": "rewritten"}, outputs)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert cache.unverifiable("tiny_gpt2", "checkpoint_inventory") is None
    with cache.locked():
        pass
    assert not cache.leftovers()


# ---------------------------------------------------------------------------
# 7. Workers and signals


class _Unsendable:
    def __reduce__(self):
        raise KeyboardInterrupt  # an interrupt while the child sends its result


def test_a_worker_never_runs_the_parents_cleanup(tmp_path):
    me = os.getpid()
    try:
        with pytest.raises(RuntimeError, match="died"):
            workers.run_all([("x", _Unsendable)], 1, lambda *a: None)
    finally:
        (tmp_path / f"cleanup.{os.getpid()}").touch()
        if os.getpid() != me:
            os._exit(0)
    assert [p.name for p in tmp_path.iterdir()] == [f"cleanup.{me}"]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_for(predicate, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_a_killed_parent(repo, tmp_path):
    marker = tmp_path / "computing"
    parent = subprocess.Popen([PYTHON, "-c", DRIVER, "run", "--quiet", "--force", *repo.args],
                              env=_env(SLOW_MARKER=str(marker)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: list(tmp_path.glob("computing.*")))
    child = int(next(tmp_path.glob("computing.*")).suffix[1:])
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    _wait_for(lambda: not _alive(child), 10)


@pytest.mark.parametrize("signum, code, word", [(signal.SIGTERM, cli.EXIT_TERMINATED, "terminated"),
                                                (signal.SIGINT, cli.EXIT_INTERRUPTED, "interrupted")])
def test_sigterm_and_sigint_stop_a_run_cleanly(repo, tmp_path, signum, code, word):
    marker = tmp_path / "computing"
    before = tree(repo.root)
    parent = subprocess.Popen([PYTHON, "-c", DRIVER, "run", "--quiet", "--force", *repo.args],
                              env=_env(SLOW_MARKER=str(marker)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    _wait_for(lambda: list(tmp_path.glob("computing.*")))
    children = [int(p.suffix[1:]) for p in tmp_path.glob("computing.*")]
    parent.send_signal(signum)
    _, err = parent.communicate(timeout=30)
    assert parent.returncode == code and one_line(err).startswith(word)
    assert not any(_alive(pid) for pid in children)
    assert tree(repo.root) == before


def test_sigint_during_start_up_is_one_line(repo):
    """Ctrl-C while the libraries are still being imported (as soon as NumPy's core is loaded)."""
    process = subprocess.Popen([PYTHON, "-m", "analyses", "status", "--root", str(repo.root)], cwd=REPO,
                               env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: "_multiarray_umath" in Path(f"/proc/{process.pid}/maps").read_text(), 30)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == cli.EXIT_INTERRUPTED and one_line(err).startswith("interrupted")


# ---------------------------------------------------------------------------
# 8. One line instead of a traceback


@pytest.mark.parametrize("sums", [b"stray line\n", b"\x80\x81\xfe\xff" * 8])
def test_a_bad_checksum_file_is_one_line(repo, capsys, sums):
    (repo.weights / "SHA256SUMS").write_bytes(sums)
    refused(capsys, repo, *repo.args, expect="SHA256SUMS")


def test_a_garbage_tokenizer_is_a_weights_error(repo):
    (repo.weights / "vocab.json").write_text("{ garbage")
    (repo.weights / "merges.txt").write_text("#version: 0.2\n")
    with pytest.raises(WeightsError, match="tokenizer files in .* cannot be read"):
        local_source("tiny-gpt2", repo.weights).tensors.tokenize("a")


@pytest.mark.parametrize("timings", ['"slow"', '{"tiny_gpt2/position_matrix": {"wall": "slow"}}', "\x80"])
def test_garbage_timings_are_ignored(repo, capsys, timings):
    (repo.cache.root / TIMINGS).write_bytes(timings.encode("latin-1"))
    assert call(capsys, "run", "--quiet", "--force", *repo.args)[0] == 0


def test_deeply_nested_timings_are_ignored(repo):
    (repo.cache.root / TIMINGS).write_text("[" * 200_000 + "]" * 200_000)
    assert repo.cache.timings() == {}


def _pre_render(repo, python: str, **env) -> subprocess.CompletedProcess:
    """The book's pre-render step in the test repository (its script, beside the repository's `analyses`)."""
    scripts = repo.root / "report" / "_scripts"
    scripts.mkdir(exist_ok=True)
    shutil.copy(REPO / "report" / "_scripts" / "pre-render.sh", scripts)
    return subprocess.run(["bash", str(scripts / "pre-render.sh")], env=_env(ANALYSES_PYTHON=python, **env),
                          capture_output=True, text=True, timeout=120)


def _analyses_run_passes(tmp_path) -> str:
    """A Python that runs `-c` and `-` for real but answers `-m analyses run` with success, as a fresh cache does."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = "-m" ] && exit 0\nexec {PYTHON} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_pre_render_on_a_read_only_assets_folder_is_one_line(repo, tmp_path):
    (repo.root / "report" / "_assets").write_text("a file where the folder belongs")  # root ignores chmod
    done = _pre_render(repo, _analyses_run_passes(tmp_path))
    assert done.returncode != 0 and "cannot write report/_assets/plotly.min.js" in one_line(done.stderr)


@pytest.mark.parametrize("python, expect", [("/bin/true", "is not a Python"),
                                            ("/nonexistent/python", "is not a Python")])
def test_pre_render_refuses_what_is_not_a_python(repo, python, expect):
    done = _pre_render(repo, python)
    assert done.returncode != 0 and expect in one_line(done.stderr)


def test_pre_render_stops_on_unusable_gpt2_weights(repo, tmp_path):
    done = _pre_render(repo, PYTHON, GPT2_WEIGHTS=str(tmp_path / "mistyped"))
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "error" in line or "not rendering" in line]
    assert any("weights directory not found" in line for line in errors) and "Traceback" not in done.stderr


def test_a_python_without_the_packages_is_one_line(repo, tmp_path):
    bare = shutil.which("python3", path="/usr/bin:/bin")
    if bare is None or subprocess.run([bare, "-c", "import numpy"], capture_output=True).returncode == 0:
        pytest.skip("no system Python without NumPy here")
    done = subprocess.run([bare, "-m", "analyses", "status"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == cli.EXIT_USAGE and "lacks 'numpy'" in one_line(done.stderr)


# ---------------------------------------------------------------------------
# 9. Smaller ones


def test_root_must_be_the_repository(tmp_path, capsys):
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    code, _, err = call(capsys, "run", "thin_shell", "--root", str(elsewhere))
    assert code == cli.EXIT_USAGE and "is not the report's repository" in one_line(err)
    assert not any(elsewhere.iterdir())


def test_the_cited_skip_reason_does_not_depend_on_how_the_weights_were_named(tmp_path, monkeypatch):
    named = open_source("gpt2", tmp_path)
    monkeypatch.setenv(WEIGHTS_ENV, str(tmp_path))
    assert open_source("gpt2").origin == named.origin


def test_a_closed_stdout_is_not_an_error(repo):
    process = subprocess.Popen([PYTHON, "-c", DRIVER, "status", *repo.args], env=_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # `status | head -0`: the reader is gone before the first line
    err = process.stderr.read()
    assert process.wait(timeout=60) == 0 and not err


def test_an_unreachable_hub_fails_fast(tmp_path, monkeypatch, tiny_model):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.invalid")
    start = time.monotonic()
    with pytest.raises(WeightsError, match="hub unreachable"):
        sources.hub_source("tiny-gpt2", cache_dir=tmp_path)
    assert time.monotonic() - start < 5


def test_a_model_named_twice_or_by_its_alias_is_planned_once(repo, capsys):
    twice = [*repo.args, "--model", "tiny-gpt2"]
    code, out, _ = call(capsys, "status", *twice)
    assert code == 0 and out.count("tiny_gpt2/position_matrix") == 1
    code, out, _ = call(capsys, "list", "thin_shell", "--model", "minilm", "--model", "all-MiniLM-L6-v2",
                        "--root", str(repo.root))
    assert code == 0 and out.count("common/thin_shell") == 1
    from analyses.engine.cli import _jobs, _parser

    jobs, _ = _jobs(_parser().parse_args(["list", "position_matrix", "--model", "minilm", "--model",
                                          "all-MiniLM-L6-v2", "--root", str(repo.root)]))
    assert [job.label for job in jobs] == ["minilm/position_matrix"]


# ---------------------------------------------------------------------------
# 10. Round three (issue 34): damage to the repository, dying workers, citations that would vanish


@pytest.fixture
def committed(tmp_path, monkeypatch):
    """A copy of the committed trained models, which the engine then reads instead of `models/`."""
    from analyses.engine import training

    models = tmp_path / "models"
    for name in ("kjv-gpt2", "kjv-gpt2-seed1"):
        shutil.copytree(training.MODELS_DIR / name, models / name)
    monkeypatch.setattr(training, "MODELS_DIR", models)
    return models


def _flip_a_byte(directory: Path) -> None:
    path = directory / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 1
    path.write_bytes(bytes(data))


def _edit_config(directory: Path) -> None:
    path = directory / "config.json"
    path.write_text(path.read_text().replace('"attn_pdrop": 0.0', '"attn_pdrop": 0.1'))


def _edit_record(directory: Path) -> None:
    path = directory / "training.json"
    path.write_text(path.read_text().replace('"cores": 2', '"cores": 64'))


DAMAGES = {"model.safetensors does not match SHA256SUMS": _flip_a_byte,
           "SHA256SUMS is missing": lambda d: (d / "SHA256SUMS").unlink(),
           "config.json does not match SHA256SUMS": _edit_config,
           "training.json does not match SHA256SUMS": _edit_record,
           "vocab.json is not listed in SHA256SUMS": lambda d: (d / "vocab.json").write_text("{}"),
           "history.safetensors is missing": lambda d: (d / "history.safetensors").unlink()}


def test_the_committed_models_are_intact(committed):
    for name in ("kjv-gpt2", "kjv-gpt2-seed1"):
        sources.check_committed(name, committed / name)  # the rule below refuses damage, not the models


@pytest.mark.parametrize("model", ["kjv-gpt2", "kjv-gpt2-seed1"])
@pytest.mark.parametrize("expect", DAMAGES)
@pytest.mark.parametrize("command", ["status", "run", "verify"])
def test_a_damaged_committed_model_is_an_error_for_every_command(committed, tmp_path, capsys, model, expect,
                                                                  command):
    """Damage to the repository, not an unreachable hub: exit 2, one line naming the file, nothing written."""
    root = make_repository(tmp_path / "repo")
    DAMAGES[expect](committed / model)
    before, models = tree(root), tree(committed)
    code, _, err = call(capsys, command, "position_matrix", "--model", model, "--root", str(root))
    assert code == cli.EXIT_USAGE and f"{committed / model}/{expect}" in one_line(err)
    assert tree(root) == before and tree(committed) == models


@pytest.mark.parametrize("model, expect", [("kjv-gpt2", "SHA256SUMS is missing"),
                                           ("kjv-gpt2-seed1", "training.json does not match SHA256SUMS")])
def test_explain_refuses_a_damaged_committed_model_too(committed, capsys, model, expect):
    DAMAGES[expect](committed / model)
    key = f"{model.replace('-', '_')}.position_matrix.norm_mean"
    code, _, err = call(capsys, "explain", key, "--root", str(REPO))  # reads the real cache, writes nothing
    assert code == cli.EXIT_USAGE and f"{committed / model}/{expect}" in one_line(err)


def _make_stale(repo) -> list[str]:
    """An entry that the next run recomputes and writes (one of its outputs gone); the arguments of that run."""
    (repo.cache.entry("tiny_gpt2", "checkpoint_inventory") / "status.md").unlink()
    return ["checkpoint_inventory", *repo.args[len(NAMES):]]


@pytest.mark.parametrize("signum, code, expect", [
    (signal.SIGKILL, cli.EXIT_WORKER, "error: tiny_gpt2/checkpoint_inventory: its worker died (killed by SIGKILL, as the "
                                      "out-of-memory killer does)"),
    (signal.SIGSEGV, cli.EXIT_WORKER, "error: tiny_gpt2/checkpoint_inventory: its worker died (killed by SIGSEGV)"),
    (signal.SIGTERM, cli.EXIT_TERMINATED, "terminated (the worker computing tiny_gpt2/checkpoint_inventory got SIGTERM)"),
    (signal.SIGINT, cli.EXIT_INTERRUPTED, "interrupted (the worker computing tiny_gpt2/checkpoint_inventory got SIGINT)"),
])
def test_a_worker_killed_by_a_signal_is_one_line_and_changes_nothing(repo, capsys, monkeypatch, signum, code, expect):
    """The issue's `strace -e inject=renameat2:signal=KILL`: the worker dies as it swaps its entry in (a SIGTERM or
    SIGINT that reaches it alone is handled, and reported, as an interrupt of the run)."""
    import faulthandler

    def die(*args):
        faulthandler.disable()  # a SIGSEGV then ends the worker without a dump of its stack
        os.kill(os.getpid(), signum)

    stale = _make_stale(repo)
    before = tree(repo.root)
    monkeypatch.setattr(cache_module, "_exchange", die)  # runs only in the forked worker that writes
    got, _, err = call(capsys, "run", "--quiet", *stale)
    assert got == code and one_line(err).startswith(expect)
    assert tree(repo.root) == before  # the old entry, no temporary beside it


@pytest.mark.parametrize("command", ["status", "run"])
@pytest.mark.parametrize("value, expect", [(np.nan, "non-finite values"), (np.inf, "non-finite values"),
                                           (1e6, "holds a value of 1e+06"), (0.0, "is all zeros")])
def test_status_and_run_agree_on_implausible_weights(repo, capsys, command, value, expect):
    wpe = _state()["wpe.weight"]
    wpe = np.zeros_like(wpe) if value == 0.0 else np.where(np.eye(*wpe.shape) > 0, np.float32(value), wpe)
    save_file(_state(**{"wpe.weight": wpe}), str(repo.weights / "model.safetensors"))
    before = tree(repo.root)
    code, _, err = call(capsys, command, *repo.args)
    assert code == cli.EXIT_USAGE and "'wpe.weight'" in one_line(err) and expect in one_line(err)
    assert tree(repo.root) == before


def test_plausible_new_weights_are_stale_not_an_error(repo, capsys):
    save_file(_state(**{"wpe.weight": _state()["wpe.weight"] * 1.5}), str(repo.weights / "model.safetensors"))
    code, out, err = call(capsys, "status", *repo.args)
    assert code == cli.EXIT_STALE and "weights" in out and not err


def _symlink_loop(tmp_path: Path) -> Path:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    return loop


def _deep_config(tmp_path: Path) -> Path:
    shutil.copytree(tmp_path / "t" / "tiny", tmp_path / "deep")
    (tmp_path / "deep" / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    return tmp_path / "deep"


def _deep_header(tmp_path: Path) -> Path:
    shutil.copytree(tmp_path / "t" / "tiny", tmp_path / "deep")
    header = ("[" * 200_000 + "]" * 200_000).encode()
    (tmp_path / "deep" / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return tmp_path / "deep"


@pytest.mark.parametrize("weights, expect", [
    (_symlink_loop, "cannot be looked up: a symlink loop"),
    (lambda tmp_path: tmp_path / ("a" * 5000), "cannot be looked up: File name too long"),
    (_deep_config, "config.json is nested too deeply"),
    (_deep_header, "its safetensors header is nested too deeply"),
])
@pytest.mark.parametrize("command", ["status", "run"])
def test_unusable_weights_of_any_shape_are_one_line(repo, tmp_path, capsys, command, weights, expect):
    args = [*NAMES, "--model", "tiny-gpt2", "--weights", str(weights(tmp_path)), "--root", str(repo.root)]
    before = tree(repo.root)
    code, _, err = call(capsys, command, *args)
    assert code == cli.EXIT_USAGE and expect in one_line(err)
    assert tree(repo.root) == before


def test_a_root_too_long_for_the_system_is_a_usage_error(tmp_path, capsys):
    code, _, err = call(capsys, "status", "--root", str(tmp_path / ("a" * 5000)))
    assert code == cli.EXIT_USAGE and "cannot be looked up: File name too long" in one_line(err)


def test_a_deeply_nested_training_record_is_a_weights_error(tmp_path):
    from analyses.engine.tensors import read_training_record

    (tmp_path / "training.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(WeightsError, match="nested too deeply"):
        read_training_record(tmp_path / "training.json")


def test_explain_on_an_ascii_terminal_degrades_characters(repo, capsys, monkeypatch):
    import io

    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", ascii_out)
    assert main(["explain", "tiny_gpt2.position_matrix.norm_mean", "--weights", str(repo.weights),
                 "--root", str(repo.root)]) == 0
    ascii_out.flush()
    text = ascii_out.buffer.getvalue().decode("ascii")
    assert "accuracy    \\xb11e-09 relative" in text and not capsys.readouterr().err


@pytest.mark.parametrize("damaged", [b"\xff", b"/* an older plotly.js */\n"])
def test_pre_render_replaces_a_plotly_copy_that_differs(repo, tmp_path, damaged):
    from plotly.offline import get_plotlyjs

    assets = repo.root / "report" / "_assets"
    assets.mkdir()
    (assets / "plotly.min.js").write_bytes(damaged)
    done = _pre_render(repo, _analyses_run_passes(tmp_path))
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert (assets / "plotly.min.js").read_bytes() == get_plotlyjs().encode()


def _cited(repo, scope: str, name: str) -> dict:
    import yaml

    return yaml.safe_load(repo.cache.variables.read_text()).get(scope, {}).get(name, {})


@pytest.mark.parametrize("damage, expect", [
    (lambda entry: (entry / "status.md").write_text("edited\n"), "is damaged (output status.md was modified"),
    (lambda entry: (entry / "numbers.json").unlink(), "is damaged (output numbers.json is missing)"),
    (shutil.rmtree, "is missing"),
])
def test_a_targeted_run_never_drops_another_entrys_citations(repo, capsys, damage, expect):
    """Damage one entry, run another analysis: an error naming the damaged entry, nothing changed; the run that
    includes it repairs it and cites the same values."""
    cited = _cited(repo, "tiny_gpt2", "checkpoint_inventory")
    assert len(cited) > 1
    damage(repo.cache.entry("tiny_gpt2", "checkpoint_inventory"))
    targeted = ["position_matrix", *repo.args[len(NAMES):]]
    refused(capsys, repo, "--force", *targeted, expect=f"report/_cache/tiny_gpt2/checkpoint_inventory {expect}")
    refused(capsys, repo, *targeted, expect="recompute it: `python -m analyses run checkpoint_inventory --model tiny-gpt2`")
    assert _cited(repo, "tiny_gpt2", "checkpoint_inventory") == cited
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0
    assert _cited(repo, "tiny_gpt2", "checkpoint_inventory") == cited


def test_a_run_still_removes_what_no_entry_holds(repo, capsys):
    """A hand-added key of no analysis is not a citation to keep: the run rewrites the file without it."""
    variables = repo.cache.variables.read_bytes()
    repo.cache.variables.write_text(variables.decode() + "tiny_gpt2_extra:\n  made_up:\n    value: '1'\n")
    assert call(capsys, "run", "--quiet", "position_matrix", *repo.args[len(NAMES):])[0] == 0
    assert repo.cache.variables.read_bytes() == variables


@pytest.mark.parametrize("command", ["status", "run"])
def test_an_empty_gpt2_weights_is_an_error(repo, capsys, monkeypatch, command):
    monkeypatch.setenv(WEIGHTS_ENV, "")
    before = tree(repo.root)
    code, _, err = call(capsys, command, "position_matrix", "--model", "gpt2", "--root", str(repo.root))
    assert code == cli.EXIT_USAGE and "$GPT2_WEIGHTS is set but empty" in one_line(err)
    assert tree(repo.root) == before


def _read_only(monkeypatch) -> None:
    """Every write into the cache fails as on a read-only file system (root ignores permissions)."""
    import errno

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(args[0]) if args else None)

    monkeypatch.setattr(cache_module, "atomic_write", refuse)
    monkeypatch.setattr(cache_module.tempfile, "mkdtemp", refuse)


def test_force_on_a_read_only_cache_with_nothing_to_change(repo, capsys, monkeypatch):
    _read_only(monkeypatch)
    before = tree(repo.root)
    code, _, err = call(capsys, "run", "--quiet", "--force", "checkpoint_inventory", *repo.args[len(NAMES):])
    assert code == 0 and not err and tree(repo.root) == before


def test_a_read_only_cache_with_something_to_change_is_an_os_error(repo, capsys, monkeypatch):
    stale = _make_stale(repo)
    _read_only(monkeypatch)
    code, _, err = call(capsys, "run", "--quiet", *stale)
    assert code == cli.EXIT_OS and "Read-only file system" in one_line(err)


@pytest.mark.parametrize("generated", ["report/provenance.qmd", "report/provenance-listing.html", "report/provenance.json"])
def test_status_reports_a_stale_provenance_page(repo, capsys, generated):
    (repo.root / "index.qmd").write_text("# Index\n\nMean norm {{< var tiny_gpt2.position_matrix.norm_mean >}}.\n")
    (repo.root / "_quarto.yml").write_text("project: {type: book}\nbook:\n  chapters: [index.qmd]\n"
                                           "  appendices: [report/provenance.qmd]\n")
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0  # a book now, which shows no figure
    assert call(capsys, "provenance", "--root", str(repo.root))[0] == 0
    assert call(capsys, "status", *repo.args)[0] == 0
    with (repo.root / generated).open("a") as f:
        f.write("\n")
    code, out, _ = call(capsys, "status", *repo.args)
    assert code == cli.EXIT_STALE and f"STALE: {generated} differs from the cache" in out
    (repo.root / generated).unlink()
    assert call(capsys, "status", *repo.args)[0] == cli.EXIT_STALE


def test_a_bert_config_with_another_activation_is_refused(tmp_path):
    from analyses.engine.shapes import shape_from_config

    bert = {"model_type": "bert", "hidden_size": 8, "max_position_embeddings": 16, "num_hidden_layers": 1,
            "num_attention_heads": 2, "vocab_size": 11, "intermediate_size": 32}
    assert shape_from_config("b", {**bert, "hidden_act": "gelu"}).family == "bert"
    with pytest.raises(WeightsError, match='hidden_act "relu" is not implemented'):
        shape_from_config("b", {**bert, "hidden_act": "relu"})


# ---------------------------------------------------------------------------
# 11. Round four (issue 47): committed runs read as data, `compare`, resealed texts, empty plans, locales


@pytest.fixture
def grid(tmp_path, monkeypatch):
    """The committed runs as the engine reads them, each a link to the checkout's (read only here) but the one a
    test damages, which `grid.damage(name)` copies first."""
    from analyses.engine import training

    models = tmp_path / "models"
    models.mkdir()
    for run in sorted(p.name for p in training.MODELS_DIR.iterdir() if (p / "SHA256SUMS").is_file()):
        (models / run).symlink_to(training.MODELS_DIR / run)
    monkeypatch.setattr(training, "MODELS_DIR", models)

    def damage(name: str) -> Path:
        (models / name).unlink()
        shutil.copytree(REPO / "models" / name, models / name)
        return models / name

    return SimpleNamespace(models=models, damage=damage)


def _edit_warmup(directory: Path) -> None:
    path = directory / "training.json"
    path.write_text(path.read_text().replace('"warmup": 30', '"warmup": 45'))


def _scale_a_snapshot_row(directory: Path) -> None:
    from safetensors.numpy import load_file

    history = load_file(str(directory / "history.safetensors"))
    history["history.W_pos"][-1, 0] *= 30
    save_file(history, str(directory / "history.safetensors"))


GRID_DAMAGES = {"training.json does not match SHA256SUMS": _edit_warmup,
                "history.safetensors does not match SHA256SUMS": _scale_a_snapshot_row,
                "history.safetensors is missing": lambda d: (d / "history.safetensors").unlink()}


def _never(what: str):
    def fail(*args, **kwargs):
        raise AssertionError(f"{what}: nothing may be computed from a damaged committed run")
    return fail


@pytest.mark.parametrize("expect", GRID_DAMAGES)
@pytest.mark.parametrize("command", ["status", "run", "verify"])
def test_a_damaged_grid_run_read_as_data_is_an_error(grid, tmp_path, capsys, monkeypatch, command, expect):
    """Issue 47, 1: `training_grid` reads every run's history and record; a damaged one is exit 2 with the `git
    checkout` that restores it, before anything is computed or written."""
    monkeypatch.setattr(workers, "run_all", _never(command))
    GRID_DAMAGES[expect](grid.damage("kjv-small"))
    root = make_repository(tmp_path / "repo")
    before = tree(root)  # the model planned is another run: kjv-small is read only as the grid's data
    code, _, err = call(capsys, command, "training_grid", "--model", "kjv-small-seed1", "--root", str(root))
    line = one_line(err)
    assert code == cli.EXIT_USAGE and f"{grid.models}/kjv-small/{expect}" in line
    assert "`git checkout -- models/kjv-small`" in line and tree(root) == before


def test_explain_and_window_shape_check_the_runs_they_read(grid, capsys, monkeypatch):
    monkeypatch.setattr(workers, "run_all", _never("verify"))
    _scale_a_snapshot_row(grid.damage("kjv-gpt2-ctx128"))
    expect = f"{grid.models}/kjv-gpt2-ctx128/history.safetensors does not match SHA256SUMS"
    code, _, err = call(capsys, "explain", "common.training_grid.base_warmup", "--root", str(REPO))
    assert code == cli.EXIT_USAGE and expect in one_line(err)
    code, _, err = call(capsys, "verify", "window_shape", "--model", "kjv-gpt2", "--root", str(REPO))
    assert code == cli.EXIT_USAGE and expect in one_line(err)


@pytest.mark.parametrize("damage", [_flip_a_byte, lambda d: (d / "history.safetensors").unlink()])
def test_train_refuses_a_damaged_committed_run(grid, capsys, monkeypatch, damage):
    """Issue 47, 8: not "fresh", and never a retraining: the `git checkout` that restores it."""
    from analyses.engine import training

    monkeypatch.setattr(training, "train", _never("train"))
    damage(grid.damage("kjv-small-seed1"))
    code, out, err = call(capsys, "train", "--model", "kjv-small-seed1")
    assert code == cli.EXIT_USAGE and "fresh" not in out
    assert "`git checkout -- models/kjv-small-seed1`" in one_line(err)


def _sealed(repo, damage) -> Path:
    """Apply `damage` to numbers.json of tiny_gpt2/position_matrix and reseal its manifest, as a forger would."""
    entry = repo.cache.entry("tiny_gpt2", "position_matrix")
    damage(entry / "numbers.json")
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["outputs"]["numbers.json"] = cache_module._sha((entry / "numbers.json").read_bytes())
    manifest[cache_module.SEAL] = cache_module._seal(manifest)
    (entry / "manifest.json").write_text(json.dumps(manifest))
    return entry


def _text_not_its_value(path: Path) -> None:
    numbers = json.loads(path.read_text())
    numbers["norm_mean"]["text"] = "9.99"
    path.write_text(json.dumps(numbers))


@pytest.mark.parametrize("damage, expect", [
    (_text_not_its_value, "numbers.json cites norm_mean as '9.99', which is not its value"),
    (lambda path: path.write_text("[1, 2]"), "numbers.json is not an object of numbers"),
])
def test_a_resealed_numbers_file_is_never_cited(repo, capsys, damage, expect):
    """Issue 47, 5 and 12: a text that is not its value's formatting, or numbers.json not an object, behind a
    resealed manifest: stale for `status` and `verify`, unknown to `explain` and `provenance`, recomputed by `run`;
    never cited, never a traceback."""
    variables = repo.cache.variables.read_bytes()
    _sealed(repo, damage)
    code, out, err = call(capsys, "status", *repo.args)
    assert code == cli.EXIT_STALE and expect in out and not err
    code, out, err = call(capsys, "verify", *repo.args)
    assert code == cli.EXIT_STALE and expect in out and "Traceback" not in err
    code, out, err = call(capsys, "explain", "tiny_gpt2.position_matrix.norm_mean", "--weights", str(repo.weights),
                          "--root", str(repo.root))
    assert code == cli.EXIT_USAGE and "fresh" not in out and "no verified cache entry holds it" in one_line(err)
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0
    assert repo.cache.variables.read_bytes() == variables and b"9.99" not in variables
    assert call(capsys, "status", *repo.args)[0] == 0


def test_a_targeted_run_on_other_weights_never_drops_the_cited_shape(repo, capsys):
    """Issue 47, 7: the same tensors saved again (another sha256, the same numbers); a run of one analysis would
    leave the scope's entries disagreeing, so `_variables.yml` would lose tiny_gpt2.model: refused, nothing written."""
    from safetensors.numpy import load_file

    path = repo.weights / "model.safetensors"
    save_file(load_file(str(path)), str(path), metadata={"saved": "again"})
    assert "d_model" in _cited(repo, "tiny_gpt2", "model")
    refused(capsys, repo, "position_matrix", *repo.args[len(NAMES):],
            expect="so _variables.yml would drop the cited tiny_gpt2.model keys")
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0  # every entry of the model: the shape is kept
    assert _cited(repo, "tiny_gpt2", "model")["d_model"] == "8"


@pytest.mark.parametrize("line", ["{digest}  ./{file}", "{digest} *{file}", "{digest}  sub/../{file}",
                                  "SHA256 ({file}) = {digest}"])
def test_checksums_are_read_however_they_name_the_files(repo, capsys, line):
    """Issue 47, 3: `sha256sum ./model.safetensors` listed no file read, so nothing was checked; binary mode
    (`*`), a path through a folder and the `--tag` form name the same files."""
    (repo.weights / "SHA256SUMS").write_text("".join(
        line.format(digest=sources.sha256_file(repo.weights / file), file=file) + "\n"
        for file in ("model.safetensors", "config.json")))
    assert call(capsys, "status", *repo.args)[0] == 0
    _flip_a_byte(repo.weights)
    refused(capsys, repo, "--force", *repo.args, expect="do not match SHA256SUMS")


def test_a_file_read_but_not_in_the_checksums_is_an_error(repo, capsys):
    (repo.weights / "SHA256SUMS").write_text(f"{sources.sha256_file(repo.weights / 'config.json')}  config.json\n")
    refused(capsys, repo, "--force", *repo.args, expect="is not listed in its SHA256SUMS")


def test_a_tensor_stored_under_two_names_is_refused(repo, capsys):
    """Issue 47, 4: which copy `run` read depended on the hash seed."""
    state = _state()
    save_file({**state, "transformer.wpe.weight": state["wpe.weight"] * 2}, str(repo.weights / "model.safetensors"))
    refused(capsys, repo, "--force", *repo.args, expect="holds 'wpe.weight' twice")
    code, _, err = call(capsys, "status", *repo.args)
    assert code == cli.EXIT_USAGE and "holds 'wpe.weight' twice" in one_line(err)


@pytest.mark.parametrize("command", ["run", "status", "verify", "list"])
def test_an_empty_plan_is_an_error(tmp_path, capsys, command):
    """Issue 47, 9: `verify helix --model kjv-small` reproduced "all 0 results"."""
    root = make_repository(tmp_path / "repo")
    code, out, err = call(capsys, command, "helix", "--model", "kjv-small", "--root", str(root))
    assert code == cli.EXIT_USAGE and "all 0" not in out
    assert "nothing to do: helix runs on none of the models named (kjv-small)" in one_line(err)
    assert tree(root) == tree(make_repository(tmp_path / "empty"))


@pytest.mark.parametrize("threads", ["99999999999999999999", "100000", "0"])
def test_threads_are_bounded_by_the_cores(tmp_path, capsys, threads):
    """Issue 47, 11: an OverflowError traceback, or a number printed as if used."""
    root = make_repository(tmp_path / "repo")
    with pytest.raises(SystemExit) as exit_info:
        main(["verify", "--threads", threads, "position_matrix", "--model", "kjv-gpt2", "--root", str(root)])
    assert exit_info.value.code == cli.EXIT_USAGE
    assert f"expected a whole number from 1 to {os.cpu_count()}" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("wpe", [np.full((16, 8), 0.25, dtype=np.float32),
                                 np.tile(np.arange(8, dtype=np.float32), (16, 1))])
def test_a_degenerate_table_is_one_line(repo, capsys, wpe):
    """Issue 47, 10: a constant table (or every row the same) is not a trained one."""
    save_file(_state(**{"wpe.weight": wpe}), str(repo.weights / "model.safetensors"))
    refused(capsys, repo, "--force", *repo.args, expect="'wpe.weight' has every row the same")


def test_verify_refuses_an_unwritable_ratios_file_before_recomputing(repo, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(workers, "run_all", _never("verify"))
    target = tmp_path / "absent" / "ratios.json"
    code, _, err = call(capsys, "verify", "--ratios", str(target), *repo.args)
    assert code == cli.EXIT_OS and one_line(err).endswith(f": {target}")


def test_a_weights_path_that_is_a_file_says_so(repo, capsys):
    args = [*NAMES, "--model", "tiny-gpt2", "--weights", str(repo.weights / "config.json"), "--root", str(repo.root)]
    code, _, err = call(capsys, "status", *args)
    assert code == cli.EXIT_USAGE and "config.json is a file, not a directory" in one_line(err)


def test_explain_suggests_keys_by_what_was_typed(repo, capsys):
    code, _, err = call(capsys, "explain", "tiny_gpt2.position_matrix.norm_me", "--root", str(repo.root))
    assert code == cli.EXIT_USAGE and "did you mean tiny_gpt2.position_matrix.norm_mean" in one_line(err)


def _book(repo) -> None:
    """A book of one chapter with non-ASCII text, its variables and provenance page written."""
    (repo.root / "index.qmd").write_text("# Où — ±\n\nNorme moyenne : {{< var tiny_gpt2.position_matrix.norm_mean >}} "
                                         "(λ₂/λ₁ ≈ …).\n", encoding="utf-8")
    (repo.root / "_quarto.yml").write_text("project: {type: book}\nbook:\n  title: Où — ±\n  chapters: [index.qmd]\n"
                                           "  appendices: [report/provenance.qmd]\n", encoding="utf-8")


@pytest.mark.parametrize("command", [["status"], ["run", "--quiet"]])
def test_text_is_utf8_whatever_the_locale(repo, capsys, command):
    """Issue 47, 13: under the C locale (ASCII), every file is still read and written as UTF-8."""
    _book(repo)
    assert call(capsys, "run", "--quiet", *repo.args)[0] == 0
    assert call(capsys, "provenance", "--root", str(repo.root))[0] == 0
    before = tree(repo.root)
    done = subprocess.run([PYTHON, "-c", DRIVER, *command, *repo.args], capture_output=True, text=True,
                          env=_env(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0"), timeout=120)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert tree(repo.root) == before
