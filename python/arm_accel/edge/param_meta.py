"""The param/buffer placeholder metadata of a decomposition call, looked up once.

Stock's ``_populate_param_buffer_metadata_to_new_gm`` rebuilds the signature's
``inputs_to_parameters`` and ``inputs_to_buffers`` dicts for every placeholder: quadratic in the
placeholders. :func:`populate` builds each once and makes the same writes in the same order;
exact, since the loop writes node metas only. Used inside :func:`looking_up_once` (the edge
stage's calls, this thread) with acceleration on.
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
