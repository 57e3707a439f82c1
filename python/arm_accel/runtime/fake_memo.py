"""Fake values remembered per fake mode, so a repeated operator call skips its fake kernel.

Two kinds of call are served: operators ``FakeTensorMode`` never caches (``quantized_decomposed``,
the ``tosa`` dialect: most nodes of an INT graph), whose kernels are pure for static shapes, by
:func:`_key`; and, inside the in-place re-trace, ``aten`` calls, while the entry stock's own
cache holds under stock's key is still there. A served call gets a new fake tensor made as a
cache hit's output; anything not modelled is dispatched as stock dispatches it. Why the values
equal stock's: design.md, "The re-trace engine".
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import (
    FakeTensor,
    FakeTensorMode,
    _DispatchCacheValidEntry,
    in_kernel_invocation_manager,
)
from torch.multiprocessing.reductions import StorageWeakRef

from arm_accel.control import counters
from arm_accel.runtime import grad_counter

#: ``namespace::name.overload`` of the operators whose fake kernels are remembered, with the
#: positions of the arguments their fake kernels never read (left out of the key, so that nodes
#: differing only in quantization parameters share an entry): the ``quantized_decomposed``
#: per-tensor Meta kernels read the input and the output dtype only, the per-channel one also
#: the axis and the range it checks, not the scales or zero points; ``RESCALE`` reads every
#: argument but its scales.
OPERATORS: dict[str, frozenset[int]] = {
    "quantized_decomposed::quantize_per_tensor.default": frozenset({1, 2, 3, 4}),
    "quantized_decomposed::dequantize_per_tensor.default": frozenset({1, 2, 3, 4}),
    "quantized_decomposed::dequantize_per_channel.default": frozenset({1, 2}),
    "tosa::RESCALE.default": frozenset({2}),
    "tosa::TABLE.default": frozenset(),
    "tosa::ADD.default": frozenset(),
    "tosa::SUB.default": frozenset(),
    "tosa::MUL.default": frozenset(),
    "tosa::RESHAPE.default": frozenset(),
    "tosa::CONV2D.default": frozenset(),
    "tosa::DEPTHWISE_CONV2D.default": frozenset(),
    "tosa::SLICE.default": frozenset(),
    "tosa::MATMUL.default": frozenset(),
    "tosa::TRANSPOSE.default": frozenset(),
    "tosa::CONCAT.default": frozenset(),
    "tosa::REDUCE_SUM.default": frozenset(),
    "tosa::CLAMP.default": frozenset(),
    "tosa::AVG_POOL2D.default": frozenset(),
    "tosa::MAX_POOL2D.default": frozenset(),
    "tosa::GATHER.default": frozenset(),
    "tosa::CAST.default": frozenset(),
}

#: The ``arm_accel.stats()`` entry: calls of the operators above, ``accelerated`` those served
#: from the memo.
STATS_NAME = "retrace_engine.fake_memo"
#: The ``arm_accel.stats()`` entry of the ``aten`` calls (:func:`cached_aten`) the re-trace's
#: interpreter keyed, ``accelerated`` those served as stock's cache hit.
ATEN_STATS_NAME = "retrace_engine.fake_memo.aten"
#: The ``arm_accel.stats()`` entry of the calls served under ``FakeTensorMode.dispatch``
#: (:func:`dispatching`: the edge stage's decompositions, a delegate call's fake run,
#: ``torch.export``).
DISPATCH_STATS_NAME = "fake_memo.dispatch"
#: The entry of the ``aten`` calls keyed under ``FakeTensorMode.dispatch`` (``torch.export``),
#: ``accelerated`` those served as stock's cache hit.
DISPATCH_ATEN_STATS_NAME = "fake_memo.dispatch.aten"
#: The attribute of a ``FakeTensorMode`` holding its memo (lives and dies with the mode).
_MEMO_ATTR = "_arm_accel_fake_memo"
#: Argument types keyed by value (exact types: ``bool`` is not ``int``).
BY_VALUE = frozenset(
    {int, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format}
)


#: Containers keyed by their items (fx hands the interpreter its immutable variants).
_SEQUENCES = frozenset({tuple, list, fx.immutable_collections.immutable_list})
_MAPPINGS = frozenset({dict, fx.immutable_collections.immutable_dict})


class _NoKey(Exception):  # noqa: N818 - control flow: the call is not remembered
    pass


def _operator(target: Any) -> torch._ops.OpOverload | None:
    """The operator ``target`` is, or the one its edge wrapper calls; None for other targets."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    op = target._op if isinstance(target, EdgeOpOverload) else target
    return op if isinstance(op, torch._ops.OpOverload) else None


