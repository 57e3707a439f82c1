"""Which operators a pass's re-trace passes through untouched, read from its ``call_operator``.

A ``call_operator`` that is the base one (``ExportPass`` / ``ArmPass``), or that opens with a
test of the operator alone handing it to the base one (:func:`_guard`), ends in ``_fx`` with the
node's own target, args, kwargs and meta for the operators the test lets through; the in-place
re-trace then claims such a node without running the call chain. Same claim, fewer Python calls.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import fx

from arm_accel import patches


def _base_call_operators() -> frozenset[Any]:
    from executorch.backends.arm._passes.arm_pass import ArmPass
    from executorch.exir.pass_base import ExportPass, _ExportPassBase

    return frozenset(
        vars(k)["call_operator"]
        for k in (ArmPass, ExportPass, _ExportPassBase)
        if "call_operator" in vars(k)
    )


def _always_own_path() -> frozenset[Any]:
    from executorch.exir.dialects._ops import ops as exir_ops

    # ``ArmPass.call_operator``'s ``ops_without_quantized_fake_kernel``.
    return frozenset({exir_ops.edge.aten.bmm.default, exir_ops.edge.aten.leaky_relu.default})


#: ``call_operator`` s (qualified name: the patch table's model) that hand every operator to
#: the base one with its arguments rebuilt unchanged (``map_args``) on the graphs their
#: condition accepts: ``ScalarToTensorPass`` turns a Python scalar passed for a ``Tensor``
#: argument into a tensor, so only where no node has one; ``SymToTensorPass`` turns symbolic
#: scalars into tensors, and ``check_graph`` declines every graph holding a symbol. A changed
#: source is not trusted.
_REBUILD_UNCHANGED: dict[str, tuple[str, Callable[[fx.GraphModule], bool] | None]] = {
    "executorch.exir.passes.scalar_to_tensor_pass.ScalarToTensorPass.call_operator": (
        "exir.scalar_to_tensor",
        lambda graph_module: not has_scalar_to_coerce(graph_module),
    ),
    "executorch.exir.passes.sym_to_tensor_pass.SymToTensorPass.call_operator": (
        "exir.sym_to_tensor",
        None,
    ),
}


def _rebuilds_unchanged(fn: Any, graph_module: fx.GraphModule | None) -> bool:
    entry = _REBUILD_UNCHANGED.get(f"{fn.__module__}.{fn.__qualname__}")
    if entry is None or not patches.holds(entry[0]):
        return False
    condition = entry[1]
    return condition is None or (graph_module is not None and condition(graph_module))


def has_scalar_to_coerce(graph_module: fx.GraphModule) -> bool:
    """Some operator node passes a Python scalar for a ``Tensor`` argument (what
    ``ScalarToTensorPass`` coerces), read with the pass's own ``map_args`` and its test."""
    import operator

    from executorch.exir.dialects.edge._ops import EdgeOpOverload
    from executorch.exir.pass_base import map_args

    found: list[bool] = []

    def probe(value: Any, arg: Any) -> Any:
        if isinstance(value, (float, int, bool)) and isinstance(arg.type, torch.TensorType):
            found.append(True)
        return value

    for node in graph_module.graph.nodes:
        target = node.target
        if node.op != "call_function" or target is operator.getitem:
            continue
        if isinstance(target, (torch._ops.OpOverload, EdgeOpOverload)):
            map_args(target, probe, node.args, node.kwargs)
            if found:
                return True
    return False


def _defining(cls: type, start: int = 0) -> tuple[int, Any] | None:
    """(MRO index, function) of the first ``call_operator`` from ``cls.__mro__[start]`` on."""
    mro = cls.__mro__
    for i in range(start, len(mro)):
        fn = vars(mro[i]).get("call_operator")
        if fn is not None:
            return i, fn
    return None


def _is_super_call(stmt: ast.stmt, func: ast.FunctionDef) -> bool:
    """``stmt`` is ``return super().call_operator(op, args, kwargs, meta[, updated])`` with
    the function's own parameters (extra ones only where they come in False)."""
    params = [a.arg for a in func.args.args]
    op, args, kwargs, meta = params[1:5]
    extra = params[5:]
    # Defaults of the extra parameters: ``updated`` must come in False (the interpreter never
    # passes it) for ``super()`` to see what it sees without it.
    defaults = dict(zip(reversed(params), reversed(func.args.defaults), strict=False))
    if not isinstance(stmt, ast.Return):
        return False
    call = stmt.value
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "call_operator"
        and isinstance(call.func.value, ast.Call)
        and isinstance(call.func.value.func, ast.Name)
        and call.func.value.func.id == "super"
        and not call.func.value.args
    ):
        return False
    if not all(isinstance(a, ast.Name) for a in call.args):
        return False
    passed = [a.id for a in call.args if isinstance(a, ast.Name)]
    if passed[:4] != [op, args, kwargs, meta]:
        return False
    for name in passed[4:] + [k.arg or "" for k in call.keywords]:
        default = defaults.get(name)
        if name not in extra or not (isinstance(default, ast.Constant) and not default.value):
            return False
    return all(isinstance(k.value, ast.Name) and k.value.id == k.arg for k in call.keywords)


