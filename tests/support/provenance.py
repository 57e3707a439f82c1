"""Provenance records (``NodeSource``) of a graph, for tests that check sharing."""

from __future__ import annotations

from typing import Any

from torch import fx


def records(graph: fx.Graph) -> dict[int, Any]:
    """Every distinct record reachable from the nodes' ``from_node`` chains, by identity."""
    seen: dict[int, Any] = {}
    todo = [s for n in graph.nodes for s in n.meta.get("from_node") or []]
    while todo:
        source = todo.pop()
        if id(source) not in seen:
            seen[id(source)] = source
            todo.extend(source.from_node)
    return seen
