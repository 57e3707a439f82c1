"""The three ``run_decompositions`` calls of ``to_edge_transform_and_lower`` on the Arm path.

Measure (default): per zoo model and call, the seconds; the same call run again (after the
profiled run, so warm) with deep copies and then with provenance records sharing their ancestors
(``arm_accel.edge.provenance``); the nodes the call changes (structure compared up to renaming;
renamed nodes counted apart; the rewritten nodes listed after the table) and where the time goes
inside (a profiled run of the same call on the same input, tottime grouped by the code it is
spent in). Stock's calls (acceleration off); sharing is switched on for its own run only.

``--compare``: the decomposition phase (the three calls) stock vs accelerated in one process,
each model lowered once per side, ratio printed, TOSA bytes compared (``--edge-only``: the edge
stage only, no TOSA).

    python benches/decompositions.py dscnnkws llama1 llama2
    python benches/decompositions.py --compare dscnnkws llama2
    python benches/decompositions.py --compare --edge-only llama8
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from arm_accel import models, patches
from arm_accel.edge import provenance
from torch import fx
from torch.export import ExportedProgram

CALL_NAMES = ("functionalize {}", "table - preserved", "full table")

#: (column, file fragment, function name): inclusive time (cumtime of the outermost call) of
#: these functions, as a share of the call. Columns nest (trace contains fake dispatch ...).
GROUPS: tuple[tuple[str, str, str], ...] = (
    ("unlift ep.module()", "torch/export/exported_program.py", "module"),
    ("trace _export_to_aten_ir", "torch/export/_trace.py", "_export_to_aten_ir"),
    ("fake dispatch", "torch/_subclasses/fake_tensor.py", "__torch_dispatch__"),
    ("NodeSource provenance", "torch/fx/traceback.py", "__init__"),
    ("deepcopy (meta)", "copy.py", "deepcopy"),
    ("new ExportedProgram + verifier", "torch/export/exported_program.py", "__init__"),
)
#: Self time (tottime) spent in decomposition functions.
DECOMP_FILES = ("torch/_decomp/", "torch/_refs/", "torch/_prims")


def profile_groups(fn: Callable[[], Any]) -> dict[str, float]:
    """Shares of one profiled run of ``fn``: each GROUPS column, and "decomposition fns"."""
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.runcall(fn)
    whole = time.perf_counter() - t0
    shares: Counter[str] = Counter()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    for (path, _line, func), (_cc, _nc, tt, ct, _callers) in stats.items():
        for column, fragment, name in GROUPS:
            if func == name and path.endswith(fragment):
                shares[column] += ct / whole
        if any(f in path for f in DECOMP_FILES):
            shares["decomposition fns"] += tt / whole
    return dict(shares)


def _signatures(gm: fx.GraphModule) -> list[tuple[Any, ...]]:
    """A structural key per node: op, target, args/kwargs with nodes replaced by their key
    index (so renaming alone changes nothing); placeholders keyed by name."""
    keys: dict[fx.Node, int] = {}
    table: dict[tuple[Any, ...], int] = {}
    out = []
    for n in gm.graph.nodes:

        def norm(a: Any) -> Any:
            if isinstance(a, fx.Node):
                return ("n", keys[a])
            if isinstance(a, (list, tuple)):
                return (type(a).__name__, tuple(norm(x) for x in a))
            if isinstance(a, dict):
                return tuple(sorted((k, norm(v)) for k, v in a.items()))
            return repr(a)

        key = (
            n.op,
            n.name if n.op == "placeholder" else str(n.target),
            norm(n.args),
            norm(n.kwargs),
        )
        keys[n] = table.setdefault(key, len(table))
        out.append(key)
    return out


def changed_nodes(before: fx.GraphModule, after: fx.GraphModule) -> tuple[int, int, str]:
    """(removed, added, renamed): call targets of ``before`` gone from ``after`` and new ones
    (multisets); "renamed" is how many names differ when the two graphs are structurally
    identical node for node, else "-"."""

    def targets(gm: fx.GraphModule) -> Counter[str]:
        return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")

    ta, tb = targets(before), targets(after)
    removed, added = sum((ta - tb).values()), sum((tb - ta).values())
    if _signatures(before) != _signatures(after):
        return removed, added, "-"
    renamed = sum(
        1 for x, y in zip(before.graph.nodes, after.graph.nodes, strict=True) if x.name != y.name
    )
    return removed, added, str(renamed)


def target_rewrites(before: fx.GraphModule, after: fx.GraphModule) -> Counter[str]:
    """``"old -> new, ..."`` per call node of ``before`` that ``after`` does not hold as one
    node of the same target: ``after``'s nodes grouped by the input node their provenance
    names (``from_node[0]``: the unlifted copy, named as in the input)."""
    made: dict[str, list[str]] = {}
    for n in after.graph.nodes:
        if n.op == "call_function" and n.meta.get("from_node"):
            made.setdefault(n.meta["from_node"][0].name, []).append(str(n.target))
    rewrites: Counter[str] = Counter()
    for n in before.graph.nodes:
        if n.op != "call_function":
            continue
        outs = made.get(n.name, [])
        if outs != [str(n.target)]:
            rewrites[f"{n.target} -> {', '.join(sorted(outs)) or '(none)'}"] += 1
    return rewrites


@contextmanager
def recording(profile: bool) -> Iterator[list[dict[str, Any]]]:
    """Record every ``ExportedProgram.run_decompositions`` call made inside the block."""
    stock = ExportedProgram.run_decompositions
    rows: list[dict[str, Any]] = []

    def recorder(self: ExportedProgram, decomp_table: Any = None, *args: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        result = stock(self, decomp_table, *args, **kw)
        seconds = time.perf_counter() - t0
        row: dict[str, Any] = {
            "seconds": seconds,
            "nodes": len(self.graph.nodes),
            "changed": changed_nodes(self.graph_module, result.graph_module),
            "rewrites": target_rewrites(self.graph_module, result.graph_module),
        }
        if profile:
            row["groups"] = profile_groups(lambda: stock(self, decomp_table, *args, **kw))
            # the same call again, warm like the profiled run: deep copies, then shared records
            for key in ("warm seconds", "shared seconds"):
                with provenance.sharing() if key == "shared seconds" else nullcontext():
                    t0 = time.perf_counter()
                    stock(self, decomp_table, *args, **kw)
                    row[key] = time.perf_counter() - t0
        rows.append(row)
        return result

    ExportedProgram.run_decompositions = recorder  # type: ignore[method-assign]
    try:
        yield rows
    finally:
        ExportedProgram.run_decompositions = stock  # type: ignore[method-assign]


@contextmanager
def edge_stage_only() -> Iterator[None]:
    """Stop ``to_edge_transform_and_lower`` right after its decomposition stage."""
    import executorch.exir.program._program as prog

    original = prog._gen_edge_manager_for_partitioners

    class _Stop(Exception):
        pass

    def stop_after(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise _Stop

    prog._gen_edge_manager_for_partitioners = stop_after
    try:
        yield
    except _Stop:
        pass
    finally:
        prog._gen_edge_manager_for_partitioners = original


def measure(name: str) -> list[dict[str, Any]]:
    """Stock's calls (acceleration off) of one lowering, recorded."""
    import arm_accel

    patches.install(("edge.provenance",))
    model, inputs, mode = models.build(name)
    exported = models.export_for_arm(model, inputs, mode)
    with arm_accel.disabled(), recording(profile=True) as rows, edge_stage_only():
        models.lower(exported, mode)
    return rows


