"""fx's name space: the candidate each node is named from, the names a fresh ``_Namespace``
gives a sequence of candidates, and a graph's name state saved and put back."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.fx.graph import _Namespace

#: A graph's name space as it was: ``_obj_to_name``, ``_used_names``, ``_base_count``.
NameState = tuple[dict[Any, str], set[str], dict[str, int]]


def save(graph: fx.Graph) -> NameState:
    """A copy of the graph's name space state."""
    ns = graph._graph_namespace
    return dict(ns._obj_to_name), set(ns._used_names), dict(ns._base_count)


def restore(graph: fx.Graph, state: NameState) -> None:
    """Put the graph's name space back as :func:`save` saw it (the saved copies stay intact)."""
    ns = graph._graph_namespace
    ns._obj_to_name = dict(state[0])
    ns._used_names = set(state[1])
    ns._base_count = dict(state[2])


# ------------------------------------------------------------------------------- candidates
def creation_candidate(graph: fx.Graph, target: Any, name: str | None) -> str:
    """The name candidate ``Graph.create_node`` starts from (what stock's new graph sees)."""
    return name if name is not None else graph._target_to_str(target)


def fx_name(graph: fx.Graph, target: Any) -> str | None:
    """The ``name`` ``_ExportPassBase._fx`` passes to ``create_proxy``."""
    if isinstance(target, torch._ops.OpOverload):
        return graph._target_to_str(target.overloadpacket.__name__)
    return None


def rebuilt_name_candidate(graph: fx.Graph, target: Any) -> str:
    """The name candidate of the node an ``ExportPass`` re-trace rebuilds, as it was, for a
    call_function (or output) node with ``target``."""
    return creation_candidate(graph, target, fx_name(graph, target))


# ------------------------------------------------------------------------- fresh name space
#: Per candidate: what ``_Namespace.create_name`` derives from it alone (a bounded memo).
_parses: dict[str, tuple[str, str, int | None]] = {}
_PARSES_KEPT = 1 << 16


def parsed(candidate: str) -> tuple[str, str, int | None]:
    """The candidate made a legal name, its base and numeric suffix: the first steps of
    ``_Namespace.create_name``, with torch's own regexes, remembered per candidate."""
    parse = _parses.get(candidate)
    if parse is None:
        from torch.fx.graph import _illegal_char_regex, _name_regex

        legal = candidate
        match = _name_regex.match(legal)
        if match is None:
            legal = _illegal_char_regex.sub("_", legal) or "_unnamed"
            if legal[0].isdigit():
                legal = f"_{legal}"
            match = _name_regex.match(legal)
            if match is None:
                raise AssertionError(f"Name regex failed to match candidate: {legal}")
        base, num = match.group(1, 2)
        if len(_parses) >= _PARSES_KEPT:
            _parses.clear()
        parse = _parses[candidate] = (legal, base, None if num is None else int(num))
    return parse


def _create_names(key: tuple[str, ...]) -> tuple[tuple[str, ...], set[str], dict[str, int]]:
    """``_Namespace.create_name(c, None)`` for each candidate in order, on a fresh namespace:
    its names, used names and base counts (stock's loop with each candidate's parse
    remembered)."""
    from torch.fx.graph import _illegal_names

    used: set[str] = set()
    base_count: dict[str, int] = {}
    names = []
    for c in key:
        legal, base, num = parsed(c)
        if num is None or legal in used:
            num = base_count.get(base, 0)
            if _illegal_names.get(legal, None) is not None:
                num += 1
                legal = f"{base}_{num}"
        while legal in used:
            num += 1
            legal = f"{base}_{num}"
        used.add(legal)
        base_count[base] = num
        names.append(legal)
    return tuple(names), used, base_count


#: The last candidate sequences :func:`fresh_names` named, with their names and the namespace
#: state they leave (a re-trace mostly names the nodes the previous one of the graph named).
_recent: dict[tuple[str, ...], tuple[tuple[str, ...], frozenset[str], dict[str, int]]] = {}
_RECENT_KEPT = 2


def fresh_names(candidates: list[str]) -> tuple[tuple[str, ...], _Namespace]:
    """The names a fresh ``_Namespace`` gives these candidates in order (``create_name`` with
    no object: a function of the sequence alone), and a namespace in the state it leaves."""
    key = tuple(candidates)
    entry = _recent.pop(key, None)  # re-inserted last: the most recently used is kept
    if entry is None:
        names, used, base_count = _create_names(key)
        entry = (names, frozenset(used), base_count)
        if len(_recent) >= _RECENT_KEPT:
            del _recent[next(iter(_recent))]
    _recent[key] = entry
    namespace = _Namespace()
    namespace._used_names = set(entry[1])
    namespace._base_count = dict(entry[2])
    return entry[0], namespace


def renamed_by_fx(name: str) -> bool:
    """A fresh namespace would not give ``name`` to a node named ``name`` (a builtin such as
    ``input`` becomes ``input_1``)."""
    return _create_names((name,))[0][0] != name


def rename_fresh(graph: fx.Graph, nodes: list[fx.Node], candidates: list[str]) -> None:
    """Name ``nodes`` (the graph's nodes, in order) as a fresh graph names nodes created from
    these candidates, and give the graph that name space."""
    names, namespace = fresh_names(candidates)
    for node, name in zip(nodes, names, strict=True):
        if node.name != name:
            node.name = name
    graph._graph_namespace = namespace


__all__ = [
    "NameState",
    "creation_candidate",
    "fresh_names",
    "fx_name",
    "parsed",
    "rebuilt_name_candidate",
    "rename_fresh",
    "renamed_by_fx",
    "restore",
    "save",
]
