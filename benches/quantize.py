"""The quantization phase of a user's script (export, ``TOSAQuantizer``, ``prepare_pt2e``,
calibration, ``convert_pt2e``, re-export), stock vs accelerated, side by side in one process.

``search``: every ``HistogramObserver`` of the model after calibration, its parameter search
(``_non_linear_param_search``) stock then accelerated, observer by observer; totals, the
per-observer ratios (min / median / max), and whether every (min, max) is bit-identical.

``observers``: the per-observer view of the same search on generated observers (normal,
uniform, heavy-tailed, bimodal, half-normal, log-normal batches; 2048 and 256 bins; int8 and
int16) and, with ``--load``, the observers ``search --save`` stored: each search timed stock
then accelerated, alternating ``--repeats`` times (the fastest of each side), per group and
overall ratio min / median / max, the slowest ratios with their times and candidates, and
whether every (min, max) is bit-identical. ``--stepwise`` times the stepwise search (the
one-call search's fallback) instead; ``--warm`` runs each side's repeats in a row (each search
then runs with the caches its own previous run left, not the other side's).

``calibrate``: one prepared model copied twice, each calibration batch fed to the stock copy
then to the accelerated one; the calibration seconds, the seconds inside
``HistogramObserver.forward``, and whether every observer's state is bit-identical after.

``phase`` (default): the whole phase, each stage stock then accelerated; seconds per stage,
ratios, and whether the converted modules' q/dq nodes and the re-exported programs are equal.
``--own-process N`` runs each side in its own interpreter instead (``phase-side``), alternating
N times: the stages' seconds of every run, and whether the q/dq nodes and the re-exported
program's code have the same digest in every run.

``guards``: the export and the re-export with the ``export.guard_cse`` rows off (stock's
``PyExprCSEPass``) and on, alternating ``--repeats`` times in one process (the rest of arm-accel on
for both): wall seconds, the seconds inside dynamo's ``build_guard_function``, and whether every
guard function it built is the same.

``header``: a model's first ``torch.export`` in a fresh process with the
``export.dynamo_header`` row off (stock's ``_create_proxy`` composes every location header) and
on, each in its own interpreter, alternating ``--repeats`` times: export seconds, the seconds
inside dynamo's ``funcname_cache`` (tokenizing each traced source file), and whether the
programs' code and nodes' stack traces have the same digest in every run.

``reexport``: the re-export of one converted module with the ``export.dynamo_meta`` row off
(stock's ``_create_proxy``) and on, alternating ``--repeats`` times in one process (the rest of
arm-accel on for both): wall seconds, the seconds inside dynamo's ``SubgraphTracer.create_proxy``
(where the rebuilds the row skips run), and whether the programs are equal.

    python benches/quantize.py                       # phase, llama4, 1 calibration batch
    python benches/quantize.py search --batches 32
    python benches/quantize.py search --save /tmp/llama4-observers.pt
    python benches/quantize.py observers --load /tmp/llama4-observers.pt --repeats 7
    python benches/quantize.py calibrate --batches 1 32 128
    python benches/quantize.py phase --model dscnnkws --batches 8
    python benches/quantize.py phase --own-process 3
    python benches/quantize.py reexport --model llama16 --repeats 2
    python benches/quantize.py guards --repeats 5
    python benches/quantize.py header --model llama-hf-2l --repeats 3
"""

from __future__ import annotations

import argparse
import copy
import gc
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import arm_accel
import torch
from arm_accel.control import counters
from arm_accel.quantize import observe
from arm_accel.tools import models
from arm_accel.tools.program_compare import program_differences
from torch import fx
from torchao.quantization.pt2e.observer import HistogramObserver, ObserverBase
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e


def calibration_batches(
    name: str, inputs: tuple[torch.Tensor, ...], n: int
) -> list[tuple[torch.Tensor, ...]]:
    """``n`` batches: the example inputs, then seeded random ones like them (the demo's)."""
    return models.calibration_batches(inputs, n)


