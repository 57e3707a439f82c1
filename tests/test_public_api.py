"""The typed public API: ``mypy --strict`` on user scripts against the installed
package, and the runtime names behind the declared ones."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import arm_accel
import pytest

DATA = Path(__file__).parent / "data"


def mypy_strict(python: str, cwd: Path, *scripts: Path) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` on ``scripts`` resolving ``arm_accel`` as ``python`` imports it (from
    its site-packages, as a user's mypy would; ``cwd`` has no ``arm_accel`` of its own)."""
    pytest.importorskip("mypy", reason="mypy is not installed (scripts/setup.sh installs it)")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--no-error-summary"]
        + ["--python-executable", python, "--cache-dir", os.devnull]
        + [str(s) for s in scripts],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def expected_errors(script: Path) -> set[int]:
    """Line numbers marked ``# line N:`` in ``script`` (one expected error each)."""
    return {int(m) for m in re.findall(r"# line (\d+):", script.read_text())}


def check_typed_api(python: str, cwd: Path) -> None:
    """The well-typed script passes; the mistyped one fails on exactly its marked lines."""
    good, bad = DATA / "typed_user_script.py", DATA / "mistyped_user_script.py"
    proc = mypy_strict(python, cwd, good, bad)
    errors = re.findall(r"^(.+?):(\d+): error: (.*)$", proc.stdout, re.M)
    assert proc.returncode == 1 and errors, proc.stdout + proc.stderr
    assert not [e for e in errors if Path(e[0]).name == good.name], proc.stdout
    assert {int(line) for _, line, _ in errors} == expected_errors(bad), proc.stdout


def test_mypy_strict_accepts_the_public_api(tmp_path: Path) -> None:
    """``mypy --strict`` against the editable install: no error on a script using every public
    function and record; an error on each misuse of the mistyped script (types are read)."""
    check_typed_api(sys.executable, tmp_path)


def test_every_exported_name_resolves() -> None:
    """Each name of ``arm_accel.__all__`` exists at run time, and the public functions return the
    records their annotations name."""
    for name in arm_accel.__all__:
        assert getattr(arm_accel, name) is not None, name
    assert isinstance(arm_accel.stats(), arm_accel.Stats)
    assert isinstance(arm_accel.status(), arm_accel.Status)
    for fn in (arm_accel.stats, arm_accel.status):
        assert inspect.signature(fn).return_annotation == type(fn()).__name__