def _reads_only_op(expr: ast.expr, op: str, self_: str, globals_: dict[str, Any]) -> bool:
    """``expr`` reads nothing but the operator, the pass's attributes and module globals, with
    no call but ``isinstance``: its value depends on the operator alone, and reading it changes
    nothing."""
    if globals_.get("isinstance", isinstance) is not isinstance:
        return False
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            if node.id not in (op, self_, "isinstance") and node.id not in globals_:
                return False
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id == "isinstance"):
                return False
            if node.keywords:
                return False
        elif not isinstance(
            node,
            (
                ast.Attribute, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Constant, ast.Tuple,
                ast.Load, ast.And, ast.Or, ast.Not, ast.In, ast.NotIn, ast.Eq, ast.NotEq,
                ast.Is, ast.IsNot,
            ),
        ):  # fmt: skip
            return False
    return True


def _exits(block: list[ast.stmt]) -> bool:
    """The block never falls through (its last statement returns or raises)."""
    return bool(block) and isinstance(block[-1], (ast.Return, ast.Raise))


@dataclass(frozen=True)
class _Guard:
    """The test a ``call_operator`` opens with: the operator goes to ``super()`` untouched
    iff ``test`` evaluates to ``passes``."""

    test: Any  # compiled expression of the operator (and the pass's attributes)
    passes: bool
    op: str
    self_: str
    globals_: dict[str, Any]
    reads_self: bool  # the pass's attributes may change while it runs: not cached


@cache
def _guard(fn: Any) -> _Guard | None:
    """How ``fn`` (a ``call_operator``) hands operators to ``super()`` untouched, read from its
    source, or None when it does not in one of the two forms::

        if TEST [or ...]:                       # TEST true: passed through
            return super().call_operator(op, args, kwargs, meta[, updated])

        if TEST:                                # TEST false: passed through
            ...                                 # (a block that returns or raises)
        return super().call_operator(op, args, kwargs, meta)

    with TEST reading the operator only (:func:`_reads_only_op`)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    func = tree.body[0] if tree.body else None
    if not isinstance(func, ast.FunctionDef) or func.decorator_list:
        return None
    params = [a.arg for a in func.args.args]
    # No closure but the ``__class__`` cell ``super()`` reads.
    if len(params) < 5 or func.args.vararg or func.args.kwarg:
        return None
    if set(fn.__code__.co_freevars) - {"__class__"}:
        return None
    self_, op = params[:2]
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body or not isinstance(body[0], ast.If):
        return None
    first = body[0]
    test, passes = first.test, None
    if len(first.body) == 1 and _is_super_call(first.body[0], func):
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
            test = test.values[0]  # ``A or B``: A true returns before B is read
        passes = True
    elif len(body) == 2 and not first.orelse and _exits(first.body):
        if _is_super_call(body[1], func):
            passes = False
    if passes is None or not _reads_only_op(test, op, self_, fn.__globals__):
        return None
    code = compile(ast.Expression(test), inspect.getsourcefile(fn) or "<guard>", "eval")
    reads_self = any(isinstance(n, ast.Name) and n.id == self_ for n in ast.walk(test))
    return _Guard(code, passes, op, self_, fn.__globals__, reads_self)


def passthrough(
    pass_: Any, graph_module: fx.GraphModule | None = None
) -> Callable[[Any], bool] | None:
    """The test "this node's operator goes through the pass's ``call_operator`` untouched" in
    a re-trace of ``graph_module``, or None when nothing is known to."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    own = _always_own_path()
    operators = (torch._ops.OpOverload, EdgeOpOverload)
    cls = type(pass_)
    found = _defining(cls)
    if found is None:
        return None
    index, fn = found
    bases = _base_call_operators()
    behind = _defining(cls, index + 1)
    base_behind = behind is not None and behind[1] in bases
    if fn in bases or (base_behind and _rebuilds_unchanged(fn, graph_module)):
        return lambda target: isinstance(target, operators) and target not in own
    guard = _guard(fn)
    if guard is None or not base_behind:
        return None
    # The guard's value for each operator, computed once where it reads the operator alone.
    known: dict[Any, bool] = {}

    def through(target: Any) -> bool:
        if not isinstance(target, operators) or target in own:
            return False
        value = known.get(target)
        if value is None:
            try:
                scope = {guard.op: target, guard.self_: pass_}
                value = bool(eval(guard.test, guard.globals_, scope)) is guard.passes
            except Exception:  # the pass's own path then meets it as stock does
                value = False
            if not guard.reads_self:
                known[target] = value
        return value

    return through


__all__ = ["passthrough"]
