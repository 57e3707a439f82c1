"""The ``arm-accel`` command: ``demo``, ``profile``, ``info`` and ``--version``."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import runpy
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from arm_accel.control.records import Stats, Status
    from arm_accel.tools.profiling import Profile

T = TypeVar("T")


# ------------------------------------------------------------------------- progress
@contextmanager
def progress(label: str, enabled: bool = True) -> Iterator[None]:
    """An elapsed-time spinner on stderr while a long step runs (only on a terminal)."""
    if not enabled or not sys.stderr.isatty():
        print(f"{label} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        yield
        print(f"{label}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
        return
    stop = threading.Event()
    start = time.perf_counter()

    def spin() -> None:
        frames = "|/-\\"
        i = 0
        while not stop.wait(0.2):
            elapsed = time.perf_counter() - start
            sys.stderr.write(f"\r{frames[i % 4]} {label} {elapsed:6.1f} s")
            sys.stderr.flush()
            i += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.stderr.write(f"\r  {label} {time.perf_counter() - start:6.1f} s\n")
        sys.stderr.flush()


def _step(label: str, fn: Callable[[], T], show: bool = True) -> T:
    with progress(label, show):
        return fn()


# ------------------------------------------------------------------------- versions / status
def _dist_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not found"


def our_version() -> str:
    try:
        from arm_accel import __version__

        return str(__version__)
    except Exception:  # noqa: BLE001
        return _dist_version("arm-accel")


def activation_status(status: Status) -> tuple[str, str]:
    """(active, why): the ``accelerated`` line of ``arm-accel info``."""
    why = status.reason
    if not status.enabled:
        why = f"switched off (ARM_ACCEL=0 or arm_accel.disable()); {why}"
    if status.activated:
        installed = sum(r.installed for r in status.patches)
        why += f"; {installed} of {len(status.patches)} patches installed"
    if not status.hook_installed and not status.activated:
        why += "; import hook not installed (arm_accel_hook.pth not loaded)"
    return ("yes" if status.enabled and status.activated else "no"), why


def cmd_info(args: argparse.Namespace) -> int:
    import arm_accel

    quiet_upstream()
    if not args.no_import:
        # The activation hook fires when executorch's Arm passes are imported: import them so
        # the status says what a lowering would get.
        try:
            import executorch.backends.arm._passes  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            print(f"warning: cannot import executorch's Arm passes: {exc}", file=sys.stderr)
    status = arm_accel.status()
    versions = {
        "arm-accel": our_version(),
        "executorch": _dist_version("executorch"),
        "torch": _dist_version("torch"),
        "python": sys.version.split()[0],
    }
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("ARM_ACCEL")}
    if args.json:
        record = {
            "versions": versions,
            "accelerated": status.enabled and status.activated,
            "status": status.as_dict(),
            "env": env,
        }
        print(json.dumps(record, indent=2))
        return 0
    active, why = activation_status(status)
    print(f"arm-accel   {versions['arm-accel']}")
    print(f"executorch  {versions['executorch']}")
    print(f"torch       {versions['torch']}")
    print(f"python      {versions['python']}")
    print(f"accelerated {active} ({why})")
    for k, v in env.items():
        print(f"env         {k}={v}")
    print_patches(status)
    return 0


def print_patches(status: Status) -> None:
    """Every row of the patch table and every modelled behaviour, installed or why stock."""
    rows, models = status.patches, status.models
    print(f"patches     {sum(r.installed for r in rows)} of {len(rows)} installed")
    layer = max((len(r.layer) for r in rows), default=0)
    group = max((len(r.group) for r in rows), default=0)
    row = max((len(r.row) for r in rows), default=0)
    for r in rows:
        print(f"  {r.layer:{layer}} {r.group:{group}} {r.row:{row}} {r.reason}")
    print(f"models      {sum(m.holds for m in models)} of {len(models)} hold")
    width = layer + group + row + 2
    for m in models:
        print(f"  {m.name:{width}} {m.reason}")


def cmd_check_pins(args: argparse.Namespace) -> int:
    from pathlib import Path

    from arm_accel.patches import check

    if args.python:
        target = check.environment(args.python)
    else:
        target = check.Target(tuple(Path(t) for t in args.tree), args.torch, args.executorch)
    findings = check.run(target)
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=2))
    else:
        print(check.report(target, findings))
    return 0


# ------------------------------------------------------------------------- demo
# Upstream noise a demo run would otherwise print before its table; filtered by the CLI only
# (never at import of the package, so a user's own lowering script sees everything).
_UPSTREAM_WARNINGS = (
    # torch.utils._pytree, raised from copyreg while deep-copying exported programs.
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated"),
)
_UPSTREAM_LOGGERS = (
    # torchao registers Enum pytree constants at import; torch logs a deprecation per Enum.
    "torch.utils._pytree",
    # Expected for the bundled llama models: an int64 token input cast to int32, and
    # aten._safe_softmax quantized as softmax (no row of theirs is fully masked).
    "executorch.backends.arm._passes.insert_int32_casts_after_int64_placeholders",
    "executorch.backends.arm._passes.decompose_softmax_pass",
)


def quiet_upstream() -> None:
    """Silence the known upstream warnings above for this process."""
    import logging
    import warnings

    for category, message in _UPSTREAM_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for name in _UPSTREAM_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def _drop_stdout(quiet: bool) -> contextlib.AbstractContextManager[Any]:
    """Vela prints a network summary per delegate to stdout; a quiet demo drops it."""
    return contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext()


def run_lowering(
    exported: Any, mode: str, stock: bool, label: str, target: str, quiet: bool = True
) -> Any:
    """Lower ``exported`` (the program this side's script exported, as a user's script lowers
    it) for ``target`` under the profiler with a progress bar."""
    from arm_accel.tools import profiling

    with _drop_stdout(quiet):
        return profiling.lower_profiled(
            exported, mode, stock, lambda fn: _step(label, fn), target, fresh_copy=False
        )


def _identity(same: bool) -> str:
    return "identical" if same else "DIFFERENT"


def verdict(
    ratio: float, same: dict[str, bool], accelerated: int | None, script_ratio: float | None = None
) -> str:
    """The demo's last line: speed-up and whether every compared output is identical."""
    names = list(same)
    outputs = " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"
    if not all(same.values()):
        differ = ", ".join(k for k, v in same.items() if not v)
        return f"verdict: FAILED, accelerated output differs from stock ({differ}); please report"
    if not accelerated:
        return f"verdict: no accelerated pass ran (both lowerings stock); {outputs} identical"
    script = f", whole script {script_ratio:.2f}x" if script_ratio is not None else ""
    return f"verdict: accelerated lowering {ratio:.2f}x stock's speed{script}; {outputs} identical"