def qualified(target: Any) -> str | None:
    """``namespace::name.overload`` of an operator or of the one its edge wrapper calls."""
    op = _operator(target)
    if op is None:
        return None
    return f"{op.namespace}::{op._opname}.{op._overloadname}"


@cache
def ignored(target: Any) -> frozenset[int] | None:
    """The argument positions left out of the key of ``target`` (an operator or its edge
    wrapper), or None when its calls are not remembered."""
    name = qualified(target)
    return None if name is None else OPERATORS.get(name)


@cache
def cached_aten(target: Any) -> torch._ops.OpOverload | None:
    """The ``aten`` operator ``target`` is or wraps, when ``FakeTensorMode``'s cache may hold
    its calls' values as new tensors (not a view: a hit's output shares its input's storage)."""
    from torch._subclasses import fake_tensor

    op = _operator(target)
    if op is None or op.namespace != "aten" or op.is_view:
        return None
    # answered before the cache (attribute queries)
    if op in fake_tensor._DISPATCH_META_HANDLERS or op in fake_tensor._DISPATCH_HANDLE_DIRECTLY:
        return None
    return op


def _tensor_key(t: FakeTensor, mode: FakeTensorMode) -> tuple[Any, ...]:
    if t.fake_mode is not mode or t.constant is not None or t.requires_grad:
        raise _NoKey
    shape = tuple(t.shape)
    if any(type(d) is not int for d in shape):
        raise _NoKey
    # A static shape can sit on symbolic strides or storage (a view of a symbolic tensor).
    stride, offset, nbytes = t.stride(), t.storage_offset(), t.untyped_storage().nbytes()
    if (
        type(offset) is not int
        or type(nbytes) is not int
        or any(type(d) is not int for d in stride)
    ):
        raise _NoKey
    return (
        shape,
        stride,
        offset,
        t.dtype,
        t.device,
        t.layout,
        t._is_view(),
        t.is_conj(),
        t.is_neg(),
        # the rest of what ``FakeTensorMode``'s cache key reads (``extract_tensor_metadata``)
        nbytes,
        t.is_inference(),
        t.is_quantized,
    )


def _key(value: Any, mode: FakeTensorMode, tensors: list[FakeTensor]) -> Any:
    """``value`` as a hashable key (tensors by metadata, collected in ``tensors``)."""
    kind = type(value)
    if kind is FakeTensor:
        tensors.append(value)
        return ("T", _tensor_key(value, mode))
    if kind in BY_VALUE:
        return (kind, value)
    if kind is float:
        return (float, value.hex())  # exact: 0.0 and -0.0 differ, so do NaN payloads
    if kind in _SEQUENCES:
        return (kind, tuple(_key(v, mode, tensors) for v in value))
    if kind in _MAPPINGS:
        return (kind, tuple((k, _key(v, mode, tensors)) for k, v in value.items()))
    raise _NoKey


def _spec_key(spec: Any) -> Any:
    """The TOSA specification by every field (its ``==`` compares version and profiles only,
    while the kernels also read its extensions, ``8k`` level and U55 subset)."""
    if spec is None:
        return None
    fields = tuple(
        (name, tuple(value) if type(value) is list else value)
        for name, value in sorted(vars(spec).items())
    )
    try:
        hash(fields)
    except TypeError:
        raise _NoKey from None
    return (type(spec), fields)


def _context() -> tuple[Any, ...]:
    """The process state the kernels (and tensor creation) read."""
    from executorch.backends.arm.tosa.specification import TosaLoweringContext

    return (
        _spec_key(TosaLoweringContext.tosa_spec_var.get(None)),
        torch.get_default_dtype(),
        torch._C._get_default_device(),
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
    )


