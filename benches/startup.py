"""Start-up overhead of the transparent-activation hook.

Times ``python -c pass`` in two fresh venvs made from the base interpreter with
``--system-site-packages``: one without and one with the arm-accel wheel installed (so with
``arm_accel_hook.pth``). Runs are interleaved in one benchmark run so load changes hit both alike.
Prints wall-clock and CPU (user+sys of the child) medians/means/mins and their differences; exits
1 if the median difference is >= the budget (CPU time when the machine is loaded, wall otherwise).

    python benches/startup.py [--wheel dist/arm_accel-*.whl] [--reps 300] [--budget-ms 5]

Without ``--wheel`` it builds one with ``maturin build --release``.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
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


def time_once(py: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+sys) of one ``python -c pass``."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([str(py), "-c", "pass"], env=env, check=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


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
        cpu: dict[str, list[float]] = {"without": [], "with": []}
        pys = {"without": without, "with": with_}
        for name in runs:  # warm the page cache / pyc files
            for _ in range(5):
                time_once(pys[name], env)
        for _ in range(args.reps):
            order = list(runs)
            random.shuffle(order)
            for name in order:
                wall, cpu_s = time_once(pys[name], env)
                runs[name].append(wall)
                cpu[name].append(cpu_s)

    def ms(xs: list[float], f) -> float:  # noqa: ANN001
        return 1000 * f(xs)

    for label, data in (("wall", runs), ("cpu", cpu)):
        for name, xs in data.items():
            print(
                f"{label:>4} {name:>7} wheel: median {ms(xs, statistics.median):7.2f} ms  "
                f"mean {ms(xs, statistics.fmean):7.2f} ms  min {ms(xs, min):7.2f} ms  "
                f"(n={len(xs)})"
            )
    d = {
        label: (
            ms(data["with"], statistics.median) - ms(data["without"], statistics.median),
            ms(data["with"], statistics.fmean) - ms(data["without"], statistics.fmean),
        )
        for label, data in (("wall", runs), ("cpu", cpu))
    }
    for label, (d_med, d_mean) in d.items():
        print(
            f"difference {label:>4} (with - without): median {d_med:+.2f} ms  mean {d_mean:+.2f} ms"
        )
    print(
        f"load average: {os.getloadavg()}; budget {args.budget_ms} ms on the median; the CPU-time"
    )
    print("figure (user+sys of the child) is the one that holds on a shared, loaded machine")
    d_med = d["cpu"][0] if os.getloadavg()[0] > (os.cpu_count() or 1) else d["wall"][0]
    return 0 if d_med < args.budget_ms else 1


if __name__ == "__main__":
    sys.exit(main())