@dataclass
class ScriptRun:
    """One side of the demo: the user's script from model to .pte, stage by stage."""

    stages: dict[str, float]
    profile: Profile
    delegate_bytes: list[bytes]
    pte: bytes
    exported: Any  # a copy of the program handed to the lowering, taken before it

    @property
    def seconds(self) -> float:
        return sum(self.stages.values())


def run_script(
    model: Any,
    inputs: tuple[Any, ...],
    mode: str,
    stock: bool,
    target: str,
    calibration: list[tuple[Any, ...]],
    quiet: bool,
) -> ScriptRun:
    """Export (and for INT quantize and re-export), lower and serialize the .pte, stock or
    accelerated, timing each stage."""
    from arm_accel.tools import models, profiling

    side = "stock" if stock else "accelerated"
    stages: dict[str, float] = {}
    label = f"export{' + quantize' if mode == 'INT' else ''} ({side})"
    with profiling.stock() if stock else contextlib.nullcontext():
        exported = _step(
            label,
            lambda: models.export_for_arm(
                model, inputs, mode, target=target, calibration=calibration, stages=stages
            ),
        )
    snapshot = _unshared_copy(exported)
    edge, prof, stages["lower"] = run_lowering(
        exported, mode, stock, f"lower {side}", target, quiet
    )
    delegate = models.tosa_bytes(edge)
    with profiling.stock() if stock else contextlib.nullcontext():
        start = time.perf_counter()
        pte = _step(f"serialize .pte ({side})", functools.partial(models.pte_bytes, edge))
        stages[".pte"] = time.perf_counter() - start
    return ScriptRun(stages, prof, delegate, pte, snapshot)


