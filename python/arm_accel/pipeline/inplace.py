"""The in-place re-trace: stock's ``ExportPass`` re-trace, result for result, without rebuilding
the nodes it would rebuild as they were.

The pass's own methods run on stock's interpreter, but the tracer writes into the old graph: a
call that rebuilds the node being interpreted from its own inputs *claims* that node (args
re-pointed, meta written as stock writes it, the value re-dispatched only when it may differ);
every other call creates its node as stock does. Then unclaimed nodes are erased, every node is
named as stock's fresh namespace would name it, and the graph is wrapped in a new
``GraphModule``. Any exception before that commit undoes every change (``fxstock``'s journal)
and the caller runs the stock re-trace. Why this is stock's result: design.md, "The re-trace
engine".
"""

from __future__ import annotations

import copy
import functools
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from executorch.exir.pass_base import ExportPass, NodeMetadata, ProxyValue, _ExportPassBase
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx import traceback as fx_traceback
from torch.fx.immutable_collections import immutable_dict, immutable_list
from torch.fx.node import map_arg
from torch.fx.proxy import _get_seq_nr
from torch.utils import _pytree as pytree

from arm_accel import patches
from arm_accel.control import counters
from arm_accel.fxstock import GraphJournal, freshness, names, order
from arm_accel.fxstock import meta as fxmeta
from arm_accel.pipeline.passthrough import has_scalar_to_coerce, passthrough
from arm_accel.runtime import fake_memo, grad_counter, identity


class Unsupported(Exception):  # noqa: N818 - a decline, its message is the reason
    """The graph or the pass holds something the in-place re-trace does not model."""


def same_value(a: Any, b: Any) -> bool:
    """Whether two ``meta["val"]`` s are equal as the equality contract compares them (and as
    fake dispatch depends on them): shape, dtype, strides, storage offset, device."""
    if a is b:
        return True
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset()
            and a.device == b.device
            and a.requires_grad == b.requires_grad
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same_value(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) or isinstance(
        b, (torch.SymInt, torch.SymFloat, torch.SymBool)
    ):
        return False
    return type(a) is type(b) and a == b


#: ``stats()`` entry: values requiring grad a re-trace kept, the autograd counter moved as
#: their dispatch would have moved it (one call per value, recorded per re-trace).
GRAD_KEPT_STATS_NAME = "retrace_engine.grad_kept"
#: ``stats()`` entry: values a re-trace kept on an input fetched by a ``get_attr`` (a parameter
#: or tensor constant, a real tensor), one call per value, recorded per re-trace.
STOWED_KEPT_STATS_NAME = "retrace_engine.stowed_input_kept"

#: Leaf types ``proxy_data`` hands back as they are (pytree leaves, never a ProxyValue).
_PLAIN_LEAVES = fake_memo.BY_VALUE | {float, FakeTensor, torch.Tensor}


def proxy_data(value: Any) -> Any:
    """``pytree.tree_map_only(ProxyValue, lambda x: x.data, value)`` -- what stock's ``_fx``
    dispatches -- without pytree's per-leaf machinery for plain tuples, lists, dicts and
    scalars; anything else goes through pytree itself."""
    kind = type(value)
    if kind is ProxyValue:
        return value.data
    if kind in _PLAIN_LEAVES:
        return value
    if kind is tuple:
        return tuple(proxy_data(v) for v in value)
    if kind is list:
        return [proxy_data(v) for v in value]
    if kind is dict:
        return {k: proxy_data(v) for k, v in value.items()}
    # The interpreter fetches list and dict args as fx's immutable variants, which pytree
    # unflattens to their own type.
    if kind is immutable_list:
        return immutable_list(proxy_data(v) for v in value)
    if kind is immutable_dict:
        return immutable_dict({k: proxy_data(v) for k, v in value.items()})
    return pytree.tree_map_only(ProxyValue, lambda x: x.data, value)


