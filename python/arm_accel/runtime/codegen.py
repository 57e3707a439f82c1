"""Recompiles of graphs whose code is already known.

Each pass of the Arm pipeline recompiles its module two or three times, mostly regenerating the
source it generated before. ``Graph.python_code`` is memoised per graph on what the source is
made of (:func:`source_key`), and the compiled ``forward`` on the source and its globals. The
key is what the code generator reads, pinned to the sources read (:data:`GENERATOR_SOURCES`):
with another source every ``python_code`` is stock's and no recompile is deferred.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from torch import fx


def generator_modelled() -> bool:
    """This torch's code generator reads what :func:`source_key` holds (the table's
    ``torch.code_generator`` model)."""
    from arm_accel import patches

    return patches.holds("torch.code_generator")


_CACHE_SIZE = 64
#: Environment variables ``_gen_python_code`` reads.
_ENV = ("FX_GRAPH_SHOW_STRIDE", "FX_GRAPH_SHOW_DEVICE", "FX_GRAPH_SHOW_META")
_lock = threading.Lock()
#: Sources remembered per graph: a pass recompiles the graph it left a few times in a row.
_GRAPH_CACHE_SIZE = 4
_MEMO_ATTR = "_arm_accel_code"
#: Bumped by :func:`clear`: a graph memo of an older generation is dropped when next used.
_generation = [0]


class _Memo(OrderedDict):  # type: ignore[type-arg]
    def __init__(self, generation: int) -> None:
        super().__init__()
        self.generation = generation


_forwards: OrderedDict[Any, Any] = OrderedDict()
hits = {"python_code": 0, "forward": 0}


#: On the graph: the entries of its last :func:`source_key`, per node, to be shared by the next.
_ENTRIES_ATTR = "_arm_accel_key_entries"


def source_key(graph: fx.Graph) -> tuple[tuple[Any, ...], list[Any]]:
    """What ``_gen_python_code`` reads of the graph by default, and the objects the key names
    by ``id`` (kept alive with the entry, so that no id is reused while it exists).

    Nodes and their args/kwargs containers are keyed by identity: fx never mutates a node's
    args containers (an edit replaces them), so the same containers hold the same arguments,
    and the nodes they reference have their names in the key at their own entries. That is
    exact, and reads no argument.

    A node's entries equal to those of the graph's previous key are that key's objects: the
    keys of successive recompiles share them, so the snapshot a dead module still holds
    (``deferred``; a module's class is a reference cycle) leaves the collector a few containers
    rather than two objects per node."""
    previous: tuple[dict[fx.Node, Any], dict[fx.Node, Any]] = getattr(
        graph, _ENTRIES_ATTR, None
    ) or ({}, {})
    old_keys, old_alive = previous
    keys: dict[fx.Node, Any] = {}
    alives: dict[fx.Node, Any] = {}
    for node in graph.nodes:
        meta = node.meta
        custom = meta.get("custom")
        args, kwargs = node._args, node._kwargs
        held = old_alive.get(node)
        if held is None or held[1] is not args or held[2] is not kwargs:
            held = (node, args, kwargs)
        entry = (
            id(node),
            node.name,
            node.op,
            node.target if not isinstance(node.target, str) else ("str", node.target),
            id(args),
            id(kwargs),
            node.type,
            meta.get("stack_trace"),
            repr(custom) if custom else None,
            meta.get("recompute"),
            meta.get("ac_graph_id"),
            meta.get("is_wrapped"),
            # read from torch 2.14.0 on: a prefix of the stack trace comment, boxed arguments
            meta.get("autograd_backward"),
            meta.get("boxed_arg_indices"),
        )
        old = old_keys.get(node)
        if old is not None and _same_entry(old, entry):
            entry = old
        keys[node] = entry
        alives[node] = held
    setattr(graph, _ENTRIES_ATTR, (keys, alives))
    return tuple(keys.values()), list(alives.values())


def _same_entry(old: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    """Whether two entries are equal (a type annotation may compare badly: then not)."""
    try:
        return bool(old == new)
    except Exception:
        return False


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any, size: int = _CACHE_SIZE) -> None:
    with _lock:
        cache[key] = value
        while len(cache) > size:
            cache.popitem(last=False)


def _recall(cache: OrderedDict[Any, Any], key: Any) -> Any:
    with _lock:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def _graph_memo(graph: fx.Graph) -> OrderedDict[Any, Any]:
    """The graph's own memo (an attribute, so it lives and dies with the graph: its entries
    reference the graph's nodes; ``Graph.__deepcopy__`` does not copy it)."""
    memo = getattr(graph, _MEMO_ATTR, None)
    if memo is None or memo.generation != _generation[0]:
        memo = _Memo(_generation[0])
        setattr(graph, _MEMO_ATTR, memo)
    return memo


def shows_meta() -> bool:
    """``FX_GRAPH_SHOW_META=1``: the generated comments then hold every meta value, which
    :func:`source_key` does not cover."""
    return os.environ.get("FX_GRAPH_SHOW_META", "0") == "1"


def python_code(
    stock: Any,
    graph: fx.Graph,
    root_module: str,
    served: Callable[[fx.Graph], object],
    **kwargs: Any,
) -> Any:
    """``Graph.python_code`` through the memo (stock for what the key does not cover). A hit
    calls ``served`` with the graph for what stock's call does to it besides the code."""
    if set(kwargs) - {"record_func"} or kwargs.get("record_func"):
        return stock(graph, root_module, **kwargs)
    if type(graph._codegen) is not fx.graph.CodeGen or shows_meta() or not generator_modelled():
        return stock(graph, root_module, **kwargs)
    try:
        nodes_key, alive = source_key(graph)
        key = (root_module, tuple(os.environ.get(v) for v in _ENV), nodes_key)
        hash(key)
    except TypeError:  # an unhashable target or type annotation
        return stock(graph, root_module, **kwargs)
    memo = _graph_memo(graph)
    entry = _recall(memo, key)
    if entry is None:
        code = stock(graph, root_module, **kwargs)
        _remember(memo, key, (code, alive), _GRAPH_CACHE_SIZE)
        return code
    hits["python_code"] += 1
    served(graph)
    return entry[0]


def forward_from_src(
    stock: Any,
    src: str,
    globals_: dict[str, Any],
    co_fields: Any,
    take_number: Callable[[], object],
) -> Any:
    """``torch.fx.graph_module._forward_from_src`` through the memo: the same source with the
    same globals object (a remembered ``python_code``) compiles to the same function. A hit
    still calls ``take_number`` for the ``<eval_with_key>`` number stock's compile would take,
    so torch's counter stays stock's (the function keeps its first compile's file name)."""
    key = (src, id(globals_), tuple(sorted((co_fields or {}).items())))
    entry = _recall(_forwards, key)
    if entry is not None and entry[0] is globals_:
        hits["forward"] += 1
        take_number()
        return entry[1]
    forward = stock(src, globals_, co_fields)
    _remember(_forwards, key, (globals_, forward))
    return forward


def clear() -> None:
    """Forget every remembered source (the graphs' memos too) and function."""
    with _lock:
        _generation[0] += 1
        _forwards.clear()
