"""Recompiles deferred until their code is used.

Inside the Arm pipeline and the edge stage's calls nothing reads a module's code between one
recompile and the next (llama4: 204 recompiles, none read). A recompile here does the cheap part
at once (pytree specs, call wrapper) and keeps a :class:`Snapshot` of what the code would be
generated from; the code is generated on first use (``forward``, ``code``, pickling, ...) or when
the module leaves the pipeline, as stock's recompile would have generated it then. Declines and
the one error-path difference: design.md, "The re-trace engine".
"""

from __future__ import annotations

import copy
import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import fx
from torch.fx import graph_module as fx_graph_module
from torch.fx.experimental import _config as fx_experimental_config
from torch.fx.graph import CodeGen, PythonCode, _PyTreeCodeGen

from arm_accel.runtime import codegen, eval_counter

#: The attributes stock's recompile sets on the module that are read back as they were set.
LAZY_ATTRIBUTES = ("_code", "_lineno_map", "_prologue_start")
_CODEGENS = (CodeGen, _PyTreeCodeGen)
_OWNER = "_arm_accel_owner"
#: On the module's own class (each GraphModule has one): the snapshot its pending code is to be
#: generated from. Not on the module (its dict is copied by deepcopy and pickling) and not in a
#: table (the snapshot references the graph, which references the module).
_PENDING = "_arm_accel_pending"

_lock = threading.RLock()
counts = {"deferred": 0, "generated": 0, "from_snapshot": 0}


@dataclass(eq=False)
class Snapshot:
    """What stock's recompile would generate the code from, taken at the recompile."""

    graph: fx.Graph
    codegen: Any
    pytree_info: Any
    co_fields: dict[str, Any]
    key: tuple[Any, ...]
    alive: list[Any]
    custom: dict[fx.Node, dict[Any, Any]]
    #: The ``<eval_with_key>.N`` number stock's recompile would have compiled the code under
    #: (taken from torch's counter at the recompile).
    eval_id: int
    code: PythonCode | None = field(default=None)


@functools.cache
def _deferrable_bases() -> tuple[type, ...]:
    """GraphModule, and torch.export's unlifted module: ``_StatefulGraphModule`` adds only an
    ``__init__`` (two attributes the recompile neither reads nor sets) and a metaclass that
    hides the constructor."""
    try:
        from torch.export._unlift import _StatefulGraphModule
    except ImportError:  # another torch: its unlifted modules recompile at once
        return (fx.GraphModule,)
    return (fx.GraphModule, _StatefulGraphModule)


def deferrable(gm: fx.GraphModule) -> bool:
    """Whether a recompile of ``gm`` may be deferred: a plain ``GraphModule`` (or torch.export's
    ``_StatefulGraphModule``) without GraphModule children, a code generator modelled, no meta
    shown in the code (``FX_GRAPH_SHOW_META``), no profiler metadata."""
    cls = type(gm)
    # Every GraphModule has a class of its own (``GraphModule.__new__``), named by __init__.
    if cls.__qualname__.split(".")[-1] != "GraphModuleImpl" or (
        cls.__mro__[1] not in _deferrable_bases()
    ):
        return False
    graph = gm.__dict__.get("_graph")
    if graph is None or type(graph._codegen) not in _CODEGENS:
        return False
    if fx_experimental_config.enrich_profiler_metadata:
        return False
    if codegen.shows_meta() or not codegen.generator_modelled():
        return False
    return not any(isinstance(m, fx.GraphModule) for m in gm._modules.values())


def _co_fields(graph: fx.Graph) -> dict[str, Any]:
    return dict(graph._co_fields) if hasattr(graph, "_co_fields") else {}


#: On the graph: the ``custom`` copies of its last snapshot, to be shared by the next.
_CUSTOM_ATTR = "_arm_accel_custom"


def snapshot(graph: fx.Graph, eval_id: int) -> Snapshot:
    key, alive = codegen.source_key(graph)
    custom = _custom_copies(graph)
    setattr(graph, _CUSTOM_ATTR, custom)
    gen = graph._codegen
    return Snapshot(
        graph,
        gen,
        getattr(gen, "pytree_info", None),
        _co_fields(graph),
        key,
        alive,
        custom,
        eval_id,
    )


