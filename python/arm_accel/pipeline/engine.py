"""The pipeline-wide re-trace engine: every ``ExportPass`` re-trace the Arm pass
manager runs goes through :func:`accelerated_call`.

- A pass whose re-trace we model (no ``call`` override, or one of :data:`IN_PLACE_CALLERS`, whose
  ``call`` uses only the re-trace's result) is re-traced in place (:mod:`.inplace`): the pass's
  own methods run as in stock, nodes rebuilt as they were are kept, values are re-dispatched only
  where they may have changed. The result equals stock's node for node, meta for meta.
- Any other call, anything :mod:`.inplace` does not model, and any failure run the stock
  re-trace (after the in-place one has undone its changes), counted in ``arm_accel.stats()``
  under ``"<Pass>.retrace"`` with the reason.
- Only inside ``ArmPassManager._transform`` (the Arm pipeline), and only while
  :func:`arm_accel.control.switch.is_enabled`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import fx
from torch.fx.passes.infra.pass_base import PassResult

from arm_accel.control import counters, switch
from arm_accel.fxstock import freshness, order
from arm_accel.patches import installed, original
from arm_accel.runtime import (
    codegen,
    collector,
    deferred,
    eval_counter,
    fake_memo,
    provenance,
)
from arm_accel.runtime.scopes import ThreadScope

logger = logging.getLogger("arm_accel")

#: executorch passes with a ``call`` override whose re-trace (``super().call``) may run in place:
#: after it they use only its result, and they report it as modified (docs/call-override-audit.md;
#: ``InsertRescalePass`` and ``ReplaceChannelsLastInputClones`` can report a re-traced graph as
#: unmodified, which keeps the input module, so they stay stock).
IN_PLACE_CALLERS: frozenset[str] = frozenset(
    {
        "AtenToDialectPass",
        "BroadcastArgsPass",
        "CanonicalizeViewCopyPermutePass",
        "CastInt64BuffersToInt32Pass",
        "ComputeConstantOpsAOTPass",
        "ConvertConv1dToConv2dPass",
        "ConvertELUParamsPass",
        "ConvertInt64ConstOpsToInt32Pass",
        "ConvertInt64OutputOpsToInt32Pass",
        "ConvertMinMaxPass",
        "ConvertSplitToSlicePass",
        "DecomposeAnyPass",
        "DecomposeBatchNormNoStatsPass",
        "DecomposeCumsumPass",
        "DecomposeEmbeddingPass",
        "DecomposeGroupNormPass",
        "DecomposeGruPass",
        "DecomposeLayerNormPass",
        "DecomposeLinearPass",
        "DecomposeLstmPass",
        "DecomposeQuantNodesPass",
        "DecomposeRnnPass",
        "DecomposeSelectPass",
        "DecomposeUnsupportedBilinearResizePass",
        "EnforceContiguousDimOrder",
        "EnsureUniqueOutputNodesPass",
        "FoldAndAnnotateQParamsPass",
        "FuseBatchNorm2dPass",
        "FuseBatchNormWithConvPass",
        "FuseClampPass",
        "FuseConstantArgsPass",
        "FuseDuplicateUsersPass",
        "FuseEqualPlaceholdersPass",
        "FuseIdenticalInputTransformsPass",
        "FuseQuantizedActivationPass",
        "FuseViewCopyTransform",
        "HierarchicalInplacePassInterface",
        "InsertConstShapesPass",
        "InsertControlFlowRescalesPass",
        "InsertInt32CastsAfterInt64PlaceholdersPass",
        "InsertRescaleInt32Pass",
        "InsertTableOpsPass",
        "MatchArgDtypePass",
        "MatchArgRanksPass",
        "MoveDataMovementOpsToSmallerDtypePass",
        "NormalizeDelegateIOLayoutPass",
        "PostponePermuteOpBelowSqueezeOrUnsqueezeLikeView",
        "PropagateViewCopyPermutePass",
        "QuantizeClampArgumentsPass",
        "RemoveGetItemPass",
        "RemoveNoopPass",
        "RemovePermutesAroundElementwiseOps",
        "RemovePermutesAroundElementwiseTosaOps",
        "ReplaceOpsWithChannelsLastVariants",
        "RewriteBoolToFp32CastViaInt8Pass",
        "RewriteConvPass",
        "RewriteMXFPConv2dPass",
        "RewriteMXFPLinearPass",
        "RewriteMatmulPass",
        "RewriteUpsamplePass",
        "ScalarsToAttributePass",
        "SizeAdjustInputPass",
        "UnsqueezeBeforeRepeatPass",
        "UnsqueezeScalarPlaceholdersPass",
        "ViewCopyToSqueezeUnsqueezePass",
    }
)


def _no_overload_packet(graph_module: fx.GraphModule) -> str | None:
    """``ScalarToTensorPass`` reads each operator's schema (``map_args``), which an overload
    packet does not have: None when no node calls one. The tensor constants it makes of
    scalars are ``get_attr`` nodes, which the in-place re-trace makes as stock does."""
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverloadPacket):
            return "operator overload packet"
    return None


#: executorch passes with a ``call`` override that uses only the re-trace's result, whose
#: re-trace runs in place when a check of the graph finds nothing it does not model (None).
CONDITIONAL_CALLERS: dict[str, Callable[[fx.GraphModule], str | None]] = {
    "ScalarToTensorPass": _no_overload_packet,
}

#: Set (True) on an arm-accel class whose ``call`` re-traces only as its last edit of the graph,
#: inside a transaction whose rollback restores the whole graph (``GraphJournal.checkpoint``):
#: the re-trace may run in place. Not on ``_VirtualRetraceBase``: its real re-trace happens in
#: the middle of a propagation call, which goes on editing.
RETRACE_LAST = "_arm_accel_retrace_last"

_pipeline = ThreadScope()
_deferring = ThreadScope()


def _in_arm_pipeline() -> bool:
    return _pipeline.active()


def deferring_recompiles() -> AbstractContextManager[None]:
    """Recompiles in this block (this thread) are deferred to first use (:mod:`.deferred`), as
    in the Arm pipeline, each keeping the ``<eval_with_key>.N`` number stock's compile would
    give it; nothing else of the engine is on. For the edge stage's decompositions: their
    traces recompile every module they build and use the code of few."""
    return _deferring.entered()


def _eligible(pass_: Any, graph_module: fx.GraphModule) -> str | None:
    """None when the pass's re-trace can be done in place, else why not."""
    from executorch.exir.pass_base import _ExportPassBase

    cls = type(pass_)
    for klass in cls.__mro__:
        if klass is _ExportPassBase:
            return None
        if "call" not in vars(klass):
            continue
        if not klass.__module__.startswith("executorch."):
            if klass.__module__.startswith("arm_accel.") and vars(klass).get(RETRACE_LAST):
                continue
            return "call override"
        if klass.__name__ in IN_PLACE_CALLERS:
            continue
        check = CONDITIONAL_CALLERS.get(klass.__name__)
        if check is None:
            return "call override"
        reason = check(graph_module)
        if reason is not None:
            return reason
    return "not an ExportPass"


