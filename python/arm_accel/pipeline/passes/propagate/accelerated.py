"""Accelerated ``PropagateViewCopyPermute{Down,Up}Pass`` (Arm/TOSA configuration).

Stock's decisions (planned natively in runs of scans, :mod:`.scan_plan`, or stock's own walk),
with the whole-graph re-trace stock runs after each scan replaced by a virtual one
(:mod:`.retrace`) and one real re-trace at the end, where stock's last one runs. Transactional:
any exception or misprediction rolls back to the graph the call received and runs the stock
pass. Why the result is stock's: design.md, "The view/permute passes".
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, ClassVar

import executorch.backends.transforms.propagate_view_copy_permute_pass as _generic
from executorch.backends.arm._passes.arm_pass import ArmPass
from executorch.backends.arm._passes.propagate_view_copy_permute_pass import (
    PropagateViewCopyPermuteDownPass as _MaybeSwappedDown,
)
from executorch.backends.arm._passes.propagate_view_copy_permute_pass import (
    PropagateViewCopyPermuteUpPass as _MaybeSwappedUp,
)
from executorch.exir.pass_base import ExportPass, PassResult
from torch import fx

from arm_accel.control import counters, switch
from arm_accel.fxstock import GraphJournal
from arm_accel.pipeline.passes.base import _stock_class, stage
from arm_accel.pipeline.passes.canonicalize import BaseCanonicalizeViewCopyPermutePass
from arm_accel.pipeline.passes.fuse_duplicate_users import BaseFuseDuplicateUsersPass
from arm_accel.pipeline.passes.fuse_identical_input_transforms import (
    BaseFuseIdenticalInputTransformsPass,
)
from arm_accel.pipeline.passes.propagate import scan_plan
from arm_accel.pipeline.passes.propagate.retrace import (
    VirtualRetracer,
    VirtualRetraceUnsupported,
    count_retraces,
    has_symbolic_shapes,
    provenance_pass_name,
    unmodelled_node_kind,
)
from arm_accel.runtime import eval_counter

logger = logging.getLogger("arm_accel")

# The activation hook may already have swapped ours into the stock module: derive from stock.
_StockDown = _stock_class(_MaybeSwappedDown)
_StockUp = _stock_class(_MaybeSwappedUp)
_GENERIC_UP_FUSE_HORIZONTAL = _stock_class(_generic.PropagateViewCopyPermuteUpPass).fuse_horizontal
_GENERIC_DOWN_FUSE_HORIZONTAL = _stock_class(
    _generic.PropagateViewCopyPermuteDownPass
).fuse_horizontal
_GENERIC_FUSE_VERTICAL = _generic.PropagateViewCopyPermutePass.fuse_vertical


# Per-thread state: two threads lowering at once must not see each other's trackers or flags.
# Keyed by ``id`` of the fusion / pass instance; entries live only for the duration of a call.
class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.fusion_trackers: dict[int, tuple[VirtualRetracer, str]] = {}
        self.call_flags: dict[int, tuple[bool, bool]] = {}


_state = _ThreadState()


class Misprediction(RuntimeError):
    """The between-scan model predicted values, dead nodes or users orders differently from
    the re-trace: the scans after it decided on a graph stock never saw."""


class RunUnverifiable(Exception):  # noqa: N818 - a decline, raised mid-call
    """A run read modelled values the virtual re-trace cannot check (a real re-trace would
    hide a misprediction): roll back and run stock, even when strict."""


class AbortCall(BaseException):  # noqa: N818 - a control-flow signal, not an error
    """Carries a failure out of an in-loop fusion to the propagation call's rollback: derived
    from ``BaseException`` so that the fusion's own ``except Exception`` fallback does not
    swallow a failure of the call's virtual re-trace (the fusion's journal cannot undo it)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


#: Stage names in fallback reasons (and the fault-injection test).
STAGES = ("plan", "apply", "virtual re-trace", "real re-trace")


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, AbortCall):
        exc = exc.error
    if isinstance(exc, Misprediction):
        return "misprediction"
    if isinstance(exc, RunUnverifiable):
        return f"run not verifiable: {exc}"
    where = getattr(exc, "_arm_accel_stage", None) or "call"
    return f"{where} failed: {type(exc).__name__}"


