"""Peak memory of table export and of each native kernel.

    python benches/memory.py [--nodes 1000000] [--blocks 4]

- Table export: ``tracemalloc`` peak of ``export_table`` on a real edge graph (a synthetic
  transformer's, exported with ``to_edge``), per node, and extrapolated to ``--nodes``.
- Kernels: the real table tiled (independent copies, indices offset) to ``--nodes`` nodes. Rust
  allocations are invisible to tracemalloc, so each kernel runs in a fresh subprocess that loads
  the table, resets the RSS high-water mark (``/proc/self/clear_refs``), runs the kernel once and
  reports ``VmHWM`` minus the RSS before the call: the kernel's own peak, result arrays included.
  Target: at most 2x the table's bytes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

COLUMNS = (
    "op", "target", "target_class", "in_ptr", "in_idx", "user_ptr", "user_idx", "rank",
    "shape_ptr", "shape", "dtype", "iarg_ptr", "iarg", "flags",
)  # fmt: skip
KERNELS = ("table_counts", "collect_chains", "duplicate_user_candidates", "constant_mask")


def edge_graph(blocks: int):  # -> fx.GraphModule
    import torch
    from arm_accel.tools import models
    from executorch.exir import to_edge

    model, inputs = models.build_synthetic_transformer(blocks)
    edge = to_edge(torch.export.export(model, inputs))
    return edge.exported_program().graph_module


def measure_export(gm) -> tuple[int, int, dict[str, np.ndarray]]:
    """(tracemalloc peak bytes of export_table, node count, the columns)."""
    from arm_accel.native import table

    table.export_table(gm)  # warm caches (target classification)
    tracemalloc.start()
    t = table.export_table(gm)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, len(t), {c: getattr(t, c) for c in COLUMNS}


def tile(cols: dict[str, np.ndarray], nodes: int) -> dict[str, np.ndarray]:
    """``k`` independent copies of the table, about ``nodes`` nodes, still valid."""
    n = len(cols["op"])
    k = max(1, -(-nodes // n))
    out = {c: np.tile(cols[c], k) for c in ("op", "target", "rank", "dtype", "flags")}
    out["target_class"] = cols["target_class"]
    for ptr, flat, offset_flat in (
        ("in_ptr", "in_idx", True),
        ("user_ptr", "user_idx", True),
        ("shape_ptr", "shape", False),
        ("iarg_ptr", "iarg", False),
    ):
        p, f = cols[ptr], cols[flat]
        out[ptr] = np.concatenate(
            [[0], (p[1:][None, :] + np.arange(k)[:, None] * p[-1]).ravel()]
        ).astype(np.int64)
        shift = np.repeat(np.arange(k) * n, len(f)) if offset_flat else 0
        out[flat] = (np.tile(f, k) + shift).astype(np.int64)
    return out


# The child's peak helpers, shared with benches/lowering_memory.py's child.
PEAK_HELPERS = r"""
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise KeyError(key)

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
"""

CHILD = (
    PEAK_HELPERS
    + r"""
import json, sys, types
import numpy as np
from arm_accel import _native

data = np.load(sys.argv[1])
t = types.SimpleNamespace(**{k: np.ascontiguousarray(data[k]) for k in data.files})
keys = np.arange(len(t.target_class), dtype=np.int64)
calls = {
    "table_counts": lambda: _native.table_counts(t),
    "collect_chains": lambda: _native.collect_chains(t, 3),
    "duplicate_user_candidates": lambda: _native.duplicate_user_candidates(t, keys),
    "constant_mask": lambda: _native.constant_mask(t),
}
call = calls[sys.argv[2]]
reset_peak()
before = status("VmRSS:")
result = call()
print(json.dumps({"peak": status("VmHWM:") - before}))
"""
)


class ChildFailed(RuntimeError):
    """A child interpreter exited non-zero (``returncode`` < 0: killed by that signal, e.g.
    -9 by the kernel's out-of-memory killer) or ran out of time (``returncode`` None)."""

    def __init__(self, args: tuple[str, ...], returncode: int | None, stderr: str) -> None:
        super().__init__(f"subprocess {args} failed ({returncode}):\n{stderr[-2000:]}")
        self.returncode = returncode
        self.stderr = stderr


#: The parent's sampling interval of the child's resident and swapped memory (seconds).
SAMPLE_S = 1.0


def _rss_swap(pid: int) -> int:
    """The process's resident plus swapped-out bytes now (0 once it is gone)."""
    total = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmSwap:")):
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


def run_child(
    code: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter and return the JSON object on its last stdout line,
    with ``rss_swap_peak_sampled``: the largest resident plus swapped-out bytes the parent saw
    every :data:`SAMPLE_S` seconds (``VmHWM`` counts resident pages only, so under swap it
    understates the need). :class:`ChildFailed` if it fails or outlives ``timeout`` seconds."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = None if timeout is None else time.monotonic() + timeout
    peak = 0
    while True:
        peak = max(peak, _rss_swap(proc.pid))
        try:
            stdout, stderr = proc.communicate(timeout=SAMPLE_S)
            break
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() > deadline:
                proc.kill()
                _, stderr = proc.communicate()
                raise ChildFailed(args, None, stderr) from None
    if proc.returncode:
        raise ChildFailed(args, proc.returncode, stderr)
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    result["rss_swap_peak_sampled"] = peak
    return result


def kernel_peak(path: Path, kernel: str) -> int:
    return run_child(CHILD, str(path), kernel)["peak"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--blocks", type=int, default=4)
    args = ap.parse_args()

    gm = edge_graph(args.blocks)
    peak, n, cols = measure_export(gm)
    small_bytes = sum(c.nbytes for c in cols.values())
    print(f"table export: graph of {n} nodes (transformer{args.blocks}, edge dialect)")
    print(f"  tracemalloc peak {peak / 1e6:.2f} MB = {peak / n:.0f} B/node", end="; ")
    print(f"table columns {small_bytes / 1e3:.1f} kB")
    print(f"  extrapolated to {args.nodes:,} nodes: {peak / n * args.nodes / 1e6:.0f} MB")

    big = tile(cols, args.nodes)
    table_bytes = sum(c.nbytes for c in big.values())
    nodes = len(big["op"])
    print(f"kernels on the table tiled to {nodes:,} nodes ({table_bytes / 1e6:.1f} MB of columns):")
    print(f"  {'kernel':28} {'peak MB':>8} {'x table':>8}")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "table.npz"
        np.savez(path, **big)
        for kernel in KERNELS:
            k_peak = kernel_peak(path, kernel)
            ratio = k_peak / table_bytes
            worst = max(worst, ratio)
            print(f"  {kernel:28} {k_peak / 1e6:8.1f} {ratio:8.2f}")
    verdict = "within" if worst <= 2.0 else "OVER"
    print(f"worst kernel / table = {worst:.2f} ({verdict} the 2x target)")


if __name__ == "__main__":
    main()
