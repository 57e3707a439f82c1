"""The CIA override of a decomposition call, without its decorators.

Every ``run_decompositions`` call patches the ~510 preservable CIA ops through the decorators
``op.py_impl(key)`` and ``register_op_impl(op)``, whose inner functions build typing aliases on
every call: ~0.18 s per call. :func:`overriding` writes what the decorators write, on the same
objects in the same order, with stock's helpers for the values and stock's exit; used inside the
edge stage's calls when every op is an ``OpOverload`` with the ``py_impl`` modelled, else stock.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

#: ``stats()`` entry: one call per override entered in the stage.
STATS_NAME = "to_edge.cia_override"


def _set_py_kernel(op: Any, key: Any, fn: Callable[..., Any]) -> None:
    """``op.py_impl(key)(fn)`` for an ``OpOverload`` and a backend, autograd or CIA dispatch key
    (never ``Python``, never a mode or transform): ``OperatorBase.py_impl``'s ``DispatchKey``
    branch."""
    if key in op.py_kernels:
        raise RuntimeError(f"Trying to override a python impl for {key} on operator {op.name()}")
    op.py_kernels[key] = fn
    op._dispatch_cache.clear()


def _force_dispatch_to_orig_cia_callable(
    fake_tensor_mode: Any, op: Any, *args: Any, **kwargs: Any
) -> Any:
    """Stock's fake rule for a patched CIA op (a closure there, the same body)."""
    orig_cia_callable = kwargs["original_callable"]
    del kwargs["original_callable"]
    with fake_tensor_mode:
        return orig_cia_callable(*args, **kwargs)


def _registers_natively() -> bool:
    """Whether this torch's ``register_op_impl`` also registers the op with the C++ fake
    dispatch (the table's ``torch.fake_registration`` model)."""
    from arm_accel import patches

    return patches.variant("torch.fake_registration") == "python and C++"


@contextmanager
def overriding(cia_ops_to_callable: dict[Any, Callable[..., Any]]) -> Iterator[None]:
    """``_override_composite_implicit_decomp`` with the decorators' writes made directly."""
    import torch
    from torch._export.utils import _get_decomp_for_cia
    from torch._higher_order_ops.utils import autograd_not_implemented
    from torch._subclasses import fake_impls
    from torch.export import exported_program as ep_module

    from arm_accel.control import counters

    t0 = time.perf_counter()
    native = _registers_natively()
    cia = torch._C.DispatchKey.CompositeImplicitAutograd
    registered = fake_impls.op_implementations_dict
    saved_tables = {}
    patched_ops = set()
    for op_overload, decomp_callable in cia_ops_to_callable.items():
        saved_tables[op_overload] = op_overload.py_kernels.copy()
        patched_ops.add(op_overload)
        for key in ep_module._AUTOGRAD_ALIAS_BACKEND_KEYS_TO_OVERRIDE:
            if key not in op_overload.py_kernels:
                _set_py_kernel(
                    op_overload, key, autograd_not_implemented(op_overload, deferred_error=True)
                )
        orig_cia_callable = _get_decomp_for_cia(op_overload)
        if cia in op_overload.py_kernels:
            del op_overload.py_kernels[cia]
        _set_py_kernel(op_overload, cia, decomp_callable)
        if op_overload not in registered:
            registered[op_overload] = functools.partial(
                _force_dispatch_to_orig_cia_callable, original_callable=orig_cia_callable
            )
            if native:
                schema = op_overload._schema
                torch._C._fake_dispatch_register_op_impl(schema.name, schema.overload_name)
        for key in ep_module._BACKEND_KEYS_TO_OVERRIDE:
            if key not in op_overload.py_kernels:
                _set_py_kernel(op_overload, key, orig_cia_callable)
    counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=True)
    try:
        yield
    finally:
        for op in patched_ops:
            op.py_kernels.clear()
            op.py_kernels.update(saved_tables[op])
            op._dispatch_cache.clear()
            fake_impls._deregister_op_impl(op)


def _decline_reason(cia_ops_to_callable: Any) -> str | None:
    import torch

    if not isinstance(cia_ops_to_callable, dict):
        return f"the ops to patch are a {type(cia_ops_to_callable).__name__}, not a dict"
    ops = torch._ops
    for op in cia_ops_to_callable:
        if not isinstance(op, ops.OpOverload):
            return f"{op!r} is a {type(op).__name__}, not an OpOverload"
        if type(op).py_impl is not ops.OperatorBase.py_impl:
            return f"{type(op).__name__} overrides py_impl"
    return None


def override(stock: Any) -> Any:
    """The module's ``_override_composite_implicit_decomp``: :func:`overriding` inside the stage."""
    from arm_accel.edge import cia_ops

    @functools.wraps(stock)
    def override(cia_ops_to_callable: Any) -> AbstractContextManager[None]:
        from arm_accel.control import counters

        if not cia_ops.collecting():
            return stock(cia_ops_to_callable)
        reason = _decline_reason(cia_ops_to_callable)
        if reason is None:
            return overriding(cia_ops_to_callable)  # counted when entered
        counters.record_decline(STATS_NAME, reason)
        counters.record_call(STATS_NAME, 0.0, accelerated=False)
        return stock(cia_ops_to_callable)

    return override


def install_check() -> str | None:
    """Why the override must stay stock here: ``OpOverload`` must inherit the ``py_impl``
    modelled (the patch table's ``edge.cia_override`` group check)."""
    from torch._ops import OperatorBase, OpOverload

    if OpOverload.py_impl is not OperatorBase.py_impl:
        return "torch._ops.OpOverload overrides py_impl"
    return None


__all__ = [
    "STATS_NAME",
    "install_check",
    "override",
    "overriding",
]
