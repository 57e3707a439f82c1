"""Accelerated ``FuseIdenticalInputTransformsPass``.

Each fixed-point iteration visits only the ``call_function`` nodes whose target is in
``target_ops`` (the only ones that can sink anything), found through the graph's (op, target)
index, and runs stock's sinking on them; the placeholder normalisation visits placeholders only.
One re-trace when modified, none otherwise, no ``recompile()``. Declines (stock runs): a string
among the target or transform targets (other op kinds could then match it).
"""

from __future__ import annotations

import logging
from typing import Any

from executorch.backends.arm._passes.fuse_identical_input_transforms_pass import (
    FuseIdenticalInputTransformsPass as __ArmFuse_maybe_swapped,
)
from executorch.backends.transforms.fuse_identical_input_transforms_pass import (
    FuseIdenticalInputTransformsPass as __BaseFuse_maybe_swapped,
)
from executorch.backends.transforms.fuse_identical_input_transforms_pass import (
    NormalizeTransformInputPlaceholdersPass,
)
from executorch.exir.pass_base import PassResult
from torch import fx

from arm_accel.fxstock import GraphJournal
from arm_accel.native.table import call_nodes_with_targets
from arm_accel.pipeline.passes.base import AcceleratedPass, Decline, _stock_class
from arm_accel.runtime import eval_counter

logger = logging.getLogger("arm_accel")

# The activation may already have swapped our classes into executorch's modules: always
# derive from the stock classes.
_ArmFuse = _stock_class(__ArmFuse_maybe_swapped)
_BaseFuse = _stock_class(__BaseFuse_maybe_swapped)


def normalize_placeholders(
    graph_module: fx.GraphModule, exported_program: Any, permute_targets: frozenset[Any]
) -> bool:
    """Stock ``NormalizeTransformInputPlaceholdersPass`` on the placeholders only, without
    making the pass or its ``recompile()`` (their ``<eval_with_key>`` numbers taken); returns
    whether it renamed anything."""
    eval_counter.take(eval_counter.EXPORT_PASS_INIT)
    if exported_program is None:
        return False
    placeholders = graph_module.graph.find_nodes(op="placeholder")  # graph order
    if not placeholders:
        return False
    norm = NormalizeTransformInputPlaceholdersPass.__new__(NormalizeTransformInputPlaceholdersPass)
    norm.exported_program = exported_program
    norm._targets = {_BaseFuse._VIEW_TARGET} | frozenset(
        permute_targets or (_BaseFuse._PERMUTE_TARGET,)
    )
    placeholder_names = {node.name for node in placeholders}
    name_updates: dict[str, str] = {}
    modified = False
    for node in placeholders:
        if not norm._placeholder_represents_transform(node):
            continue
        old_target = str(node.target)
        if node.target != node.name:
            node.target = node.name
            modified = True
            if old_target not in placeholder_names:
                name_updates[old_target] = node.name
    if not modified:
        return False
    if name_updates:
        signature = exported_program.graph_signature
        signature.input_specs = [
            norm._renamed_input_spec(spec, name_updates) for spec in signature.input_specs
        ]
    graph_module.graph.lint()
    eval_counter.take(eval_counter.RECOMPILE)
    return True


class AccelFuseIdenticalInputTransformsMixin(AcceleratedPass):
    """Candidate-only fixed point for any ``FuseIdenticalInputTransformsPass`` (list it first)."""

    accel_recompile = False  # as stock: its re-trace (or nothing) follows the edits

    def accel_plan(self, graph_module: fx.GraphModule) -> list[fx.Node]:
        """The candidate nodes, in graph order. Reads only; the graph is untouched."""
        if any(isinstance(t, str) for t in self._targets):  # type: ignore[attr-defined]
            raise Decline("string transform target")
        candidates = call_nodes_with_targets(graph_module.graph, self.target_ops)  # type: ignore[attr-defined]
        if candidates is None:
            raise Decline("string target op")
        return candidates

    def accel_apply(
        self, graph_module: fx.GraphModule, plan: list[fx.Node], journal: GraphJournal
    ) -> Any:
        # Stock's own methods edit the graph: the journal records it whole, to roll back.
        journal.checkpoint()
        modified = normalize_placeholders(
            graph_module,
            getattr(self, "exported_program", None),
            self._permute_targets,  # type: ignore[attr-defined]
        )
        candidates = plan
        while candidates:
            iteration_modified = False
            for node in candidates:
                while self._sink_identical_input_transforms(node):  # type: ignore[attr-defined]
                    iteration_modified = True
            if not iteration_modified:
                break
            modified = True
            # Sinking never adds or removes a candidate; re-query anyway (cheap, and exact).
            candidates = call_nodes_with_targets(graph_module.graph, self.target_ops) or []  # type: ignore[attr-defined]

        if modified:
            graph = graph_module.graph
            graph.eliminate_dead_code()
            graph.lint()
            self.accel_recompile_number()
            graph_module = super(_BaseFuse, self).call(graph_module).graph_module  # type: ignore[misc]
            self.note_retrace()
        return PassResult(graph_module, modified)


class FuseIdenticalInputTransformsPass(AccelFuseIdenticalInputTransformsMixin, _ArmFuse):
    """Arm configuration, accelerated."""

    _arm_accel_stock = _ArmFuse  # stock class without an MRO walk per call


class BaseFuseIdenticalInputTransformsPass(AccelFuseIdenticalInputTransformsMixin, _BaseFuse):
    """``backends.transforms`` configuration (as the propagation passes use it), accelerated."""

    _arm_accel_stock = _BaseFuse  # stock class without an MRO walk per call

    accel_name = "transforms.FuseIdenticalInputTransformsPass"
