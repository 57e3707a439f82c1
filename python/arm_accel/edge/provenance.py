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

Pinned to the source digest of ``NodeSource.__init__`` (:data:`MODELLED_SOURCES`): torch 2.13
and 2.14.0 deep-copy the chain, and the constructor is wrapped; torch 2.15.0's shares the
records itself (a fresh list of the same objects, what :func:`sharing` makes), and nothing is
wrapped. Another source stays stock.
"""

from __future__ import annotations

import functools
import threading
from contextlib import AbstractContextManager
from typing import Any

from torch.fx import traceback as fx_traceback

from arm_accel.scopes import ThreadScope

#: ``stats()`` entry: one accelerated call per ``run_decompositions`` call run sharing records.
STATS_NAME = "to_edge.provenance"

#: Source digests (``passthrough.source_digest``) of ``NodeSource.__init__`` read, each with
#: whether it deep-copies the node's chain (True: wrapped) or shares the records itself.
MODELLED_SOURCES: dict[str, bool] = {"99395e7f40a4a049": True, "d21b0c932373c74c": False}

_scope = ThreadScope()
_lock = threading.Lock()
_installed: dict[str, Any] = {}


def stock_deep_copies() -> bool | None:
    """Whether this torch's ``NodeSource`` deep-copies the chain (None: a source not read)."""
    from arm_accel.retrace_engine.passthrough import source_digest

    return MODELLED_SOURCES.get(source_digest(fx_traceback.NodeSource.__init__) or "")


def _shared_chain(node: Any) -> list[Any] | None:
    """The list the new record holds: ``node``'s chain, shallow-copied, or None when stock's
    deep copy must run (no node, nothing to share, or an element that is not a NodeSource)."""
    if not node or "from_node" not in node.meta:
        return None
    chain = node.meta["from_node"]
    if type(chain) is not list or any(type(s) is not fx_traceback.NodeSource for s in chain):
        return None
    return list(chain)


def install() -> None:
    """Wrap ``NodeSource.__init__`` (idempotent) where it deep-copies the chain
    (:func:`stock_deep_copies`); outside :func:`sharing` it runs stock's."""
    with _lock:
        if _installed or not stock_deep_copies():
            return
        stock = fx_traceback.NodeSource.__init__

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

        fx_traceback.NodeSource.__init__ = __init__  # type: ignore[method-assign]
        _installed.update(stock=stock, ours=__init__)


def uninstall() -> None:
    """Put stock's constructor back (only where ours is still installed)."""
    with _lock:
        if not _installed:
            return
        if fx_traceback.NodeSource.__dict__.get("__init__") is _installed["ours"]:
            fx_traceback.NodeSource.__init__ = _installed["stock"]  # type: ignore[method-assign]
        _installed.clear()


def installed() -> bool:
    return bool(_installed)


def sharing() -> AbstractContextManager[None]:
    """Records built in this thread inside the block share their ancestors (needs
    :func:`install`; without it the block changes nothing)."""
    return _scope.entered()