def _unshared_copy(program: Any) -> Any:
    """A deep copy of ``program`` whose nodes' meta containers are its own: ``deepcopy``
    shares them (``custom``, ``nn_module_stack``, ...), and a stock lowering of a deep copy
    writes into them (dynamo's ``custom`` markers): the copy stays as the program was."""
    import copy

    clone = copy.deepcopy(program)
    for node in clone.graph.nodes:
        for key, value in node.meta.items():
            if isinstance(value, (dict, list)):
                node.meta[key] = copy.copy(value)
    return clone


def _stage_rows(stock: ScriptRun, accel: ScriptRun, batches: int) -> list[list[str]]:
    rows = []
    for stage in stock.stages:
        s, a = stock.stages[stage], accel.stages.get(stage, float("nan"))
        label = (
            f"{stage} ({batches} batch{'es' if batches > 1 else ''})"
            if stage == "calibrate"
            else stage
        )
        rows.append([label, f"{s:.2f}", f"{a:.2f}", f"{s / a:.2f}x" if a else "-"])
    s, a = stock.seconds, accel.seconds
    rows.append(["whole script", f"{s:.2f}", f"{a:.2f}", f"{s / a:.2f}x" if a else "-"])
    return rows


def _programs_equal(a: Any, b: Any) -> bool:
    from arm_accel.tools.program_compare import program_differences

    return not program_differences(a, b, separately_exported=True)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the user's script (export, quantize, lower, serialize) on a zoo model stock and
    accelerated; print both sides' timings and whether every output is identical."""
    from arm_accel.tools import models, profiling

    name = _demo_model_name(args)
    if name is None:
        return 2
    target = args.target
    if target not in models.TARGETS:
        print(f"unknown target {target!r}; known: {', '.join(models.TARGETS)}", file=sys.stderr)
        return 2
    quiet = not args.verbose
    _prepare_demo(quiet)
    mode = models.target_mode(target, models.ZOO[name].mode)
    model, inputs, _ = _step(f"build {name}", lambda: models.build(name))
    if not args.no_warmup:
        with _drop_stdout(quiet):
            _step("warm-up (untimed)", lambda: _warm_up(model, inputs, mode, target))
    calibration = models.calibration_batches(inputs, args.batches)
    stock, accel, counts = _run_both(model, inputs, mode, target, calibration, quiet)
    delegate = "Vela" if models.is_ethos_u(target) else "TOSA"
    same = _same_outputs(stock, accel, mode, delegate)
    print(
        profiling.format_table(
            _stage_rows(stock, accel, args.batches), ["stage", "stock s", "accelerated s", "ratio"]
        ),
        end="",
    )
    _print_lowering(f"{name} ({mode}) for {target}", delegate, stock, accel)
    _print_outcome(stock, accel, counts, same)
    return 0 if all(same.values()) else 1


def _demo_model_name(args: argparse.Namespace) -> str | None:
    """The zoo model ``--model`` / ``--layers`` name, or None (said on stderr) if unknown."""
    from arm_accel.tools import models

    name = args.model or models.DEFAULT_MODEL
    if args.layers is not None:
        name = f"llama{args.layers}"
    if name not in models.ZOO:
        print(f"unknown model {name!r}; known: {', '.join(models.ZOO)}", file=sys.stderr)
        return None
    return name


