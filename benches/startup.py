"""Start-up overhead of the transparent-activation hook (issue 5).

Times ``python -c pass`` in two fresh venvs made from the base interpreter with
``--system-site-packages``: one without and one with the arm-accel wheel installed (so with
``arm_accel_hook.pth``). Runs are interleaved in one benchmark run so load changes hit both alike.
Prints medians/means/mins and the difference; exits 1 if the median difference is >= the budget.

    python benches/startup.py [--wheel dist/arm_accel-*.whl] [--reps 300] [--budget-ms 5]

Without ``--wheel`` it builds one with ``maturin build --release``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def base_python() -> str:
    for name in ("python3", "python"):
        cand = Path(sys.base_prefix) / "bin" / name
        if cand.exists():
            return str(cand)
    raise SystemExit("base interpreter not found")


def build_wheel(out: Path) -> Path:
    maturin = shutil.which("maturin")
    cmd = [maturin] if maturin else [sys.executable, "-m", "maturin"]
    subprocess.run([*cmd, "build", "--release", "-q", "-o", str(out)], cwd=ROOT, check=True)
    return next(out.glob("arm_accel-*.whl"))


def make_venv(path: Path, wheel: Path | None) -> Path:
    subprocess.run([base_python(), "-m", "venv", "--system-site-packages", str(path)], check=True)
    py = path / "bin" / "python"
    if wheel is not None:
        subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
            check=True,
        )
    return py


def time_once(py: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(py), "-c", "pass"], env=env, check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path)
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--budget-ms", type=float, default=5.0)
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ARM_ACCEL")}
    with tempfile.TemporaryDirectory(prefix="arm-accel-startup-") as tmp:
        tmp_path = Path(tmp)
        wheel = args.wheel or build_wheel(tmp_path / "dist")
        without = make_venv(tmp_path / "without", None)
        with_ = make_venv(tmp_path / "with", wheel)
        check = (
            "import sys; print(any(type(f).__name__ == 'ArmAccelFinder' for f in sys.meta_path))"
        )
        hooked = subprocess.run(
            [str(with_), "-c", check], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        if hooked != "True":
            raise SystemExit("the hook is not active in the venv with the wheel")

        runs: dict[str, list[float]] = {"without": [], "with": []}
        pys = {"without": without, "with": with_}
        for name in runs:  # warm the page cache / pyc files
            for _ in range(5):
                time_once(pys[name], env)
        for _ in range(args.reps):
            order = list(runs)
            random.shuffle(order)
            for name in order:
                runs[name].append(time_once(pys[name], env))

    def ms(xs: list[float], f) -> float:  # noqa: ANN001
        return 1000 * f(xs)

    for name, xs in runs.items():
        print(
            f"{name:>8} wheel: median {ms(xs, statistics.median):7.2f} ms  "
            f"mean {ms(xs, statistics.fmean):7.2f} ms  min {ms(xs, min):7.2f} ms  (n={len(xs)})"
        )
    d_med = ms(runs["with"], statistics.median) - ms(runs["without"], statistics.median)
    d_min = ms(runs["with"], min) - ms(runs["without"], min)
    d_mean = ms(runs["with"], statistics.fmean) - ms(runs["without"], statistics.fmean)
    print(
        f"difference (with - without): median {d_med:+.2f} ms  mean {d_mean:+.2f} ms  "
        f"min {d_min:+.2f} ms  budget {args.budget_ms} ms"
    )
    return 0 if d_med < args.budget_ms else 1


if __name__ == "__main__":
    sys.exit(main())
