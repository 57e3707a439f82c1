"""The CIA override of a decomposition call, without its decorators (issue 17).

Every ``run_decompositions`` call enters ``torch.export.exported_program.
_override_composite_implicit_decomp`` around its trace. On entry it patches each of the ~510
preservable CIA ops (the table's and ``_special_op_to_preserve_cia`` for the rest) with ~20
python kernels, each through ``op.py_impl(key)(fn)``, and registers a fake rule through
``register_op_impl(op)(fn)``. Those decorators define an inner function per call, and its
annotations (``Callable[_P, _T]``) build typing aliases each time: ~0.18 s per call, 20-25% of a
stock decomposition call on an MLPerf Tiny model.

:func:`overriding` makes the same changes to the same objects in the same order, writing what
the decorators write (``py_kernels``, ``_dispatch_cache``, ``op_implementations_dict``, and
where ``register_op_impl`` does, the C++ fake dispatch's registration) and reusing stock's
helpers for the values written (``autograd_not_implemented``, ``_get_decomp_for_cia``); its exit
is stock's. It is used inside
:func:`arm_accel.edge.cia_ops.collecting_once` (the edge stage's decomposition calls) when every
op to patch is an ``OpOverload`` whose ``py_impl`` is the one modelled; otherwise, or
outside the block, the stock function runs. It is pinned to the source digests of the functions
it was read from (torch 2.13, 2.14.0, 2.15.0): with another source nothing is replaced. Counted in
``arm_accel.stats()`` under :data:`STATS_NAME` (seconds: the patching), with the reason when
stock runs in the block.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

#: ``stats()`` entry: one call per override entered in the stage.
STATS_NAME = "to_edge.cia_override"
#: Source digests (``passthrough.source_digest``) of the functions :func:`overriding` models,
#: by module and qualified name, one per source read (torch 2.13, then 2.14.0 = 2.15.0).
MODELLED_SOURCES: dict[tuple[str, str], tuple[str, ...]] = {
    # 2.14.0: a comment's spelling
    ("torch.export.exported_program", "_override_composite_implicit_decomp"): (
        "4422dc79d0792af7",
        "e96e2a4f053f0684",
    ),
    # ``OpOverload`` inherits it (checked at install)
    ("torch._ops", "OpOverload.py_impl"): ("8173bd205b783783",),
    # 2.14.0: also registers the op with the C++ fake dispatch (:data:`NATIVE_FAKE_REGISTRATION`)
    ("torch._subclasses.fake_impls", "register_op_impl"): (
        "405e93300718a185",
        "6c0b0bcd047f8a6f",
    ),
    ("torch._subclasses.fake_impls", "_is_op_registered_to_fake_rule"): ("b42b78458191b7ee",),
}
#: The ``register_op_impl`` sources that, after filing a rule in ``op_implementations_dict``,
#: tell the C++ fake dispatch about it (``torch._C._fake_dispatch_register_op_impl``; the exit's
#: ``_deregister_op_impl`` of those torches withdraws it).
NATIVE_FAKE_REGISTRATION = frozenset({"6c0b0bcd047f8a6f"})
#: Where the stock function is bound and called by name.
MODULE = "torch.export.exported_program"

_lock = threading.Lock()
_installed: dict[str, Any] = {}


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
    dispatch (:data:`NATIVE_FAKE_REGISTRATION`)."""
    from torch._subclasses import fake_impls

    from arm_accel.retrace_engine.passthrough import source_digest

    return source_digest(fake_impls.register_op_impl) in NATIVE_FAKE_REGISTRATION


@contextmanager
def overriding(cia_ops_to_callable: dict[Any, Callable[..., Any]]) -> Iterator[None]:
    """``_override_composite_implicit_decomp`` with the decorators' writes made directly."""
    import torch
    from torch._export.utils import _get_decomp_for_cia
    from torch._higher_order_ops.utils import autograd_not_implemented
    from torch._subclasses import fake_impls
    from torch.export import exported_program as ep_module

    from arm_accel import counters

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


def _override(stock: Any) -> Any:
    """The module's ``_override_composite_implicit_decomp``: :func:`overriding` inside the stage."""
    from arm_accel.edge import cia_ops

    @functools.wraps(stock)
    def override(cia_ops_to_callable: Any) -> AbstractContextManager[None]:
        from arm_accel import counters

        if not cia_ops.collecting():
            return stock(cia_ops_to_callable)
        reason = _decline_reason(cia_ops_to_callable)
        if reason is None:
            return overriding(cia_ops_to_callable)  # counted when entered
        counters.record_decline(STATS_NAME, reason)
        counters.record_call(STATS_NAME, 0.0, accelerated=False)
        return stock(cia_ops_to_callable)

    return override


def _modelled(module: str, qualname: str) -> Any:
    import importlib

    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def install() -> None:
    """Replace the module's ``_override_composite_implicit_decomp`` (idempotent). Raises
    ImportError, replacing nothing, where torch's functions are not the ones modelled."""
    import importlib

    from arm_accel.retrace_engine.passthrough import source_digest

    with _lock:
        if _installed:
            return
        for (module, qualname), digests in MODELLED_SOURCES.items():
            if source_digest(_modelled(module, qualname)) not in digests:
                raise ImportError(f"{module}.{qualname} is not the source modelled")
        ops: Any = importlib.import_module("torch._ops")
        if ops.OpOverload.py_impl is not ops.OperatorBase.py_impl:
            raise ImportError("torch._ops.OpOverload overrides py_impl")
        target: Any = importlib.import_module(MODULE)
        stock = target._override_composite_implicit_decomp
        ours = _override(stock)
        target._override_composite_implicit_decomp = ours
        _installed.update(module=target, override=(stock, ours))


def uninstall() -> None:
    """Put stock's function back (only where ours is still installed)."""
    with _lock:
        if not _installed:
            return
        stock, ours = _installed["override"]
        module = _installed["module"]
        if module._override_composite_implicit_decomp is ours:
            module._override_composite_implicit_decomp = stock
        _installed.clear()


def installed() -> bool:
    return bool(_installed)


__all__ = [
    "MODELLED_SOURCES",
    "STATS_NAME",
    "install",
    "installed",
    "overriding",
    "uninstall",
]