def _prepare_demo(quiet: bool) -> None:
    """Quiet upstream warnings (unless ``--verbose``) and warn when both runs will be stock."""
    from arm_accel.tools import profiling

    if quiet:
        quiet_upstream()
    if not profiling.accel_available() or not profiling.ensure_active():
        print(
            "warning: acceleration is unavailable or switched off (see `arm-accel info`); "
            "both runs are stock",
            file=sys.stderr,
        )


def _warm_up(model: Any, inputs: tuple[Any, ...], mode: str, target: str) -> None:
    """First-call costs (lazy imports, dynamo, Vela's start-up, caches) would otherwise land on
    the first side: the whole script on a tiny model, each side once, and the model's own
    export and quantization (dynamo marks some ops only the first time a process traces them,
    stock or not: an in-place relu's ``custom`` meta)."""
    from arm_accel.tools import models, profiling

    m, i, _ = models.build("convnet")
    for stock in (True, False):
        with profiling.stock() if stock else contextlib.nullcontext():
            models.lower(models.export_for_arm(m, i, mode, target=target), mode, target)
    models.export_for_arm(model, inputs, mode, target=target)


@dataclass
class DemoCounts:
    """What ``arm_accel.stats()`` counted during the accelerated side (None: no stats)."""

    accelerated: int | None
    fallbacks: int | None
    in_place: int | None
    stock_retraces: int | None


def _run_both(
    model: Any,
    inputs: tuple[Any, ...],
    mode: str,
    target: str,
    calibration: list[tuple[Any, ...]],
    quiet: bool,
) -> tuple[ScriptRun, ScriptRun, DemoCounts]:
    """The script stock, then accelerated, and what the accelerated side counted."""
    from arm_accel.tools import profiling

    stock = run_script(model, inputs, mode, True, target, calibration, quiet)
    stats_before = profiling.stats_snapshot()
    accel = run_script(model, inputs, mode, False, target, calibration, quiet)
    stats_after = profiling.stats_snapshot()
    accelerated, fallbacks = profiling.stats_delta(stats_before, stats_after)
    in_place, stock_retraces = profiling.stats_delta(
        stats_before, stats_after, lambda n: n.endswith(".retrace")
    )
    return stock, accel, DemoCounts(accelerated, fallbacks, in_place, stock_retraces)


def _same_outputs(stock: ScriptRun, accel: ScriptRun, mode: str, delegate: str) -> dict[str, bool]:
    """Per compared output (the quantized program for INT, the delegate bytes, the .pte),
    whether both sides made the same."""
    same = {}
    if mode == "INT":
        same["quantized program"] = _programs_equal(stock.exported, accel.exported)
    same[f"{delegate} output"] = stock.delegate_bytes == accel.delegate_bytes
    same[".pte"] = stock.pte == accel.pte
    return same


def _lowering_rows(prof_s: Profile, prof_a: Profile, vela: bool) -> list[list[str]]:
    """The lowering's per-group seconds (and Vela's compile) of both sides."""
    from arm_accel.tools import profiling

    rows = [["re-traces", str(prof_s.retraces), str(prof_a.retraces)]]
    for group in profiling.VIEW_PERMUTE_GROUPS:
        rows.append(
            [
                f"  {group} s",
                f"{prof_s.group_seconds(group):.3f}",
                f"{prof_a.group_seconds(group):.3f}",
            ]
        )
    rows.append(
        [
            "  view/permute passes s",
            f"{prof_s.view_permute_seconds():.3f}",
            f"{prof_a.view_permute_seconds():.3f}",
        ]
    )
    if vela:
        phase = profiling.PHASES["vela_compile"]
        rows.append(
            [
                "  Vela compile s",
                *(
                    f"{p.rows[phase].inclusive:.3f}" if phase in p.rows else "-"
                    for p in (prof_s, prof_a)
                ),
            ]
        )
    return rows


