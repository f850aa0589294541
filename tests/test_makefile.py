"""The Makefile's environment: outside the project tree by default, with `.venv` a symlink to it (Quarto walks every
file under the project before each render), one per checkout; an older checkout's `.venv` directory kept and used.
Checked with `make -n` and a stand-in installed environment: nothing is installed here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not on PATH")


@pytest.fixture
def checkout(tmp_path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(REPO / name, root / name)
    return root


def make(root: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([MAKE, "--no-print-directory", "-C", str(root), *args, f"VENV_HOME={home}"], capture_output=True, text=True,
                          timeout=60)


def test_a_new_checkout_gets_an_environment_outside_its_tree_and_a_symlink_to_it(checkout, tmp_path):
    home = tmp_path / "cache"
    venv = home / ("venv" + str(checkout).replace("/", "-"))
    plan = make(checkout, "-n", "test", home=home).stdout
    assert f"python3 -m venv {venv}" in plan and f"{venv}/bin/python -m pytest" in plan
    venv.mkdir(parents=True)
    (venv / ".installed").touch()  # as if installed: `make env` only links it
    assert make(checkout, "env", home=home).returncode == 0
    assert (checkout / ".venv").is_symlink() and (checkout / ".venv").resolve() == venv.resolve()
    assert make(checkout, "env", home=home).returncode == 0 and (checkout / ".venv").resolve() == venv.resolve()
    assert f"{venv}/bin/python -m pytest" in make(checkout, "-n", "test", home=home).stdout


def test_an_older_checkouts_environment_directory_is_kept_and_used(checkout, tmp_path):
    (checkout / ".venv").mkdir()
    (checkout / ".venv" / ".installed").touch()
    plan = make(checkout, "-n", "test", home=tmp_path / "cache").stdout
    assert plan.strip().splitlines()[-1] == ".venv/bin/python -m pytest"
    assert "python3 -m venv" not in plan and not (tmp_path / "cache").exists()
