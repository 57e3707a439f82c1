"""The orders a fresh fx graph keeps: each node's users and the ``find_nodes`` index."""

from __future__ import annotations

from torch import fx


def file_in_graph_order(graph: fx.Graph, nodes: list[fx.Node]) -> None:
    """The graph's find_nodes index (op, target -> nodes) with every node filed in graph order:
    as stock's re-trace leaves its new graph, whose nodes were filed as created, in order."""
    table = graph._find_nodes_lookup_table
    table.table.clear()
    for node in nodes:
        table.insert(node)


def refile_as_python_code(graph: fx.Graph) -> None:
    """The find_nodes index as ``Graph.python_code`` (which every stock recompile calls) leaves
    it: it sets an attribute of every node in graph order, and ``Node.__setattr__`` re-files a
    node it finds in the index (remove, insert), so each bucket ends in graph order, the
    buckets themselves where they were."""
    table = graph._find_nodes_lookup_table
    buckets, key = table.table, table._key
    for node in graph.nodes:
        bucket = buckets[key(node)]
        if bucket.pop(node, _ABSENT) is not _ABSENT:
            bucket[node] = None


_ABSENT = object()


def order_users(nodes: list[fx.Node]) -> None:
    """Each node's users in graph order (``nodes`` in graph order, every user among them), as
    stock's re-trace leaves them: it creates every user after its inputs, while a node kept in
    place keeps its users dict and re-pointed args append to it. Later passes iterate
    ``node.users``: its order decides what they do first."""
    for node in nodes:
        node.users.clear()
    for node in nodes:
        for inp in node._input_nodes:
            inp.users[node] = None


__all__ = ["file_in_graph_order", "order_users", "refile_as_python_code"]