def _custom_copies(graph: fx.Graph) -> dict[fx.Node, dict[Any, Any]]:
    """A copy of each node's ``meta["custom"]``; where the last snapshot's copy holds the same
    keys and value objects in the same order, that copy (what a copy now would be; shared, a
    dead module's snapshot holds no copy of its own for the collector)."""
    previous: dict[fx.Node, dict[Any, Any]] = getattr(graph, _CUSTOM_ATTR, None) or {}
    copies: dict[fx.Node, dict[Any, Any]] = {}
    for node in graph.nodes:
        custom = node.meta.get("custom")
        if not custom:
            continue
        shared = previous.get(node)
        if shared is None or not isinstance(custom, dict) or not _same_items(shared, custom):
            shared = dict(custom)
        copies[node] = shared
    return copies


def _same_items(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    return len(a) == len(b) and all(
        ka is kb and va is vb for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
    )


def _matches(graph: fx.Graph, snap: Snapshot) -> bool:
    """The graph is as the snapshot recorded it (so its code is the snapshot's)."""
    gen = graph._codegen
    return (
        graph is snap.graph
        and gen is snap.codegen
        and getattr(gen, "pytree_info", None) is snap.pytree_info
        and _co_fields(graph) == snap.co_fields
        and codegen.source_key(graph)[0] == snap.key
    )


def rebuild(snap: Snapshot) -> fx.Graph:
    """A graph whose generated code is the snapshot's: its nodes, names, args, types and the
    meta the generator reads, as they were."""
    graph = fx.Graph()
    gen = snap.codegen
    if getattr(gen, "pytree_info", None) is not snap.pytree_info:
        gen = copy.copy(gen)  # the generator as it was, with the pytree info it had then
        gen.pytree_info = snap.pytree_info
    graph._codegen = gen
    if snap.co_fields:
        graph._co_fields = dict(snap.co_fields)
    env: dict[fx.Node, fx.Node] = {}
    for entry, (node, args, kwargs) in zip(snap.key, snap.alive, strict=True):
        _, name, op, target, _, _, type_, stack_trace, _, recompute, ac_graph_id = entry[:11]
        wrapped, autograd_backward, boxed_arg_indices = entry[11:]
        if isinstance(target, tuple):  # ("str", name): how the key holds string targets
            target = target[1]
        new = graph.create_node(
            op, target, fx.map_arg(args, env.__getitem__), fx.map_arg(kwargs, env.__getitem__),
            name=name, type_expr=type_,
        )  # fmt: skip
        new.name = name  # the namespace keeps a legal unique name; set it as it was anyway
        for key, value in (
            ("stack_trace", stack_trace),
            ("custom", snap.custom.get(node)),
            ("recompute", recompute),
            ("ac_graph_id", ac_graph_id),
            ("is_wrapped", wrapped),
            ("autograd_backward", autograd_backward),
            ("boxed_arg_indices", boxed_arg_indices),
        ):
            if value is not None:
                new.meta[key] = value
        env[node] = new
    return graph


def _generate(gm: fx.GraphModule, snap: Snapshot) -> PythonCode:
    """The code stock's recompile generated when the snapshot was taken."""
    graph = gm.__dict__.get("_graph")
    if graph is None or not _matches(graph, snap):
        counts["from_snapshot"] += 1
        graph = rebuild(snap)
    counts["generated"] += 1
    # Generating re-files the graph's find_nodes index; stock's did that at the recompile
    # (so did ours: ``engine.recompile``), not now: the live graph's index is kept.
    buckets = graph._find_nodes_lookup_table.table
    kept = {key: list(bucket) for key, bucket in buckets.items()}
    try:
        return graph.python_code(root_module="self", record_func=False)
    finally:
        for key, nodes in kept.items():
            bucket = buckets[key]
            bucket.clear()
            bucket.update(dict.fromkeys(nodes))


def _install(gm: fx.GraphModule, code: PythonCode, snap: Snapshot) -> None:
    """What stock's recompile sets from the generated code."""
    d = gm.__dict__
    d["_code"] = code.src
    d["_lineno_map"] = code._lineno_map
    d["_prologue_start"] = code._prologue_start
    type(gm).forward = _compile(code, snap)


def _compile(code: PythonCode, snap: Snapshot) -> Any:
    """``forward`` compiled from the code, under the number reserved for it (so the file name
    of its frames, which traces through it record in stack traces, is stock's)."""
    with eval_counter.numbered(snap.eval_id):
        # stock's ``_forward_from_src`` itself (not a memo that may hand back a function
        # compiled under another number)
        return fx_graph_module._method_from_src(
            method_name="forward", src=code.src, globals=code.globals, co_fields=snap.co_fields
        )


def pending(gm: fx.GraphModule) -> Snapshot | None:
    """The snapshot ``gm``'s pending code is to be generated from, if any."""
    return vars(type(gm)).get(_PENDING)


def _take(gm: fx.GraphModule) -> Snapshot | None:
    snap = pending(gm)
    if snap is not None:
        setattr(type(gm), _PENDING, None)
    return snap


def materialize(gm: fx.GraphModule) -> None:
    """Generate and install ``gm``'s pending code (nothing when none is pending)."""
    with _lock:
        snap = _take(gm)
        if snap is None:
            return
        code = _generate(gm, snap)
        _install(gm, code, snap)
        snap.code = code


def drop(gm: fx.GraphModule) -> None:
    """Forget ``gm``'s pending code: a stock recompile is about to replace it."""
    with _lock:
        _take(gm)


def code_of(gm: fx.GraphModule, snap: Snapshot) -> PythonCode:
    """What the recompile that took ``snap`` returned."""
    with _lock:
        if pending(gm) is snap:
            materialize(gm)
        if snap.code is None:  # superseded by a later recompile before it was used
            snap.code = _generate(gm, snap)
        return snap.code


class DeferredCode:
    """The value of a deferred ``recompile()``: stock's ``PythonCode``, generated on use."""

    def __init__(self, gm: fx.GraphModule, snap: Snapshot) -> None:
        self._gm = gm
        self._snap = snap

    def __getattr__(self, name: str) -> Any:
        return getattr(code_of(self._gm, self._snap), name)


class _LazyAttribute:
    """A module attribute stock's recompile sets: generates pending code before it is read."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)
        materialize(obj)
        try:
            return obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = value

    def __delete__(self, obj: Any) -> None:
        try:
            del obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None


class _LazyForward:
    """``forward`` of a module with pending code (its class is its own, as for every
    GraphModule): compiled on first access, through the instance or the class."""

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        cls = objtype if objtype is not None else type(obj)
        owner = obj
        if owner is None:
            ref = vars(cls).get(_OWNER)
            owner = ref() if ref is not None else None
        if owner is not None:
            materialize(owner)
        fn = vars(cls).get("forward")
        if fn is self:
            raise AttributeError("forward")
        return fn if obj is None else fn.__get__(obj, cls)


_FORWARD = _LazyForward()


def _make_lazy(gm: fx.GraphModule) -> None:
    cls = type(gm)
    for name in LAZY_ATTRIBUTES:
        if not isinstance(vars(cls).get(name), _LazyAttribute):
            setattr(cls, name, _LazyAttribute(name))
    setattr(cls, _OWNER, weakref.ref(gm))
    cls.forward = _FORWARD  # type: ignore[assignment]


def _wrap_call(cls: type) -> None:
    """Stock recompile's call wrapper (``_WrappedCall``), installed as stock installs it."""
    cls_call = cls.__call__ if "__call__" in vars(cls) else None
    if "_wrapped_call" not in vars(cls):
        cls._wrapped_call = fx_graph_module._WrappedCall(cls, cls_call)  # type: ignore[attr-defined]

    def call_wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._wrapped_call(self, *args, **kwargs)

    cls.__call__ = call_wrapped  # type: ignore[method-assign]


def defer(gm: fx.GraphModule) -> DeferredCode:
    """Stock's recompile with the code generation deferred (``deferrable(gm)`` holds); the
    code's ``<eval_with_key>.N`` number is taken now, as stock's compile takes it."""
    graph = gm._graph
    if isinstance(graph._codegen, _PyTreeCodeGen):
        gm._in_spec = graph._codegen.pytree_info.in_spec
        gm._out_spec = graph._codegen.pytree_info.out_spec
    snap = snapshot(graph, eval_counter.take())
    _make_lazy(gm)
    _wrap_call(type(gm))
    with _lock:
        setattr(type(gm), _PENDING, snap)
        counts["deferred"] += 1
    return DeferredCode(gm, snap)


def reducer(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``GraphModule.__reduce__`` / ``__reduce_package__``: they copy the module's dict
    (``_code`` included) before they recompile, so pending code is generated first."""

    @functools.wraps(stock)
    def reduce(self: Any, *args: Any) -> Any:
        materialize(self)
        return stock(self, *args)

    return reduce
