"""dynamo's list of a traced GraphModule's node metas, rebuilt when what it lists changed.

When dynamo traces a GraphModule's ``forward`` (``torch.export`` of a quantized module),
``SubgraphTracer._create_proxy`` copies each new node's stack trace and ``_COPY_META_FIELDS``
from the original graph's node on the same line. Before that it rebuilds its list of the
original graph's metas, ``[nd.meta for nd in graph.nodes]``, on every proxy it creates: its
``tx.f_code is not self._cur_code`` guard never holds, as ``_cur_code`` is never assigned. The
rebuilds are quadratic in the graph: about 2 s of a llama16 re-export.

Inside :func:`tracing` (``torch.export``'s scope, ``pipeline/scoped_calls.py``) stock's
refresh is skipped when everything it reads is what it read last time: the same code object,
naming the same live module, with the same graph object and node count, line map and
``forward`` code. The list, line map and first line it would build are then the ones it holds.
``_cur_code`` is None again after each call, as stock leaves it; where it is not None on entry
(not stock's state) or reading fails, stock's call runs as it is. Why exact: design.md, "The
re-trace engine" (dynamo's original metas).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from torch import fx

from arm_accel.control import counters, switch
from arm_accel.runtime.scopes import CountedScope

#: ``stats()`` entry, recorded once per :func:`tracing` block: its calls are the proxies
#: created, the accelerated ones those created without the rebuild.
STATS_NAME = "export.dynamo_meta"

_scope = CountedScope(STATS_NAME)
#: Per tracer: what its last refresh read (see :func:`_read`).
_last_read: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def tracing() -> AbstractContextManager[None]:
    """The block in which dynamo's tracers reuse their metas list (``torch.export``); the
    outermost block records what it counted."""
    return _scope.entered()


def _read(tx: Any) -> tuple[Any, ...] | None:
    """What stock's refresh reads for the code ``tx`` traces: the code, the context's weak
    reference, the live GraphModule's graph, its node count, line map and ``forward``'s code;
    None when the reference is missing or dead, or names no GraphModule (stock's refresh then
    sets the three to None, cheaply)."""
    from torch._dynamo import output_graph

    code = tx.f_code
    ref = output_graph.code_context.get_context(code).get("orig_graphmodule")
    module = ref() if ref is not None else None
    if not isinstance(module, fx.GraphModule):
        return None
    graph = module.graph
    return (code, ref, graph, len(graph.nodes), module._lineno_map, module.forward.__code__)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same objects (by identity) and the same node count."""
    return (
        a[0] is b[0]
        and a[1] is b[1]
        and a[2] is b[2]
        and a[3] == b[3]
        and a[4] is b[4]
        and a[5] is b[5]
    )


def create_proxy(stock: Callable[..., Any]) -> Any:
    """``SubgraphTracer._create_proxy`` that skips the metas rebuild inside :func:`tracing`
    where it would rebuild what it holds (the patch table's ``export.dynamo_meta``)."""

    @functools.wraps(stock)
    def _create_proxy(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _scope.active() or not switch.is_enabled():
            return stock(self, *args, **kwargs)
        try:
            read = _read(self.output_graph.current_tx) if self._cur_code is None else None
        except Exception as exc:
            if switch.strict():
                raise
            # Stock's refresh reads the same after creating the node: it raises there, or not.
            counters.record_fallback(STATS_NAME, f"reading the traced module failed: {exc!r}")
            read = None
        last = _last_read.get(self)
        if read is None or last is None or not _same(read, last):
            # Stock's refresh runs; it now holds what ``read`` names (or None's).
            _scope.count(accelerated=False)
            out = stock(self, *args, **kwargs)
            if read is None:
                _last_read.pop(self, None)
            else:
                _last_read[self] = read
            return out
        self._cur_code = read[0]
        try:
            out = stock(self, *args, **kwargs)
        finally:
            self._cur_code = None
        _scope.count(accelerated=True)
        return out

    return _create_proxy


__all__ = ["STATS_NAME", "create_proxy", "tracing"]
