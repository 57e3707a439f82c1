"""End-to-end lowering benchmark: the model zoo lowered stock and accelerated in one run.

    python benches/lowering.py                 # the full zoo (long: tens of minutes)
    python benches/lowering.py --quick         # a small FP subset, a few minutes
    python benches/lowering.py --models convnet,transformer1

Every model is built in code with seeded weights (``arm_accel.tools.models.ZOO``), exported (and for
INT quantized) once, and each lowering gets its own deep copy of the exported program. The
stock lowering runs inside ``arm_accel.disabled()``, the accelerated one right after it. Per
model it reports: the node count of the graph entering the first view/permute pass, stock and
accelerated lowering seconds (wall time of ``to_edge_transform_and_lower``), their ratio, the
five view/permute passes' share of lowering time before and after, re-traces before and after,
and whether the TOSA bytes are equal. Writes ``<out>.md``, ``<out>.csv`` and ``<out>.png``
(default out: ``benches/results/lowering``, or ``benches/results/lowering-quick`` with
``--quick``).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))

FULL = [
    "dscnnkws",
    "resnet8",
    "mobilenetv1025",
    "deepautoencoder",
    "llama4",
    "llama8",
    "llama16",
    "transformer1",
    "transformer2",
    "transformer4",
    "transformer8",
    "transformer16",
    "convnet",
    "transformer32",  # last: the slowest stock lowering
]
PROP = "PropagateViewCopyPermutePass"
QUICK = ["convnet", "transformer1", "transformer2", "transformer4"]
WARMUP_MODEL = "convnet"


@dataclass
class Result:
    model: str
    mode: str
    depth: int | None
    nodes: int | None
    stock_s: float
    accel_s: float
    ratio: float
    vp_share_stock: float
    vp_share_accel: float
    vp_stock_s: float
    vp_accel_s: float
    retraces_stock: int
    retraces_accel: int
    # The two propagation passes: inclusive seconds and re-traces per call (the Up
    # pass's calls, then the Down pass's), in-loop fusion re-traces included.
    prop_stock_s: float
    prop_accel_s: float
    prop_retraces_stock: str
    prop_retraces_accel: str
    tosa_bytes: int
    identical: bool
    accelerated_calls: int
    fallbacks: int
    error: str = ""

    @classmethod
    def failed(cls, name: str, mode: str, error: str) -> Result:
        blank = {f.name: "" if f.type == "str" else 0 for f in fields(cls)}
        blank.update(model=name, mode=mode, depth=depth_of(name), nodes=None, identical=False)
        return cls(**{**blank, "error": error})


def depth_of(name: str) -> int | None:
    m = re.fullmatch(r"(?:llama|transformer)(\d+)(?:-fp)?", name)
    return int(m.group(1)) if m else None


def bench_model(name: str, repeat: int = 1) -> Result:
    """Lower ``name`` stock and accelerated, ``repeat`` times each (alternating which goes
    first); every figure is taken from the fastest run of its side."""
    from arm_accel.tools import models, profiling

    model, inputs, mode = models.build(name)
    exported = models.export_for_arm(model, inputs, mode)
    # (TOSA bytes, profile, seconds) per run: only the bytes of an edge program are kept, so no
    # run's garbage or live graphs weigh on the next run's garbage collections.
    stock_runs: list[tuple[Any, Any, float]] = []
    accel_runs: list[tuple[Any, Any, float]] = []
    acc = fb = 0

    def lower(stock_run: bool) -> tuple[Any, Any, float]:
        edge, prof, seconds = profiling.lower_profiled(exported, mode, stock_run)
        return models.tosa_bytes(edge), prof, seconds

    def run_stock() -> None:
        stock_runs.append(lower(stock_run=True))

    def run_accel() -> None:
        nonlocal acc, fb
        before = profiling.stats_snapshot()
        accel_runs.append(lower(stock_run=False))
        a, f = profiling.stats_delta(before, profiling.stats_snapshot())
        acc, fb = acc + (a or 0), fb + (f or 0)

    for i in range(max(1, repeat)):
        order = (run_stock, run_accel) if i % 2 == 0 else (run_accel, run_stock)
        for run in order:
            run()
    bytes_s, prof_s, t_s = min(stock_runs, key=lambda r: r[2])
    bytes_a, prof_a, t_a = min(accel_runs, key=lambda r: r[2])
    # Every run's bytes must match, not only the fastest ones'.
    all_bytes = [r[0] for r in stock_runs + accel_runs]
    vp_s, vp_a = prof_s.view_permute_seconds(), prof_a.view_permute_seconds()
    return Result(
        model=name,
        mode=mode,
        depth=depth_of(name),
        nodes=prof_s.nodes_in,
        stock_s=t_s,
        accel_s=t_a,
        ratio=t_s / t_a if t_a else float("nan"),
        vp_share_stock=vp_s / t_s if t_s else 0.0,
        vp_share_accel=vp_a / t_a if t_a else 0.0,
        vp_stock_s=vp_s,
        vp_accel_s=vp_a,
        retraces_stock=prof_s.retraces,
        retraces_accel=prof_a.retraces,
        prop_stock_s=prof_s.group_seconds(PROP),
        prop_accel_s=prof_a.group_seconds(PROP),
        prop_retraces_stock=",".join(map(str, prof_s.group_retraces_per_call(PROP))),
        prop_retraces_accel=",".join(map(str, prof_a.group_retraces_per_call(PROP))),
        tosa_bytes=sum(len(b) for b in bytes_s),
        identical=all(b == bytes_s for b in all_bytes) and bytes_s == bytes_a,
        accelerated_calls=acc,
        fallbacks=fb,
    )


def machine() -> dict[str, str]:
    from importlib import metadata

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass

    def ver(d: str) -> str:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            return "not found"

    import arm_accel

    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "torch": ver("torch"),
        "executorch": ver("executorch"),
        "arm-accel": str(getattr(arm_accel, "__version__", ver("arm-accel"))),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def write_csv(path: str, results: list[Result]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(asdict(results[0])))
        w.writeheader()
        for r in results:
            w.writerow(asdict(r))


def read_csv(path: str) -> list[Result]:
    """Rows written by :func:`write_csv`, typed again."""
    kinds = {f.name: f.type for f in fields(Result)}
    convert = {"int": int, "float": float, "bool": lambda v: v == "True", "str": str}
    rows = []
    with open(path, newline="") as f:
        for raw in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in raw.items():
                kind = kinds[k].replace(" | None", "")
                row[k] = None if v == "" and "None" in kinds[k] else convert[kind](v)
            rows.append(Result(**row))
    return rows


def merge_csvs(paths: list[str]) -> list[Result]:
    """Rows of several runs; a later file's row replaces an earlier one of the same model."""
    merged: dict[str, Result] = {}
    for path in paths:
        for r in read_csv(path):
            merged[r.model] = r
    return list(merged.values())