def accelerated_call(self: Any, graph_module: fx.GraphModule) -> Any:
    """``_ExportPassBase.call``, in place where modelled (see the module docstring)."""
    stock_call = original("retrace_engine.call")
    if not _in_arm_pipeline() or not switch.is_enabled():
        return stock_call(self, graph_module)
    from arm_accel.pipeline import inplace

    name = f"{type(self).__name__}.retrace"
    start = time.perf_counter()
    reason = _eligible(self, graph_module)
    failure: Exception | None = None
    if reason is not None:
        counters.record_decline(name, reason)
    else:
        try:
            result, _engine = inplace.retrace(self, graph_module)
        except inplace.Unsupported as exc:
            counters.record_decline(name, str(exc))
        except Exception as exc:  # the graph is as it came: run stock, which may raise it too
            failure = exc
            counters.record_fallback(name, f"{type(exc).__name__} in the in-place re-trace")
            logger.debug("arm_accel: in-place re-trace of %s failed", name, exc_info=True)
        else:
            counters.record_call(name, time.perf_counter() - start, True)
            return result
    result = stock_call(self, graph_module)
    if failure is not None and switch.strict():
        # Stock succeeded where the in-place re-trace failed: an engine fault, not the pass's.
        message = f"arm_accel: in-place re-trace of {name} failed: {failure!r}"
        raise RuntimeError(message) from failure
    # Every value of a stock re-trace is what dispatch gives: later in-place re-traces may
    # keep those the graph still holds.
    freshness.record(result.graph_module.graph)
    counters.record_call(name, time.perf_counter() - start, False)
    return result


