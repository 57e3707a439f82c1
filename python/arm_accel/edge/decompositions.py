"""Replay the ``run_decompositions`` calls of the Arm edge stage without re-tracing the program.

When a call's input is the previous call's output, edited only by target swaps, the re-trace
would rebuild each node as it is: :func:`replay_program` models what it still changes (names,
provenance, tracer meta, placeholder meta, signature), with ``conv2d`` rewritten as its kernel
does (:func:`_as_convolution`) and any other rewritten node traced alone
(:mod:`arm_accel.edge.subtrace`). Anything else runs the stock call, counted under
:data:`STATS_NAME` with the reason. Why the program is stock's: design.md, "The re-trace engine".
"""

from __future__ import annotations

import copy
import functools
import operator
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    OutputSpec,
    TensorArgument,
)

from arm_accel import patches
from arm_accel.edge import cia_ops, dtype_check, export_outputs, param_meta, subtrace
from arm_accel.fxstock import meta as fxmeta
from arm_accel.fxstock import names
from arm_accel.pipeline import engine
from arm_accel.runtime import collector, deferred, eval_counter, fake_memo, provenance

STATS_NAME = "to_edge.run_decompositions"

#: The namespace ``_replace_aten_ops_with_transformed_ops`` moves preserved ops into.
EDGE_NAMESPACE = "EDGE_DO_NOT_DECOMP"
#: Namespaces of ops whose replay is modelled (checked against stock on the zoo).
NAMESPACES_MODELLED = frozenset({"aten", "quantized_decomposed", "dim_order_ops", EDGE_NAMESPACE})
#: Nodes without users the re-trace keeps (asserts); any other dead node declines.
KEPT_WITHOUT_USERS = frozenset({"aten._assert_tensor_metadata.default"})
USER_INPUT_META = frozenset({"desc", "tensor_meta", "val"})

_local = threading.local()
# replayed graph module -> the unlifted module's graph its provenance names by id(): kept alive
# so that id stays unique, as it is while stock's trace runs
_graph_ids: weakref.WeakKeyDictionary[fx.GraphModule, fx.Graph] = weakref.WeakKeyDictionary()


class _Stage:
    """One ``_gen_edge_manager_for_partitioners`` call: the last program a decomposition call
    returned and a snapshot of its nodes (to prove the next input is that output)."""

    def __init__(self) -> None:
        self.calls = 0
        self.last: ExportedProgram | None = None
        self.snapshot: export_outputs.Snapshot = []

    def swapped(self, ep: ExportedProgram) -> frozenset[str]:
        """Names of the nodes whose target changed since :meth:`remember`."""
        return frozenset(n.name for n, _ in export_outputs.edited_nodes(ep, self.snapshot) or ())

    def remember(self, ep: ExportedProgram) -> None:
        self.last = ep
        self.snapshot = export_outputs.snapshot(ep)


def _stage_stack() -> list[_Stage]:
    stack = getattr(_local, "stages", None)
    if stack is None:
        stack = _local.stages = []
    return stack


def _edited_only_by_target_swaps(ep: ExportedProgram, stage: _Stage) -> str | None:
    from executorch.exir.program._program import transform_op_to_aten_op

    if ep is not stage.last:
        return "input is not the previous call's output"
    swapped = export_outputs.edited_nodes(ep, stage.snapshot)
    if swapped is None:
        return "graph edited since the previous call"
    for node, old_target in swapped:
        if transform_op_to_aten_op.get(str(node.target)) is not old_target:
            return "graph edited since the previous call"
    return None


