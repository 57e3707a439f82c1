"""Whole lowering, stock vs accelerated in one process, split by phase.

    python benches/pipeline.py --models llama4,dscnnkws [--repeat 2] [--out PREFIX]

Each model is built with seeded weights and exported (INT: quantized) once; every lowering gets
its own deep copy. Sides alternate (stock first, then accelerated first on the next repeat) and
the fastest run of each side is kept. Per model and side the profiler
(``arm_accel.tools.profiling``) splits the wall time of ``to_edge_transform_and_lower`` into:

- decompositions: ``ExportedProgram.run_decompositions`` (to_edge);
- re-traces: every ``ExportPass`` re-trace (``_ExportPassBase.call``), wherever it runs;
- pass bodies: the passes' own time without their re-traces;
- pipeline setup: ``ArmPassManager.transform_to_backend_pipeline`` outside its passes;
- serialization: ``TOSABackend.preprocess`` outside the passes (node visitors, flatbuffer);
- other: partitioning and the rest of the lowering.

Prints the table with the ratios, whether the TOSA bytes are equal, and the in-place re-traces
of the engine (``arm_accel.stats()``); writes ``<out>.md``, ``<out>.csv`` and ``<out>.png``.
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
PARTS = ("decompositions", "re-traces", "pass bodies", "pipeline setup", "serialization", "other")


def split(profile: Any) -> dict[str, float]:
    """The profile's exclusive seconds grouped into :data:`PARTS`."""
    from arm_accel.tools.profiling import PHASES

    parts = dict.fromkeys(PARTS, 0.0)
    for row in profile.rows.values():
        parts["re-traces"] += row.retrace_seconds
        if row.name == PHASES["run_decompositions"]:
            key = "decompositions"
        elif row.name == PHASES["transform_to_backend_pipeline"]:
            key = "pipeline setup"
        elif row.name == PHASES["preprocess"]:
            key = "serialization"
        elif row.kind == "phase":
            key = "other"
        else:
            key = "pass bodies"
        parts[key] += row.seconds - (row.retrace_seconds if key == "pass bodies" else 0.0)
    return parts


def run(name: str, repeat: int) -> dict[str, Any]:
    import arm_accel
    from arm_accel.tools import models, profiling

    net, inputs, mode = models.build(name)
    exported = models.export_for_arm(net, inputs, mode)
    best: dict[bool, tuple[float, dict[str, float], list[bytes], int]] = {}
    for i in range(repeat):
        for stock in (True, False) if i % 2 == 0 else (False, True):
            arm_accel.reset_stats()
            gc.collect()
            edge, prof, seconds = profiling.lower_profiled(exported, mode, stock_run=stock)
            entries = arm_accel.stats().items()
            in_place = sum(v.accelerated for k, v in entries if k.endswith(".retrace"))
            if stock not in best or seconds < best[stock][0]:
                best[stock] = (seconds, split(prof), models.tosa_bytes(edge), in_place)
            del edge
    (s_sec, s_parts, s_tosa, _), (a_sec, a_parts, a_tosa, in_place) = best[True], best[False]
    row: dict[str, Any] = {
        "model": name,
        "stock_s": round(s_sec, 2),
        "accel_s": round(a_sec, 2),
        "ratio": round(s_sec / a_sec, 2),
        "tosa_equal": s_tosa == a_tosa,
        "in_place_retraces": in_place,
    }
    for part in PARTS:
        row[f"{part} stock"] = round(s_parts[part], 2)
        row[f"{part} accel"] = round(a_parts[part], 2)
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    out = [
        "| model | stock s | accel s | ratio | TOSA equal | in-place re-traces | "
        + " | ".join(f"{p} (stock -> accel)" for p in PARTS)
        + " |",
        "|---|--:|--:|--:|---|--:|" + "--:|" * len(PARTS),
    ]
    for r in rows:
        parts = " | ".join(f"{r[f'{p} stock']} -> {r[f'{p} accel']}" for p in PARTS)
        out.append(
            f"| {r['model']} | {r['stock_s']} | {r['accel_s']} | **{r['ratio']}x** | "
            f"{'yes' if r['tosa_equal'] else 'NO'} | {r['in_place_retraces']} | {parts} |"
        )
    return "\n".join(out) + "\n"


def plot(rows: list[dict[str, Any]], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the plot is optional
        return
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(rows), 4.5))
    labels = []
    for i, r in enumerate(rows):
        for j, side in enumerate(("stock", "accel")):
            bottom = 0.0
            for k, part in enumerate(PARTS):
                value = r[f"{part} {side}"]
                ax.bar(
                    2.5 * i + j,
                    value,
                    bottom=bottom,
                    color=f"C{k}",
                    label=part if i == 0 and j == 0 else None,
                )
                bottom += value
            labels.append((2.5 * i + j, f"{r['model']}\n{side}"))
    ax.set_xticks([x for x, _ in labels], [t for _, t in labels], fontsize=8)
    ax.set_ylabel("seconds (fastest run)")
    ax.set_title("Lowering split by phase, stock vs arm-accel")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="dscnnkws,llama2")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "pipeline"))
    args = parser.parse_args(argv)
    import executorch.backends.arm._passes  # noqa: F401 - activation

    rows = []
    for name in args.models.split(","):
        rows.append(run(name, args.repeat))
        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    table = markdown(rows)
    with open(args.out + ".md", "w") as f:
        f.write(table)
    with open(args.out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, args.out + ".png")
    print(table)
    return 0 if all(r["tosa_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