def _print_lowering(what: str, delegate: str, stock: ScriptRun, accel: ScriptRun) -> None:
    """The model line and the lowering table."""
    from arm_accel.tools import profiling

    prof_s, prof_a = stock.profile, accel.profile
    t_s, t_a = stock.stages["lower"], accel.stages["lower"]
    rows = [
        ["lowering seconds", f"{t_s:.2f}", f"{t_a:.2f}"],
        *_lowering_rows(prof_s, prof_a, delegate == "Vela"),
    ]
    nbytes = sum(len(b) for b in stock.delegate_bytes)
    print(
        f"model {what}, {prof_s.nodes_in or '?'} nodes entering the "
        f"view/permute passes, {len(stock.delegate_bytes)} delegate(s) of {nbytes} {delegate} "
        f"bytes, .pte {len(stock.pte)} bytes"
    )
    print(profiling.format_table(rows, ["", "stock", "accelerated"]), end="")


def _print_outcome(
    stock: ScriptRun, accel: ScriptRun, counts: DemoCounts, same: dict[str, bool]
) -> None:
    """The ratios, the counters, each output's identity and the verdict."""
    t_s, t_a = stock.stages["lower"], accel.stages["lower"]
    ratio = t_s / t_a if t_a else float("nan")
    script_ratio = stock.seconds / accel.seconds if accel.seconds else float("nan")
    print(f"ratio (stock / accelerated): {ratio:.2f}x")
    print(f"whole script ratio (stock / accelerated): {script_ratio:.2f}x")
    if counts.accelerated is not None:
        print(
            f"accelerated pass calls: {counts.accelerated}, fallbacks to stock: {counts.fallbacks}"
        )
        print(f"pipeline re-traces in place: {counts.in_place}, stock: {counts.stock_retraces}")
    for what, ok in same.items():
        print(f"{what}: {_identity(ok)}")
    print(verdict(ratio, same, counts.accelerated, script_ratio))


# ------------------------------------------------------------------------- profile
def _run_script(script: str, script_args: list[str], quiet: bool) -> tuple[Profile, Stats]:
    """Run ``script`` as ``__main__`` under the profiler; returns its profile and the
    ``arm_accel.stats()`` it recorded (reset before it starts). ``quiet`` sends the script's
    stdout to stderr (``--json`` keeps stdout for the JSON)."""
    import arm_accel
    from arm_accel.tools import profiling

    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    arm_accel.reset_stats()
    out = contextlib.redirect_stdout(sys.stderr) if quiet else contextlib.nullcontext()
    try:
        with out, profiling.profiled() as prof:
            start = time.perf_counter()
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise
            finally:
                prof.script_seconds = time.perf_counter() - start
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return prof, arm_accel.stats()


def profile_record(runs: dict[str, tuple[Profile, Stats]]) -> dict[str, object]:
    """``arm-accel profile --json``: per run its profile (every row) and its stats."""
    return {
        name: {"profile": prof.as_dict(), "stats": stats.as_dict()}
        for name, (prof, stats) in runs.items()
    }


def cmd_profile(args: argparse.Namespace) -> int:
    from arm_accel.tools import profiling

    if not os.path.exists(args.script):
        print(f"no such script: {args.script}", file=sys.stderr)
        return 2
    runs: dict[str, tuple[Profile, Stats]] = {}
    if args.compare:
        if not profiling.accel_available() or not profiling.ensure_active():
            print(
                "warning: acceleration is unavailable or switched off (see `arm-accel "
                "info`); both runs are stock",
                file=sys.stderr,
            )
        with profiling.stock(), progress("run stock"):
            runs["stock"] = _run_script(args.script, args.args, args.json)
        with progress("run accelerated"):
            runs["accelerated"] = _run_script(args.script, args.args, args.json)
    else:
        runs["run"] = _run_script(args.script, args.args, args.json)
    if args.json:
        print(json.dumps(profile_record(runs), indent=2))
    elif args.compare:
        print(profiling.compare_table(runs["stock"][0], runs["accelerated"][0], args.top), end="")
    else:
        print(profiling.profile_table(runs["run"][0], args.top), end="")
    if not args.json:
        print(profiling.stage_table({name: prof for name, (prof, _) in runs.items()}), end="")
    if args.csv:
        profiling.write_csv(args.csv, {name: prof for name, (prof, _) in runs.items()})
    return 0