def _is_cia(op: torch._ops.OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _preserved_cia(op: torch._ops.OpOverload) -> bool:
    """A CompositeImplicitAutograd op the re-trace keeps as it is when the table does not hold
    it (the caller checks that): an aten op of the preservable set
    (``_split_decomp_table_to_cia_and_python_decomp`` preserves every one the table lacks)."""
    from torch._export.utils import _collect_all_valid_cia_ops_for_aten_namespace

    return op.namespace == "aten" and op in _collect_all_valid_cia_ops_for_aten_namespace()


def _conv2d_decline(node: fx.Node, table: dict[Any, Any]) -> str | None:
    """Why the re-trace may not turn the ``aten.conv2d.default`` node into the single
    ``convolution`` :func:`_as_convolution` builds, or None. The table's entry must be the one
    ``_get_decomp_for_cia`` makes for it (its C++ CompositeImplicitAutograd kernel, which
    ``_override_composite_implicit_decomp`` installs for the trace); that kernel calls
    ``convolution`` once with the arguments it was given for a batched (4-D), non-complex input,
    and first checks the bias dtype."""
    from torch._export.utils import _get_decomp_for_cia

    conv2d = torch.ops.aten.conv2d.default
    if not patches.holds("aten.conv2d_kernel"):
        return f"conv2d's kernel not read for torch {torch.__version__}"
    entry = table[conv2d]
    stock_entry = _get_decomp_for_cia(conv2d)
    if not (
        isinstance(entry, functools.partial)
        and isinstance(stock_entry, functools.partial)
        and entry.func.__code__ is stock_entry.func.__code__
        and entry.args == ()
        and entry.keywords == {"kernel": conv2d}
    ):
        return "conv2d's table entry is not its CompositeImplicitAutograd kernel"
    if node.kwargs or not 2 <= len(node.args) <= len(conv2d._schema.arguments):
        return "conv2d arguments not canonical"
    values = [a.meta.get("val") if isinstance(a, fx.Node) else a for a in node.args[:3]]
    x, weight = values[0], values[1]
    bias = values[2] if len(values) == 3 else None
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return "conv2d input or weight without a tensor value"
    if x.dim() != 4 or x.is_complex():
        return "conv2d input not a batched real tensor"
    if len(node.args) == 3 and bias is None and node.args[2] is not None:
        return "conv2d bias without a tensor value"
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype != x.dtype):
        return "conv2d bias of another dtype"
    return None


def _as_convolution(node: fx.Node) -> tuple[Any, tuple[Any, ...]]:
    """The ``convolution`` call conv2d's C++ kernel makes for ``node`` (``_conv2d_decline`` is
    None): its arguments with the schema's defaults filled in, not transposed, zero output
    padding."""
    schema = torch.ops.aten.conv2d.default._schema.arguments
    given = list(node.args) + [a.default_value for a in schema[len(node.args) :]]
    x, weight, bias, stride, padding, dilation, groups = given
    return torch.ops.aten.convolution.default, (
        x,
        weight,
        bias,
        stride,
        padding,
        dilation,
        False,
        [0, 0],
        groups,
    )


def _new_constants() -> bool | None:
    """Whether stock's new program holds a new ``constants`` dict (the table's
    ``torch.program_constants`` model); None for a source not read."""
    found = patches.variant("torch.program_constants")
    return None if found is None else found == "a new dict"


#: a graph whose ``_target_to_str`` (it reads nothing of the graph) names ops as the tracer's does
_NAMER = fx.Graph()


def _op_name(target: Any) -> str | None:
    """The name the tracer asks fx's namespace for a node of ``target`` (None: the target's
    own, ``getitem``): its packet's name through ``Graph._target_to_str`` (``__and__`` ->
    ``and``), as ``proxy_call`` asks."""
    if target is operator.getitem:
        return None
    return _NAMER._target_to_str(target.overloadpacket.__name__)


def _name_base(name: str) -> str:
    """``name`` without fx's ``_N`` suffix."""
    return name.rsplit("_", 1)[0] if name[-1:].isdigit() else name


def _flat_outputs(ep: ExportedProgram) -> bool:
    """The output node returns a flat tuple or list of the signature's outputs."""
    outputs = ep.graph.output_node().args[0]
    return isinstance(outputs, (tuple, list)) and len(outputs) == len(
        ep.graph_signature.output_specs
    )


# Program-level reasons to decline, checked in order: (holds when declining, reason).
_PROGRAM_DECLINES: tuple[tuple[Callable[[ExportedProgram], Any], str], ...] = (
    (
        lambda ep: _new_constants() is None,
        "run_decompositions' program assembly not read for this torch",
    ),
    (
        lambda ep: (
            ep.graph_signature.backward_signature is not None
            or ep.graph_signature.buffers_to_mutate
            or ep.graph_signature.user_inputs_to_mutate
        ),
        "mutations or backward signature",
    ),
    (
        lambda ep: (
            ep.graph_signature.input_tokens
            or ep.graph_signature.output_tokens
            or ep.range_constraints
        ),
        "tokens or symbolic shapes",
    ),
    (
        lambda ep: any(
            s.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.USER_INPUT)
            for s in ep.graph_signature.input_specs
        ),
        "lifted constants or custom objects",
    ),
    (
        lambda ep: (
            len(list(ep.graph_module.children()))
            or ep.graph_module._buffers
            or ep.graph_module._parameters
        ),
        "graph module owns submodules or tensors",
    ),
    (
        lambda ep: not _flat_outputs(ep),
        "output not a flat tuple of the signature's outputs",
    ),
    (
        lambda ep: any(type(s.arg) is not TensorArgument for s in ep.graph_signature.output_specs),
        "non-tensor output",
    ),
)


