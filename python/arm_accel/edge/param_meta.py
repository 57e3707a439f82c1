"""The param/buffer placeholder metadata of a decomposition call, looked up once.

After its trace, every ``run_decompositions`` call writes the collected param/buffer metadata
back onto the new graph's placeholders with ``torch._export.utils.
_populate_param_buffer_metadata_to_new_gm``. That function reads
``new_sig.inputs_to_parameters`` and ``new_sig.inputs_to_buffers`` for every placeholder, and
each read rebuilds its dict from every input spec: quadratic in the placeholders (MobileNetV1's
INT program: 340 placeholders, 115,000 generator steps, 3-4% of an accelerated call).

:func:`populate` does what stock's function does, in the same order, with each of the two
mappings built once. That is exact: the loop writes node metas only, so neither mapping can
change while it runs. It is bound in ``torch.export.exported_program`` (the decomposition call's
module; ``torch.export._trace``'s own binding, used by ``torch.export.export``, stays stock) and
used inside :func:`looking_up_once` (the edge stage's decomposition calls, this thread) with
acceleration on; elsewhere stock's function runs. Pinned to the source digests of the function it
was read from (torch 2.13, 2.14.0, 2.15.0): with another source nothing is replaced. Counted in
``arm_accel.stats()`` under :data:`STATS_NAME`.
"""

from __future__ import annotations

import functools
import time
from contextlib import AbstractContextManager
from typing import Any

from arm_accel.runtime.scopes import ThreadScope

#: ``stats()`` entry: one accelerated call per metadata write-back in the stage.
STATS_NAME = "to_edge.param_meta"
_scope = ThreadScope()


def looking_up_once() -> AbstractContextManager[None]:
    """In this block (this thread) the write-back builds the signature's mappings once."""
    return _scope.entered()


def populate(params_buffers_to_node_meta: dict[str, Any], gm: Any, new_sig: Any) -> None:
    """Stock's ``_populate_param_buffer_metadata_to_new_gm`` with ``inputs_to_parameters`` and
    ``inputs_to_buffers`` read once instead of twice per placeholder."""
    for metadata in params_buffers_to_node_meta.values():
        metadata.pop("nn_module_stack", None)
        metadata.pop("stack_trace", None)
    to_parameters = new_sig.inputs_to_parameters
    to_buffers = new_sig.inputs_to_buffers
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        for mapping in (to_parameters, to_buffers):
            if node.target in mapping:
                name = mapping[node.target]
                if name in params_buffers_to_node_meta:
                    for k, v in params_buffers_to_node_meta[name].items():
                        node.meta[k] = v


def dispatching(stock: Any) -> Any:
    @functools.wraps(stock)
    def populate_param_buffer_metadata(*args: Any, **kwargs: Any) -> None:
        from arm_accel.control import counters, switch

        if kwargs or not _scope.active() or not switch.is_enabled():
            return stock(*args, **kwargs)
        t0 = time.perf_counter()
        populate(*args)
        counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=True)

    return populate_param_buffer_metadata


__all__ = ["STATS_NAME", "dispatching", "looking_up_once", "populate"]
