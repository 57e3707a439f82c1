"""Per-pass profiling of an ExecuTorch lowering, shared by ``arm-accel profile``, ``arm-accel
demo`` and ``benches/lowering.py``.

While active, the profiler wraps at class level the passes' ``__call__`` (``PassBase``,
``ArmPass``, the pass adapter, which is charged to the pass it wraps: one *pass* frame each),
``_ExportPassBase.call`` (a *re-trace*, charged to the innermost pass), the lowering phases that
are not passes (*phase* frames, in parentheses) and what the entry points do between them
(:data:`LOWERING_PARTS`; ``(lowering: other)`` is the rest of their own time). Seconds are
exclusive (a frame's time minus its nested frames'), so the rows add up to the lowering's wall
time; ``inclusive`` counts once per outermost call of a name.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gc
import importlib
import io
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arm_accel.control.records import Stats

# The five view/permute passes arm-accel accelerates (the propagation pass comes in an Up and
# a Down class; both count as the fifth).
VIEW_PERMUTE_GROUPS: dict[str, tuple[str, ...]] = {
    "CanonicalizeViewCopyPermutePass": ("CanonicalizeViewCopyPermutePass",),
    "FuseDuplicateUsersPass": ("FuseDuplicateUsersPass",),
    "FuseIdenticalInputTransformsPass": ("FuseIdenticalInputTransformsPass",),
    "RemovePermutesAroundElementwiseTosaOps": ("RemovePermutesAroundElementwiseTosaOps",),
    "PropagateViewCopyPermutePass": (
        "PropagateViewCopyPermuteUpPass",
        "PropagateViewCopyPermuteDownPass",
    ),
}
VIEW_PERMUTE_PASSES: frozenset[str] = frozenset(
    name for names in VIEW_PERMUTE_GROUPS.values() for name in names
)

LOWERING = "(lowering: other)"
PHASES = {
    "run_decompositions": "(to_edge: decompositions)",
    "partition": "(TOSAPartitioner.partition)",
    "preprocess": "(TOSABackend.preprocess: node visitors, serialization)",
    "vela_compile": "(Vela compile)",
    "transform_to_backend_pipeline": "(ArmPassManager: pipeline setup)",
}
# What a lowering does outside its passes and the phases above, each a phase row of its own:
# (module, class or None for a module function, attribute, row). Their time is exclusive as
# everywhere: a verifier run inside a pass is charged to the verifier row, not to the pass.
LOWERING_PARTS: tuple[tuple[str, str | None, str, str], ...] = (
    (
        "torch._export.verifier",
        "Verifier",
        "_check_graph_module",
        "(verifiers: graph and op checks)",
    ),
    (
        "executorch.exir.verification.verifier",
        None,
        "_check_tensor_args_matching_op_allowed_dtype",
        "(verifiers: edge op dtype check, a fake run of the graph)",
    ),
    (
        "torch.export.exported_program",
        "ExportedProgram",
        "__init__",
        "(ExportedProgram construction)",
    ),
    (
        "executorch.exir.program._program",
        "EdgeProgramManager",
        "__init__",
        "(EdgeProgramManager construction)",
    ),
    (
        "executorch.exir.program._program",
        None,
        "lift_constant_tensor_pass",
        "(to_edge: constant lifting)",
    ),
    (
        "executorch.exir.backend.backend_api",
        None,
        "get_fake_program",
        "(to_backend: fake program copy)",
    ),
    (
        "executorch.exir.backend.backend_api",
        None,
        "_create_partitions",
        "(to_backend: partition submodules)",
    ),
    (
        "executorch.exir.backend.backend_api",
        None,
        "lower_all_submodules_to_backend",
        "(to_backend: program copies for preprocess)",
    ),
    (
        "arm_accel.runtime.deferred",
        None,
        "materialize",
        "(code generation of deferred recompiles)",
    ),
)


#: The stages of a user's script, in order: ``torch.export.export`` before quantizing, the
#: quantizer's ``prepare_pt2e``, the calibration (the script's time from ``prepare_pt2e``'s
#: return to ``convert_pt2e``'s call), ``convert_pt2e``, ``torch.export.export`` after it, the
#: lowering entry points, and ``to_executorch`` with the program's serialization (``buffer``).
STAGES = ("export", "prepare", "calibrate", "convert", "re-export", "lower", ".pte")


@dataclass
class Row:
    name: str
    kind: str  # "arm" (an executorch Arm pass), "pass" (other passes) or "phase"
    calls: int = 0
    retraces: int = 0
    seconds: float = 0.0  # exclusive
    inclusive: float = 0.0
    # Wall time of the re-traces charged to this row (part of ``seconds``).
    retrace_seconds: float = 0.0
    # Re-traces inside each outermost call, nested passes' included (the in-loop fusions'
    # re-traces count towards the propagation call that ran them).
    retraces_per_call: list[int] = field(default_factory=list)

    def as_dict(self, total: float) -> dict[str, object]:
        return {
            "pass": self.name,
            "kind": self.kind,
            "calls": self.calls,
            "retraces": self.retraces,
            "seconds": round(self.seconds, 6),
            "inclusive_seconds": round(self.inclusive, 6),
            "share": round(self.seconds / total, 6) if total else 0.0,
        }


@dataclass
class Profile:
    rows: dict[str, Row] = field(default_factory=dict)
    lowering_seconds: float = 0.0  # wall time inside the outermost lowering entry points
    lowering_calls: int = 0
    nodes_in: int | None = None  # graph nodes entering the first view/permute pass
    # Inclusive seconds of the user script's stages (see STAGES), outside the pass rows.
    stages: dict[str, float] = field(default_factory=dict)
    script_seconds: float | None = None  # wall time of the whole script (``arm-accel profile``)

    def stage_seconds(self) -> dict[str, float]:
        """Each stage's seconds in script order, the lowering's included (its wall time)."""
        out = {k: self.stages[k] for k in STAGES if k in self.stages}
        if self.lowering_calls:
            out["lower"] = self.lowering_seconds
        return {k: out[k] for k in STAGES if k in out}

    @property
    def total_seconds(self) -> float:
        return sum(r.seconds for r in self.rows.values())

    @property
    def retraces(self) -> int:
        return sum(r.retraces for r in self.rows.values())

    def as_dict(self) -> dict[str, object]:
        """Every row (sorted by exclusive seconds) and the totals, JSON-ready."""
        total = self.total_seconds
        return {
            "total_seconds": round(total, 6),
            "lowering_seconds": round(self.lowering_seconds, 6),
            "lowering_calls": self.lowering_calls,
            "retraces": self.retraces,
            "nodes_in": self.nodes_in,
            "view_permute_seconds": round(self.view_permute_seconds(), 6),
            "stages": {k: round(v, 6) for k, v in self.stage_seconds().items()},
            "script_seconds": None
            if self.script_seconds is None
            else round(self.script_seconds, 6),
            "rows": [r.as_dict(total) for r in self.sorted_rows()],
        }

    def sorted_rows(self) -> list[Row]:
        return sorted(self.rows.values(), key=lambda r: (-r.seconds, r.name))

    def group_seconds(self, group: str) -> float:
        """Inclusive seconds of one of the five view/permute passes."""
        return sum(self.rows[n].inclusive for n in VIEW_PERMUTE_GROUPS[group] if n in self.rows)

    def view_permute_seconds(self) -> float:
        return sum(self.group_seconds(g) for g in VIEW_PERMUTE_GROUPS)

    def view_permute_retraces(self) -> int:
        return sum(self.rows[n].retraces for n in VIEW_PERMUTE_PASSES if n in self.rows)

    def group_retraces_per_call(self, group: str) -> list[int]:
        """Inclusive re-traces of each call of one of the five view/permute passes."""
        return [
            k
            for n in VIEW_PERMUTE_GROUPS[group]
            if n in self.rows
            for k in self.rows[n].retraces_per_call
        ]


class _Frame:
    __slots__ = ("key", "kind", "target", "start", "child", "is_lowering", "retraces")

    def __init__(self, key: str, kind: str, target: Any, is_lowering: bool) -> None:
        self.key = key
        self.kind = kind
        self.target = target
        self.is_lowering = is_lowering
        self.child = 0.0
        self.retraces = 0  # inclusive of nested frames
        self.start = time.perf_counter()


def _arm_pass_base() -> type | None:
    try:
        from executorch.backends.arm._passes.arm_pass import ArmPass
    except Exception:  # noqa: BLE001 - profiling works without the Arm backend
        return None
    return ArmPass


def pass_name(p: Any) -> tuple[str, str]:
    """(name, kind) of a pass instance; accelerated subclasses report their stock name."""
    cls = type(p)
    for base in cls.__mro__:
        if base.__name__ in VIEW_PERMUTE_PASSES:
            return base.__name__, "arm"
    name = cls.__name__
    if not isinstance(p, type) and callable(p) and hasattr(p, "__name__") and name == "function":
        name = p.__name__
    module = getattr(cls, "__module__", "") or ""
    kind = "arm" if module.startswith("executorch.backends.arm") else "pass"
    return name, kind


class Profiler:
    """Install the hooks with ``with Profiler() as prof: ...``; read ``prof.profile``."""

    def __init__(self) -> None:
        self.profile = Profile()
        self._stack: list[_Frame] = []
        self._patches: list[tuple[Any, str, Any]] = []
        self._prepared_at: float | None = None  # when prepare_pt2e last returned
        self._converted = False  # a convert_pt2e finished: later exports are re-exports
        self._in_stage = 0  # nesting depth of stage wrappers (only the outermost counts)

    # ----------------------------------------------------------------- frames
    def _push(self, key: str, kind: str, target: Any = None, is_lowering: bool = False) -> _Frame:
        frame = _Frame(key, kind, target, is_lowering)
        self._stack.append(frame)
        return frame

    def _pop(self, frame: _Frame) -> None:
        now = time.perf_counter()
        # Pop down to ``frame`` (an exception may have skipped inner pops).
        while self._stack and self._stack[-1] is not frame:
            self._pop(self._stack[-1])
        if not self._stack:
            return
        self._stack.pop()
        duration = now - frame.start
        row = self.profile.rows.get(frame.key)
        if row is None:
            row = self.profile.rows[frame.key] = Row(frame.key, frame.kind)
        row.seconds += duration - frame.child
        if not any(f.key == frame.key for f in self._stack):  # outermost call of this name
            row.calls += 1
            row.inclusive += duration
            row.retraces_per_call.append(frame.retraces)
        if self._stack:
            self._stack[-1].child += duration
        if frame.is_lowering and not any(f.is_lowering for f in self._stack):
            self.profile.lowering_seconds += duration
            self.profile.lowering_calls += 1

    def _innermost_pass(self) -> _Frame | None:
        for frame in reversed(self._stack):
            if frame.kind != "phase":
                return frame
        return None

    # ---------------------------------------------------------------- wrappers
    def _wrap_pass(self, original: Callable[..., Any]) -> Callable[..., Any]:
        profiler = self

        @functools.wraps(original)
        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            target = getattr(self, "graph_pass", self)  # the Arm adapter: name the inner pass
            top = profiler._stack[-1] if profiler._stack else None
            if top is not None and top.target is target:
                return original(self, *args, **kwargs)
            name, kind = pass_name(target)
            if (
                profiler.profile.nodes_in is None
                and name in VIEW_PERMUTE_PASSES
                and args
                and hasattr(args[0], "graph")
            ):
                profiler.profile.nodes_in = len(args[0].graph.nodes)
            frame = profiler._push(name, kind, target)
            try:
                return original(self, *args, **kwargs)
            finally:
                profiler._pop(frame)

        return __call__

    def _wrap_retrace(self, original: Callable[..., Any]) -> Callable[..., Any]:
        profiler = self

        @functools.wraps(original)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            frame = profiler._innermost_pass()
            key, kind = (frame.key, frame.kind) if frame else pass_name(self)
            row = profiler.profile.rows.get(key)
            if row is None:
                row = profiler.profile.rows[key] = Row(key, kind)
            row.retraces += 1
            for f in profiler._stack:
                f.retraces += 1
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                row.retrace_seconds += time.perf_counter() - start

        return call

    def _wrap_phase(
        self, original: Callable[..., Any], key: str, is_lowering: bool = False
    ) -> Callable[..., Any]:
        profiler = self

        @functools.wraps(original)
        def phase(*args: Any, **kwargs: Any) -> Any:
            frame = profiler._push(key, "phase", None, is_lowering)
            try:
                return original(*args, **kwargs)
            finally:
                profiler._pop(frame)

        return phase

    def _add_stage(self, stage: str, seconds: float) -> None:
        self.profile.stages[stage] = self.profile.stages.get(stage, 0.0) + seconds

    def _wrap_stage(self, original: Callable[..., Any], stage: str) -> Callable[..., Any]:
        """Time the outermost calls of ``original`` as ``stage`` (``export`` becomes
        ``re-export`` after a ``convert_pt2e``), without a row of their own."""
        profiler = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if profiler._in_stage:
                return original(*args, **kwargs)
            name = "re-export" if stage == "export" and profiler._converted else stage
            if name == "convert" and profiler._prepared_at is not None:
                profiler._add_stage("calibrate", time.perf_counter() - profiler._prepared_at)
                profiler._prepared_at = None
            profiler._in_stage += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                end = time.perf_counter()
                profiler._in_stage -= 1
                profiler._add_stage(name, end - start)
                if name == "prepare":
                    profiler._prepared_at = end
                elif name == "convert":
                    profiler._converted = True

        return timed

    # ---------------------------------------------------------------- patching
    def _patch_attr(self, owner: Any, attr: str, make: Callable[[Any], Any]) -> None:
        raw = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        if raw is None:
            return
        if isinstance(raw, staticmethod):
            new: Any = staticmethod(make(raw.__func__))
        elif isinstance(raw, property):
            new = property(make(raw.fget), raw.fset, raw.fdel, raw.__doc__)
        elif isinstance(raw, classmethod):
            return  # not needed for any hook point
        else:
            new = make(raw)
        self._patches.append((owner, attr, raw))
        setattr(owner, attr, new)

    def _patch_module_fn(self, module_name: str, attr: str, key: str, lowering: bool) -> None:
        try:
            module = importlib.import_module(module_name)
        except Exception:  # noqa: BLE001
            return
        if hasattr(module, attr):
            self._patch_attr(module, attr, lambda f: self._wrap_phase(f, key, lowering))

    def _patch_class_fn(
        self, module_name: str, cls_name: str, attr: str, make: Callable[[Any], Any]
    ) -> None:
        """``_patch_attr`` on class ``cls_name`` of ``module_name``, if it imports."""
        try:
            cls = getattr(importlib.import_module(module_name), cls_name)
        except Exception:  # noqa: BLE001
            return
        self._patch_attr(cls, attr, make)

    def install(self) -> None:
        """Hook the pass calls, the re-traces, the lowering's phases and the script's stages
        (nothing past the pass hooks when executorch's pass base does not import)."""
        if not self._install_pass_hooks():
            return
        self._install_lowering_entries()
        self._install_phases()
        self._install_stages()

    def _install_pass_hooks(self) -> bool:
        """Every pass call (torch's, the Arm passes', executorch's) and ``ExportPass``'s
        re-trace; False when executorch's pass base does not import."""
        from torch.fx.passes.infra.pass_base import PassBase

        # Importing the Arm passes activates arm-accel: first, so the hooks wrap what runs.
        arm_pass = _arm_pass_base()
        self._patch_attr(PassBase, "__call__", self._wrap_pass)
        if arm_pass is not None:
            self._patch_attr(arm_pass, "__call__", self._wrap_pass)
        try:
            from executorch.exir.pass_base import ExportedProgramPassBase, _ExportPassBase
        except Exception:  # noqa: BLE001
            return False
        self._patch_attr(ExportedProgramPassBase, "__call__", self._wrap_pass)
        self._patch_attr(_ExportPassBase, "call", self._wrap_retrace)
        return True

    def _install_lowering_entries(self) -> None:
        """Lowering entry points: the module functions users import, and to_backend; and
        ``run_decompositions``."""
        entry_modules = (
            "executorch.exir",
            "executorch.exir.program",
            "executorch.exir.program._program",
        )
        for module_name in entry_modules:
            for attr in ("to_edge_transform_and_lower", "to_edge"):
                self._patch_module_fn(module_name, attr, LOWERING, True)
        from executorch.exir.program._program import EdgeProgramManager

        self._patch_attr(
            EdgeProgramManager, "to_backend", lambda f: self._wrap_phase(f, LOWERING, True)
        )
        from torch.export import ExportedProgram

        self._patch_attr(
            ExportedProgram,
            "run_decompositions",
            lambda f: self._wrap_phase(f, PHASES["run_decompositions"]),
        )

    def _install_phases(self) -> None:
        """The lowering's phases: partitioning, TOSA, the Arm pass pipeline, Vela and
        ``LOWERING_PARTS``."""
        hooks = (
            ("executorch.backends.arm.tosa.partitioner", "TOSAPartitioner", "partition"),
            ("executorch.backends.arm.tosa.backend", "TOSABackend", "preprocess"),
            (
                "executorch.backends.arm._passes.arm_pass_manager",
                "ArmPassManager",
                "transform_to_backend_pipeline",
            ),
        )
        # Ethos-U: EthosUBackend.preprocess runs TOSABackend._preprocess (not hooked, so its
        # time stays in the lowering row) and then Vela through the module-level vela_compile.
        self._patch_module_fn(
            "executorch.backends.arm.ethosu.backend", "vela_compile", PHASES["vela_compile"], False
        )
        for module_name, cls_name, attr in hooks:
            self._patch_class_fn(
                module_name, cls_name, attr, lambda f, a=attr: self._wrap_phase(f, PHASES[a])
            )
        for module_name, owner, attr, key in LOWERING_PARTS:
            if owner is None:
                self._patch_module_fn(module_name, attr, key, False)
                continue
            self._patch_class_fn(module_name, owner, attr, lambda f, k=key: self._wrap_phase(f, k))

    def _install_stages(self) -> None:
        """The script's stages outside the lowering (``STAGES``): module functions where
        scripts and the Arm quantizer look them up, and the .pte's methods."""
        import torch.export

        self._patch_attr(torch.export, "export", lambda f: self._wrap_stage(f, "export"))
        # torchao's functions are patched where they are defined (a script importing them
        # later gets ours); a module that already bound them by name is patched only if
        # loaded (importing the Arm quantizer would import, hence activate, the Arm passes).
        quantize_modules = (
            ("torchao.quantization.pt2e.quantize_pt2e", True),
            ("torchao.quantization.pt2e", True),
            ("executorch.backends.arm.quantizer.arm_quantizer", False),
        )
        for module_name, load in quantize_modules:
            try:
                module = importlib.import_module(module_name) if load else sys.modules[module_name]
            except Exception:  # noqa: BLE001
                continue
            for attr, stage in (
                ("prepare_pt2e", "prepare"),
                ("prepare_qat_pt2e", "prepare"),
                ("convert_pt2e", "convert"),
            ):
                if hasattr(module, attr):
                    self._patch_attr(module, attr, lambda f, st=stage: self._wrap_stage(f, st))
        from executorch.exir.program._program import EdgeProgramManager, ExecutorchProgramManager

        self._patch_attr(EdgeProgramManager, "to_executorch", lambda f: self._wrap_stage(f, ".pte"))
        self._patch_attr(ExecutorchProgramManager, "buffer", lambda f: self._wrap_stage(f, ".pte"))

    def uninstall(self) -> None:
        while self._patches:
            owner, attr, raw = self._patches.pop()
            setattr(owner, attr, raw)
        self._stack.clear()

    def __enter__(self) -> Profiler:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()


@contextmanager
def profiled() -> Iterator[Profile]:
    with Profiler() as prof:
        yield prof.profile


def lower_profiled(
    exported: Any,
    mode: str,
    stock_run: bool,
    step: Callable[[Callable[[], Any]], Any] | None = None,
    target: str = "tosa",
    fresh_copy: bool = True,
) -> tuple[Any, Profile, float]:
    """Lower a fresh deep copy of ``exported`` (stock or accelerated) for ``target`` (see
    ``models.TARGETS``) under the profiler; returns (edge program manager, profile, wall
    seconds). ``step`` wraps the lowering call (the CLI's progress bar). ``fresh_copy=False``
    lowers ``exported`` itself, as a user's script lowers what ``torch.export`` returned (the
    edge stage's first call is replayed only on such a program)."""
    import copy

    from arm_accel.tools import models

    # lowering mutates its input: each run of one program gets its own copy
    program = copy.deepcopy(exported) if fresh_copy else exported
    gc.collect()  # the previous run's garbage must not be collected on this run's clock
    switch = stock() if stock_run else contextlib.nullcontext()
    with switch, profiled() as prof:
        start = time.perf_counter()
        lower = functools.partial(models.lower, program, mode, target)
        edge = step(lower) if step else lower()
        seconds = time.perf_counter() - start
    return edge, prof, seconds


def stats_snapshot() -> Stats | None:
    """``arm_accel.stats()``, or None where the activation layer is unavailable."""
    import arm_accel

    try:
        return arm_accel.stats()
    except Exception:  # noqa: BLE001 - reporting must not break a lowering
        return None


def is_pass_entry(name: str) -> bool:
    """A ``stats()`` entry of an accelerated pass, not a re-trace's (``"<Pass>.retrace"``) or one
    under :data:`NOT_PASSES`: their declines by design count as fallbacks."""
    return not name.endswith(".retrace") and not name.startswith(NOT_PASSES)


#: ``stats()`` name prefixes of entries that are not accelerated passes (:func:`is_pass_entry`):
#: the re-trace engine, the to_edge stage, the verifiers, the quantization flow, the fake memo,
#: the scoped stock calls and the imports in the collector's scope.
NOT_PASSES = (
    "to_edge.",
    "retrace_engine.",
    "verifier.",
    "quantize.",
    "fake_memo.",
    "delegate.",
    "export.",
    "imports.",
)


def stats_delta(
    before: Stats | None,
    after: Stats | None,
    entries: Callable[[str], bool] = is_pass_entry,
) -> tuple[int | None, int | None]:
    """Accelerated calls and fallbacks recorded by ``arm_accel.stats()`` between two snapshots,
    over the entries ``entries`` selects (the accelerated passes by default)."""
    if before is None or after is None:
        return None, None
    from arm_accel.control.records import PassStats

    acc = fb = 0
    for name, s in after.items():
        if not entries(name):
            continue
        b = before.get(name, PassStats())
        acc += s.accelerated - b.accelerated
        fb += s.fallback_count - b.fallback_count
    return acc, fb


# -------------------------------------------------------------------- acceleration switch
@contextmanager
def stock() -> Iterator[bool]:
    """``arm_accel.disabled()`` if the activation layer provides it; yields whether it did."""
    import arm_accel

    disabled = getattr(arm_accel, "disabled", None)
    if disabled is None:
        yield False
        return
    with disabled():
        yield True


def ensure_active() -> bool:
    """Swap the accelerated passes in now (``arm_accel.enable()``) unless acceleration was
    switched off (``ARM_ACCEL=0``); returns whether acceleration is on. The import hook does
    this by itself when installed; calling it here makes the accelerated runs independent of
    whether the hook fired."""
    import arm_accel

    is_enabled = getattr(arm_accel, "is_enabled", None)
    enable = getattr(arm_accel, "enable", None)
    if is_enabled is None or enable is None:
        return False
    if not is_enabled():
        return False
    try:
        enable()
    except Exception as exc:  # noqa: BLE001
        import sys

        print(f"warning: arm_accel.enable() failed: {exc}", file=sys.stderr)
        return False
    return True


def accel_available() -> bool:
    import arm_accel

    return getattr(arm_accel, "disabled", None) is not None


# -------------------------------------------------------------------- formatting
def format_table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    out = io.StringIO()

    def line(cells: list[str]) -> None:
        parts = []
        for i, (cell, w) in enumerate(zip(cells, widths, strict=True)):
            parts.append(str(cell).ljust(w) if i == 0 else str(cell).rjust(w))
        out.write("  ".join(parts).rstrip() + "\n")

    line(header)
    line(["-" * w for w in widths])
    for r in rows:
        line(r)
    return out.getvalue()


def profile_table(profile: Profile, top: int | None = None) -> str:
    total = profile.total_seconds
    rows = profile.sorted_rows()
    shown = rows[:top] if top else rows
    body = [
        [
            r.name,
            r.kind,
            str(r.calls),
            str(r.retraces),
            f"{r.seconds:.3f}",
            f"{100 * r.seconds / total:.1f}%" if total else "-",
        ]
        for r in shown
    ]
    text = format_table(body, ["pass", "kind", "calls", "retraces", "seconds", "share"])
    if top and len(rows) > top:
        rest = sum(r.seconds for r in rows[top:])
        text += f"... {len(rows) - top} more rows, {rest:.3f} s\n"
    text += (
        f"total {total:.3f} s (exclusive seconds; rows add up to it); lowering wall time "
        f"{profile.lowering_seconds:.3f} s in {profile.lowering_calls} lowering call(s); "
        f"{profile.retraces} re-traces; view/permute passes "
        f"{profile.view_permute_seconds():.3f} s\n"
    )
    return text


def compare_table(stock_p: Profile, accel_p: Profile, top: int | None = None) -> str:
    names = sorted(
        set(stock_p.rows) | set(accel_p.rows),
        key=lambda n: -(stock_p.rows[n].seconds if n in stock_p.rows else 0.0),
    )
    shown = names[:top] if top else names
    ts, ta = stock_p.total_seconds, accel_p.total_seconds

    def cells(p: Profile, n: str, total: float) -> list[str]:
        r = p.rows.get(n)
        if r is None:
            return ["-", "-", "-", "-"]
        share = f"{100 * r.seconds / total:.1f}%" if total else "-"
        return [str(r.calls), str(r.retraces), f"{r.seconds:.3f}", share]

    body = [[n, *cells(stock_p, n, ts), *cells(accel_p, n, ta)] for n in shown]
    header = [
        "pass",
        "stock calls",
        "stock retraces",
        "stock s",
        "stock share",
        "accel calls",
        "accel retraces",
        "accel s",
        "accel share",
    ]
    text = format_table(body, header)
    ratio = ts / ta if ta else float("nan")
    text += (
        f"total: stock {ts:.3f} s, accelerated {ta:.3f} s, ratio {ratio:.2f}x; lowering wall "
        f"time stock {stock_p.lowering_seconds:.3f} s, accelerated "
        f"{accel_p.lowering_seconds:.3f} s; re-traces {stock_p.retraces} -> {accel_p.retraces}\n"
    )
    return text


def stage_table(profiles: dict[str, Profile]) -> str:
    """The script's stages (``STAGES``) per run, and the whole script's wall time; with two
    runs (stock, accelerated) a ratio column and the whole script's and lowering's ratios."""
    runs = list(profiles)
    stages = [k for k in STAGES if any(k in p.stage_seconds() for p in profiles.values())]
    if not stages:
        return ""
    pair = len(runs) == 2

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}x" if a is not None and b else "-"

    body = []
    for stage in stages:
        values = [p.stage_seconds().get(stage) for p in profiles.values()]
        row = [stage, *(f"{v:.3f}" if v is not None else "-" for v in values)]
        body.append(row + ([ratio(values[0], values[1])] if pair else []))
    scripts = [p.script_seconds for p in profiles.values()]
    if all(v is not None for v in scripts):
        body.append(
            ["whole script", *(f"{v:.3f}" for v in scripts if v is not None)]
            + ([ratio(scripts[0], scripts[1])] if pair else [])
        )
    header = ["stage", *(f"{r} s" for r in runs)] + (["ratio"] if pair else [])
    text = format_table(body, header)
    if pair:
        a, b = profiles[runs[0]], profiles[runs[1]]
        text += (
            f"whole script ratio: {ratio(a.script_seconds, b.script_seconds)}; lowering ratio: "
            f"{ratio(a.lowering_seconds, b.lowering_seconds)}\n"
        )
    return text


def write_csv(path: str, profiles: dict[str, Profile]) -> None:
    """All rows of each profile (one ``run`` column per profile)."""
    fields = ["run", "pass", "kind", "calls", "retraces", "seconds", "inclusive_seconds", "share"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for run, p in profiles.items():
            total = p.total_seconds
            for r in p.sorted_rows():
                w.writerow({"run": run, **r.as_dict(total)})