def deprecated_base_call(self: Any, graph_module: fx.GraphModule) -> Any:
    """torch's ``_ExportPassBaseDeprecatedDoNotUse.call``, stock; in the pipeline (with
    acceleration on) its provenance records share their ancestors (:mod:`provenance`, counted
    under ``provenance.STATS_NAME``) and the fake memo serves its quantize/dequantize calls
    (:func:`fake_memo.dispatching`), as in the edge stage's other calls. The edge stage runs it for
    ``ReplaceViewOpsWithViewCopyOpsPass`` right before the engine's first re-trace. That pass
    only retargets view ops and calls the base's ``call_operator``, and the base dispatches
    every node as executorch's re-trace does (the same fake mode and python dispatcher, a plain
    ``fx.Interpreter``, the same ``set_metadata``): its values are what dispatch gives, and the
    engine's next re-trace may keep them (without the record it dispatched every node again)."""
    from torch._export.passes.replace_view_ops_with_view_copy_ops_pass import (
        ReplaceViewOpsWithViewCopyOpsPass,
    )

    stock = original("retrace_engine.deprecated_call")
    if not (_in_arm_pipeline() and switch.is_enabled()):
        return stock(self, graph_module)
    t0 = time.perf_counter()
    with provenance.sharing(), fake_memo.dispatching():
        result = stock(self, graph_module)
    if installed("edge.provenance"):
        counters.record_call(provenance.STATS_NAME, time.perf_counter() - t0, accelerated=True)
    if type(self) is ReplaceViewOpsWithViewCopyOpsPass and isinstance(result, PassResult):
        freshness.record(result.graph_module.graph)
    return result


def arm_pipeline() -> AbstractContextManager[None]:
    """Re-traces in this block (this thread) are the Arm pipeline's: served by the engine."""
    return _pipeline.entered()


def transform(self: Any, *args: Any, **kwargs: Any) -> Any:
    with arm_pipeline(), collector.lowering():
        result = original("retrace_engine.transform")(self, *args, **kwargs)
    # What leaves the pipeline has its code (``deferred``: other modules get it when used).
    if isinstance(result, fx.GraphModule):
        deferred.materialize(result)
    return result


def python_code(graph: fx.Graph, root_module: str, **kwargs: Any) -> Any:
    stock = original("retrace_engine.python_code")
    if not _in_arm_pipeline() or not switch.is_enabled():
        return stock(graph, root_module, **kwargs)
    return codegen.python_code(stock, graph, root_module, order.refile_as_python_code, **kwargs)


def forward_from_src(src: str, globals_: dict[str, Any], co_fields: Any = None) -> Any:
    stock = original("retrace_engine.forward_from_src")
    if not _in_arm_pipeline() or not switch.is_enabled():
        return stock(src, globals_, co_fields)
    return codegen.forward_from_src(stock, src, globals_, co_fields, eval_counter.take)


def recompile(self: fx.GraphModule) -> Any:
    # In the pipeline and deferring_recompiles() the code is generated when first used
    # (``deferred``), else at once.
    deferring = _in_arm_pipeline() or _deferring.active()
    if deferring and switch.is_enabled() and deferred.deferrable(self):
        # The code keeps stock's ``<eval_with_key>.N`` file name, taken now: torch's counter
        # then stays stock's for every later compile (which traces through generated code
        # record in stack traces: the re-export of a quantized module). Stock's code
        # generation re-files the graph's find_nodes index: so does the deferred recompile.
        order.refile_as_python_code(self.graph)
        return deferred.defer(self)
    deferred.drop(self)
    return original("retrace_engine.recompile")(self)


def generate_edge_program(*args: Any, **kwargs: Any) -> Any:
    # to_edge's own ExportPass passes (OpReplacePass, MemoryFormatOpsPass, ...): the engine
    # serves them as it serves the Arm pipeline's.
    with arm_pipeline():
        program = original("retrace_engine.generate_edge_program")(*args, **kwargs)
    deferred.materialize(program.graph_module)
    return program
