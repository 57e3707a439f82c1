"""Recompiles of graphs whose code is already known.

Each pass of the Arm pipeline recompiles its graph module two or three times (the re-trace's new
``GraphModule``, the pass manager, the pass adapter), and most passes leave the graph as it was,
so most recompiles regenerate the very source they generated before. ``Graph.python_code`` is
memoised on what the generated source is made of (``source_key``: every node's name, op, target,
args and kwargs with their types, type annotation, and the meta the code generator writes into
comments), and the compiled ``forward`` on the source and its globals. Anything else (another
code generator, a verbose or profiler-instrumented request, unhashable arguments) is generated
as stock generates it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

from torch import fx

_CACHE_SIZE = 64
#: Environment variables ``_gen_python_code`` reads.
_ENV = ("FX_GRAPH_SHOW_STRIDE", "FX_GRAPH_SHOW_DEVICE", "FX_GRAPH_SHOW_META")
_lock = threading.Lock()
_sources: OrderedDict[Any, Any] = OrderedDict()
_forwards: OrderedDict[Any, Any] = OrderedDict()
hits = {"python_code": 0, "forward": 0}


class _NotKeyable(Exception):
    pass


def _arg_key(value: Any) -> Any:
    if isinstance(value, fx.Node):
        return ("node", value.name)
    if isinstance(value, tuple):
        return ("tuple", tuple(_arg_key(v) for v in value))
    if isinstance(value, list):
        return ("list", tuple(_arg_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _arg_key(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        raise _NotKeyable(type(value).__name__) from None
    return (type(value), value)


def source_key(graph: fx.Graph) -> tuple[Any, ...]:
    """What ``_gen_python_code`` reads of the graph by default (raises ``_NotKeyable``)."""
    key: list[Any] = []
    for node in graph.nodes:
        meta = node.meta
        custom = meta.get("custom")
        key.append(
            (
                node.name,
                node.op,
                node.target if not isinstance(node.target, str) else ("str", node.target),
                _arg_key(node.args),
                _arg_key(node.kwargs),
                node.type,
                meta.get("stack_trace"),
                repr(custom) if custom else None,
                meta.get("recompute"),
                meta.get("ac_graph_id"),
            )
        )
    return tuple(key)


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    with _lock:
        cache[key] = value
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)


def _recall(cache: OrderedDict[Any, Any], key: Any) -> Any:
    with _lock:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def python_code(stock: Any, graph: fx.Graph, root_module: str, **kwargs: Any) -> Any:
    """``Graph.python_code`` through the memo (stock for what the key does not cover)."""
    if set(kwargs) - {"record_func"} or kwargs.get("record_func"):
        return stock(graph, root_module, **kwargs)
    if type(graph._codegen) is not fx.graph.CodeGen:
        return stock(graph, root_module, **kwargs)
    try:
        key = (root_module, tuple(os.environ.get(v) for v in _ENV), source_key(graph))
        hash(key)
    except (_NotKeyable, TypeError):
        return stock(graph, root_module, **kwargs)
    code = _recall(_sources, key)
    if code is None:
        code = stock(graph, root_module, **kwargs)
        _remember(_sources, key, code)
    else:
        hits["python_code"] += 1
    return code


def forward_from_src(stock: Any, src: str, globals_: dict[str, Any], co_fields: Any = None) -> Any:
    """``torch.fx.graph_module._forward_from_src`` through the memo: the same source with the
    same globals object (a remembered ``python_code``) compiles to the same function."""
    key = (src, id(globals_), tuple(sorted((co_fields or {}).items())))
    entry = _recall(_forwards, key)
    if entry is not None and entry[0] is globals_:
        hits["forward"] += 1
        return entry[1]
    forward = stock(src, globals_, co_fields)
    _remember(_forwards, key, (globals_, forward))
    return forward


def clear() -> None:
    with _lock:
        _sources.clear()
        _forwards.clear()
