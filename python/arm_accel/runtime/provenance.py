"""Provenance records that share their ancestors instead of deep-copying them.

Inside :func:`sharing` (this thread) a new ``NodeSource`` holds a fresh list of the same ancestor
records where stock's deep-copies the node's whole chain, which every re-trace of the edge stage
copies again. Equal values, other identities; exact because nothing mutates a ``NodeSource``
after construction (design.md, "The re-trace engine"). torch 2.15.0 shares the records itself:
the patch table's ``edge.provenance`` row stays stock there. The same scope covers the module a
delegate call unlifts for its fake outputs and ``torch.export``'s traces
(:mod:`arm_accel.pipeline.scoped_calls`).
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from typing import Any

from torch.fx import traceback as fx_traceback

from arm_accel.runtime import identity
from arm_accel.runtime.scopes import ThreadScope

#: ``stats()`` entry: one accelerated call per call run sharing records (the edge stage's
#: ``run_decompositions`` calls, the deprecated ``ExportPass`` base's re-traces in the pipeline).
STATS_NAME = "to_edge.provenance"

_scope = ThreadScope()


def _shared_chain(node: Any) -> list[Any] | None:
    """The list the new record holds: ``node``'s chain, shallow-copied, or None when stock's
    deep copy must run (no node, nothing to share, or an element that is not a NodeSource)."""
    if not node or "from_node" not in node.meta:
        return None
    chain = node.meta["from_node"]
    if type(chain) is not list or any(type(s) is not fx_traceback.NodeSource for s in chain):
        return None
    return list(chain)


def sharing_init(stock: Any) -> Any:
    """``NodeSource.__init__`` whose record shares its node's chain inside :func:`sharing`;
    stock's elsewhere (the patch table's ``edge.provenance`` row)."""

    @functools.wraps(stock)
    def __init__(self: Any, node: Any, pass_name: str = "", action: Any = None) -> None:
        chain = _shared_chain(node) if _scope.active() else None
        if chain is None:
            stock(self, node, pass_name, action)
            return
        # stock's own constructor for everything but the chain: no node, then node_info
        stock(self, None, pass_name, action)
        self.node_info = self.NodeInfo(
            name=node.name, target=str(node.target), graph_id=identity.graph_id(node.graph)
        )
        self.from_node = chain

    return __init__


def sharing() -> AbstractContextManager[None]:
    """Records built in this thread inside the block share their ancestors (needs
    :func:`install`; without it the block changes nothing)."""
    return _scope.entered()
