"""The programs ``torch.export`` returned, remembered as returned (weakly).

The edge stage's first decomposition call (the functionalization of the user's program) is
replayed only on such a program, unedited since: its nodes were recorded by the export's trace
at dispatch, as the call's trace records them. Why that is stock's program: design.md, "The
edge stage".
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

from torch import fx
from torch.export import ExportedProgram

#: one entry per node: the node and its target, args and kwargs objects
Snapshot = list[tuple[fx.Node, Any, Any, Any]]

_returned: weakref.WeakKeyDictionary[ExportedProgram, tuple[fx.Graph, Snapshot]] = (
    weakref.WeakKeyDictionary()
)


def snapshot(ep: ExportedProgram) -> Snapshot:
    """What :func:`edited_nodes` compares: each node with its target, args and kwargs."""
    return [(n, n.target, n.args, n.kwargs) for n in ep.graph.nodes]


def edited_nodes(ep: ExportedProgram, taken: Snapshot) -> list[tuple[fx.Node, Any]] | None:
    """The nodes of ``ep`` whose target changed since ``taken`` was taken, each with its old
    target, or None when the graph was edited otherwise (a node added, removed or moved, args
    or kwargs replaced)."""
    nodes = list(ep.graph.nodes)
    if len(nodes) != len(taken):
        return None
    swapped = []
    for node, (old, target, args, kwargs) in zip(nodes, taken, strict=True):
        if node is not old or node.args is not args or node.kwargs is not kwargs:
            return None
        if node.target is not target:
            swapped.append((node, target))
    return swapped


def remember(ep: ExportedProgram) -> None:
    _returned[ep] = (ep.graph, snapshot(ep))


def edited_reason(ep: ExportedProgram) -> str | None:
    """Why ``ep`` is not a program ``torch.export`` returned, unedited since; None if it is."""
    entry = _returned.get(ep)
    if entry is None:
        return "input is not a program torch.export returned"
    graph, taken = entry
    if ep.graph is not graph or edited_nodes(ep, taken) != []:
        return "program edited since torch.export returned it"
    return None


def recording(stock: Callable[..., ExportedProgram]) -> Callable[..., ExportedProgram]:
    """``torch.export._trace._export`` (what ``torch.export.export`` calls), remembering what
    it returns."""

    @functools.wraps(stock)
    def _export(*args: Any, **kwargs: Any) -> ExportedProgram:
        ep = stock(*args, **kwargs)
        if isinstance(ep, ExportedProgram):
            remember(ep)
        return ep

    return _export


__all__ = ["Snapshot", "edited_nodes", "edited_reason", "recording", "remember", "snapshot"]
