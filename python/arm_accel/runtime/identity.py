"""The graph a provenance record names, when one graph object stands for several of stock's.

``NodeSource(node, ...)`` records ``graph_id = id(node.graph)``. Each stock ``ExportPass``
re-trace builds a new ``fx.Graph``: the records it makes from the nodes it interprets name the
graph it read, and records made later from the new graph's nodes name another. The in-place
re-trace and the propagation passes' modelled re-traces keep one graph object, so each of them
gives the graph a new *identity* when it ends (:func:`renew`): an empty ``fx.Graph`` standing in
for the graph stock's re-trace would have built. Every record made from the graph's nodes names
its current identity (:func:`graph_id`: ``NodeSource.__init__`` wrapped by :func:`naming_init`, and
the sharing constructor of :mod:`arm_accel.runtime.provenance`), so records fall into graphs as
stock's do (design.md, the in-place re-trace).

The stand-ins live as long as their graph, so their ids stay distinct from one another and from
every live object's; ``Graph.__deepcopy__`` does not copy them (a copy is a graph of its own).
"""

from __future__ import annotations

import functools
from typing import Any

from torch import fx

#: The attribute of an ``fx.Graph`` holding its stand-ins, the current one last.
_ATTR = "_arm_accel_identity"


def graph_id(graph: fx.Graph) -> int:
    """The ``graph_id`` a record made now from one of ``graph``'s nodes has in stock terms:
    the id of its current stand-in, or of the graph itself before its first renewal."""
    stand_ins = graph.__dict__.get(_ATTR)
    return id(stand_ins[-1]) if stand_ins else id(graph)


def renewed(graph: fx.Graph) -> bool:
    """Whether ``graph`` stands for a graph other than itself (records need :func:`graph_id`)."""
    return bool(graph.__dict__.get(_ATTR))


def renew(graph: fx.Graph) -> None:
    """``graph`` now stands for the new graph a stock re-trace of it builds."""
    graph.__dict__.setdefault(_ATTR, []).append(fx.Graph())


def mark(graph: fx.Graph) -> int:
    """How many times ``graph`` was renewed (for :func:`restore`)."""
    return len(graph.__dict__.get(_ATTR, ()))


def restore(graph: fx.Graph, marked: int) -> None:
    """Undo the renewals since :func:`mark` returned ``marked`` (a rolled-back transaction: the
    graph is again the one it was, and so is the identity its records name)."""
    stand_ins = graph.__dict__.get(_ATTR)
    if stand_ins is not None:
        del stand_ins[marked:]


def naming_init(stock: Any) -> Any:
    """``NodeSource.__init__`` whose record made from a node of a renewed graph names the
    graph's identity (the patch table's ``retrace_engine.identity`` row)."""

    @functools.wraps(stock)
    def __init__(self: Any, node: Any, pass_name: str = "", action: Any = None) -> None:
        stock(self, node, pass_name, action)
        if node and renewed(node.graph):
            self.node_info = self.NodeInfo(
                name=node.name, target=str(node.target), graph_id=graph_id(node.graph)
            )

    return __init__


__all__ = ["graph_id", "mark", "naming_init", "renew", "renewed", "restore"]