def print_measure(names: list[str]) -> None:
    group_names = [g for g, _, _ in GROUPS] + ["decomposition fns"]
    print(
        "| model | call | nodes | seconds | again | shared provenance | "
        "targets removed / added / renamed (same structure) | " + " | ".join(group_names) + " |"
    )
    print("|---|---|--:|--:|--:|--:|--:|" + "--:|" * len(group_names))
    rewrites: list[str] = []
    for name in names:
        for i, row in enumerate(measure(name)):
            call = CALL_NAMES[i] if i < len(CALL_NAMES) else f"call {i}"
            groups = row["groups"]
            cells = " | ".join(f"{100 * groups.get(g, 0.0):.0f}%" for g in group_names)
            r, a, n = row["changed"]
            print(
                f"| {name} | {i}: {call} | {row['nodes']} | {row['seconds']:.2f} | "
                f"{row['warm seconds']:.2f} | {row['shared seconds']:.2f} | {r} / {a} / {n} | "
                f"{cells} |",
                flush=True,
            )
            listed = "; ".join(f"{c} x {k}" for k, c in sorted(row["rewrites"].items()))
            rewrites.append(f"- {name} call {i}: {listed or 'none'}")
    print("\nNodes rewritten (input node -> the output nodes its provenance names):")
    print("\n".join(rewrites))


