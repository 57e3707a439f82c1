"""``ArmPassManager.transform_for_annotation_pipeline`` (``prepare_pt2e``'s Arm passes) run
inside the re-trace engine's pipeline scope.

That pipeline runs its passes through a ``GraphModulePassManager``, not ``_transform``, so it
recompiled every module (llama4: 135 recompiles, none read before the next). Inside
:func:`arm_accel.pipeline.engine.arm_pipeline` the recompiles are deferred and memoised, and
garbage collection runs as in a lowering; its re-traces run in place where the engine models
them (design.md, "The quantization flow").
"""

from __future__ import annotations

import functools
from typing import Any

from arm_accel.quantize.patch import run_accelerated

#: ``stats()`` entry (also the patch table's row): one call per pipeline run.
STATS_NAME = "quantize.annotation_pipeline"


def in_pipeline_scope(stock: Any, manager: Any, graph_module: Any) -> Any:
    """Stock's pipeline on ``graph_module`` inside the engine's pipeline scope; its result
    with its code generated."""
    from torch import fx

    from arm_accel.pipeline.engine import arm_pipeline
    from arm_accel.runtime import collector, deferred

    with arm_pipeline(), collector.lowering():
        result = stock(manager, graph_module)
    if isinstance(result, fx.GraphModule):
        deferred.materialize(result)
    return result


def wrap(stock: Any) -> Any:
    """The method the patch table installs: stock's pipeline in the engine's scope."""

    @functools.wraps(stock)
    def transform_for_annotation_pipeline(self: Any, graph_module: Any) -> Any:
        return run_accelerated(
            STATS_NAME,
            lambda: None,
            lambda: (True, in_pipeline_scope(stock, self, graph_module)),
            lambda: stock(self, graph_module),
        )

    return transform_for_annotation_pipeline


def install_check() -> str | None:
    """The patch table's check of the group: the re-trace engine (whose scope it enters) is
    installed."""
    from arm_accel import patches

    if not patches.installed("retrace_engine"):
        return "the re-trace engine is not installed"
    return None


__all__ = ["STATS_NAME", "in_pipeline_scope", "install_check", "wrap"]
