"""Installed-wheel test: build the wheel, install it into a fresh venv, run an
unmodified lowering script, and check that our passes ran and the TOSA bytes equal stock's; and
that the wheel ships its types (``py.typed``: ``mypy --strict`` reads them from the wheel).

The venv is created from the BASE interpreter (``sys.base_prefix``), and a ``.pth`` file puts this
run's own site-packages on its path: torch/executorch are visible (they need not be installed in
the base interpreter), our editable install is not (a path line does not run the ``.pth`` files
of the directory it adds, and the editable install is one). Takes about
a minute or two (wheel build, venv, two lowerings), so it is marked ``slow`` but stays in the
default run; deselect with ``-m "not slow"``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

# A plain user script: lowers a small conv/linear model with executorch's TOSAPartitioner and
# does not import arm_accel until the very end, when it reports what happened.
LOWERING_SCRIPT = r"""
import hashlib, json, sys
import torch
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.lowered_backend_module import get_lowered_submodules

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.lin = torch.nn.Linear(8, 16)

    def forward(self, x):
        y = self.conv(x).relu()                      # 1x8x8x8
        y = y.permute(0, 2, 3, 1).reshape(1, 64, 8)  # NHWC tokens
        y = self.lin(y).reshape(1, 8, 8, 16).permute(0, 3, 1, 2)
        return y.sigmoid().reshape(1, 16, 64).transpose(1, 2)

torch.manual_seed(0)
model = Net().eval()
inputs = (torch.randn(1, 3, 8, 8),)
ep = torch.export.export(model, inputs)
edge = to_edge_transform_and_lower(
    ep, partitioner=[TOSAPartitioner(TosaCompileSpec("TOSA-1.0+FP"))]
)
gm = edge.exported_program().graph_module
blobs = [bytes(m.processed_bytes) for _, m, _ in get_lowered_submodules(gm)]

import arm_accel  # only now
from arm_accel.patches import table
print("REPORT" + json.dumps({
    "tosa_sha256": [hashlib.sha256(b).hexdigest() for b in blobs],
    "stats": arm_accel.stats().as_dict(),
    "status": arm_accel.status().as_dict(),
    "registry": {r.name: r.replacement for r in table.group("passes").rows},
    "arm_accel_file": arm_accel.__file__,
}))
"""


def _base_python() -> str:
    for name in ("python3", "python"):
        cand = Path(sys.base_prefix) / "bin" / name
        if cand.exists():
            return str(cand)
    pytest.skip("base interpreter not found")


def _stack_paths() -> list[str]:
    """The site-packages directories of the interpreter running the tests (the stack: torch,
    executorch, tosa-tools, mypy)."""
    paths = sysconfig.get_paths()
    return sorted({paths["purelib"], paths["platlib"]})


def _maturin() -> list[str]:
    exe = shutil.which("maturin")
    if exe:
        return [exe]
    return [sys.executable, "-m", "maturin"]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    subprocess.run(
        [*_maturin(), "build", "--release", "-q", "-o", str(dist)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=900,
    )
    (wheel,) = dist.glob("arm_accel-*.whl")
    venv = tmp / "venv"
    subprocess.run([_base_python(), "-m", "venv", str(venv)], check=True, timeout=300)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "_test_stack.pth").write_text("\n".join(_stack_paths()) + "\n")
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    return venv


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("ARM_ACCEL", None)
    env.update(extra)
    return env


def _run(venv: Path, tmp: Path, **extra: str) -> dict:
    script = tmp / "lower_script.py"
    script.write_text(LOWERING_SCRIPT)
    proc = subprocess.run(
        [str(venv / "bin" / "python"), str(script)],
        cwd=tmp,
        env=_env(**extra),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT"))
    return json.loads(line[len("REPORT") :])


def test_pth_at_site_packages_root(wheel_venv: Path) -> None:
    (pth,) = wheel_venv.glob("lib/python*/site-packages/arm_accel_hook.pth")
    assert "arm_accel.bootstrap.hook" in pth.read_text()


def test_no_torch_import_at_startup(wheel_venv: Path) -> None:
    code = (
        "import sys; print('torch' in sys.modules, "
        "any(type(f).__name__ == 'ArmAccelFinder' for f in sys.meta_path))"
    )
    out = subprocess.run(
        [str(wheel_venv / "bin" / "python"), "-c", code],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["False", "True"]


def test_release_wheel_has_no_test_only_bindings(wheel_venv: Path) -> None:
    """The wheel is built without the cargo feature ``testing``: none of the test-only bindings
    is in its extension, and the extension says so."""
    code = (
        "from arm_accel import _native; print(_native.TESTING, [n for n in "
        "('plan_propagation_scan', 'ViewMap', 'PermuteMap', 'duplicate_user_candidates', "
        "'_test_panic') if hasattr(_native, n)], hasattr(_native, 'plan_propagation_run'))"
    )
    out = subprocess.run(
        [str(wheel_venv / "bin" / "python"), "-c", code],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["False", "[]", "True"]


def test_lowering_script_accelerated_and_identical(wheel_venv: Path, tmp_path: Path) -> None:
    on = _run(wheel_venv, tmp_path)
    off = _run(wheel_venv, tmp_path, ARM_ACCEL="0")

    # The installed wheel, not the editable checkout, was used.
    assert "site-packages" in on["arm_accel_file"], on["arm_accel_file"]
    assert on["status"]["activated"] is True, on["status"]
    assert off["status"]["activated"] is False and off["stats"] == {}
    assert on["tosa_sha256"] and on["tosa_sha256"] == off["tosa_sha256"]

    registry = on["registry"]
    if registry:
        assert set(on["status"]["swapped"]) | set(on["status"]["skipped"]) == set(registry)
        ran = {name: s for name, s in on["stats"].items() if name in registry and s["calls"]}
        assert ran, (on["stats"], on["status"])


def test_wheel_ships_its_types(wheel_venv: Path, tmp_path: Path) -> None:
    """The wheel carries ``py.typed`` and the native stub, and ``mypy --strict`` reads the public
    API's types from the installed wheel as from the editable install (test_public_api)."""
    from test_public_api import check_typed_api

    (site,) = wheel_venv.glob("lib/python*/site-packages")
    assert (site / "arm_accel" / "py.typed").is_file()
    assert (site / "arm_accel" / "_native.pyi").is_file()
    check_typed_api(str(wheel_venv / "bin" / "python"), tmp_path)
