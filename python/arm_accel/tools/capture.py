"""Capture the graphs the view/permute passes receive during a real lowering.

Used by the round-trip and differential tests and by the pass benchmark: each record holds
a deep copy of the graph module as the pass received it, plus the pass instance, so a test
can replay stock and accelerated versions of that pass on identical inputs.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import fx

# (module under executorch.backends.arm._passes, class name) of the passes we accelerate.
STOCK_PASSES: dict[str, str] = {
    "CanonicalizeViewCopyPermutePass": "canonicalize_view_copy_permute_pass",
    "FuseDuplicateUsersPass": "fuse_duplicate_users_pass",
    "FuseIdenticalInputTransformsPass": "fuse_identical_input_transforms_pass",
    "RemovePermutesAroundElementwiseTosaOps": "remove_permutes_around_elementwise_tosa_ops",
    "PropagateViewCopyPermuteDownPass": "propagate_view_copy_permute_pass",
    "PropagateViewCopyPermuteUpPass": "propagate_view_copy_permute_pass",
}


def stock_class(name: str) -> type:
    """The Arm pass class ``name`` as executorch defines it."""
    module = importlib.import_module(f"executorch.backends.arm._passes.{STOCK_PASSES[name]}")
    return getattr(module, name)


@dataclass
class Captured:
    pass_name: str
    index: int  # n-th call of this pass in the lowering
    graph_module: fx.GraphModule
    pass_instance: Any

    def fresh_graph(self) -> fx.GraphModule:
        """A new deep copy, so each replay starts from the same input."""
        return copy.deepcopy(self.graph_module)


@contextmanager
def capture(
    names: tuple[str, ...] = tuple(STOCK_PASSES), outermost_only: bool = True
) -> Iterator[list[Captured]]:
    """Record the input of every call of the named passes inside the block.

    With ``outermost_only`` (the default) a pass called from inside another captured pass
    (e.g. RemovePermutesAroundElementwiseTosaOps inside propagation) is not recorded.
    """
    records: list[Captured] = []
    counts: dict[str, int] = {}
    depth = [0]

    def wrap(name: str, original: Any) -> Any:
        def call(self: Any, graph_module: fx.GraphModule) -> Any:
            if (depth[0] == 0 or not outermost_only) and type(self).__name__ == name:
                index = counts.get(name, 0)
                counts[name] = index + 1
                records.append(Captured(name, index, copy.deepcopy(graph_module), self))
            depth[0] += 1
            try:
                return original(self, graph_module)
            finally:
                depth[0] -= 1

        return call

    with patched_calls(names, wrap):
        yield records


@contextmanager
def patched_calls(
    names: Iterable[str], wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]
) -> Iterator[None]:
    """Inside the block, ``call`` of each named pass class (the class executorch uses, ours once
    swapped in) is ``wrap(name, call)``; each class's own ``call`` (or its absence) is restored
    after, also when the block raises."""
    originals: list[tuple[type, Any]] = []
    try:
        for name in names:
            cls = stock_class(name)
            originals.append((cls, cls.__dict__.get("call")))
            cls.call = wrap(name, cls.call)
        yield
    finally:
        for cls, original in reversed(originals):
            if original is None:
                del cls.call
            else:
                cls.call = original
