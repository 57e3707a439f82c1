"""The meta ``TracerBase.create_node`` gives a node it creates under preserved node meta: the
one copy rule the in-place re-trace and the edge replay both write."""

from __future__ import annotations

import copy
import functools
from collections.abc import Container, Mapping
from typing import Any

from torch.fx import traceback as fx_traceback
from torch.fx.proxy import _COPY_META_FIELDS


def traced_meta(
    current: Mapping[str, Any], seq_nr: int | None, placed: Container[str] = ()
) -> dict[str, Any]:
    """``TracerBase.create_node``'s meta under ``current`` (the preserved current meta) with the
    tracer's ``seq_nr``: the stack trace (and the gradient-accumulation flags it implies), the
    ``_COPY_META_FIELDS`` (``copy.copy``), ``seq_nr``, ``autograd_backward``. Fields in ``placed``
    get their key only (None): the caller writes their value over it."""
    meta: dict[str, Any] = {}
    stack_trace = current.get("stack_trace")
    if stack_trace:
        meta["stack_trace"] = stack_trace
        if fx_traceback.GRADIENT_ACC_SPECIAL_STACK in stack_trace:
            meta["is_gradient_acc"] = True
            meta["autograd_backward"] = True
    for field in _COPY_META_FIELDS:
        if field in current:
            meta[field] = None if field in placed else copy.copy(current[field])
    if seq_nr is not None:
        meta["seq_nr"] = seq_nr
    if current.get("autograd_backward", False):
        meta["autograd_backward"] = True
    return meta


@functools.lru_cache(maxsize=1024)
def retraced_key_order(
    keys: tuple[str, ...], stack_trace: bool, autograd_backward: bool
) -> tuple[str, ...] | None:
    """The key order of :func:`traced_meta` under a node's own meta (whose ``stack_trace`` and
    ``autograd_backward`` are truthy or not) with that meta written over it, every value the
    meta's own: the fields :func:`traced_meta` sets first, then the rest in the meta's order.
    ``()`` when that is ``keys``' own order. None when a value would not be the meta's own: no
    ``from_node`` (the current meta's record is copied) or ``seq_nr`` (the autograd counter is
    read), or ``in_grad_fn`` (another ``seq_nr`` rule)."""
    if "from_node" not in keys or "seq_nr" not in keys or "in_grad_fn" in keys:
        return None
    first = ["stack_trace"] if stack_trace else []
    first += [field for field in _COPY_META_FIELDS if field in keys]
    first.append("seq_nr")
    if autograd_backward:
        first.append("autograd_backward")
    placed = set(first)
    order = (*first, *(k for k in keys if k not in placed))
    return () if order == keys else order


__all__ = ["retraced_key_order", "traced_meta"]