# ------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    """The ``arm-accel`` parser: one sub-command per ``_COMMANDS`` row."""
    parser = argparse.ArgumentParser(
        prog="arm-accel",
        description="Faster lowering for ExecuTorch's Arm backend (TOSA / Ethos-U), output "
        "identical to stock.",
    )
    parser.add_argument("--version", action="version", version=f"arm-accel {our_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in _COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.description)
        command.options(p)
        p.set_defaults(fn=command.run)
    return parser


def _info_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-import",
        action="store_true",
        help="don't import executorch's Arm passes first (faster; the activation "
        "hook may then not have fired yet)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print versions, arm_accel.status() and the ARM_ACCEL* environment as JSON",
    )


def _check_pins_options(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--python", help="the interpreter of another installation")
    where.add_argument(
        "--tree", action="append", help="a source tree or site-packages directory (repeatable)"
    )
    p.add_argument("--torch", help="with --tree: the torch version the tree is")
    p.add_argument("--executorch", help="with --tree: the executorch version the tree is")
    p.add_argument("--json", action="store_true", help="one JSON list instead of the text")


def _demo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default=None,
        help="a model of arm_accel.tools.models.ZOO (default: models.DEFAULT_MODEL, a llama-style "
        "INT transformer)",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=None,
        help="shorthand for --model llamaN (N in 1, 2, 4, 8, 16)",
    )
    p.add_argument(
        "--target",
        default="tosa",
        help="tosa (default: bare TOSA), ethos-u55-128 or ethos-u85-256 (EthosUPartitioner "
        "and Vela; INT only, so FP zoo models are quantized for it); models.TARGETS",
    )
    p.add_argument(
        "--batches",
        type=int,
        default=1,
        help="calibration batches for INT models: the example inputs, then seeded random ones "
        "like them (default 1)",
    )
    p.add_argument(
        "--no-warmup", action="store_true", help="skip the untimed warm-up lowering of a tiny model"
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show upstream warnings (filtered by default) and Vela's network summaries",
    )


def _profile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=int, default=25, help="rows to print (0: all)")
    p.add_argument("--csv", help="write every row to this CSV file")
    p.add_argument(
        "--json",
        action="store_true",
        help="print every row and each run's arm_accel.stats() as JSON instead of the table "
        "(the script's own output goes to stderr)",
    )
    p.add_argument(
        "--compare", action="store_true", help="run stock (arm_accel.disabled()) then accelerated"
    )
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)


@dataclass(frozen=True)
class Command:
    """One sub-command: its name, help line and description, options and the function run."""

    name: str
    help: str
    options: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


_COMMANDS = (
    Command("info", "versions found and whether acceleration is active", _info_options, cmd_info),
    Command(
        "check-pins",
        "which patch table rows another torch/executorch would keep stock",
        _check_pins_options,
        cmd_check_pins,
        "Read every source the patch table pins from another installation (its interpreter) "
        "or from source trees, without importing it, and list the rows and models that would "
        "stay stock there.",
    ),
    Command("demo", "lower the bundled model stock and accelerated", _demo_options, cmd_demo),
    Command(
        "profile",
        "run a lowering script and time every pass",
        _profile_options,
        cmd_profile,
        "Run SCRIPT.py unchanged and print a per-pass table (seconds are exclusive of nested "
        "passes). Options go before SCRIPT; everything after it is the script's.",
    ),
)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