def _phase_seconds(
    exported: Any, mode: str, edge_only: bool = False
) -> tuple[float, float, list[bytes] | None, Any]:
    """One full lowering (or its edge stage only): seconds inside the decomposition calls
    (whatever implementation is installed), seconds of the whole lowering, the TOSA bytes (None
    with ``edge_only``) and the edge stage's program."""
    import executorch.exir.program._program as prog

    spent = [0.0]
    staged: list[Any] = []
    inner = ExportedProgram.run_decompositions
    generate = prog._generate_edge_program

    def timed(self: ExportedProgram, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0

    def recording(config: Any, program: Any, *args: Any, **kwargs: Any) -> Any:
        staged.append(program)
        return generate(config, program, *args, **kwargs)

    ExportedProgram.run_decompositions = timed  # type: ignore[method-assign]
    prog._generate_edge_program = recording
    try:
        t0 = time.perf_counter()
        if edge_only:
            with edge_stage_only():
                models.lower(exported, mode)
            edge = None
        else:
            edge = models.lower(exported, mode)
        whole = time.perf_counter() - t0
    finally:
        ExportedProgram.run_decompositions = inner  # type: ignore[method-assign]
        prog._generate_edge_program = generate
    return spent[0], whole, None if edge is None else models.tosa_bytes(edge), staged[0]


def compare(names: list[str], edge_only: bool = False, repeat: int = 1) -> None:
    """Stock and accelerated in one process, after one untimed stock lowering of a small model
    (the first lowering of a process differs from later ones: one-time costs, and stock
    annotates ``custom`` on a node only then, e.g. dscnnkws' relu 66). ``repeat`` rounds per
    model, alternating which side goes first; the fastest round per side is printed (the
    machine is shared), differences and TOSA from the last round (with ``repeat`` >= 2 both
    sides have lowered the model once before it: a kernel that annotates ``custom`` the first
    time it meets an op and shape in the process, e.g. the relus of deepautoencoder and
    mobilenetv1025, does so for whichever side lowers first, stock or not). Each side lowers its
    own export of the model (stock lowering mutates an FP llama's exported program, so one
    program cannot be lowered twice). ``edge_only``: stop after the edge stage (no TOSA; for models
    whose whole lowering takes too long on a shared machine)."""
    import arm_accel
    import executorch.backends.arm._passes  # noqa: F401  (triggers the activation)
    from arm_accel.devtools.program_compare import program_differences
    from arm_accel.edge.decompositions import STATS_NAME

    arm_accel.enable()
    model, inputs, mode = models.build("dscnnkws")
    with arm_accel.disabled():
        _phase_seconds(models.export_for_arm(model, inputs, mode), mode)
    print(
        "| model | decompositions stock | accelerated | ratio | lowering stock | accelerated "
        "| ratio | calls replayed | edge program differences | TOSA equal |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|---|")
    for name in names:
        model, inputs, mode = models.build(name)
        runs: dict[bool, list[tuple[float, float, list[bytes] | None, Any]]] = {
            True: [],
            False: [],
        }
        before = arm_accel.stats().get(STATS_NAME, arm_accel.PassStats()).accelerated
        for round_ in range(repeat):
            for accelerated in (True, False) if round_ % 2 == 0 else (False, True):
                with arm_accel.enabled() if accelerated else arm_accel.disabled():
                    runs[accelerated].append(
                        _phase_seconds(models.export_for_arm(model, inputs, mode), mode, edge_only)
                    )
        after = arm_accel.stats().get(STATS_NAME, arm_accel.PassStats()).accelerated
        replayed = (after - before) / repeat
        a_phase, a_whole = min(r[0] for r in runs[True]), min(r[1] for r in runs[True])
        s_phase, s_whole = min(r[0] for r in runs[False]), min(r[1] for r in runs[False])
        (_, _, a_bytes, a_prog), (_, _, s_bytes, s_prog) = runs[True][-1], runs[False][-1]
        diffs = len(program_differences(s_prog, a_prog, separately_exported=True))
        print(
            f"| {name} | {s_phase:.2f} s | {a_phase:.2f} s | {s_phase / a_phase:.2f}x | "
            f"{s_whole:.1f} s | {a_whole:.1f} s | {s_whole / a_whole:.2f}x | {replayed:g} | "
            f"{diffs} | {'n/a' if edge_only else s_bytes == a_bytes} |",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["dscnnkws", "llama1", "llama2"])
    parser.add_argument("--compare", action="store_true")
    parser.add_argument(
        "--edge-only", action="store_true", help="--compare: stop after the edge stage"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="--compare: rounds per model (fastest printed)"
    )
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    if args.compare:
        compare(args.models, args.edge_only, args.repeat)
    else:
        print_measure(args.models)
    return 0


if __name__ == "__main__":
    sys.exit(main())
