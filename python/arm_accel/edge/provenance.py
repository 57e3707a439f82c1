"""Provenance records that share their ancestors instead of deep-copying them (issue 17 item 3).

``NodeSource(node, ...)`` (torch/fx/traceback.py) stores ``copy.deepcopy(node.meta["from_node"])``:
every re-trace copies every node's whole provenance chain, which grows by two levels per
``run_decompositions`` call (a fifth to two fifths of each call of the edge stage). Inside
:func:`sharing` the new record holds a fresh list of the same ``NodeSource`` objects instead:
the same values (``to_dict``, ``==``, serialization), other identities. That is exact because
nothing mutates a ``NodeSource`` after construction: torch and executorch write ``from_node``
only by assigning a new list to ``node.meta`` or appending to a node's own top-level list
(``GraphTransformObserver``), and the list each record holds is its own. A chain whose list
holds anything but ``NodeSource`` objects is deep-copied as stock does.

The switch is per thread: another thread's ``NodeSource`` calls stay stock.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager
from typing import Any

from torch.fx import traceback as fx_traceback

from arm_accel.scopes import ThreadScope

#: ``stats()`` entry: one accelerated call per ``run_decompositions`` call run sharing records.
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
            name=node.name, target=str(node.target), graph_id=id(node.graph)
        )
        self.from_node = chain

    return __init__


def sharing() -> AbstractContextManager[None]:
    """Records built in this thread inside the block share their ancestors (needs
    :func:`install`; without it the block changes nothing)."""
    return _scope.entered()
