"""Which operators a pass's re-trace passes through untouched, read from its ``call_operator``.

For a node whose target is an operator (aten or edge), stock's re-trace calls the pass's
``call_operator``. When that is the base one (``ExportPass`` / ``ArmPass``), or one whose first
statement is the guard most passes open with::

    if op not in self.target_ops [or ...]:
        return super().call_operator(op, args, kwargs, meta[, updated])

with the base one right behind it, the call for an operator outside ``self.target_ops`` ends in
``_fx`` with the node's own target, args, kwargs and meta. The in-place re-trace then claims the
node directly, skipping the call chain (the interpreter's dispatch on the target, the guard,
``ArmPass``'s checks, ``ExportPass.call_operator``, the claim test in ``_fx``). The result is the
same claim; only the Python calls in between are saved.

``ArmPass.call_operator`` builds quantized ``bmm``/``leaky_relu`` nodes by its own rule: those
always take the pass's own path.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from functools import cache
from typing import Any

import torch


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


def _defining(cls: type, start: int = 0) -> tuple[int, Any] | None:
    """(MRO index, function) of the first ``call_operator`` from ``cls.__mro__[start]`` on."""
    mro = cls.__mro__
    for i in range(start, len(mro)):
        fn = vars(mro[i]).get("call_operator")
        if fn is not None:
            return i, fn
    return None


@cache
def _guard_attribute(fn: Any) -> str | None:
    """``ATTR`` when ``fn`` opens with ``if op not in self.ATTR [or ...]: return
    super().call_operator(op, args, kwargs, meta[, updated])``, else None."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    func = tree.body[0] if tree.body else None
    if not isinstance(func, ast.FunctionDef) or func.decorator_list:
        return None
    params = [a.arg for a in func.args.args]
    if len(params) < 5 or func.args.vararg or func.args.kwarg:
        return None
    self_, op, args, kwargs, meta = params[:5]
    extra = params[5:]
    # Defaults of the extra parameters: ``updated`` must come in False (the interpreter never
    # passes it) for ``super()`` to see what it sees without it.
    defaults = dict(zip(reversed(params), reversed(func.args.defaults), strict=False))
    body = func.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body or not isinstance(body[0], ast.If):
        return None
    test = body[0].test
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        test = test.values[0]  # ``A or B``: A true returns before B is read
    if not (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == op
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.NotIn)
        and isinstance(test.comparators[0], ast.Attribute)
        and isinstance(test.comparators[0].value, ast.Name)
        and test.comparators[0].value.id == self_
    ):
        return None
    attr = test.comparators[0].attr
    then = body[0].body
    if len(then) != 1 or not isinstance(then[0], ast.Return):
        return None
    call = then[0].value
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "call_operator"
        and isinstance(call.func.value, ast.Call)
        and isinstance(call.func.value.func, ast.Name)
        and call.func.value.func.id == "super"
        and not call.func.value.args
    ):
        return None
    passed = [a.id if isinstance(a, ast.Name) else None for a in call.args]
    if passed[:4] != [op, args, kwargs, meta] or any(a is None for a in passed):
        return None
    for name in passed[4:] + [k.arg or "" for k in call.keywords]:
        default = defaults.get(name)
        if name not in extra or not (isinstance(default, ast.Constant) and not default.value):
            return None
    if any(not isinstance(k.value, ast.Name) or k.value.id != k.arg for k in call.keywords):
        return None
    return attr


def passthrough(pass_: Any) -> Callable[[Any], bool] | None:
    """The test "this node's operator goes through the pass's ``call_operator`` untouched",
    or None when nothing is known to."""
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    own = _always_own_path()
    operators = (torch._ops.OpOverload, EdgeOpOverload)
    cls = type(pass_)
    found = _defining(cls)
    if found is None:
        return None
    index, fn = found
    bases = _base_call_operators()
    if fn in bases:
        return lambda target: isinstance(target, operators) and target not in own
    attr = _guard_attribute(fn)
    if attr is None:
        return None
    behind = _defining(cls, index + 1)
    if behind is None or behind[1] not in bases:
        return None
    targets = getattr(pass_, attr, None)
    if targets is None or callable(targets):
        return None
    return lambda target: (
        isinstance(target, operators) and target not in own and target not in targets
    )


__all__ = ["passthrough"]