def _active(mode: FakeTensorMode) -> bool:
    """``mode`` is the fake mode dispatch runs in now."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is mode


def _made(mode: FakeTensorMode, entry: tuple[Any, ...]) -> FakeTensor:
    """A new fake tensor with the remembered metadata, made as ``FakeTensorMode`` makes the
    output of a cache hit (``_get_output_tensor_from_cache_entry``)."""
    shape, stride, dtype, device, layout = entry
    with in_kernel_invocation_manager(mode):
        empty = torch.empty_strided(shape, stride, dtype=dtype, layout=layout, device="meta")
    return FakeTensor(mode, empty, device)


def _signature(t: torch.Tensor) -> tuple[Any, ...]:
    return (
        tuple(t.shape),
        t.stride(),
        t.storage_offset(),
        t.dtype,
        t.device,
        t.layout,
        t.requires_grad,
        t.untyped_storage().nbytes(),
        t._is_view(),
        t.is_conj(),
        t.is_neg(),
    )


def _entry_of(out: Any, mode: FakeTensorMode, inputs: list[FakeTensor]) -> tuple[Any, ...] | None:
    """What remembers ``out``, or None when a tensor rebuilt from it would not be ``out``."""
    if type(out) is not FakeTensor or out.fake_mode is not mode or out.constant is not None:
        return None
    if out._is_view() or out.requires_grad or any(type(d) is not int for d in out.shape):
        return None
    storage = StorageWeakRef(out.untyped_storage())  # type: ignore[no-untyped-call]
    if any(StorageWeakRef(t.untyped_storage()) == storage for t in inputs):  # type: ignore[no-untyped-call]
        return None
    entry = (tuple(out.shape), out.stride(), out.dtype, out.device, out.layout)
    return entry if _signature(_made(mode, entry)) == _signature(out) else None


def _serve(
    mode: FakeTensorMode,
    memo: dict[Any, Any],
    target: Any,
    args: Any,
    kwargs: Any,
    run: Any,
    stats_name: str = STATS_NAME,
) -> tuple[Any, bool | None]:
    """The value of ``target(*args, **kwargs)`` in ``mode``: remembered (True), dispatched by
    ``run()`` and remembered when it can be (False), or dispatched outside the memo (None).
    Counted under ``stats_name``."""
    skip = ignored(target)
    if skip is None or mode.propagate_real_tensors:
        return run(), None
    tensors: list[FakeTensor] = []
    try:
        read = tuple(a for i, a in enumerate(args) if i not in skip) if skip else args
        key = (target, _key(read, mode, tensors), _key(kwargs, mode, tensors), _context())
    except _NoKey:
        return run(), None
    entry = memo.get(key)
    counters.record_call(stats_name, 0.0, entry is not None)
    if entry is not None:
        return _made(mode, entry), True
    # A kernel that moved autograd's counter is not remembered: serving it later would skip
    # the move and change later nodes' ``seq_nr``.
    seq_nr = grad_counter.now()
    out = run()
    if key not in memo:
        modelled = grad_counter.now() == seq_nr
        memo[key] = _entry_of(out, mode, tensors) if modelled else None
    return out, False


#: A memo value: this call is never served (stock's cache does not hold its value as a tensor).
_NEVER = False


def _serve_cached(
    mode: FakeTensorMode,
    memo: dict[Any, Any],
    target: Any,
    op: torch._ops.OpOverload,
    args: Any,
    kwargs: Any,
    run: Any,
    stats_name: str,
) -> tuple[Any, bool | None]:
    """The value of an ``aten`` call (:func:`cached_aten`): served while stock's cache holds
    the entry it served or stored for the same key (True), else dispatched by ``run()`` and
    remembered when stock's cache stored or served a tensor for it (False); dispatched outside
    the memo (None) when the call cannot be keyed or the mode's cache is not stock's default.
    Counted under ``stats_name``."""
    if not mode.cache_enabled or mode.cache_crosscheck_enabled or mode.propagate_real_tensors:
        return run(), None
    tensors: list[FakeTensor] = []
    try:
        tracing = torch.fx.experimental.proxy_tensor.get_proxy_mode() is not None
        key = (target, _key(args, mode, tensors), _key(kwargs, mode, tensors), _context(), tracing)
    except _NoKey:
        return run(), None
    held = memo.get(key)
    if held is _NEVER:
        return run(), None
    if held is not None:
        entry, stock_key, stock_entry = held
        if FakeTensorMode.cache.get(stock_key) is stock_entry:
            counters.record_call(stats_name, 0.0, True)
            return _made(mode, entry), True
    counters.record_call(stats_name, 0.0, False)
    seq_nr = grad_counter.now()
    keys: list[tuple[Any, Any]] = []
    with _capturing_cache_keys(mode, keys):
        out = run()
    modelled = grad_counter.now() == seq_nr
    memo[key] = _cached_entry(out, mode, tensors, op, keys) if modelled else _NEVER
    return out, False


#: Per thread: the key lists of the captures active in it, innermost last.
_captures = threading.local()
_capture_lock = threading.Lock()
#: Attributes of a mode while captures are active on it: how many, and what ``_cache_key``
#: resolved to before the first.
_CAPTURE_COUNT = "_arm_accel_captures"
_CAPTURE_PRIOR = "_arm_accel_cache_key"


@contextmanager
def _capturing_cache_keys(mode: FakeTensorMode, keys: list[tuple[Any, Any]]) -> Iterator[None]:
    """Record in ``keys`` the (operator, key) of the first cache key ``mode`` computes in
    this thread inside the block (the key None if it bypassed the cache). Nests (a call
    dispatched inside another's kernel: each block's first key), and other threads' calls on
    the same mode are not recorded; the mode's own ``_cache_key`` is back once the last
    block on it ends."""
    stack = _captures.__dict__.setdefault("stack", [])
    with _capture_lock:
        count = mode.__dict__.get(_CAPTURE_COUNT, 0)
        if count == 0:
            prior = mode.__dict__.get("_cache_key")
            mode.__dict__[_CAPTURE_PRIOR] = prior
            mode._cache_key = _capture(mode._cache_key)  # type: ignore[method-assign]
        mode.__dict__[_CAPTURE_COUNT] = count + 1
    stack.append(keys)
    try:
        yield
    finally:
        stack.pop()
        with _capture_lock:
            count = mode.__dict__.pop(_CAPTURE_COUNT) - 1
            if count:
                mode.__dict__[_CAPTURE_COUNT] = count
            else:
                prior = mode.__dict__.pop(_CAPTURE_PRIOR)
                if prior is None:
                    del mode._cache_key
                else:
                    mode._cache_key = prior  # type: ignore[method-assign]


def _capture(stock: Any) -> Any:
    """``stock`` (a mode's ``_cache_key``), recording its key in this thread's waiting
    captures (those that have none yet)."""

    def capture(state: Any, func: Any, args: Any, kwargs: Any) -> Any:
        waiting = [k for k in getattr(_captures, "stack", ()) if not k]
        if not waiting:
            return stock(state, func, args, kwargs)
        try:
            key = stock(state, func, args, kwargs)
        except BaseException:
            for k in waiting:
                k.append((func, None))
            raise
        for k in waiting:
            k.append((func, key))
        return key

    return capture


def _cached_entry(
    out: Any,
    mode: FakeTensorMode,
    inputs: list[FakeTensor],
    op: torch._ops.OpOverload,
    keys: list[tuple[Any, Any]],
) -> Any:
    """What remembers ``out`` of a call of ``op`` whose first cache key was ``keys[0]``: our
    entry, stock's key and the entry stock's cache holds under it; :data:`_NEVER` when stock's
    cache did not key this call or holds no single tensor for it."""
    if not keys or keys[0][0] is not op or keys[0][1] is None:
        return _NEVER
    stock_key = keys[0][1]
    stock_entry = FakeTensorMode.cache.get(stock_key)
    if type(stock_entry) is not _DispatchCacheValidEntry or stock_entry.is_output_tuple:
        return _NEVER
    entry = _entry_of(out, mode, inputs)
    return _NEVER if entry is None else (entry, stock_key, stock_entry)


def _memo_of(mode: FakeTensorMode) -> dict[Any, tuple[Any, ...] | None]:
    memo = mode.__dict__.get(_MEMO_ATTR)
    if memo is None:
        memo = mode.__dict__[_MEMO_ATTR] = {}
    return memo  # type: ignore[no-any-return]


def _serve_any(
    mode: FakeTensorMode,
    memo: dict[Any, Any],
    target: Any,
    args: Any,
    kwargs: Any,
    run: Any,
    stats_name: str,
    aten_stats_name: str | None,
) -> tuple[Any, bool | None]:
    """The value of ``target(*args, **kwargs)`` in ``mode``: an ``aten`` call stock's cache may
    hold by :func:`_serve_cached` (counted under ``aten_stats_name``; None: ``aten`` calls are
    not served), any other by :func:`_serve` (under ``stats_name``)."""
    op = cached_aten(target) if aten_stats_name is not None else None
    if op is not None:
        return _serve_cached(mode, memo, target, op, args, kwargs, run, aten_stats_name)
    return _serve(mode, memo, target, args, kwargs, run, stats_name)


class Interpreter(fx.Interpreter):
    """The interpreter ``_ExportPassBase._fx`` dispatches through, remembering the fake values
    of :data:`OPERATORS` and of the ``aten`` calls stock's cache holds in ``mode``."""

    def __init__(self, module: fx.GraphModule, mode: FakeTensorMode) -> None:
        super().__init__(module)
        self.mode = mode
        self.memo = _memo_of(mode)
        self.hits = 0
        self.misses = 0

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        def run() -> Any:
            return super(Interpreter, self).call_function(target, args, kwargs)

        if not _active(self.mode):
            return run()
        out, served = _serve_any(
            self.mode, self.memo, target, args, kwargs, run, STATS_NAME, ATEN_STATS_NAME
        )
        if served is not None:
            self.hits += served
            self.misses += not served
        return out


# ---------------------------------------------------------------------------------------------
# The same memo under ``FakeTensorMode.dispatch``, for traces that dispatch through the modes
# (the edge stage's ``run_decompositions``: its quantize/dequantize calls), for a delegate's
# fake run and for ``torch.export``'s traces (``pipeline/scoped_calls.py``).


class _Dispatching(threading.local):
    """Per thread: one flag per open :func:`dispatching` block, innermost last (whether its
    ``aten`` calls are served)."""

    def __init__(self) -> None:
        self.aten: list[bool] = []


_dispatching = _Dispatching()


@contextmanager
def dispatching(aten: bool = False) -> Iterator[None]:
    """In this block (this thread), ``FakeTensorMode.dispatch`` serves :data:`OPERATORS` from
    the mode's memo (:func:`install` must have run), and with ``aten`` the ``aten`` calls
    stock's cache holds, as the in-place re-trace does (:func:`_serve_cached`). ``torch.export``
    serves them (its traces repeat calls: 0.13-0.15 s of a ``llama4`` export or re-export);
    the edge stage's decompositions do not (most of their cache hits are views, which the memo
    does not serve, and serving the rest measured no faster: MobileNet, llama2). The
    innermost block decides."""
    flags = _dispatching.aten
    flags.append(aten)
    try:
        yield
    finally:
        flags.pop()


def memo_dispatch(stock: Any) -> Any:
    """``FakeTensorMode.dispatch`` serving from the mode's memo inside :func:`dispatching`;
    stock's elsewhere (the patch table's ``edge.fake_memo`` row)."""
    from torch._subclasses import fake_tensor

    @functools.wraps(stock)
    def dispatch(
        self: FakeTensorMode, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        flags = _dispatching.aten
        # Every fake dispatch of the process comes here: outside the block, straight to
        # stock. Stock logs every call at DEBUG level first, which a served call would not.
        if not flags or fake_tensor.log.isEnabledFor(logging.DEBUG):
            return stock(self, func, types, args, kwargs)

        def run() -> Any:
            return stock(self, func, types, args, kwargs)

        aten_stats_name = DISPATCH_ATEN_STATS_NAME if flags[-1] else None
        out, _ = _serve_any(
            self, _memo_of(self), func, args, kwargs, run, DISPATCH_STATS_NAME, aten_stats_name
        )
        return out

    return dispatch


__all__ = [
    "ATEN_STATS_NAME",
    "DISPATCH_ATEN_STATS_NAME",
    "DISPATCH_STATS_NAME",
    "OPERATORS",
    "STATS_NAME",
    "Interpreter",
    "cached_aten",
    "dispatching",
    "ignored",
    "memo_dispatch",
    "qualified",
]
