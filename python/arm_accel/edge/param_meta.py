"""The param/buffer placeholder metadata of a decomposition call, looked up once (issue 17).

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
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

from arm_accel.scopes import ThreadScope

#: ``stats()`` entry: one accelerated call per metadata write-back in the stage.
STATS_NAME = "to_edge.param_meta"
#: Where the modelled function is defined, its name and its source digests
#: (``passthrough.source_digest``), one per source read: torch 2.13, then 2.14.0 = 2.15.0,
#: whose function reads each mapping once itself (the same writes in the same order).
SOURCE_MODULE = "torch._export.utils"
FUNCTION = "_populate_param_buffer_metadata_to_new_gm"
MODELLED_DIGESTS: tuple[str, ...] = ("89e75119b33fa818", "94147610844e8976")
#: The module that binds it by name for ``run_decompositions``.
MODULE = "torch.export.exported_program"

_scope = ThreadScope()
_lock = threading.Lock()
_installed: dict[str, Any] = {}


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


def _dispatching(stock: Any) -> Any:
    @functools.wraps(stock)
    def populate_param_buffer_metadata(*args: Any, **kwargs: Any) -> None:
        from arm_accel import counters, switch

        if kwargs or not _scope.active() or not switch.is_enabled():
            return stock(*args, **kwargs)
        t0 = time.perf_counter()
        populate(*args)
        counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=True)

    return populate_param_buffer_metadata


def install() -> None:
    """Bind ours in :data:`MODULE` (idempotent). Raises ImportError, replacing nothing, where
    torch's function is not the one modelled."""
    import importlib

    from arm_accel.retrace_engine.passthrough import source_digest

    with _lock:
        if _installed:
            return
        source: Any = importlib.import_module(SOURCE_MODULE)
        stock = getattr(source, FUNCTION)
        if source_digest(stock) not in MODELLED_DIGESTS:
            raise ImportError(f"{SOURCE_MODULE}.{FUNCTION} is not the source modelled")
        target: Any = importlib.import_module(MODULE)
        if getattr(target, FUNCTION) is not stock:
            raise ImportError(f"{MODULE}.{FUNCTION} is not torch's")
        ours = _dispatching(stock)
        setattr(target, FUNCTION, ours)
        _installed.update(module=target, function=(stock, ours))


def uninstall() -> None:
    """Put stock's function back (only where ours is still bound)."""
    with _lock:
        if not _installed:
            return
        stock, ours = _installed["function"]
        module = _installed["module"]
        if getattr(module, FUNCTION) is ours:
            setattr(module, FUNCTION, stock)
        _installed.clear()


def installed() -> bool:
    return bool(_installed)


__all__ = [
    "FUNCTION",
    "MODELLED_DIGESTS",
    "STATS_NAME",
    "install",
    "installed",
    "looking_up_once",
    "populate",
    "uninstall",
]
