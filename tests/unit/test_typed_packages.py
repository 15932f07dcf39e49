"""A user's type checker reads the library's hints: every package ships a ``py.typed``
marker (PEP 561), or mypy skips it ("module is installed, but missing library stubs or
py.typed marker") and every call into it goes unchecked."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_marked_typed_and_ships_the_marker() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = config["tool"]["setuptools"]
    packages = [pattern.rstrip("*") for pattern in setuptools["packages"]["find"]["include"]]
    assert packages, "no packages listed"
    for package in packages:
        assert (ROOT / package / "py.typed").is_file(), f"{package} has no py.typed"
    assert "py.typed" in setuptools["package-data"]["*"]


def test_a_users_code_is_checked_against_the_librarys_hints(tmp_path: Path) -> None:
    """A handler of the wrong type is an error in the user's own mypy run."""
    (tmp_path / "user.py").write_text(
        "from subscriber import Subscriber\n\n\n"
        "def handler(event: int) -> None:\n    pass\n\n\n"
        'Subscriber("orders", "s1", handler=handler)\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "user.py"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert 'Argument "handler" to "Subscriber"' in run.stdout, run.stdout + run.stderr
