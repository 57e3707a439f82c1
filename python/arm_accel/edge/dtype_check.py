"""The edge dialect's dtype check, run once per graph and lowering (issue 36).

``EXIREdgeDialectVerifier`` ends with ``_check_tensor_args_matching_op_allowed_dtype(gm)``: an
``fx.Interpreter`` (``EdgeOpArgValidator``) runs every node of the graph on fake values, only to
read the dtypes of each edge operator's tensor arguments and results and test them against the
operator's dtype constraints. A lowering verifies its programs a dozen times (the edge program's
construction, the pass manager's check, ``EdgeProgramManager``, ``to_backend`` and its fake
copy, the partition programs), mostly the same graph again: 22% of an accelerated llama8
lowering, and most of what it did outside its passes and phases.

:func:`checking` remembers the graphs the check passed inside a lowering: a graph whose
:func:`graph_key` was seen pass is not run again. The key holds everything the run reads: each
node's op, target, arguments (nodes by position, every other leaf by type and value, floats by
their bits); the placeholders' fake values the interpreter is fed (shape, dtype, strides,
offset, device, layout, ``requires_grad``, conjugate/negative bits, storage size, which
placeholders share storage, the base of a view, the value of a fake constant); the result types
and dtypes the check reads from each edge operator's ``meta["val"]``; the objects ``get_attr``
fetches (by identity, while they live); the ambient state the run depends on (grad and
inference mode, the dispatch mode stack, the tracing context's fake mode). Two graphs with one
key run the same operators on the same fake values, so the check raises on both or neither, and
a second run would only hit the fake tensor cache the first one filled. Not remembered: a check
that raised (it runs again, and raises again, as stock's), a run that changed the shape
environment (an unbacked symbol allocated: a second run would allocate another). Declined
(stock runs): symbolic shapes or values, quantized tensors or fake constants of more than one
element among the inputs, ``call_module`` nodes, argument types the key does not model,
placeholders of another fake mode, shape-environment event recording.

Used inside a lowering's scopes (``collector.lowering``: the edge stage, ``to_backend``, the Arm
pipeline; this thread) with acceleration on; the memo is this thread's and dropped when the next
edge stage starts (:func:`forget`), so a lowering never reuses another's checks. Counted in
``arm_accel.stats()`` under :data:`STATS_NAME`: a graph checked before is an accelerated call;
a first check a stock call.
"""

from __future__ import annotations

import functools
import threading
import time
import weakref
from typing import Any

import torch
from torch.fx import Node

#: ``stats()`` entry: one accelerated call per check answered from the memo.
STATS_NAME = "verifier.dtype_check"

_local = threading.local()


def _memo() -> weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], list[Any]]]:
    """This thread's memo: per fake mode, graph key -> weak references to the objects the key
    names by identity (an entry holds while they live: their ids name no other object)."""
    memo = getattr(_local, "memo", None)
    if memo is None:
        memo = _local.memo = weakref.WeakKeyDictionary()
    return memo


def forget() -> None:
    """A lowering starts (the edge stage): the checks remembered on this thread are dropped, so
    each lowering runs its own first checks."""
    _local.memo = None


class Declined(Exception):
    """The graph holds something :func:`graph_key` does not model; stock's check runs."""


_LEAVES: frozenset[type] = frozenset(
    {type(None), bool, int, str, torch.dtype, torch.device, torch.layout, torch.memory_format}
)
_CONTAINERS: frozenset[type] = frozenset(
    {tuple, list, dict, torch.fx.immutable_collections.immutable_list,
     torch.fx.immutable_collections.immutable_dict}
)  # fmt: skip


def _arg_key(a: Any, index: dict[Node, int]) -> Any:
    """An argument as the interpreter reads it: a node by its position, a leaf by type and
    value, a container by its type and items."""
    t = type(a)
    if t is Node:
        return index[a]
    if t in _LEAVES:
        return (t, a)
    if t is float:
        return (float, a.hex())
    if t in _CONTAINERS:
        if isinstance(a, dict):
            return (t, tuple((k, _arg_key(v, index)) for k, v in a.items()))
        return (t, tuple(_arg_key(x, index) for x in a))
    if t is slice:
        return (slice, _arg_key(a.start, index), _arg_key(a.stop, index), _arg_key(a.step, index))
    raise Declined(f"argument of type {t.__name__}")


def _input_key(v: Any, mode: Any, storages: dict[int, int]) -> Any:
    """A placeholder's fake value as the run receives it."""
    from torch._subclasses.fake_tensor import FakeTensor

    if v is None or type(v) in (bool, int):
        return (type(v), v)
    if type(v) is float:
        return (float, v.hex())
    if not isinstance(v, FakeTensor):
        raise Declined(f"placeholder value of type {type(v).__name__}")
    if v.fake_mode is not mode:
        raise Declined("placeholders of another fake mode")
    if v._has_symbolic_sizes_strides or v.is_quantized:
        raise Declined("symbolic or quantized placeholder")
    constant = None if v.constant is None else _constant_key(v.constant)
    storage = v.untyped_storage()
    shared = storages.setdefault(storage._cdata, len(storages))
    base = v._base
    return (
        type(v), tuple(v.shape), v.dtype, v.stride(), v.storage_offset(), v.device, v.layout,
        v.requires_grad, v.is_conj(), v.is_neg(), storage.nbytes(), shared,
        None if base is None else (tuple(base.shape), base.dtype, base.stride(),
                                   base.storage_offset(), base.requires_grad),
        constant,
    )  # fmt: skip