class _VirtualRetraceBase(ExportPass):
    """Placed right before ``ExportPass`` in a fusion pass's MRO: the fusion's closing
    ``super().call(graph_module)`` re-trace becomes a virtual one."""

    @property
    def _arm_accel_tracker(self) -> VirtualRetracer | None:
        entry = _state.fusion_trackers.get(id(self))
        return entry[0] if entry is not None else None

    @_arm_accel_tracker.setter
    def _arm_accel_tracker(self, tracker: VirtualRetracer | None) -> None:
        if tracker is None:
            _state.fusion_trackers.pop(id(self), None)
        else:
            _state.fusion_trackers[id(self)] = (tracker, self._arm_accel_owner)

    @property
    def _arm_accel_owner(self) -> str:
        entry = _state.fusion_trackers.get(id(self))
        return entry[1] if entry is not None else ""

    def _set_tracker(self, tracker: VirtualRetracer, owner: str) -> None:
        _state.fusion_trackers[id(self)] = (tracker, owner)

    def call(self, graph_module: fx.GraphModule) -> PassResult:
        tracker = self._arm_accel_tracker
        if tracker is not None and tracker.graph_module is graph_module:
            try:
                with stage("virtual re-trace"):
                    # The fusion ran its own DCE/lint, if any: ``ExportPass.call`` does neither.
                    tracker.apply(
                        pass_name=provenance_pass_name(self),
                        prologue=False,
                        arm_pass=isinstance(self, ArmPass),
                    )
                eval_counter.take(eval_counter.EXPORT_PASS_CALL)  # stock's re-trace compiles
                return PassResult(graph_module, True)
            except VirtualRetraceUnsupported as exc:
                counters.record_fallback(self._arm_accel_owner, f"virtual retrace: {exc}")
            except Exception as exc:
                raise AbortCall(exc) from exc
            with stage("real re-trace"):
                try:
                    return super().call(graph_module)
                except Exception as exc:
                    raise AbortCall(exc) from exc
        return super().call(graph_module)


# The accelerated ``backends.transforms`` fusion classes, keyed by the stock class they replace.
_ACCELERATED_FUSIONS: dict[type, type] = {
    _stock_class(cls): cls
    for cls in (
        BaseFuseDuplicateUsersPass,
        BaseFuseIdenticalInputTransformsPass,
        BaseCanonicalizeViewCopyPermutePass,
    )
}


# Bound of one native run of scans (the re-traces between them modelled): a guard against a
# planner that never reaches the fixed point, far above any real graph's scan count.
_SCANS_PER_RUN = 1 << 16


def _fusion_class(looked_up: type) -> type:
    """The class to run where stock runs ``looked_up`` (taken from the module, as stock looks it
    up): our accelerated variant when it is the stock class, else (a harness replaced it)
    whatever is there."""
    return _ACCELERATED_FUSIONS.get(looked_up, looked_up)


_VIRTUAL_VARIANTS: dict[type, type] = {}
_VARIANTS_LOCK = threading.Lock()


def _virtualized(cls: type) -> type:
    with _VARIANTS_LOCK:  # one variant per class, also when two threads ask first
        variant = _VIRTUAL_VARIANTS.get(cls)
        if variant is None:
            variant = type(f"Virtual{cls.__name__}", (cls, _VirtualRetraceBase), {})
            mro = variant.__mro__
            if mro.index(_VirtualRetraceBase) != mro.index(ExportPass) - 1:
                variant = cls  # cannot interpose: keep the real re-trace
            _VIRTUAL_VARIANTS[cls] = variant
    return variant