def decline_reason(
    ep: ExportedProgram, table: dict[Any, Any], trace_rewritten: bool = True
) -> str | None:
    """Why the re-trace of ``ep`` with ``table`` may change more than :func:`replay_program`
    models, or None. Assumes the graph came out of a re-trace (canonical args, functional).
    ``trace_rewritten``: the nodes the table decomposes may be traced alone
    (:mod:`arm_accel.edge.subtrace`); else any of them declines (but conv2d, modelled)."""
    for declines, reason in _PROGRAM_DECLINES:
        if declines(ep):
            return reason
    bases = _op_bases_or_decline(ep, table, trace_rewritten)
    if isinstance(bases, str):
        return bases
    return _placeholder_decline(ep, bases)


def _op_bases_or_decline(
    ep: ExportedProgram, table: dict[Any, Any], trace_rewritten: bool
) -> set[str] | str:
    """Why a node of ``ep`` is not modelled, or the base names of the ops the replay makes."""
    bases: set[str] = set()
    seen_op = False
    for node in ep.graph.nodes:
        if node.op == "placeholder" and seen_op:
            return "placeholder after an op"
        seen_op = node.op != "placeholder"
        if node.op in ("placeholder", "output"):
            continue
        if node.op != "call_function":
            return f"{node.op} node"
        target = node.target
        if target is operator.getitem:
            continue
        if not isinstance(target, torch._ops.OpOverload):
            return f"target {target} is not an OpOverload"
        name = str(target)
        if target.namespace not in NAMESPACES_MODELLED:
            return f"namespace {target.namespace} not modelled"
        if target._schema.is_mutable:
            inplace = _inplace_decline(node, table)
            if inplace is not None:
                return inplace
            target = _functional_variant(target)
        if target is torch.ops.aten.conv2d.default and target in table:
            conv2d = _conv2d_decline(node, table)
            if conv2d is not None:
                return conv2d
            target = torch.ops.aten.convolution.default
        elif _rewritten_by_trace(target, table):
            if not trace_rewritten:
                if target in table:
                    return f"{name} in the decomposition table"
                return f"{name} is CompositeImplicitAutograd"
            alone = subtrace.decline_reason(node)
            if alone is not None:
                return alone
        if not node.users and name not in KEPT_WITHOUT_USERS:
            return "dead node"
        if subtrace.listed(node) and not _rewritten_by_trace(target, table):
            getitems = _getitems_decline(node)
            if getitems is not None:
                return getitems
        if not _inserted_after_trace(node) and (
            "original_aten" not in node.meta or "from_node" not in node.meta
        ):
            return "node meta without original_aten/from_node"
        bases.add(_op_name(target))
    return bases


def _inserted_after_trace(node: fx.Node) -> bool:
    """An ``_assert_tensor_metadata`` node export inserted after its trace (no dispatch
    recorded it: no ``original_aten``); its args are as the inserting pass wrote them."""
    return str(node.target) in KEPT_WITHOUT_USERS and "original_aten" not in node.meta