def _same_args(a: Any, b: Any) -> bool:
    """``a`` (what a pass passed to ``_fx``) is ``b`` (what the interpreter fetched for the node)
    up to containers: ProxyValues by identity, other leaves by type and value."""
    if a is b:
        return True
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or isinstance(a, tuple) != isinstance(b, tuple):
            return False
        return len(a) == len(b) and all(_same_args(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(_same_args(a[k], b[k]) for k in a)
        )
    if isinstance(a, ProxyValue) or isinstance(b, ProxyValue):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


# ---------------------------------------------------------------------------------------------
# Preconditions


def _stock_methods() -> dict[str, frozenset[Any]]:
    from executorch.backends.arm._passes.arm_pass import ArmPass

    return {
        "call_submodule": frozenset(
            {
                _ExportPassBase.call_submodule,
                ExportPass.call_submodule,
                ArmPass.call_submodule,
            }
        ),
        "placeholder": frozenset({_ExportPassBase.placeholder}),
        "_fx": frozenset({_ExportPassBase._fx}),
        "inputs": frozenset({_ExportPassBase.inputs}),
        "on_attr": frozenset({_ExportPassBase.on_attr}),
        "ExportInterpreter": frozenset({ExportPass.ExportInterpreter}),
        "ExportTracer": frozenset({ExportPass.ExportTracer}),
    }


def check_pass(pass_: Any) -> None:
    """Raise ``Unsupported`` unless the pass re-traces through stock's machinery only."""
    cls = type(pass_)
    for name, stock in _stock_methods().items():
        if getattr(cls, name, None) not in stock:
            raise Unsupported(f"overrides {name}")
    if any(attr in vars(pass_) for attr in (*_SHADOWED, "call_operator")):
        raise Unsupported("instance attribute shadows a re-trace method")


#: The pass's methods the in-place re-trace shadows with instance attributes while it runs.
_SHADOWED = ("_fx", "placeholder", "_call_quantized_op_without_fake_kernel")


def _quantized_value_modelled() -> bool:
    """``ArmPass._call_quantized_op_without_fake_kernel`` is the source read for
    :func:`_quantized_value` (the table's ``arm.quantized_op_value``); another source builds
    its nodes itself (``InplaceRetrace._adopt``)."""
    return patches.holds("arm.quantized_op_value")


def _quantized_value(meta: NodeMetadata) -> Any:
    """The value ``ArmPass._call_quantized_op_without_fake_kernel`` gives the node it builds
    (its operators have no quantized fake kernel): a new tensor like the old value, in the
    dtype of the output's quantization."""
    old_val = meta.data["val"]
    output_qparams = meta.data.get("output_qparams", {})
    dtype = next(iter(output_qparams.values())).dtype if output_qparams else old_val.dtype
    return torch.empty_like(old_val, dtype=dtype)


def _stock_quantized_op(pass_: Any) -> bool:
    """The pass builds quantized ``bmm``/``leaky_relu`` nodes with ``ArmPass``'s own method."""
    from executorch.backends.arm._passes.arm_pass import ArmPass

    method = getattr(type(pass_), "_call_quantized_op_without_fake_kernel", None)
    return method is not None and method is ArmPass._call_quantized_op_without_fake_kernel


#: The attribute of an ``fx.Graph`` holding the nodes :func:`check_graph` last passed, each with
#: the op, target, args, kwargs and value objects it passed with (``Graph.__deepcopy__`` does
#: not copy it).
_CHECKED_ATTR = "_arm_accel_checked"


def check_graph(graph_module: fx.GraphModule) -> None:
    """Raise ``Unsupported`` for what the in-place re-trace does not model. A node that passed
    the last check of this graph with the same objects passes again without being read: the
    same objects hold the same values (what the freshness records rely on as well)."""
    if graph_module.meta.get("args") is not None:
        raise Unsupported("graph module carries its own inputs")
    graph = graph_module.graph
    before: dict[fx.Node, tuple[Any, ...]] = getattr(graph, _CHECKED_ATTR, None) or {}
    passed: dict[fx.Node, tuple[Any, ...]] = {}
    for node in graph.nodes:
        op, target, args, kwargs = node.op, node.target, node._args, node._kwargs
        val = node.meta.get("val")
        last = before.get(node)
        if (
            last is None
            or last[0] is not op
            or last[1] is not target
            or last[2] is not args
            or last[3] is not kwargs
            or last[4] is not val
        ):
            _check_node(node, val)
        passed[node] = (op, target, args, kwargs, val)
    setattr(graph, _CHECKED_ATTR, passed)


def _check_node(node: fx.Node, val: Any) -> None:
    op = node.op
    if op == "get_attr":
        _check_tensor_constant(node, val)
        return
    if op in ("call_module", "call_method"):
        raise Unsupported(op)
    if op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
        raise Unsupported("higher-order op")
    for leaf in (val,) if type(val) is FakeTensor else _tensors_and_symbols(val):
        if not isinstance(leaf, torch.Tensor):
            raise Unsupported("symbolic value")
        if any(type(d) is not int for d in leaf.shape):
            raise Unsupported("symbolic shape")
    if _has_tensor_or_symbol(node.args) or _has_tensor_or_symbol(node.kwargs):
        raise Unsupported("tensor or symbolic argument")


def _names_graph(stack: Any, graph: fx.Graph) -> bool:
    """An entry of ``stack`` (a ``source_fn_stack``, or None) holds a node of ``graph``
    (executorch's decompositions record the node itself)."""
    for entry in stack or ():
        if _node_of_graph(entry, graph) is not None:
            return True
    return False


def _node_of_graph(entry: Any, graph: fx.Graph) -> fx.Node | None:
    """The node of ``graph`` a ``source_fn_stack`` entry names, or None."""
    if isinstance(entry, tuple) and entry:
        head = entry[0]
        if isinstance(head, fx.Node) and head.graph is graph:
            return head
    return None


def _stand_in(node: fx.Node, graph: fx.Graph) -> fx.Node:
    """A node of ``graph`` (never inserted) named, typed and targeted as ``node`` is now: what
    a record naming ``node`` names after stock's re-trace, the old graph's node."""
    return fx.Node(graph, node.name, node.op, node.target, (), {}, node.type)


#: What a ``get_attr`` may fetch: ``create_arg`` stows a tensor as ``_tensor_constantN`` and a
#: parameter as ``_param_constantN`` on the re-trace's new root.
_STOWED = (torch.Tensor, torch.nn.Parameter)


def _check_tensor_constant(node: fx.Node, val: Any) -> None:
    """A ``get_attr`` of a tensor or parameter: the interpreter fetches it and each use in the
    re-trace stows it again on the new root (``ExportTracer.create_arg``)."""
    try:  # ``fx.Interpreter.fetch_attr``'s walk along the dotted target
        attr = operator.attrgetter(node.target)(node.graph.owning_module)
    except (AttributeError, TypeError):
        raise Unsupported("get_attr of a missing attribute") from None
    if type(attr) not in _STOWED or type(val) is not FakeTensor:
        raise Unsupported("get_attr of a non-tensor")


_SYMBOLS = (torch.SymInt, torch.SymFloat, torch.SymBool)
#: Argument types that are neither tensors nor symbols nor containers (exact types: fast).
_PLAIN = frozenset({fx.Node, int, float, bool, str, type(None), torch.dtype, torch.device})


def _has_constant(value: Any) -> bool:
    """Some fake tensor in the value carries a constant (fake dispatch propagates constants:
    a value computed from one is dispatched again, never kept)."""
    return not _keepable(value, grad_counted=False)


def _keepable(value: Any, grad_counted: bool) -> bool:
    """A value (a node's, or an input's) whose node may keep its old value instead of being
    dispatched: no leaf that pins its dispatch (:func:`_pins_dispatch`)."""
    if type(value) is FakeTensor:  # the common case, without building a list
        return not _pins_dispatch(value, grad_counted)
    return not any(_pins_dispatch(leaf, grad_counted) for leaf in _tensors_and_symbols(value))


#: ``_value_still_holds``: the node's value is dispatched again.
_DISPATCH = object()


def _same_input(current: Any, recorded: Any) -> bool:
    """An input's value equals the one recorded (``same_value``), ``requires_grad`` too."""
    return same_value(current, recorded) and _requires_grad(current) is _requires_grad(recorded)


def _requires_grad(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.requires_grad


def _accepts_real_inputs(mode: Any) -> bool:
    """The fake mode's dispatch converts real tensor inputs (``FakeTensorMode
    .validate_and_convert_non_fake_tensors``: the thread's override, else the mode's flag)."""
    from torch._subclasses.fake_tensor import fake_tensor_tls

    override = fake_tensor_tls.allow_non_fake_inputs_override
    return bool(mode.allow_non_fake_inputs if override is None else override)


def _pins_dispatch(leaf: Any, grad_counted: bool) -> bool:
    """A fake constant, or, where the re-trace reads the autograd counter (``grad_counted``),
    a tensor requiring grad (its dispatch creates an autograd node, which moves the counter)."""
    if getattr(leaf, "constant", None) is not None:
        return True
    return grad_counted and isinstance(leaf, torch.Tensor) and leaf.requires_grad


def _reads_grad_counter(pass_: Any, graph_module: fx.GraphModule) -> bool:
    """Under grad mode, the re-trace makes nodes whose ``seq_nr`` is the autograd counter's
    value rather than an old node's: the ``get_attr`` s ``create_arg`` makes, of the graph's
    tensor constants or of the scalars ``ScalarToTensorPass`` coerces. (The nodes passes build
    take the interpreted node's ``seq_nr`` with its meta.)"""
    from executorch.exir.passes.scalar_to_tensor_pass import ScalarToTensorPass

    if not torch.is_grad_enabled():
        return False
    if graph_module.graph.find_nodes(op="get_attr"):
        return True
    return isinstance(pass_, ScalarToTensorPass) and has_scalar_to_coerce(graph_module)


def _tensors_and_symbols(value: Any) -> list[Any]:
    """The tensors and symbolic scalars inside a value or an args structure (nodes skipped)."""
    if isinstance(value, (torch.Tensor, *_SYMBOLS)):
        return [value]
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in _tensors_and_symbols(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _tensors_and_symbols(v)]
    return []


def _has_tensor_or_symbol(value: Any) -> bool:
    """Whether ``_tensors_and_symbols(value)`` is not empty, without building it."""
    if isinstance(value, (tuple, list)):
        return any(type(v) not in _PLAIN and _has_tensor_or_symbol(v) for v in value)
    if isinstance(value, dict):
        return any(type(v) not in _PLAIN and _has_tensor_or_symbol(v) for v in value.values())
    return isinstance(value, (torch.Tensor, *_SYMBOLS))


# ---------------------------------------------------------------------------------------------
# The interpreter's current meta, with its provenance record built only when read


class _LazyCurrentMeta(dict):  # type: ignore[type-arg]
    """What ``fx_traceback.set_current_meta`` makes current: a copy of the node's meta whose
    ``from_node`` is ``[NodeSource(node, pass_name, CREATE)]``. ``NodeSource`` deep-copies the
    node's provenance chain, the costliest step of a re-trace, and a new node keeps it only when
    the meta it is given has no ``from_node`` of its own; so it is built on first read."""

    __slots__ = ("_node", "_pass_name", "_built")

    def __init__(self, node: fx.Node, pass_name: str) -> None:
        super().__init__(node.meta)
        dict.__setitem__(self, "from_node", None)
        self._node = node
        self._pass_name = pass_name
        self._built = False

    def _build(self) -> None:
        if not self._built:
            self._built = True
            source = fx_traceback.NodeSource(
                self._node, self._pass_name, fx_traceback.NodeSourceAction.CREATE
            )
            dict.__setitem__(self, "from_node", [source])

    def __getitem__(self, key: str) -> Any:
        if key == "from_node":
            self._build()
        return dict.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        if key == "from_node":
            self._build()
        return dict.get(self, key, default)

    def copy(self) -> dict[str, Any]:
        self._build()
        return dict(self)

    def items(self) -> Any:
        self._build()
        return dict.items(self)

    def values(self) -> Any:
        self._build()
        return dict.values(self)

    def __iter__(self) -> Any:
        self._build()
        return dict.__iter__(self)


@contextmanager
def _current_meta(node: fx.Node, pass_name: str) -> Iterator[None]:
    """``fx_traceback.set_current_meta`` with the provenance record built lazily."""
    if fx_traceback.should_preserve_node_meta and node.meta:
        saved = fx_traceback.current_meta
        fx_traceback.current_meta = _LazyCurrentMeta(node, pass_name)
        try:
            yield
        finally:
            fx_traceback.current_meta = saved
    else:
        yield


# ---------------------------------------------------------------------------------------------
# The interpreter


#: The engine's subclass of each pass interpreter class. One per class, not one per re-trace: a
#: class is a reference cycle, and one whose methods referenced the re-trace would keep all it
#: built (the environment's proxies, the old metas, the journal) alive until a full collection.
_interpreters: dict[type, type] = {}


def _interpreter_class(base: type) -> type:
    """``base`` (a pass's ``ExportInterpreter``) with the engine's hooks; the instance carries
    the re-trace (``engine``) and its ``passthrough`` test (``through``)."""
    cls = _interpreters.get(base)
    if cls is not None:
        return cls

    class Interpreter(base):  # type: ignore[misc]
        engine: InplaceRetrace
        through: Any
        # NodeSource records "Interpreter_<class name>" of stock's interpreter.
        pass_name = f"Interpreter_{base.__name__}"

        def fetch_args_kwargs_from_env(self, n: fx.Node) -> tuple[Any, Any]:
            fetched = super().fetch_args_kwargs_from_env(n)
            self.engine.fetched = fetched
            return fetched

        def _set_current_node(self, node: fx.Node) -> Any:
            return _current_meta(node, self.pass_name)

        def run_node(self, n: fx.Node) -> Any:
            # ``_ExportPassBase.ExportInterpreter.run_node`` formats every node for the
            # pass's ``node_debug_str`` (read by no Arm pass): format the last one only,
            # which is what stock leaves there.
            self.node = n
            if n.op == "output":
                self.callback.node_debug_str = n.format_node()
            through = self.through
            if through is not None and n.op == "call_function" and through(n.target):
                # What the pass's call chain would end in (``passthrough``): the claim.
                engine = self.engine
                engine.passed_through += 1
                proxy = engine._claim_as_is(n)
                if proxy is not None:
                    engine.claimed_as_is += 1
                    return proxy
                with self._set_current_node(n):
                    args, kwargs = self.fetch_args_kwargs_from_env(n)
                    meta = NodeMetadata(n.meta)
                    return engine._claim(n, "call_function", n.target, args, kwargs, meta)
            return fx.Interpreter.run_node(self, n)

    _interpreters[base] = Interpreter
    return Interpreter


# ---------------------------------------------------------------------------------------------
# The re-trace


def _retargetable(kind: str, target: Any) -> bool:
    """A call that rebuilds the interpreted node with this operator instead may claim it."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    return kind == "call_function" and isinstance(target, (torch._ops.OpOverload, EdgeOpOverload))


def _wraps(target: Any, op: Any) -> bool:
    """``target`` is the edge operator of ``op`` (``EdgeOpOverload.__call__`` calls it)."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    return isinstance(target, EdgeOpOverload) and target._op is op


class InplaceRetrace:
    """One in-place re-trace of ``graph_module`` by ``pass_`` (see the module docstring)."""

    def __init__(self, pass_: Any, graph_module: fx.GraphModule) -> None:
        self.pass_ = pass_
        self.gm = graph_module
        self.graph = graph_module.graph
        self.order: list[fx.Node] = list(self.graph.nodes)
        self.left = freshness.left_by(self.graph)
        # Nodes as the last re-trace left them (their value is what dispatch gave then).
        self.as_is = {n for n in self.order if freshness.left_as_is(self.left, n) is not None}
        self.old_val: dict[fx.Node, Any] = {n: n.meta.get("val") for n in self.order}
        self.claimed: dict[fx.Node, ProxyValue] = {}
        self.candidates: dict[fx.Node, str] = {}
        self.current: fx.Node | None = None
        self.fetched: tuple[Any, Any] | None = None
        self.anchor: fx.Node | None = None
        self.dispatched = 0
        self.passed_through = 0  # nodes claimed without the pass's call chain (``passthrough``)
        self.claimed_as_is = 0  # of those, claimed by ``_claim_as_is``
        #: ``_claim_as_is`` may run: the process-wide state ``_stock_node_meta`` reads is the
        #: one it models (set when the interpretation starts).
        self.fast_meta = False
        self.candidate_of: dict[Any, str] = {}
        self.journal = GraphJournal(graph_module)
        self.journal.save_names()
        #: Values requiring grad are dispatched again, never kept (:func:`_keepable`), unless
        #: their record says how far their dispatch moved the autograd counter (:meth:`_keep_rule`).
        self.grad_counted = _reads_grad_counter(pass_, graph_module)
        self.counting = grad_counter.counting()
        #: Per node, the autograd nodes its value's dispatch created (for the next record).
        self.grad_nodes: dict[fx.Node, int] = {}
        self.grad_kept = 0  # values kept whose dispatch created autograd nodes
        self.stowed_kept = 0  # values kept on an input a ``get_attr`` fetched

    # -- hooks the tracer and the pass call ------------------------------------------------
    def insert(self, node: fx.Node) -> None:
        """``Graph._insert``: new nodes go where stock's creation order puts them."""
        assert self.anchor is not None
        self.anchor.prepend(node)
        self.journal.track_created(node)

    def created(self, node: fx.Node, candidate: str) -> None:
        self.candidates[node] = candidate

    def fx(
        self,
        kind: str,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        meta: NodeMetadata,
    ) -> ProxyValue:
        """``_ExportPassBase._fx`` for this re-trace: claim the node being interpreted when the
        call rebuilds it as it was, else stock's ``_fx``."""
        node = self._being_rebuilt(kind, args, kwargs)
        if node is not None and (target is node.target or _retargetable(kind, target)):
            return self._claim(node, kind, target, args, kwargs, meta)
        return _ExportPassBase._fx(self.pass_, kind, target, args, kwargs, meta)

    def _being_rebuilt(
        self, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> fx.Node | None:
        """The node being interpreted, unclaimed, when a call of this kind with these args is
        built from its own inputs (the caller checks the target)."""
        node = self.current
        if (
            node is not None
            and node not in self.claimed
            and kind == node.op
            and self.fetched is not None
            and _same_args(args, self.fetched[0])
            and _same_args(kwargs, self.fetched[1])
        ):
            return node
        return None

    def quantized_op(
        self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], meta: NodeMetadata
    ) -> ProxyValue:
        """``ArmPass._call_quantized_op_without_fake_kernel`` for this re-trace: stock's method
        builds the node (its own value rule, no dispatch); when it rebuilds the node being
        interpreted from its own inputs, the old node adopts what it built."""
        from executorch.backends.arm._passes.arm_pass import ArmPass

        node = self._being_rebuilt("call_function", args, kwargs)
        if node is None or op is not node.target:
            return ArmPass._call_quantized_op_without_fake_kernel(
                self.pass_, op, args, kwargs, meta
            )
        if _quantized_value_modelled() and not _has_constant(meta.data["val"]):
            # Stock's method without the node it creates: the same value, meta and name.
            value = _quantized_value(meta)
            return self._take(node, value, meta, names.creation_candidate(self.graph, op, None))
        result = ArmPass._call_quantized_op_without_fake_kernel(self.pass_, op, args, kwargs, meta)
        return self._adopt(node, result)

    def _adopt(self, node: fx.Node, made: ProxyValue) -> ProxyValue:
        """The old node takes the place of the node a stock method just created for it: that
        node's meta (written by stock) and creation-order name; the created node goes."""
        new = made.proxy.node
        self._repoint_inputs(node)
        self.journal.replace_meta(node, new.meta)
        self.candidates[node] = self.candidates.pop(new)
        self.graph.erase_node(new)
        proxy = ProxyValue(made.data, self.pass_.tracer.proxy(node))
        self.claimed[node] = proxy
        self._after_claim(node)
        return proxy

    def placeholder(self, name: str, arg: Any, meta: NodeMetadata) -> ProxyValue:
        """``_ExportPassBase.placeholder``: the new placeholder's meta is the old one's copy."""
        node = self.current
        assert node is not None and node.op == "placeholder" and node.target == name
        data = meta.data
        data["val"] = arg
        self.journal.replace_meta(node, data)
        self.candidates[node] = names.creation_candidate(self.graph, name, None)
        proxy = ProxyValue(arg, self.pass_.tracer.proxy(node))
        self.claimed[node] = proxy
        self._after_claim(node)
        return proxy

    # -- claiming --------------------------------------------------------------------------
    def _claim(
        self,
        node: fx.Node,
        kind: str,
        target: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        meta: NodeMetadata,
    ) -> ProxyValue:
        pass_ = self.pass_
        same_op = True
        if target is not node.target:
            # The call rebuilds the node from its own inputs with another operator (e.g. aten
            # to edge): stock's new node would sit right here, named from its target. An edge
            # operator calls the aten one it wraps: the same dispatch.
            same_op = _wraps(target, node.target)
            self.journal.set_target(node, target)
        moves = self._value_still_holds(node) if same_op and kind == "call_function" else _DISPATCH
        if moves is not _DISPATCH:
            res_data = self.old_val[node]
            self._keep(node, moves)
            env = self.env
            self.stowed_kept += any(type(env[i]) is not ProxyValue for i in node._input_nodes)
        else:
            args_data, kwargs_data = proxy_data((args, kwargs))
            counted = self.counting and kind == "call_function"
            before = grad_counter.now() if counted else 0
            res_data = getattr(pass_.interpreter, kind)(target, args_data, kwargs_data)
            if counted:
                self.grad_nodes[node] = grad_counter.now() - before
            self.dispatched += kind == "call_function"
        return self._take(node, res_data, meta, self._rebuilt_candidate(target))

    def _take(self, node: fx.Node, res_data: Any, meta: NodeMetadata, candidate: str) -> ProxyValue:
        """The node becomes the one stock creates for it with this value and name candidate:
        inputs re-pointed, the meta ``TracerBase.create_node`` writes, the old meta over it,
        then ``val``/``tensor_meta``."""
        tracer = self.pass_.tracer
        self._repoint_inputs(node)
        new_meta = _stock_node_meta(tracer, node, meta.data)
        self.journal.replace_meta(node, new_meta)
        if isinstance(res_data, FakeTensor):
            # What ``ExportTracer.set_metadata`` makes of a fake tensor, without its tree maps.
            new_meta["val"] = res_data
            new_meta["tensor_meta"] = None
        else:
            tracer.set_metadata(node, res_data)
        self.candidates[node] = candidate
        proxy = ProxyValue(res_data, tracer.proxy(node))
        self.claimed[node] = proxy
        self._after_claim(node)
        return proxy

    def _claim_as_is(self, node: fx.Node) -> ProxyValue | None:
        """The claim of a passed-through node that is as our last re-trace left it, on inputs
        still what they were (same nodes, equal values), with a meta whose key order
        ``fxstock.meta.retraced_key_order`` models: what :meth:`_claim` gives, without building
        the pass's current meta or fetching the arguments. None when the node needs
        :meth:`_claim`."""
        if not self.fast_meta or node not in self.as_is or _saves_eager_input_vals(node.target):
            return None
        val = self.old_val[node]
        grad_counted, moves = self._keep_rule(node)
        if type(val) is not FakeTensor or not _keepable(val, grad_counted):
            return None
        if not self._inputs_hold(node, grad_counted, same_nodes=True):
            return None
        meta = node.meta
        stack_trace = meta.get("stack_trace")
        if stack_trace and fx_traceback.GRADIENT_ACC_SPECIAL_STACK in stack_trace:
            return None
        keys = tuple(meta)
        backward = bool(meta.get("autograd_backward"))
        key_order = fxmeta.retraced_key_order(keys, bool(stack_trace), backward)
        if key_order is None:
            return None
        self._keep(node, moves)
        new_meta = dict(meta) if not key_order else {k: meta[k] for k in key_order}
        new_meta["val"] = val
        new_meta["tensor_meta"] = None
        self.journal.replace_meta(node, new_meta)
        self.candidates[node] = self._rebuilt_candidate(node.target)
        proxy = ProxyValue(val, self.pass_.tracer.proxy(node))
        self.claimed[node] = proxy
        self._after_claim(node)
        return proxy

    def _rebuilt_candidate(self, target: Any) -> str:
        """:func:`fxstock.names.rebuilt_name_candidate`, once per target."""
        candidate = self.candidate_of.get(target)
        if candidate is None:
            candidate = self.candidate_of[target] = names.rebuilt_name_candidate(self.graph, target)
        return candidate

    def _repoint_inputs(self, node: fx.Node) -> None:
        """Where some input was rebuilt, point the args at what the re-trace made of them; a
        tensor constant's ``get_attr`` input is made again as ``create_proxy`` makes it (args
        before kwargs, one fresh node per use)."""
        env = self.env
        if any(type(env[i]) is not ProxyValue or env[i].node is not i for i in node._input_nodes):
            arg_of = self._arg_of
            args = map_arg(node.args, lambda i: arg_of(env[i]))
            self.journal.set_args(node, args, map_arg(node.kwargs, lambda i: arg_of(env[i])))

    def _arg_of(self, value: Any) -> fx.Node:
        """The node ``ExportTracer.create_arg`` makes of an interpreted input: a proxy's node,
        or a real tensor (a fetched ``get_attr``) stowed on the new root as a ``get_attr``."""
        if isinstance(value, ProxyValue):
            return value.node
        if type(value) in _STOWED:
            return self.pass_.tracer.create_arg(value)
        return _node_of(value)

    def _after_claim(self, node: fx.Node) -> None:
        # What the same step creates after the claim goes after the claimed node.
        nxt = node.next
        self.anchor = nxt if nxt.op != "root" else None

    def _value_still_holds(self, node: fx.Node) -> Any:
        """When the node's value is the one our last re-trace computed, from inputs whose
        values are equal to those it was computed from: how keeping it moves the autograd
        counter (:meth:`_keep_rule`); else ``_DISPATCH``."""
        if node not in self.as_is:
            return _DISPATCH
        grad_counted, moves = self._keep_rule(node)
        if not _keepable(self.old_val[node], grad_counted):
            return _DISPATCH
        if not self._inputs_hold(node, grad_counted, same_nodes=False):
            return _DISPATCH
        return moves

    def _inputs_hold(self, node: fx.Node, grad_counted: bool, same_nodes: bool) -> bool:
        """Every input of the node has a record of our last re-trace and an interpreted value
        (standing for the input's own node, where ``same_nodes``) that is keepable and equal
        to the recorded one, ``requires_grad`` included."""
        env, left = self.env, self.left
        for inp in node._input_nodes:
            proxy = env.get(inp)
            entry = left.get(inp)
            if entry is None:
                return False
            if not isinstance(proxy, ProxyValue):
                # A fetched ``get_attr`` (a real tensor) holds where the node is rebuilt anyway.
                if same_nodes or not self._stowed_input_holds(proxy, entry, grad_counted):
                    return False
                continue
            if same_nodes and proxy.node is not inp:
                return False
            if not _keepable(proxy.data, grad_counted) or not _same_input(proxy.data, entry.val):
                return False
        return True

    def _stowed_input_holds(self, value: Any, entry: freshness.Left, grad_counted: bool) -> bool:
        """A real tensor fetched by a ``get_attr`` input: fake dispatch would convert it to the
        fake tensor the fake mode's converter remembers for it, without side effects. It holds
        when that fake is the very value recorded for the input (the ``get_attr`` our last
        re-trace stowed, whose ``val`` ``set_metadata`` took from the same memo), keepable, and
        dispatch would accept a real input (design.md, "The re-trace engine")."""
        mode = self.interpreter.mode  # the pass's fake mode
        if type(value) not in _STOWED or value.is_mkldnn or not _accepts_real_inputs(mode):
            return False
        fake = mode.fake_tensor_converter._get_memo(value)
        return fake is not None and fake is entry.val and _keepable(fake, grad_counted)

    def _keep_rule(self, node: fx.Node) -> tuple[bool, int | None]:
        """Whether values requiring grad pin the node's dispatch, and how many autograd nodes
        keeping its value must create (None: not known, none created). Under grad mode, where
        the node's record counted its dispatch (``grad_nodes``), they do not pin it: keeping
        the value moves the counter as that dispatch did (same operator, inputs equal in
        value and in ``requires_grad``)."""
        entry = self.left.get(node)
        if self.counting and entry is not None and entry.grad_nodes is not None:
            return False, entry.grad_nodes
        return self.grad_counted, None

    def _keep(self, node: fx.Node, moves: int | None) -> None:
        """The node keeps its value: the counter moves as its dispatch would have moved it."""
        if moves is not None:
            grad_counter.advance(moves)
            self.grad_nodes[node] = moves
            self.grad_kept += moves > 0

    # -- driving ---------------------------------------------------------------------------
    def run(self, inputs: tuple[Any, ...]) -> fx.GraphModule:
        """Interpret the graph with the pass's own interpreter; returns the new module."""
        pass_ = self.pass_
        interpreter_cls = type(pass_).ExportInterpreter
        prev_tracer = pass_.tracer
        tracer = type(pass_).ExportTracer(pass_, self.graph._codegen)
        tracer.graph = self.graph
        tracer.fake_tensor_mode = prev_tracer.fake_tensor_mode
        interpreter = _interpreter_class(interpreter_cls)(pass_, self.gm)
        interpreter.engine, interpreter.through = self, passthrough(pass_, self.gm)
        prev_interpreter = pass_.interpreter
        pass_.tracer = tracer
        # Stock's interpreter (a new one on an empty module), remembering the fake values that
        # ``FakeTensorMode`` does not cache (``fake_memo``).
        self.interpreter = fake_memo.Interpreter(
            fx.GraphModule(torch.nn.Module(), fx.Graph()), tracer.fake_tensor_mode
        )
        pass_.interpreter = self.interpreter
        self.env = interpreter.env = {}
        pass_._fx = self.fx
        pass_.placeholder = self.placeholder
        if _stock_quantized_op(pass_):
            pass_._call_quantized_op_without_fake_kernel = self.quantized_op
        graph_create_node = self.graph.create_node
        graph_insert = self.graph._insert
        self.graph._insert = self.insert

        def create_node(
            op: str,
            target: Any,
            args: Any = None,
            kwargs: Any = None,
            name: str | None = None,
            type_expr: Any = None,
        ) -> fx.Node:
            node = graph_create_node(op, target, args, kwargs, None, type_expr)
            self.created(node, names.creation_candidate(self.graph, target, name))
            return node

        self.graph.create_node = create_node  # type: ignore[method-assign]
        try:
            self._stand_in_records()
            with fx_traceback.preserve_node_meta():
                self._interpret(interpreter, inputs)
            self._check_erasable()
        except BaseException:
            del self.graph.create_node
            self.graph._insert = graph_insert
            self.journal.rollback()
            raise
        finally:
            pass_.tracer = prev_tracer
            pass_.interpreter = prev_interpreter
            for attr in _SHADOWED:
                pass_.__dict__.pop(attr, None)
        del self.graph.create_node
        self.graph._insert = graph_insert
        return self._commit(tracer)

    def _stand_in_records(self) -> None:
        """Give ``source_fn_stack`` records naming nodes of this graph the nodes stock's
        re-trace leaves them naming: those of the old graph, with the names, targets and meta
        they have now, which nothing renames (the renaming at commit would otherwise show in
        them). Each stack naming such nodes is replaced (journaled) by one copy naming
        stand-ins, shared where the stack was; the stand-ins hold the meta as it then is."""
        graph = self.graph
        stacks: dict[int, tuple[list[Any], list[Any]]] = {}  # id -> (stack, its copy)
        holders: list[tuple[fx.Node, list[Any]]] = []
        for node in self.order:
            stack = node.meta.get("source_fn_stack")
            if stack and _names_graph(stack, graph):
                if type(stack) is not list or any(type(e) is not tuple for e in stack):
                    raise Unsupported("source_fn_stack naming the graph is not a list of tuples")
                stacks.setdefault(id(stack), (stack, []))
                holders.append((node, stack))
        if not holders:
            return
        old_graph = fx.Graph()
        stand_ins: dict[fx.Node, fx.Node] = {}
        for stack, copied in stacks.values():
            for entry in stack:
                head = _node_of_graph(entry, graph)
                if head is not None:
                    if head not in stand_ins:
                        stand_ins[head] = _stand_in(head, old_graph)
                    entry = (stand_ins[head], *entry[1:])
                copied.append(entry)
        for node, stack in holders:
            self.journal.set_meta(node, "source_fn_stack", stacks[id(stack)][1])
        for node, stand_in in stand_ins.items():
            stand_in.meta.update(node.meta)

    def _interpret(self, interpreter: fx.Interpreter, inputs: tuple[Any, ...]) -> None:
        """``fx.Interpreter.run`` over the old nodes only (new ones are inserted among them)."""
        args = self.graph.process_inputs(*inputs)
        interpreter.args_iter = iter(args)
        env = interpreter.env
        self.fast_meta = (
            fx_traceback.has_preserved_node_meta()
            and not fx_traceback._is_preserving_node_seq_nr()
            and fx_traceback.get_current_replay_node() is None
            and not self.pass_.tracer.record_stack_traces
        )
        for node in self.order:
            self.current = node
            self.anchor = node
            self.fetched = None
            env[node] = interpreter.run_node(node)
            if node.op == "output":
                break
        self.current = None

    def _check_erasable(self) -> None:
        unclaimed = [n for n in self.order if n not in self.claimed]
        dead = set(unclaimed)
        for node in unclaimed:
            if any(user not in dead for user in node.users):
                raise Unsupported(f"{node.name} is used by a node the re-trace kept")
        self.unclaimed = unclaimed

    def _commit(self, tracer: Any) -> fx.GraphModule:
        graph = self.graph
        for node in reversed(self.unclaimed):
            graph.erase_node(node)
        nodes = list(graph.nodes)
        candidates = self.candidates
        names.rename_fresh(graph, nodes, [candidates[node] for node in nodes])
        order.order_users(nodes)
        order.file_in_graph_order(graph, nodes)
        # Placeholders keep their original values (ExportPass.call_submodule).
        for node in self.order:
            if node.op == "placeholder":
                node.meta["val"] = self.old_val[node]
        new_gm = fx.GraphModule(tracer.root, graph)
        new_gm.meta = self.gm.meta.copy()
        freshness.record(graph, self.grad_nodes)
        if self.grad_kept:
            counters.record_calls(GRAD_KEPT_STATS_NAME, self.grad_kept, self.grad_kept, 0.0)
        if self.stowed_kept:
            counters.record_calls(STOWED_KEPT_STATS_NAME, self.stowed_kept, self.stowed_kept, 0.0)
        # Stock's re-trace built a new graph: records made from these nodes from now on name
        # another graph than those this re-trace made.
        identity.renew(graph)
        return new_gm


def _node_of(value: Any) -> fx.Node:
    """The node an interpreted value stands for (what ``create_arg`` makes of it)."""
    if isinstance(value, ProxyValue):
        return value.node
    raise Unsupported(f"an input interpreted to {type(value).__name__}")


def _stock_node_meta(tracer: Any, node: fx.Node, old: dict[str, Any]) -> dict[str, Any]:
    """The meta ``TracerBase.create_node`` + ``_fx`` give the node stock creates for ``node``:
    the traced fields (``fxstock.meta``), then the old meta over them (``val`` and
    ``tensor_meta`` follow from ``set_metadata``)."""
    if fx_traceback.has_preserved_node_meta():
        if fx_traceback.get_current_replay_node() is not None:
            raise Unsupported("functionalization replay node")
        # The old meta overwrites what it has: keep those fields' places only (reading
        # ``from_node`` would build the provenance record for nothing).
        current = fx_traceback.get_current_meta()
        meta = fxmeta.traced_meta(current, _get_seq_nr(node.name), placed=old)
    elif tracer.module_stack:
        meta = {"nn_module_stack": copy.copy(tracer.module_stack)}
    else:
        meta = {}
    if tracer.record_stack_traces:
        raise Unsupported("tracer records stack traces")
    if _saves_eager_input_vals(node.target):
        meta["eager_input_vals"] = _eager_input_vals(node.args, node.kwargs)
    meta.update(old)
    return meta


@functools.cache
def _saves_eager_input_vals(target: Any) -> bool:
    """``PythonKeyTracer.create_node`` records the inputs' values of this operator (one with
    the ``needs_exact_strides`` tag; the higher-order ops it also names are declined)."""
    from torch.fx.experimental.proxy_tensor import _should_save_eager_input_vals

    return isinstance(target, torch._ops.OpOverload) and _should_save_eager_input_vals(target)


def _eager_input_vals(args: Any, kwargs: Any) -> Any:
    """``PythonKeyTracer.create_node``'s ``eager_input_vals``: each input node's fake value
    (``extract_val``), None for anything else. torch 2.13 tests a value with
    ``isinstance(FakeTensor)``, 2.14 on with ``is_fake_tensor``: they agree on fake and plain
    tensors, and any other tensor class is declined."""
    from torch.fx.experimental.proxy_tensor import extract_val

    def value(v: Any) -> Any:
        if not isinstance(v, fx.Node) or "val" not in v.meta:
            return None
        val = v.meta["val"]
        if isinstance(val, torch.Tensor) and type(val) is not FakeTensor:
            if type(val) not in _STOWED:
                raise Unsupported("an input value of a tensor subclass")
            return None
        return extract_val(val)

    return fx.node.map_aggregate((args, kwargs), value)


def retrace(pass_: Any, graph_module: fx.GraphModule) -> tuple[Any, InplaceRetrace]:
    """``_ExportPassBase.call`` done in place. Raises ``Unsupported`` for what it does not model,
    and any exception with the graph as it came (the caller then runs the stock re-trace)."""
    from executorch.exir.pass_base import PassResult
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import FakeTensor

    if not getattr(pass_, "_initialized", False):
        raise Unsupported("pass not initialised")
    check_pass(pass_)
    check_graph(graph_module)
    inputs = pass_.inputs(graph_module)
    fake_tensor_mode = None
    for i in inputs:
        if isinstance(i, FakeTensor):
            if fake_tensor_mode is not None and fake_tensor_mode is not i.fake_mode:
                raise Unsupported("multiple fake tensor modes")
            fake_tensor_mode = i.fake_mode
    if fake_tensor_mode is None:
        raise Unsupported("no fake inputs")
    fake_tensor_mode.allow_non_fake_inputs = True
    pass_.tracer.fake_tensor_mode = fake_tensor_mode
    pass_.fake_tensor_mode = fake_tensor_mode
    # The pass's own attributes as they came: a failed attempt puts them back, so the stock
    # re-trace that follows starts from the same state (counters, flags; not the contents of
    # containers the pass mutates in place).
    state = dict(vars(pass_))
    depth = hasattr(pass_, "submodule_depth")
    if depth:
        pass_.submodule_depth += 1
    try:
        with fake_tensor_mode, enable_python_dispatcher():
            engine = InplaceRetrace(pass_, graph_module)
            new_gm = engine.run(tuple(inputs))
    except BaseException:
        vars(pass_).clear()
        vars(pass_).update(state)
        raise
    if depth:
        pass_.submodule_depth -= 1
    return PassResult(new_gm, True), engine


__all__ = [
    "InplaceRetrace",
    "Unsupported",
    "retrace",
    "same_value",
]