def timed(fn: Callable[[], Any], accelerated: bool) -> tuple[Any, float]:
    ctx = arm_accel.enabled() if accelerated else arm_accel.disabled()
    with ctx:
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0


def export(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> fx.GraphModule:
    return torch.export.export(model, inputs, strict=True).module(check_guards=False)


def prepared_model(name: str) -> tuple[fx.GraphModule, tuple[torch.Tensor, ...]]:
    model, inputs, mode = models.build(name)
    torch.manual_seed(0)
    return prepare_pt2e(export(model, inputs), models.quantizer(mode)), inputs


def _bits(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().numpy().tobytes()


def observers(gm: fx.GraphModule) -> list[tuple[str, ObserverBase]]:
    return [(n, m) for n, m in gm.named_modules() if isinstance(m, ObserverBase)]


def observer_state(gm: fx.GraphModule) -> list[Any]:
    return [(n, [(k, _bits(v)) for k, v in m.state_dict().items()]) for n, m in observers(gm)]


def cmd_search(args: argparse.Namespace) -> None:
    prepared, inputs = prepared_model(args.model)
    for batch in calibration_batches(args.model, inputs, args.batches):
        prepared(*batch)
    hists = [m for _, m in observers(prepared) if isinstance(m, HistogramObserver)]
    if args.save:
        torch.save(hists, args.save)
    stock_s, ours_s, ratios, same = 0.0, 0.0, [], True
    for obs in hists:
        (a, ta) = timed(obs._non_linear_param_search, accelerated=False)
        (b, tb) = timed(obs._non_linear_param_search, accelerated=True)
        stock_s, ours_s = stock_s + ta, ours_s + tb
        ratios.append(ta / tb)
        same &= _bits(a[0]) == _bits(b[0]) and _bits(a[1]) == _bits(b[1])
    print(
        f"{args.model}, {args.batches} calibration batch(es): {len(hists)} HistogramObservers; "
        f"parameter search stock {stock_s:.3f} s, accelerated {ours_s:.4f} s, "
        f"ratio {stock_s / ours_s:.1f}x"
    )
    print(
        f"per observer: ratio min {min(ratios):.1f}x, median {statistics.median(ratios):.1f}x, "
        f"max {max(ratios):.1f}x; stock mean {1e3 * stock_s / len(hists):.2f} ms; "
        f"(min, max) bit-identical: {same}"
    )


# (label, dtype, quant_min, quant_max): the Arm configs' int8 and int16 activations.
_OBSERVER_CONFIGS = (("int8", torch.int8, -128, 127), ("int16", torch.int16, -32767, 32767))


def _generated_batch(kind: str, g: torch.Generator, n: int) -> torch.Tensor:
    if kind == "normal":
        return torch.randn(n, generator=g)
    if kind == "uniform":
        return torch.rand(n, generator=g) * 4.0 - 1.0
    if kind == "heavy":  # Cauchy: far outliers, long searches
        return torch.tan(torch.pi * (torch.rand(n, generator=g) - 0.5))
    if kind == "bimodal":
        return torch.randn(n, generator=g) * 0.3 + torch.randint(0, 2, (n,), generator=g) * 4.0
    if kind == "halfnormal":  # after a ReLU
        return torch.randn(n, generator=g).clamp(min=0.0)
    return torch.exp(torch.randn(n, generator=g) * 1.5)  # lognormal


def generated_observers() -> list[tuple[str, HistogramObserver]]:
    """HistogramObservers fed seeded batches of each kind, for 2048 and 256 bins, int8 and
    int16, 1 and 4 batches."""
    found = []
    for kind in ("normal", "uniform", "heavy", "bimodal", "halfnormal", "lognormal"):
        for bins in (2048, 256):
            for label, dtype, qmin, qmax in _OBSERVER_CONFIGS:
                for batches in (1, 4):
                    obs = HistogramObserver(
                        bins=bins,
                        dtype=dtype,
                        qscheme=torch.per_tensor_symmetric,
                        quant_min=qmin,
                        quant_max=qmax,
                    )
                    g = torch.Generator().manual_seed(len(found))
                    for _ in range(batches):
                        obs(_generated_batch(kind, g, 4096))
                    found.append((f"{kind}/{bins}/{label}", obs))
    return found


def _candidates(obs: HistogramObserver) -> int:
    """How many candidates' errors stock's search computes on ``obs``."""
    count = [0]
    method = obs._compute_quantization_error

    def counted(start: int, end: int) -> float:
        count[0] += 1
        return float(method(start, end))

    obs._compute_quantization_error = counted  # type: ignore[method-assign]
    try:
        with arm_accel.disabled():
            obs._non_linear_param_search()
    finally:
        del obs._compute_quantization_error
    return count[0]


def _summary(ratios: list[float]) -> str:
    return (
        f"min {min(ratios):7.1f}x  median {statistics.median(ratios):7.1f}x  "
        f"max {max(ratios):8.1f}x"
    )


def cmd_observers(args: argparse.Namespace) -> None:
    import executorch.backends.arm._passes  # noqa: F401 - activates arm-accel (the patches)
    from arm_accel.quantize import histogram as qh

    groups = generated_observers()
    if args.load:
        groups += [("loaded", o) for o in torch.load(args.load, weights_only=False)]
    ours_fn: Callable[[HistogramObserver], Any] = (
        qh._search_stepwise if args.stepwise else (lambda o: o._non_linear_param_search())
    )
    rows: list[tuple[float, str, float, float, int]] = []
    same = True
    for label, obs in groups:
        stock_t, ours_t = math.inf, math.inf
        runs = [(False, True)] * args.repeats  # alternating
        if args.warm:  # each side's runs in a row
            runs = [(False,)] * args.repeats + [(True,)] * args.repeats
        outs: dict[bool, Any] = {}
        for sides in runs:
            for accelerated in sides:
                fn = (lambda obs=obs: ours_fn(obs)) if accelerated else obs._non_linear_param_search
                outs[accelerated], t = timed(fn, accelerated=accelerated)
                if accelerated:
                    ours_t = min(ours_t, t)
                else:
                    stock_t = min(stock_t, t)
            if len(outs) == 2:
                a, b = outs[False], outs[True]
                same &= _bits(a[0]) == _bits(b[0]) and _bits(a[1]) == _bits(b[1])
        rows.append((stock_t / ours_t, label, stock_t, ours_t, _candidates(obs)))
    side = "stepwise search" if args.stepwise else "accelerated"
    order = "consecutive runs of each side" if args.warm else "alternating runs each"
    print(
        f"{len(rows)} HistogramObservers, stock vs {side}, fastest of {args.repeats} "
        f"{order}; (min, max) bit-identical: {same}"
    )
    by_group: dict[str, list[float]] = {}
    for ratio, label, *_ in rows:
        by_group.setdefault(label.rsplit("/", 1)[0] if "/" in label else label, []).append(ratio)
    for group, ratios in by_group.items():
        print(f"  {group:<22} {len(ratios):4d}  {_summary(ratios)}")
    print(f"  {'all':<22} {len(rows):4d}  {_summary([r[0] for r in rows])}")
    at_50 = sum(r[0] >= 50.0 for r in rows)
    fastest_miss = max((r[2] for r in rows if r[0] < 50.0), default=0.0)
    print(
        f"at 50x or more: {at_50} of {len(rows)}; the longest stock search below 50x: "
        f"{1e3 * fastest_miss:.3f} ms"
    )
    print("slowest ratios (stock ms, ours us, candidates):")
    for ratio, label, st, ot, cands in sorted(rows)[:6]:
        print(f"  {ratio:7.1f}x  {label:<22} {1e3 * st:8.3f} ms  {1e6 * ot:8.1f} us  {cands}")


def _forward_seconds() -> float:
    s = counters.snapshot().get(observe.FORWARD_STATS_NAME)
    return s.seconds if s else 0.0


def cmd_calibrate(args: argparse.Namespace) -> None:
    for n in args.batches_list:
        prepared, inputs = prepared_model(args.model)
        sides = {"stock": copy.deepcopy(prepared), "accelerated": prepared}
        seconds = {k: 0.0 for k in sides}
        in_forward = {k: 0.0 for k in sides}
        for batch in calibration_batches(args.model, inputs, n):
            for side, gm in sides.items():
                f0 = _forward_seconds()
                _, dt = timed(lambda gm=gm, b=batch: gm(*b), accelerated=side == "accelerated")
                seconds[side] += dt
                in_forward[side] += _forward_seconds() - f0
        same = observer_state(sides["stock"]) == observer_state(sides["accelerated"])
        s, a = seconds["stock"], seconds["accelerated"]
        fs, fa = in_forward["stock"], in_forward["accelerated"]
        print(
            f"{args.model}, {n:4d} batch(es): calibration stock {s:7.2f} s, accelerated "
            f"{a:6.2f} s ({s / a:5.2f}x); in HistogramObserver.forward {fs:7.2f} s vs "
            f"{fa:6.2f} s ({fs / fa if fa else float('nan'):5.1f}x); observers identical: {same}"
        )


def _qdq(gm: fx.GraphModule) -> list[Any]:
    return [
        (n.name, str(n.target), repr(n.args))
        for n in gm.graph.nodes
        if n.op == "call_function" and "quantize_per" in str(n.target)
    ]


def phase_stages(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], mode: str, batches: list[Any]
) -> list[tuple[str, Callable[[dict[str, Any]], Any]]]:
    """The phase's stages in order: (label, what it runs on the side's state so far)."""

    def quantizer() -> Any:
        torch.manual_seed(0)
        return models.quantizer(mode)

    return [
        ("export", lambda st: (export(model, inputs), quantizer())),
        ("prepare", lambda st: prepare_pt2e(*st["export"])),
        ("calibrate", lambda st: [st["prepare"](*b) for b in batches]),
        ("convert", lambda st: convert_pt2e(st["prepare"])),
        ("re-export", lambda st: torch.export.export(st["convert"], inputs, strict=True)),
    ]


def cmd_phase(args: argparse.Namespace) -> None:
    if args.own_process:
        cmd_phase_own_process(args)
        return
    model, inputs, mode = models.build(args.model)
    batches = calibration_batches(args.model, inputs, args.batches)
    sides = ("stock", "accelerated")
    t: dict[str, dict[str, float]] = {s: {} for s in sides}
    state: dict[str, dict[str, Any]] = {s: {} for s in sides}
    for label, fn in phase_stages(model, inputs, mode, batches):
        for side in sides:
            out, dt = timed(
                lambda side=side, fn=fn: fn(state[side]), accelerated=side == "accelerated"
            )
            state[side][label] = out
            t[side][label] = dt

    print(
        f"{args.model} ({mode}), {args.batches} calibration batch(es), "
        f"{torch.get_num_threads()} threads"
    )
    print(f"{'stage':<12}{'stock s':>10}{'accel s':>10}{'ratio':>8}")
    for label in t["stock"]:
        s, a = t["stock"][label], t["accelerated"][label]
        print(f"{label:<12}{s:10.2f}{a:10.2f}{s / a:8.2f}")
    s, a = sum(t["stock"].values()), sum(t["accelerated"].values())
    print(f"{'whole phase':<12}{s:10.2f}{a:10.2f}{s / a:8.2f}")
    qdq_same = _qdq(state["stock"]["convert"]) == _qdq(state["accelerated"]["convert"])
    diffs = program_differences(
        state["stock"]["re-export"], state["accelerated"]["re-export"], separately_exported=True
    )
    print(f"q/dq nodes identical: {qdq_same}; re-exported programs equal: {not diffs}")
    for d in diffs[:5]:
        print("  ", d)


def cmd_phase_side(args: argparse.Namespace) -> None:
    """One side of ``phase --own-process`` (the side ``ARM_ACCEL`` selects): the stages' seconds
    and digests of the converted module's q/dq nodes and of the re-exported program's code,
    as one JSON line."""
    model, inputs, mode = models.build(args.model)
    batches = calibration_batches(args.model, inputs, args.batches)
    state: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    for label, fn in phase_stages(model, inputs, mode, batches):
        t0 = time.perf_counter()
        state[label] = fn(state)
        seconds[label] = time.perf_counter() - t0
    program = state["re-export"].graph_module.print_readable(print_output=False)
    digest = {
        "qdq": hashlib.sha256(repr(_qdq(state["convert"])).encode()).hexdigest()[:16],
        "program": hashlib.sha256(program.encode()).hexdigest()[:16],
    }
    print(json.dumps({"seconds": seconds, "digest": digest}))


def _child_record(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """This script run as ``command`` in a fresh interpreter (``PYTHONHASHSEED=0`` and
    ``env`` added to the environment): the JSON record it prints."""
    done = subprocess.run(
        [sys.executable, __file__, *command],
        env={**os.environ, "PYTHONHASHSEED": "0", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith('{"seconds"'))
    return json.loads(line)  # type: ignore[no-any-return]


def cmd_phase_own_process(args: argparse.Namespace) -> None:
    """``phase`` with each side in its own interpreter (``PYTHONHASHSEED=0``, ``ARM_ACCEL=0``
    for stock), the sides alternating ``--own-process`` times: what a user's script, which runs
    one side in a fresh process, waits for (in one process the side that runs second finds the
    caches the first filled, torch's fake-tensor dispatch cache among them)."""
    runs: dict[str, list[dict[str, Any]]] = {"stock": [], "accelerated": []}
    for _ in range(args.own_process):
        for side, flag in (("stock", "0"), ("accelerated", "1")):
            command = ["phase-side", "--model", args.model, "--batches", str(args.batches)]
            runs[side].append(_child_record(command, {"ARM_ACCEL": flag}))
    print(
        f"{args.model}, {args.batches} calibration batch(es), each side in its own process, "
        f"{args.own_process} run(s) each (every run; ratio of the fastest)"
    )
    labels = list(runs["stock"][0]["seconds"])
    print(f"{'stage':<12}{'stock s':>22}{'accel s':>22}{'ratio':>8}")

    def row(label: str, values: dict[str, list[float]]) -> None:
        cells = [" ".join(f"{v:.2f}" for v in values[side]) for side in runs]
        ratio = min(values["stock"]) / min(values["accelerated"])
        print(f"{label:<12}{cells[0]:>22}{cells[1]:>22}{ratio:8.2f}")

    for label in labels:
        row(label, {side: [r["seconds"][label] for r in rs] for side, rs in runs.items()})
    row(
        "whole phase", {side: [sum(r["seconds"].values()) for r in rs] for side, rs in runs.items()}
    )
    digests = {json.dumps(r["digest"], sort_keys=True) for rs in runs.values() for r in rs}
    print(
        f"q/dq nodes and re-exported program code identical across every run: {len(digests) == 1}"
    )


def _report_off_on(runs: dict[str, list[tuple[float, float]]], inside: str) -> None:
    """Each side's (wall, inside ``inside``) seconds per run, and the fastest of each inside."""
    for side, rs in runs.items():
        walls = ", ".join(f"{w:.2f}" for w, _ in rs)
        inner = ", ".join(f"{i:.3f}" for _, i in rs)
        print(f"  {side:<3}  wall s: {walls}   in {inside} s: {inner}")
    off = min(i for _, i in runs["off"])
    on = min(i for _, i in runs["on"])
    print(f"  {inside}, fastest of each: {off:.3f} -> {on:.3f} s ({off / on:.2f}x)")


def cmd_reexport(args: argparse.Namespace) -> None:
    from arm_accel import patches
    from torch._dynamo.output_graph import SubgraphTracer

    prepared, inputs = prepared_model(args.model)
    prepared(*inputs)
    converted = convert_pt2e(prepared)
    ours = SubgraphTracer.__dict__["_create_proxy"]
    rows = {"off": patches.original("export.dynamo_meta"), "on": ours}
    outer = SubgraphTracer.create_proxy
    in_proxies = [0.0]

    def create_proxy(self: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return outer(self, *a, **k)
        finally:
            in_proxies[0] += time.perf_counter() - t0

    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in rows}
    programs: dict[str, Any] = {}
    SubgraphTracer.create_proxy = create_proxy  # type: ignore[method-assign]
    try:
        for _ in range(args.repeats):
            for side, method in rows.items():
                SubgraphTracer._create_proxy = method  # type: ignore[method-assign]
                gc.collect()
                in_proxies[0] = 0.0
                program, dt = timed(
                    lambda: torch.export.export(converted, inputs, strict=True), accelerated=True
                )
                runs[side].append((dt, in_proxies[0]))
                programs[side] = program
    finally:
        SubgraphTracer.create_proxy = outer  # type: ignore[method-assign]
        SubgraphTracer._create_proxy = ours  # type: ignore[method-assign]
    print(f"{args.model}: re-export of {len(converted.graph.nodes)} nodes, export.dynamo_meta")
    _report_off_on(runs, "create_proxy")
    diffs = program_differences(programs["off"], programs["on"], separately_exported=True)
    print(f"  programs equal: {not diffs}")


def cmd_header_side(args: argparse.Namespace) -> None:
    """One run of ``header`` (``--row`` off or on): the first export's seconds, the seconds in
    ``funcname_cache._add_file``, the digest of the program's code and stack traces, as one
    JSON line."""
    import executorch.backends.arm._passes  # noqa: F401 - activates arm-accel (the patches)
    from arm_accel import patches
    from torch._dynamo import funcname_cache

    if args.row == "off":
        patches.uninstall(("export.dynamo_header",))
    model, inputs, _ = models.build(args.model)
    tokenizing = [0.0]
    add_file = funcname_cache._add_file

    def timed_add_file(filename: str) -> None:
        t0 = time.perf_counter()
        try:
            add_file(filename)
        finally:
            tokenizing[0] += time.perf_counter() - t0

    funcname_cache._add_file = timed_add_file
    t0 = time.perf_counter()
    program = torch.export.export(model, inputs, strict=True)
    seconds = time.perf_counter() - t0
    traces = [n.meta.get("stack_trace") for n in program.graph.nodes]
    text = program.graph_module.code + repr(traces)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    print(json.dumps({"seconds": seconds, "tokenizing": tokenizing[0], "digest": digest}))


def cmd_header(args: argparse.Namespace) -> None:
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for _ in range(args.repeats):
        for row in runs:
            command = ["header-side", "--model", args.model, "--row", row]
            runs[row].append(_child_record(command, {}))
    print(
        f"{args.model}: first torch.export in a fresh process, export.dynamo_header off / on, "
        f"{args.repeats} run(s) each"
    )
    for row, rs in runs.items():
        walls = ", ".join(f"{r['seconds']:.2f}" for r in rs)
        inner = ", ".join(f"{r['tokenizing']:.3f}" for r in rs)
        print(f"  {row:<3}  export s: {walls}   in funcname_cache s: {inner}")
    off, on = (min(r["seconds"] for r in runs[k]) for k in ("off", "on"))
    print(f"  export, fastest of each: {off:.2f} -> {on:.2f} s ({off / on:.2f}x)")
    digests = {r["digest"] for rs in runs.values() for r in rs}
    print(f"  program code and stack traces identical across every run: {len(digests) == 1}")


def cmd_guards(args: argparse.Namespace) -> None:
    from arm_accel import patches
    from torch._dynamo import guards

    model, inputs, _ = models.build(args.model)
    prepared, _ = prepared_model(args.model)
    prepared(*inputs)
    converted = convert_pt2e(prepared)
    cse = guards.PyExprCSEPass
    methods = ("count", "replace")
    rows = {
        "off": {m: patches.original(f"export.guard_cse.{m}") for m in methods},
        "on": {m: cse.__dict__[m] for m in methods},
    }
    build = guards.build_guard_function
    inside = [0.0]
    built: list[Any] = []

    def timed_build(code_parts: list[str], closure_args: str) -> Any:
        t0 = time.perf_counter()
        out = build(code_parts, closure_args)
        inside[0] += time.perf_counter() - t0
        built.append(out)
        return out

    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in rows}
    functions: dict[str, list[Any]] = {}
    guards.build_guard_function = timed_build
    try:
        for _ in range(args.repeats):
            for side, replaced in rows.items():
                for name, method in replaced.items():
                    setattr(cse, name, method)
                gc.collect()
                inside[0] = 0.0
                built.clear()

                def both() -> None:
                    torch.export.export(model, inputs, strict=True)
                    torch.export.export(converted, inputs, strict=True)

                _, dt = timed(both, accelerated=True)
                runs[side].append((dt, inside[0]))
                functions[side] = list(built)
    finally:
        guards.build_guard_function = build
        for name, method in rows["on"].items():
            setattr(cse, name, method)
    print(f"{args.model}: export and re-export, the export.guard_cse rows off / on")
    _report_off_on(runs, "build_guard_function")
    print(f"  guard functions equal: {functions['off'] == functions['on']}")


def warm_up(sides: tuple[bool, ...] = (False, True)) -> None:
    """One quantization phase of a small model per side (accelerated or not), untimed:
    first-call costs (dynamo, lazy imports, kernels) would otherwise land on whichever side
    runs first."""
    model, inputs, mode = models.build("dscnnkws")
    for accelerated in sides:
        with arm_accel.enabled() if accelerated else arm_accel.disabled():
            prepared = prepare_pt2e(export(model, inputs), models.quantizer(mode))
            prepared(*inputs)
            torch.export.export(convert_pt2e(prepared), inputs, strict=True)
    counters.reset()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "what",
        nargs="?",
        default="phase",
        choices=[
            "phase",
            "phase-side",
            "search",
            "observers",
            "calibrate",
            "reexport",
            "guards",
            "header",
            "header-side",
        ],
    )
    parser.add_argument("--model", default=models.DEFAULT_MODEL)
    parser.add_argument("--batches", type=int, nargs="+", default=[1])
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up")
    parser.add_argument("--save", help="search: store the observers (torch.save) here")
    parser.add_argument("--load", help="observers: also time the observers stored here")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="observers, reexport, guards, header: runs per side",
    )
    parser.add_argument(
        "--stepwise", action="store_true", help="observers: time the stepwise search"
    )
    parser.add_argument(
        "--own-process",
        type=int,
        default=0,
        metavar="N",
        help="phase: each side in its own process, alternating N times",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="observers: each side's runs in a row (warm caches) instead of alternating",
    )
    parser.add_argument("--row", choices=["off", "on"], help="header-side: the row's state")
    args = parser.parse_args()
    if args.what in ("header", "header-side"):
        pass  # each run's first export is what is measured: nothing before it
    elif args.what == "phase-side":
        warm_up((arm_accel.is_enabled(),))  # this process's side only
    elif not args.no_warmup and not args.own_process:
        warm_up()
    args.batches_list = args.batches
    args.batches = args.batches[0]
    commands = {
        "phase": cmd_phase,
        "phase-side": cmd_phase_side,
        "search": cmd_search,
        "observers": cmd_observers,
        "calibrate": cmd_calibrate,
        "reexport": cmd_reexport,
        "guards": cmd_guards,
        "header": cmd_header,
        "header-side": cmd_header_side,
    }
    commands[args.what](args)
    print(
        "stats:",
        {
            k: (v.calls, v.accelerated, dict(v.fallbacks))
            for k, v in counters.snapshot().items()
            if k.startswith("quantize.")
        },
    )


if __name__ == "__main__":
    main()