class _AcceleratedPropagation:
    """Mixin placed before the stock Arm class; overrides ``call`` and the fusion hooks."""

    #: The real re-trace closes the accelerated call, inside its transaction (checkpoint
    #: rollback): the re-trace engine may run it in place (``retrace_engine.RETRACE_LAST``).
    _arm_accel_retrace_last: ClassVar[bool] = True

    _stock_name: str

    # ``active``: inside an accelerated call; ``exact``: values are exact (a re-trace, real or
    # virtual, ran in this call). Per thread and per instance (see ``_ThreadState``).
    @property
    def _arm_accel_active(self) -> bool:
        return _state.call_flags.get(id(self), (False, False))[0]

    @property
    def _arm_accel_exact(self) -> bool:
        return _state.call_flags.get(id(self), (False, False))[1]

    @_arm_accel_exact.setter
    def _arm_accel_exact(self, exact: bool) -> None:
        _state.call_flags[id(self)] = (self._arm_accel_active, exact)

    def _run_fusion(self, fusion: Any, graph_module: fx.GraphModule) -> PassResult:
        # Only on the accelerated path: a stock run (decline, switch off) keeps real re-traces.
        active = self._arm_accel_active
        exact = self._arm_accel_exact
        virtual = isinstance(fusion, _VirtualRetraceBase)
        if virtual and active:
            try:
                fusion._set_tracker(VirtualRetracer(graph_module, full=not exact), self._stock_name)
            except VirtualRetraceUnsupported:
                pass
        try:
            result = fusion.call(graph_module)
        finally:
            if virtual:
                fusion._arm_accel_tracker = None
        if active and result.modified:
            self._arm_accel_exact = True  # re-traced, really or virtually from exact values
        return result

    # Stock ``fuse_horizontal``/``fuse_vertical``/``make_fusion_pass``, with the fusion classes
    # looked up where stock looks them up, and their closing re-trace made virtual. The direction
    # comes from the stock class's own method (captured at import: a harness may replace the
    # module attributes ``_generic.PropagateViewCopyPermute*Pass`` by subclasses, and an
    # ``isinstance`` against the replaced attribute picks the wrong fusion). A stock class with
    # its own override keeps it (real re-traces).
    def fuse_horizontal(self, graph_module: fx.GraphModule) -> PassResult:
        stock_impl = self._arm_accel_stock.fuse_horizontal  # type: ignore[attr-defined]
        if stock_impl is _GENERIC_UP_FUSE_HORIZONTAL:
            cls = _virtualized(_fusion_class(_generic.FuseDuplicateUsersPass))
            fusion = cls(self.duplicate_user_fusion_exclusions())  # type: ignore[attr-defined]
        elif stock_impl is _GENERIC_DOWN_FUSE_HORIZONTAL:
            cls = _virtualized(_fusion_class(_generic.FuseIdenticalInputTransformsPass))
            fusion = cls(permute_targets=self._permute_targets)  # type: ignore[attr-defined]
        else:
            return stock_impl(self, graph_module)
        result = self._run_fusion(fusion, graph_module)
        return PassResult(result.graph_module, result.modified)

    def fuse_vertical(self, graph_module: fx.GraphModule) -> PassResult:
        stock_impl = self._arm_accel_stock.fuse_vertical  # type: ignore[attr-defined]
        if stock_impl is not _GENERIC_FUSE_VERTICAL:
            return stock_impl(self, graph_module)
        modified = False
        fusion_pass = self.make_fusion_pass()  # type: ignore[attr-defined]
        if fusion_pass is not None:
            result = self._run_fusion(fusion_pass, graph_module)
            graph_module = result.graph_module
            modified |= result.modified
        canonicalize = _virtualized(_fusion_class(_generic.CanonicalizeViewCopyPermutePass))
        permute_targets = self._permute_targets  # type: ignore[attr-defined]
        result = self._run_fusion(canonicalize(permute_targets), graph_module)
        graph_module = result.graph_module
        modified |= result.modified
        return PassResult(graph_module, modified)

    def make_fusion_pass(self) -> ExportPass | None:
        fusion = super().make_fusion_pass()  # type: ignore[misc]
        if fusion is not None:
            # The variant only adds class attributes, so the instance can switch class.
            fusion.__class__ = _virtualized(type(fusion))
        return fusion

    def call(self, graph_module: fx.GraphModule) -> PassResult:  # type: ignore[override]
        name = self._stock_name
        start = time.perf_counter()
        reason = None
        if not switch.is_enabled():
            reason = "switched off"
        elif has_symbolic_shapes(graph_module):
            reason = "symbolic shapes"
        elif (kind := unmodelled_node_kind(graph_module)) is not None:
            reason = f"{kind} node (re-traced name not modelled)"
        else:
            try:
                VirtualRetracer._find_fake_mode(graph_module)
            except VirtualRetraceUnsupported as exc:
                reason = str(exc)
        with count_retraces() as retraces:
            if reason is not None:
                if reason != "switched off":  # a decline by design: counted, not warned
                    counters.record_decline(name, reason)
                logger.info("%s: stock pass runs (%s)", name, reason)
                result = super().call(graph_module)  # type: ignore[misc]
            else:
                result, reason = self._transaction(graph_module)
        counters.record_call(name, time.perf_counter() - start, reason is None, retraces.count)
        return result

    def _transaction(self, graph_module: fx.GraphModule) -> tuple[PassResult, str | None]:
        """The accelerated call, or -- on any failure -- the graph restored to what the call
        received and the stock pass run on it; the fallback reason, None when accelerated."""
        journal = GraphJournal(graph_module)
        journal.checkpoint()
        numbers = eval_counter.position()
        # No re-trace yet: the first one, real or virtual, recomputes every value.
        _state.call_flags[id(self)] = (True, False)
        try:
            result = self._accelerated_call(graph_module)
        except (Exception, AbortCall) as exc:
            error = exc.error if isinstance(exc, AbortCall) else exc
            reason = _failure_reason(exc)
            _state.call_flags.pop(id(self), None)
            journal.rollback()
            eval_counter.rewind(numbers)  # the stock pass takes them
            counters.record_fallback(self._stock_name, reason)
            if switch.strict() and not isinstance(error, RunUnverifiable):
                raise error from None
            logger.info(
                "%s: accelerated call failed (%s); graph restored, stock pass runs",
                self._stock_name,
                reason,
                exc_info=True,
            )
            return super().call(graph_module), reason  # type: ignore[misc]
        finally:
            _state.call_flags.pop(id(self), None)
        journal.commit(recompile=False)
        return result, None

    # The loop is stock's ``PropagateViewCopyPermutePass.call`` with the re-traces between
    # scans made virtual.
    def _accelerated_call(self, graph_module: fx.GraphModule) -> PassResult:
        modified = False

        result = self.fuse_horizontal(graph_module)  # type: ignore[attr-defined]
        graph_module = result.graph_module
        modified |= result.modified
        result = self.fuse_vertical(graph_module)  # type: ignore[attr-defined]
        graph_module = result.graph_module
        modified |= result.modified
        if result.modified:
            # The fusion that modified ended with a re-trace; stock re-traces once more.
            graph_module = self._virtual_retrace(VirtualRetracer(graph_module))

        scan_cache = scan_plan.ScanCache()
        while True:
            tracker = VirtualRetracer(graph_module)
            # Scans after the first read re-traced values: the native model of the re-trace
            # between scans starts from exact values only.
            max_scans = _SCANS_PER_RUN if self._arm_accel_exact else 1
            run = scan_plan.run_scans(
                self,
                graph_module,
                self._stock_name,
                scan_cache,
                max_scans,
                verify=lambda t=tracker: self._verify_model(t),
            )
            if run is None:
                with stage("apply"):
                    iteration_modified = self._python_scan(graph_module)
                fixed_point = not iteration_modified
                retraces = int(iteration_modified)
            else:
                iteration_modified, fixed_point = run.modified, run.fixed_point
                retraces = run.retraces

            if iteration_modified:
                modified = True
                # The run's last scans read modelled values: check them against the re-trace
                # (a run whose last scan edited was checked before that scan: ``verify``).
                check = run is not None and run.scans > 1 and run.model_at_end
                graph_module = self._virtual_retrace(tracker, check=check, stands_for=retraces)
            if not fixed_point:
                continue

            result = self.fuse_horizontal(graph_module)  # type: ignore[attr-defined]
            graph_module = result.graph_module
            iteration_modified = result.modified
            result = self.fuse_vertical(graph_module)  # type: ignore[attr-defined]
            graph_module = result.graph_module
            iteration_modified |= result.modified

            modified |= iteration_modified
            if not iteration_modified:
                break

        if modified:
            with stage("real re-trace"):
                graph_module = self._retrace(graph_module)  # type: ignore[attr-defined]

        return PassResult(graph_module, modified)

    def _python_scan(self, graph_module: fx.GraphModule) -> bool:
        """Stock's scan, stock's decisions (when the native planner declines)."""
        iteration_modified = False
        stale_nodes: set[fx.Node] = set()
        for node in list(graph_module.graph.nodes):
            if node in stale_nodes:
                continue
            if node.target in self._targets:  # type: ignore[attr-defined]
                if len(node.users) == 0:
                    continue
                if self._propagate(node, stale_nodes):  # type: ignore[attr-defined]
                    iteration_modified = True
        return iteration_modified

    def _virtual_retrace(
        self, tracker: VirtualRetracer, check: bool = False, stands_for: int = 1
    ) -> fx.GraphModule:
        """In place of ``stands_for`` stock re-traces (a run's, one per scan that edited).
        ``check``: the graph holds the between-scan model's values, DCE and users orders
        (a run of natively planned scans ended on them): any the re-trace finds different
        raises ``Misprediction`` (the call rolls back)."""
        if not self._arm_accel_exact:
            tracker.full = True  # the first re-trace of this call refreshes every value
        self._arm_accel_exact = True
        try:
            with stage("virtual re-trace"):
                tracker.apply(pass_name=provenance_pass_name(self), check=check)
        except VirtualRetraceUnsupported as exc:
            if check:  # a real re-trace would hide what the model got wrong
                raise RunUnverifiable(str(exc)) from exc
            counters.record_fallback(self._stock_name, f"virtual retrace: {exc}")
            logger.info("%s: real re-trace (%s)", self._stock_name, exc)
            eval_counter.take(eval_counter.EXPORT_PASS_CALL * (stands_for - 1))
            with stage("real re-trace"):
                return self._retrace(tracker.graph_module)  # type: ignore[attr-defined]
        self._raise_mispredictions(tracker)
        eval_counter.take(eval_counter.EXPORT_PASS_CALL * stands_for)  # stock's re-traces
        return tracker.graph_module

    def _verify_model(self, tracker: VirtualRetracer) -> None:
        """Before the last scan of a run that ends on an edit: the modelled values, DCE and
        users orders that scan was planned on, against a virtual re-trace."""
        with stage("virtual re-trace"):
            try:
                tracker.apply(pass_name=provenance_pass_name(self), check=True)
            except VirtualRetraceUnsupported as exc:
                raise RunUnverifiable(str(exc)) from exc
        self._raise_mispredictions(tracker)

    def _raise_mispredictions(self, tracker: VirtualRetracer) -> None:
        if tracker.mismatches:
            counters.record_shape_mismatch(self._stock_name, tracker.mismatches)
            raise Misprediction(
                f"the between-scan model predicted {tracker.mismatches} value(s), dead node(s)"
                " or users order(s) differently from the re-trace (please report)"
            )


class PropagateViewCopyPermuteDownPass(_AcceleratedPropagation, _StockDown):
    _stock_name = "PropagateViewCopyPermuteDownPass"
    _arm_accel_stock = _StockDown


class PropagateViewCopyPermuteUpPass(_AcceleratedPropagation, _StockUp):
    _stock_name = "PropagateViewCopyPermuteUpPass"
    _arm_accel_stock = _StockUp


def accelerate(stock_class: type) -> type:
    """An accelerated subclass of any ``PropagateViewCopyPermutePass`` subclass (for example
    the backend-neutral ``executorch.backends.transforms`` ones)."""
    name = stock_class.__name__
    attrs = {"_stock_name": name, "_arm_accel_stock": stock_class}
    return type(name, (_AcceleratedPropagation, stock_class), attrs)