class _Recording(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the one call it sees as the dispatcher hands it to the modes (args split per
    schema, defaults dropped), the form the tracer records."""

    call: tuple[Any, tuple[Any, ...], dict[str, Any]] | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.call = (func, args, kwargs or {})
        return func(*args, **(kwargs or {}))


def _as_dispatched(target: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
    """``args``/``kwargs`` (of nodes) as the dispatcher hands them to the tracer: the call run
    once on their fake values under :class:`_Recording`, its tensors mapped back to the nodes."""
    nodes: dict[int, fx.Node] = {}

    def value(n: fx.Node) -> Any:
        nodes[id(n.meta["val"])] = n
        return n.meta["val"]

    fake_args, fake_kwargs = fx.map_arg((args, kwargs), value)
    fake_mode = next(iter(nodes.values())).meta["val"].fake_mode
    recording = _Recording()
    with fake_mode, recording:
        target(*fake_args, **fake_kwargs)
    if recording.call is None or recording.call[0] is not target:
        raise subtrace.Declined(f"{target} did not reach the modes as itself")
    _, got_args, got_kwargs = recording.call

    def node_of(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            if id(v) not in nodes:
                raise subtrace.Declined(f"{target}: a tensor argument not the graph's")
            return nodes[id(v)]
        return v

    return (
        tuple(fx.node.map_aggregate(a, node_of) for a in got_args),
        {k: fx.node.map_aggregate(v, node_of) for k, v in got_kwargs.items()},
    )


def _getitems_decline(node: fx.Node) -> str | None:
    """Why the tracer would make other ``getitem`` nodes for ``node``'s list value than the
    graph holds, or None: it makes one per element, in order, right after ``node`` (the
    graph's must be those, none dropped)."""
    reason = f"{node.name}: its getitems are not one per element right after it"
    count = len(node.meta["val"])
    if len(node.users) != count:
        return reason
    item = node
    for index in range(count):
        item = item.next
        if item.target is not operator.getitem or item.args != (node, index):
            return reason
    return None


def _rewritten_by_trace(target: Any, table: dict[Any, Any] | None) -> bool:
    """Whether the trace rewrites a node of ``target`` (but conv2d, modelled): the table
    decomposes it, or it is a CompositeImplicitAutograd op the trace does not preserve (its
    kernel runs: ``flatten`` becomes ``view``, an eval ``dropout`` its input)."""
    if target is torch.ops.aten.conv2d.default and table is not None and target in table:
        return False
    if table is not None and target in table:
        return True
    return _is_cia(target) and not _preserved_cia(target)


def _is_mutable(target: Any) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable


def _functional_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The out-of-place op of the in-place ``op`` (``relu_`` -> ``relu``): same namespace and
    overload, the name without its trailing underscore, the same argument names, not mutable."""
    name = op._schema.name.split("::")[1]
    if not name.endswith("_") or name.endswith("__"):
        return None
    packet = getattr(getattr(torch.ops, op.namespace), name[:-1], None)
    functional = getattr(packet, op._overloadname, None) if packet is not None else None
    if not isinstance(functional, torch._ops.OpOverload) or functional._schema.is_mutable:
        return None
    if [a.name for a in functional._schema.arguments] != [a.name for a in op._schema.arguments]:
        return None
    return functional


def _inplace_decline(node: fx.Node, table: dict[Any, Any]) -> str | None:
    """Why functionalization may do more to the in-place ``node`` than call its functional
    variant on the same arguments, or None: it mutates only its first argument, a value a
    non-aliasing op made and only ``node`` reads (no graph input, no view, nobody reading the
    old or the new contents through it), and neither it nor its out-of-place variant is
    rewritten by the trace."""
    op = node.target
    name = str(op)
    functional = _functional_variant(op)
    if op in table or functional is None:
        return f"{name} is mutable"
    if _rewritten_by_trace(functional, table) or functional is torch.ops.aten.conv2d.default:
        return f"{name}: its out-of-place variant is rewritten by the trace"
    writes = [
        i
        for i, a in enumerate(op._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    ]
    mutated = node.args[0] if node.args else None
    if writes != [0] or not isinstance(mutated, fx.Node):
        return f"{name} mutates other than its first argument"
    producer = mutated.target
    if (
        mutated.op != "call_function"
        or list(mutated.users) != [node]
        or not isinstance(producer, torch._ops.OpOverload)
        or any(r.alias_info is not None for r in producer._schema.returns)
        or not isinstance(mutated.meta.get("val"), torch.Tensor)
    ):
        return f"{name} mutates a value others may read"
    return None


def _placeholder_decline(ep: ExportedProgram, bases: set[str]) -> str | None:
    """Why a placeholder's name would not survive the replay (an op base name shares it, or
    fx renames it), or None."""
    for node in ep.graph.find_nodes(op="placeholder"):
        if _name_base(node.name) in bases or node.name in bases:
            return f"placeholder {node.name} shares a name with an op"
        # export names placeholders directly; the replay's fx namespace renames builtins
        # (``input`` becomes ``input_1``)
        if names.renamed_by_fx(node.name):
            return f"placeholder {node.name} is a name fx renames"
    return None


def _dispatched(target: Any) -> Any:
    """The op object the tracer records: the one ``torch.ops`` holds now (defining more
    EDGE_DO_NOT_DECOMP ops re-creates that namespace's objects, so a graph may hold an older
    one)."""
    if not isinstance(target, torch._ops.OpOverload):
        return target
    packet = getattr(getattr(torch.ops, target.namespace), target._schema.name.split("::")[1])
    return getattr(packet, target._overloadname)


def _replayed_meta(
    old: fx.Node,
    source: fx.Node,
    target: Any,
    seq_nr: int,
    args: Any,
    kwargs: Any,
    dispatched: Any = None,
) -> dict[str, Any]:
    """The meta the tracer gives the replay of ``old``, made while it interprets ``source``
    (``old``'s copy in ``ep.module()``; for a ``getitem``, its producer's, which the tracer
    made it for) dispatching ``dispatched`` (default ``target``), in the tracer's key order:
    the traced fields (``fxstock.meta``) under ``source``'s meta, eager input values, value
    and tensor meta (none for an op that returns nothing)."""
    from torch.fx.experimental.proxy_tensor import _should_save_eager_input_vals, extract_val

    dispatched = target if dispatched is None else dispatched
    current = dict(source.meta)
    current["from_node"] = subtrace.created_from(source)
    if isinstance(dispatched, torch._ops.OpOverload):  # set_original_aten_op at dispatch
        current["original_aten"] = dispatched
    meta = fxmeta.traced_meta(current, seq_nr)
    if _should_save_eager_input_vals(target, (args, kwargs)):

        def value(v: Any) -> Any:
            return extract_val(v.meta["val"]) if isinstance(v, fx.Node) else None

        meta["eager_input_vals"] = fx.node.map_aggregate((args, kwargs), value)
    if isinstance(target, torch._ops.OpOverload) and not target._schema.returns:
        return meta
    for key in ("val", "tensor_meta"):
        if key in old.meta:
            meta[key] = old.meta[key]
    return meta


def _run_as_traced(
    old: fx.Node, source: fx.Node, target: Any, args: Any = None, kwargs: Any = None
) -> None:
    """Run ``target`` on the fake values of ``args``/``kwargs`` (default: ``old``'s) as the
    re-trace's first (metadata) pass does: exporting, with ``source``'s meta as the current
    meta. A dynamo-disabled kernel on its path annotates ``custom`` in place
    (``fx.traceback.annotate``), which the traced node then copies; this reproduces that.
    Raises if the value differs from ``old``'s."""
    from torch._export.utils import _compiling_state_context
    from torch.fx import traceback as fx_traceback

    def value(n: fx.Node) -> Any:
        return n.meta["val"]

    args = fx.map_arg(old.args if args is None else args, value)
    kwargs = fx.map_arg(old.kwargs if kwargs is None else kwargs, value)
    expected = old.meta["val"]
    with (
        expected.fake_mode,
        _compiling_state_context(),
        fx_traceback.preserve_node_meta(),
        fx_traceback.set_current_meta(source, subtrace.TRACE_PASS_NAME),
    ):
        got = target(*args, **kwargs)
    same = (got.shape, got.dtype, got.stride()) == (
        expected.shape,
        expected.dtype,
        expected.stride(),
    )
    if not same:
        raise ValueError(f"{old.name}: value {got.shape} differs from the graph's")


def _traced_meta(traced: fx.Node, source: fx.Node, seq_nr: int) -> dict[str, Any]:
    """The meta of a node the small program's trace made (:mod:`.subtrace`), as the full
    trace would have made it: its first provenance level names ``source`` (the rewritten
    node's copy in ``ep.module()``), and it takes the full trace's sequence number."""
    meta = dict(traced.meta)
    if "from_node" in meta:
        meta["from_node"] = subtrace.created_from(source)
    if "seq_nr" in meta:
        meta["seq_nr"] = seq_nr
    return meta


def _drop_dead(graph: fx.Graph) -> None:
    """Remove the nodes left without users (but impure ones), last first, as the trace's
    dead-code elimination does: a rewritten node may no longer read what it read (``type_as``
    of the same dtype returns its input)."""
    for node in reversed(graph.nodes):
        if node.op == "call_function" and not node.users and not node.is_impure():
            graph.erase_node(node)


def replay_program(
    ep: ExportedProgram,
    swapped: frozenset[str] = frozenset(),
    table: dict[Any, Any] | None = None,
    stock: Any = None,
) -> ExportedProgram:
    """The program ``ep.run_decompositions(table)`` returns when :func:`decline_reason` is None,
    built without tracing: stock's own unlift (``ep.module()``) gives the first provenance
    level and the param/buffer metadata, the tracer's copy rules the rest. A ``conv2d`` the
    table holds becomes the ``convolution`` its kernel calls (:func:`_as_convolution`), run on
    fake values as a swapped node is; the other nodes the table decomposes are traced alone
    with ``stock`` (the unwrapped ``run_decompositions``, see :mod:`.subtrace`) and grafted in
    their place. ``swapped`` names
    the nodes whose target changed since the trace that made ``ep``: only they run (on fake
    values, see :func:`_run_as_traced`); every other node would compute as last time."""
    mod = ep.module()
    unlifted = eval_counter.position()
    placeholder_meta = _param_buffer_meta(mod)
    seq_nr = torch.autograd._get_sequence_nr() - 1
    with eval_counter.scratch():  # modules of the subtraces only: stock makes none of them
        traced = _trace_rewritten(ep, table, stock)
    graph = _replay_graph(ep, mod, placeholder_meta, seq_nr, traced, table, swapped)
    if traced is not None:
        _drop_dead(graph)
    # Stock's compiles after its unlift, but the last two (design.md, "The eval counter").
    eval_counter.take(unlifted + DECOMPOSITION_NUMBERS - 2 - eval_counter.position())
    return _program_of(ep, mod, graph)


#: The ``<eval_with_key>`` numbers stock's ``run_decompositions`` of a program without
#: submodules takes after its unlift (``ep.module()``): the aten trace's two modules, the
#: runtime-assertion, constant-registration, placeholder-naming and copy-removal passes'
#: recompiles, one more ``forward`` compile, and last the ``ExportedProgram``'s module. The
#: replay's :func:`_program_of` takes the last two (its root, the program's module).
DECOMPOSITION_NUMBERS = 8


def _param_buffer_meta(mod: fx.GraphModule) -> dict[str, dict[str, Any]]:
    """The meta the trace gives each parameter and buffer placeholder (by target)."""
    from torch._export.utils import _collect_param_buffer_metadata

    placeholder_meta = _collect_param_buffer_metadata(mod)
    for meta in placeholder_meta.values():
        meta.pop("nn_module_stack", None)
        meta.pop("stack_trace", None)
    return placeholder_meta


def _trace_rewritten(
    ep: ExportedProgram, table: dict[Any, Any] | None, stock: Any
) -> subtrace.SubTrace | None:
    """The nodes the table decomposes (but conv2d) traced alone (:mod:`.subtrace`), or None
    when there are none; declines when a node it makes would be named as a placeholder is."""
    rewritten = [
        n
        for n in ep.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
        if _rewritten_by_trace(n.target, table)
    ]
    if not rewritten:
        return None
    traced = subtrace.trace_rewritten(ep, rewritten, table or {}, stock or _stock_method())
    taken = {_name_base(n.name) for n in ep.graph.find_nodes(op="placeholder")}
    taken |= {n.name for n in ep.graph.find_nodes(op="placeholder")}
    for made in traced.made.values():
        for t in made:
            if _op_name(t.target) in taken:
                raise subtrace.Declined(f"a placeholder shares a name with {t.target}")
    return traced


def _replay_graph(
    ep: ExportedProgram,
    mod: fx.GraphModule,
    placeholder_meta: dict[str, dict[str, Any]],
    seq_nr: int,
    traced: subtrace.SubTrace | None,
    table: dict[Any, Any] | None,
    swapped: frozenset[str],
) -> fx.Graph:
    """``ep``'s graph rebuilt node by node as the trace makes it, with ``traced``'s nodes
    grafted in place of the nodes it rewrote (see :func:`replay_program`)."""
    descs = _input_descs(ep)
    by_name = {n.name: n for n in mod.graph.nodes}
    conv2d = torch.ops.aten.conv2d.default
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    grafted: dict[fx.Node, fx.Node] = {}
    for old in ep.graph.nodes:
        if old in env:  # a getitem of a rewritten node: its value was grafted
            continue
        if traced is not None and old in traced.made:
            _graft(graph, old, traced, env, grafted, by_name, seq_nr)
            continue
        if old.op == "placeholder":
            new = graph.placeholder(old.name)
            new.meta = _placeholder_meta(old, placeholder_meta, descs[old.name])
        elif old.op == "call_function":
            target, old_args = old.target, old.args
            decomposed = table is not None and target is conv2d and target in table
            if decomposed:
                target, old_args = _as_convolution(old)
            elif _is_mutable(target):  # functionalized: its out-of-place variant
                target = _functional_variant(target)
                decomposed = True
            old_kwargs = old.kwargs
            if _inserted_after_trace(old):
                old_args, old_kwargs = _as_dispatched(target, old_args, old_kwargs)
            # fx's namespace renumbers the names in graph order, as in the traced graph
            name = _op_name(target)
            args = fx.map_arg(old_args, env.__getitem__)
            kwargs = fx.map_arg(old_kwargs, env.__getitem__)
            target = _dispatched(target)
            if decomposed or old.name in swapped:
                _run_as_traced(old, by_name[old.name], target, old_args, old_kwargs)
            new = graph.create_node("call_function", target, args, kwargs, name)
            source, op = by_name[old.name], target
            if target is operator.getitem:  # made while its producer's output was tracked
                source, op = by_name[old.args[0].name], env[old.args[0]].target
            new.meta = _replayed_meta(old, source, target, seq_nr, args, kwargs, op)
        else:
            new = graph.output(fx.map_arg(old.args[0], env.__getitem__))
            new.meta = {"from_node": by_name[old.name].meta["from_node"]}
        env[old] = new
    return graph


def _input_descs(ep: ExportedProgram) -> dict[str, tuple[str | None, Any]]:
    """Per placeholder name: its parameter/buffer target (None for a user input) and the
    ``desc`` the trace gives it (aot_autograd's input descriptors: parameters and buffers by
    target, user inputs by position)."""
    from torch._functorch._aot_autograd.descriptors import (
        BufferAOTInput,
        ParamAOTInput,
        PlainAOTInput,
    )

    descs: dict[str, tuple[str | None, Any]] = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            descs[spec.arg.name] = (None, PlainAOTInput(sum(t is None for t, _ in descs.values())))
        elif spec.kind == InputKind.PARAMETER:
            descs[spec.arg.name] = (spec.target, ParamAOTInput(spec.target))
        else:
            descs[spec.arg.name] = (spec.target, BufferAOTInput(spec.target))
    return descs


def _placeholder_meta(
    old: fx.Node, placeholder_meta: dict[str, dict[str, Any]], desc: tuple[str | None, Any]
) -> dict[str, Any]:
    """The meta the trace gives placeholder ``old``: value, tensor meta and ``desc``; a
    parameter's or buffer's then updated from its unlifted node's
    (``_populate_param_buffer_metadata_to_new_gm``)."""
    target, descriptor = desc
    if target is None:
        meta = {k: v for k, v in old.meta.items() if k in USER_INPUT_META}
        meta.setdefault("desc", descriptor)
        return meta
    collected = placeholder_meta[target]
    if "val" not in collected or "tensor_meta" not in collected:
        raise subtrace.Declined(f"{old.name}: its unlifted node has no value")
    meta = {"val": None, "tensor_meta": None, "desc": descriptor}
    meta.update(collected)
    return meta


def _graft(
    graph: fx.Graph,
    old: fx.Node,
    traced: subtrace.SubTrace,
    env: dict[fx.Node, fx.Node],
    grafted: dict[fx.Node, fx.Node],
    by_name: dict[str, fx.Node],
    seq_nr: int,
) -> None:
    """Append the nodes ``traced`` made for the rewritten node ``old`` (``by_name``: the nodes
    of ``ep.module()``) and map what the rest of the graph reads of ``old`` in ``env``."""

    def carried(value: fx.Node) -> fx.Node:
        if value.op == "placeholder":
            return env[traced.inputs[value]]
        return grafted[value]

    for t in traced.made[old]:
        name = _op_name(t.target)
        args, kwargs = fx.map_arg(t.args, carried), fx.map_arg(t.kwargs, carried)
        grafted[t] = graph.create_node("call_function", t.target, args, kwargs, name)
        grafted[t].meta = _traced_meta(t, by_name[old.name], seq_nr)
    # what the rest of the graph reads: the node, or the getitems of its list
    for reader in list(old.users) if subtrace.listed(old) else [old]:
        env[reader] = carried(traced.values[reader])


def _program_of(ep: ExportedProgram, mod: fx.GraphModule, graph: fx.Graph) -> ExportedProgram:
    """The ExportedProgram of the replayed ``graph``: ``ep``'s signature, state, constants
    and call graph, updated as ``run_decompositions`` updates them."""
    from torch.export.exported_program import (
        _get_updated_module_call_graph,
        _get_updated_range_constraints,
    )

    sig = ep.graph_signature
    out = graph.output_node()
    gm = fx.GraphModule(torch.nn.Module(), graph)
    _graph_ids[gm] = mod.graph
    new_sig = ExportGraphSignature(
        input_specs=[copy.copy(s) for s in sig.input_specs],
        output_specs=[
            OutputSpec(s.kind, TensorArgument(node.name), s.target)
            for s, node in zip(sig.output_specs, out.args[0], strict=True)
        ],
    )
    gm.meta.update(ep.graph_module.meta)
    return ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=new_sig,
        state_dict=dict(ep.state_dict),
        range_constraints=_get_updated_range_constraints(gm, ep.range_constraints),
        module_call_graph=_get_updated_module_call_graph(
            ep.graph_module, ep.graph_signature, gm, new_sig, ep.module_call_graph
        ),
        example_inputs=ep.example_inputs,
        constants=dict(ep.constants) if _new_constants() else ep.constants,
    )


def _stock_method() -> Any:
    """The unwrapped ``ExportedProgram.run_decompositions`` (ours wraps it while installed)."""
    try:
        return patches.original("edge.decompositions.run")
    except KeyError:
        return ExportedProgram.run_decompositions


def _decompose(
    stage: _Stage, index: int, ep: ExportedProgram, table: Any, triton: bool, stock: Any
) -> ExportedProgram:
    """One decomposition call of the stage: replayed when provably a no-op, else stock; with
    acceleration on, either builds its provenance records sharing their ancestors."""
    from arm_accel.control import counters, switch

    if not switch.is_enabled():
        return stock(ep, table, triton)
    t0 = time.perf_counter()
    with (
        provenance.sharing(),
        fake_memo.dispatching(),
        engine.deferring_recompiles(),
        cia_ops.collecting_once(),
        param_meta.looking_up_once(),
    ):
        result = _decompose_sharing(stage, index, ep, table, triton, stock)
    # What the call returns gets its code when first used, as every module the call built
    # (the stage's last result gets it when the stage ends).
    if patches.installed("edge.provenance"):
        counters.record_call(provenance.STATS_NAME, time.perf_counter() - t0, accelerated=True)
    return result


def _decompose_sharing(
    stage: _Stage, index: int, ep: ExportedProgram, table: Any, triton: bool, stock: Any
) -> ExportedProgram:
    """:func:`_decompose` with acceleration on, provenance records shared (the replay's unlift
    and the stock call's trace alike, see :mod:`arm_accel.runtime.provenance`)."""
    from arm_accel.control import counters, switch

    t0 = time.perf_counter()
    reason: str | None
    if table is None or triton:
        reason = "default table or decompose_custom_triton_ops"
    elif index == 0:  # the functionalization of the user's program
        reason = export_outputs.edited_reason(ep) or decline_reason(ep, table)
    else:
        reason = _edited_only_by_target_swaps(ep, stage) or decline_reason(ep, table)
    failure: Exception | None = None
    if reason is None:
        numbers = eval_counter.position()
        try:
            result = replay_program(ep, stage.swapped(ep), table, stock)
        except subtrace.Declined as exc:  # found only once the rewritten nodes were traced
            reason = str(exc)
            eval_counter.rewind(numbers)  # the stock call takes them
        except Exception as exc:  # never wrong: any surprise runs the stock call
            failure = exc
            reason = f"replay failed: {exc!r}"
            eval_counter.rewind(numbers)
        else:
            counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=True)
            return result
    if failure is None:  # a decline by design: counted, not logged as a warning
        counters.record_decline(STATS_NAME, reason)
    else:
        counters.record_fallback(STATS_NAME, reason)
    result = stock(ep, table, triton)
    if failure is not None and switch.strict():
        # stock succeeded where the replay failed: a fault of ours, not of the program
        raise RuntimeError(f"arm_accel: {STATS_NAME} replay failed: {failure!r}") from failure
    counters.record_call(STATS_NAME, time.perf_counter() - t0, accelerated=False, retraces=1)
    return result