def write_md(path: str, results: list[Result], info: dict[str, str], png: str | None) -> None:
    lines = [
        "# Lowering benchmark: stock vs arm-accel",
        "",
        "Generated by `benches/lowering.py`. Machine: "
        + ", ".join(f"{k} {v}" for k, v in info.items())
        + ".",
        "",
        "Seconds are the wall time of `to_edge_transform_and_lower` with the TOSA partitioner "
        "(stock inside `arm_accel.disabled()`, then accelerated; with `--repeat N` the fastest of "
        "N runs per side, alternating which side goes first). *nodes*: nodes of the graph "
        "entering the first view/permute pass. *v/p share*: the five view/permute passes' "
        "inclusive seconds over the lowering seconds. *re-traces*: `ExportPass` re-traces "
        "during the lowering. *accel calls / fallbacks*: from `arm_accel.stats()` over the "
        "accelerated runs.",
        "",
        "| model | mode | nodes | stock s | accel s | ratio | v/p share stock | "
        "v/p share accel | re-traces stock | re-traces accel | accel calls / fallbacks | "
        "TOSA bytes | identical |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.model} | {r.mode} | error: {r.error} ||||||||||| |")
            continue
        lines.append(
            f"| {r.model} | {r.mode} | {r.nodes if r.nodes is not None else '-'} | "
            f"{r.stock_s:.2f} | {r.accel_s:.2f} | {r.ratio:.2f}x | "
            f"{100 * r.vp_share_stock:.1f}% | {100 * r.vp_share_accel:.1f}% | "
            f"{r.retraces_stock} | {r.retraces_accel} | {r.accelerated_calls} / {r.fallbacks} | "
            f"{r.tosa_bytes} | "
            f"{'yes' if r.identical else '**NO**'} |"
        )
    lines += [
        "",
        "## The two propagation passes (PropagateViewCopyPermute{Up,Down}Pass)",
        "",
        "Inclusive seconds in both passes and re-traces per call (the Up pass's calls, then the "
        "Down pass's), the re-traces of the in-loop fusions included.",
        "",
        "| model | stock s | accel s | ratio | re-traces per call stock "
        "| re-traces per call accel |",
        "|---|--:|--:|--:|---|---|",
    ]
    for r in results:
        if not r.error:
            ratio = r.prop_stock_s / r.prop_accel_s if r.prop_accel_s else float("nan")
            lines.append(
                f"| {r.model} | {r.prop_stock_s:.2f} | {r.prop_accel_s:.2f} | {ratio:.1f}x | "
                f"{r.prop_retraces_stock} | {r.prop_retraces_accel} |"
            )
    if png:
        lines += ["", f"![lowering time vs depth]({os.path.basename(png)})"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_all(out: str, results: list[Result]) -> None:
    write_csv(out + ".csv", results)
    png = out + ".png"
    has_png = plot(png, results)
    write_md(out + ".md", results, machine(), png if has_png else None)


def plot(path: str, results: list[Result]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return False
    ok = [r for r in results if not r.error]
    families: dict[str, list[Result]] = {}
    for r in ok:
        if r.depth is not None:
            fam = re.sub(r"\d+", "", r.model) + f" ({r.mode})"
            families.setdefault(fam, []).append(r)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if families:
        for i, (fam, rs) in enumerate(sorted(families.items())):
            rs.sort(key=lambda r: r.depth or 0)
            xs = [r.depth for r in rs]
            color = f"C{i}"
            ax.plot(xs, [r.stock_s for r in rs], "o-", color=color, label=f"{fam} stock")
            ax.plot(xs, [r.accel_s for r in rs], "s--", color=color, label=f"{fam} arm-accel")
        ax.set_xlabel("depth (layers / blocks)")
        ax.set_xscale("log", base=2)
    else:
        xs = list(range(len(ok)))
        ax.bar([x - 0.2 for x in xs], [r.stock_s for r in ok], 0.4, label="stock")
        ax.bar([x + 0.2 for x in xs], [r.accel_s for r in ok], 0.4, label="arm-accel")
        ax.set_xticks(xs, [r.model for r in ok])
    ax.set_ylabel("lowering seconds")
    ax.set_title("Arm/TOSA lowering time: stock vs arm-accel")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {','.join(QUICK)}")
    parser.add_argument("--models", help="comma-separated zoo names (overrides --quick)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="lowerings per side; the fastest counts"
    )
    parser.add_argument("--out", help="output path prefix (default benches/results/lowering)")
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help=f"skip the untimed warm-up lowering of {WARMUP_MODEL}",
    )
    parser.add_argument(
        "--from-csv",
        nargs="+",
        metavar="CSV",
        help="write the table and plot from earlier runs' CSVs (later files' rows win); no run",
    )
    args = parser.parse_args(argv)
    if args.from_csv:
        write_all(args.out or os.path.join(HERE, "results", "lowering"), merge_csvs(args.from_csv))
        return 0

    from arm_accel.tools import models, profiling

    names = args.models.split(",") if args.models else (QUICK if args.quick else FULL)
    unknown = [n for n in names if n not in models.ZOO]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(models.ZOO)}")
    out = args.out or os.path.join(
        HERE, "results", "lowering-quick" if args.quick and not args.models else "lowering"
    )
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    if not profiling.accel_available() or not profiling.ensure_active():
        print(
            "warning: acceleration unavailable or switched off: both runs are stock",
            file=sys.stderr,
        )

    if not args.no_warmup:
        # First-call costs (lazy imports, dispatcher caches) would otherwise land on the first
        # model's stock run.
        print(f"warm-up: lowering {WARMUP_MODEL} (untimed)", file=sys.stderr, flush=True)
        model, inputs, mode = models.build(WARMUP_MODEL)
        models.lower(models.export_for_arm(model, inputs, mode), mode)

    results: list[Result] = []
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            r = bench_model(name, args.repeat)
        except Exception as exc:  # noqa: BLE001 - one failing model must not stop the run
            r = Result.failed(name, models.ZOO[name].mode, f"{type(exc).__name__}: {exc}"[:200])
        results.append(r)
        write_all(out, results)  # after every model: a long run that stops early keeps its rows
        print(
            f"    {time.perf_counter() - start:.0f} s: "
            + (
                r.error
                or f"stock {r.stock_s:.2f} s, accel {r.accel_s:.2f} s, "
                f"{r.ratio:.2f}x, identical={r.identical}"
            ),
            file=sys.stderr,
            flush=True,
        )

    with open(out + ".md") as f:
        print(f.read())
    print(f"wrote {out}.md, {out}.csv, {out}.png", file=sys.stderr)
    bad = [r.model for r in results if r.error or not r.identical]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