def _constant_key(c: torch.Tensor) -> Any:
    """The real value a fake constant carries (ops on constants may compute with it): small
    constants (FakeTensorConverter keeps one element at most) by dtype, shape and values."""
    if c.numel() > 1 or c.is_quantized or c.layout != torch.strided:
        raise Declined("fake constant of more than one element")
    values = tuple(x.hex() if type(x) is float else x for x in c.flatten().tolist())
    return (c.dtype, tuple(c.shape), c.stride(), values)


def _result_key(v: Any) -> Any:
    """What the check reads of a node's ``meta["val"]``: tensors' dtypes, the structure."""
    if isinstance(v, torch.Tensor):
        if v._has_symbolic_sizes_strides:
            raise Declined("symbolic shape")
        return v.dtype
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(_result_key(x) for x in v))
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise Declined("symbolic value")
    return type(v)


def _ambient() -> tuple[Any, ...]:
    """The thread's state the run depends on beyond the graph."""
    from torch._guards import TracingContext
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    context = TracingContext.try_get()
    return (
        torch.is_grad_enabled(),
        torch.is_inference_mode_enabled(),
        tuple(id(m) for m in _get_current_dispatch_mode_stack()),
        torch._C._len_torch_function_stack(),
        id(context.fake_mode) if context is not None else None,
    )


def graph_key(gm: torch.fx.GraphModule) -> tuple[Any, tuple[Any, ...], list[Any]]:
    """(fake mode, key, weak references to the attributes the key names by identity) of what
    the check of ``gm`` reads; :class:`Declined` where it reads something the key does not
    model. Operator targets are in the key themselves (hashed and compared by identity)."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    nodes = list(gm.graph.nodes)
    mode = None
    for n in nodes:
        if n.op == "placeholder":
            mode = getattr(n.meta.get("val"), "fake_mode", None)
            break
    if mode is None:
        raise Declined("no fake placeholder")
    if mode.shape_env is not None and mode.shape_env.should_record_events:
        raise Declined("shape environment records events")
    index: dict[Node, int] = {}
    storages: dict[int, int] = {}
    kept: list[Any] = []
    key: list[Any] = [_ambient()]
    for i, n in enumerate(nodes):
        index[n] = i
        op = n.op
        if op == "call_function":
            target = n.target
            val = n.meta.get("val")
            if isinstance(target, EdgeOpOverload):
                if "val" not in n.meta:
                    raise Declined("edge operator without a value")
                result = _result_key(val)
            else:
                result = None if val is None else _result_key(val)
            key.append((target, _arg_key(n.args, index), _arg_key(n.kwargs, index), result))
        elif op == "placeholder":
            key.append(("p", n.target, _input_key(n.meta.get("val"), mode, storages)))
        elif op == "get_attr":
            obj = gm
            for atom in str(n.target).split("."):
                obj = getattr(obj, atom)
            if isinstance(obj, torch.Tensor):
                raise Declined("tensor attribute")
            try:
                kept.append(weakref.ref(obj))
            except TypeError:
                raise Declined(f"attribute of type {type(obj).__name__}") from None
            key.append(("a", id(obj)))
        elif op in ("call_method", "output"):
            key.append((op, n.target, _arg_key(n.args, index), _arg_key(n.kwargs, index)))
        else:
            raise Declined(f"{op} node")
    return mode, tuple(key), kept


def _shape_env_state(mode: Any) -> tuple[int, ...]:
    """What a run that allocated a symbol or added a guard changes in the shape environment."""
    env = mode.shape_env
    if env is None:
        return ()
    return (
        len(env.var_to_range),
        len(env.guards),
        len(env.replacements),
        len(env.pending_fresh_unbacked_symbols),
    )


def checking(stock: Any) -> Any:
    """``_check_tensor_args_matching_op_allowed_dtype``: inside a lowering (this thread), a
    graph whose key passed before is not run again (the patch table's ``verifier.dtype_check``)."""

    @functools.wraps(stock)
    def _check_tensor_args_matching_op_allowed_dtype(gm: Any) -> None:
        from arm_accel import collector, counters, switch

        if not collector.in_lowering() or not switch.is_enabled():
            return stock(gm)
        t0 = time.perf_counter()
        try:
            mode, key, kept = graph_key(gm)
        except Declined as exc:
            counters.record_decline(STATS_NAME, str(exc))
            return stock(gm)
        memo = _memo()
        refs = memo.get(mode, {}).get(key)
        if refs is not None and all(ref() is not None for ref in refs):
            counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=True)
            return None
        before = _shape_env_state(mode)
        stock(gm)  # raises as stock does; then nothing is remembered
        if _shape_env_state(mode) == before:
            memo.setdefault(mode, {})[key] = kept
        counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=False)
        return None

    return _check_tensor_args_matching_op_allowed_dtype


__all__ = ["STATS_NAME", "Declined", "checking", "forget", "graph_key"]