def stage(stock: Any) -> Any:
    """``_gen_edge_manager_for_partitioners``: the edge stage, whose decomposition calls
    :func:`decomposition_call` counts and replays (the patch table's ``edge.decompositions``)."""

    @functools.wraps(stock)
    def _gen_edge_manager_for_partitioners(*args: Any, **kwargs: Any) -> Any:
        stack = _stage_stack()
        if not stack:
            dtype_check.forget()  # a lowering starts
        stack.append(_Stage())
        # The code generated in the collector's scope too: a full collection the scope put
        # off would otherwise run on its first allocations after it.
        with collector.lowering():
            try:
                return stock(*args, **kwargs)
            finally:
                last = stack.pop().last
                # The one call result that left the stage (``_generate_edge_program``'s
                # input) has its code, as stock's; the others were only the next call's input.
                if last is not None:
                    deferred.materialize(last.graph_module)

    return _gen_edge_manager_for_partitioners


def decomposition_call(stock: Any) -> Any:
    """``ExportedProgram.run_decompositions``: inside the edge stage, :func:`_decompose`."""

    @functools.wraps(stock)
    def run_decompositions(
        self: ExportedProgram,
        decomp_table: dict[Any, Any] | None = None,
        decompose_custom_triton_ops: bool = False,
    ) -> ExportedProgram:
        stack = _stage_stack()
        if not stack:
            return stock(self, decomp_table, decompose_custom_triton_ops)
        stage = stack[-1]
        stage.calls += 1
        result = _decompose(
            stage, stage.calls - 1, self, decomp_table, decompose_custom_triton_ops, stock
        )
        stage.remember(result)
        return result

    return run_decompositions
