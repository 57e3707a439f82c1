"""The edge dialect's dtype check, run once per graph and lowering.

``EXIREdgeDialectVerifier`` runs every node of the graph on fake values to check each edge
operator's dtypes, about a dozen times per lowering and mostly on the same graph (22% of an
accelerated llama8 lowering). :func:`checking` answers a graph whose :func:`graph_key` (all the
run reads) passed before in this lowering without running it; a first check still runs, with
each operator call whose key was run before answered from that run (:class:`_Remembering`).
Why that is stock's verdict: design.md, "The edge dialect's dtype check".
"""

from __future__ import annotations

import functools
import operator
import threading
import time
import weakref
from typing import Any

import torch
from torch.fx import Node

#: ``stats()`` entry: one accelerated call per check answered from the memo.
STATS_NAME = "verifier.dtype_check"

_local = threading.local()


class _Memo:
    """What one lowering (this thread) remembers for one fake mode."""

    __slots__ = ("graphs", "calls")

    def __init__(self) -> None:
        #: graph key -> weak references to the objects the key names by identity (an entry
        #: holds while they live: their ids name no other object)
        self.graphs: dict[tuple[Any, ...], list[Any]] = {}
        #: ambient state -> operator call key -> its fake result (see _Remembering)
        self.calls: dict[tuple[Any, ...], dict[tuple[Any, ...], Any]] = {}


def _memo(mode: Any) -> _Memo:
    """This thread's memo for the fake mode ``mode``."""
    memos = getattr(_local, "memo", None)
    if memos is None:
        memos = _local.memo = weakref.WeakKeyDictionary()
    memo = memos.get(mode)
    if memo is None:
        memo = memos[mode] = _Memo()
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
        torch.get_default_dtype(),
        tuple(id(m) for m in _get_current_dispatch_mode_stack()),
        torch._C._len_torch_function_stack(),
        id(context.fake_mode) if context is not None else None,
    )


def _mutates(target: Any) -> bool:
    """Whether an operator may write one of its arguments (or is not an operator)."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    op = target._op if isinstance(target, EdgeOpOverload) else target
    schema = op._schema if isinstance(op, torch._ops.OpOverload) else None
    return not isinstance(schema, torch._C.FunctionSchema) or schema.is_mutable


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
            obj = operator.attrgetter(str(n.target))(gm)
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


def _is_operator(target: Any) -> bool:
    """An aten/edge operator overload (a fake kernel computes its result)."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    return isinstance(target, (torch._ops.OpOverload, EdgeOpOverload))


def _functional(gm: Any) -> bool:
    """No operator of ``gm`` may write its arguments (a served result is never mutated)."""
    return not any(
        _mutates(n.target) for n in gm.graph.nodes if n.op == "call_function" and
        not isinstance(n.target, torch._ops.HigherOrderOperator)
        and n.target is not operator.getitem
    )  # fmt: skip


def last_calls() -> tuple[int, int]:
    """(served, run) operator calls of this thread's last check that ran."""
    return getattr(_local, "last_calls", (0, 0))


def served_calls() -> int:
    """Operator calls this thread's checks were served so far."""
    return getattr(_local, "served", 0)


def _value_key(a: Any, mode: Any, storages: dict[int, int]) -> Any:
    """An operator argument by what its fake run reads: a fake tensor by its metadata (and
    which of the call's tensors share storage), a leaf by type and value."""
    from torch._subclasses.fake_tensor import FakeTensor

    t = type(a)
    if t is FakeTensor:
        if a.fake_mode is not mode or a._has_symbolic_sizes_strides or a.is_quantized:
            raise Declined("fake value not modelled")
        return ("T", *_input_key(a, mode, storages)[1:])
    if t in _LEAVES:
        return (t, a)
    if t is float:
        return (float, a.hex())
    if t in _CONTAINERS:
        if isinstance(a, dict):
            return (t, tuple((k, _value_key(v, mode, storages)) for k, v in a.items()))
        return (t, tuple(_value_key(x, mode, storages) for x in a))
    raise Declined(f"value of type {t.__name__}")


def _servable(out: Any, mode: Any) -> bool:
    """A result that can be handed to a later run: fresh fake tensors (not views of an input)
    and plain values, in tuples or lists."""
    from torch._subclasses.fake_tensor import FakeTensor

    t = type(out)
    if t is FakeTensor:
        return out.fake_mode is mode and not out._is_view() and not out._has_symbolic_sizes_strides
    if t in _LEAVES or t is float:
        return True
    if t in (tuple, list):
        return all(_servable(x, mode) for x in out)
    return False


class _Remembering(torch.fx.Interpreter):
    """Between ``EdgeOpArgValidator`` and ``Interpreter``: inside a check of a functional
    graph, an operator call on fake values with the same key as one run before in this
    lowering is answered with that run's result (same metadata: the validator reads dtypes
    only, and the run would compute the same values)."""

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        state = getattr(_local, "calls", None)
        if state is None or state[0] is None or not _is_operator(target):
            return super().call_function(target, args, kwargs)
        calls, mode, counts = state
        try:
            storages: dict[int, int] = {}
            key = (target, _value_key(args, mode, storages), _value_key(kwargs, mode, storages))
        except Declined:
            return super().call_function(target, args, kwargs)
        served = calls.get(key)
        if served is not None:
            counts[0] += 1
            return served[0]
        out = super().call_function(target, args, kwargs)
        counts[1] += 1
        if _servable(out, mode):
            calls[key] = (out,)
        return out


def validator(stock: type) -> type:
    """``EdgeOpArgValidator`` with :class:`_Remembering` under it (the patch table's
    ``verifier.dtype_check.validator``, bound in the verifier's module)."""
    return type(stock.__name__, (stock, _Remembering), {"__module__": __name__})


def checking(stock: Any) -> Any:
    """``_check_tensor_args_matching_op_allowed_dtype``: inside a lowering (this thread), a
    graph whose key passed before is not run again (the patch table's ``verifier.dtype_check``)."""

    @functools.wraps(stock)
    def _check_tensor_args_matching_op_allowed_dtype(gm: Any) -> None:
        from arm_accel.control import counters, switch
        from arm_accel.runtime import collector, fake_memo

        if not collector.in_lowering() or not switch.is_enabled():
            return stock(gm)
        t0 = time.perf_counter()
        try:
            mode, key, kept = graph_key(gm)
        except Declined as exc:
            counters.record_decline(STATS_NAME, str(exc))
            return stock(gm)
        memo = _memo(mode)
        refs = memo.graphs.get(key)
        if refs is not None and all(ref() is not None for ref in refs):
            counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=True)
            return None
        before = _shape_env_state(mode)
        calls = memo.calls.setdefault(key[0], {}) if _functional(gm) else None
        counts = [0, 0]
        _local.calls = (calls, mode, counts)
        try:
            # the mode's memo serves the quantize/dequantize and TOSA calls (fake_memo)
            with fake_memo.dispatching():
                stock(gm)  # raises as stock does; then nothing is remembered
        finally:
            _local.calls = None
            _local.last_calls = tuple(counts)
            _local.served = getattr(_local, "served", 0) + counts[0]
        if _shape_env_state(mode) == before:
            memo.graphs[key] = kept
        else:  # a call allocated a symbol or guarded: its results are not to be served
            memo.calls.clear()
        counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=False)
        return None

    return _check_tensor_args_matching_op_allowed_dtype


__all__ = [
    "STATS_NAME", "Declined", "checking", "forget", "graph_key", "last_calls", "served_calls",
    "validator",
]  # fmt: skip
