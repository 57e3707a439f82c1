"""dynamo's guard CSE with each sub-expression's text composed once.

``build_guard_function`` (``torch._dynamo.guards``) runs ``PyExprCSEPass`` over every guard
expression: ``count`` takes the text of each attribute, call and subscript sub-expression
(``_ast_unparse``: ``ast.unparse`` without newlines), ``replace`` takes them again and names the
repeated ones. ``ast.unparse`` of a node walks its whole subtree, so these texts cost quadratic
time in the expressions' depth: 0.1-0.2 s of each ``torch.export`` of the demo model.

Inside ``count`` and ``replace`` (:func:`scoped`), the first text asked of a node is composed
from its children's texts, each node's once, the way ``ast._Unparser`` writes them
(:class:`_Texts`; node kinds it does not compose are written by ``ast._Unparser`` itself). A node
asked a second time, which ``replace`` does after rewriting the node's children, gets stock's
text, and so does a node whose unparse could reach the recursion limit in stock's code. Why
exact: design.md, "The re-trace engine" (dynamo's guard CSE).
"""

from __future__ import annotations

import ast
import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

from arm_accel.control import counters, switch

#: ``stats()`` entry, per ``count``/``replace`` call: the texts asked, those composed.
STATS_NAME = "export.guard_cse"

_P = ast._Precedence  # type: ignore[attr-defined]
_ATOM, _TEST, _CMP, _CMP_NEXT = _P.ATOM, _P.TEST, _P.CMP, _P.CMP.next()
_UNPARSER: Any = ast._Unparser  # type: ignore[attr-defined]
_NOT: str = _UNPARSER.unop["Not"]
_NOT_PRECEDENCE: Any = _UNPARSER.unop_precedence[_NOT]
_SCALARS = (int, str, bool, type(None))
#: Frames stock's unparser may stack per level of the tree (its deepest per-level chain, an
#: f-string's formatted value, takes 7), and a margin for the C calls on top.
_FRAMES_PER_LEVEL = 8
_FRAMES_MARGIN = 40


def _written(node: ast.AST, precedence: Any) -> str:
    """``node`` written by stock's unparser as its parent writes it: a fresh unparser whose
    only state the node's text reads is the precedence its parent set."""
    unparser = _UNPARSER()
    if precedence is not _TEST:
        unparser._precedences[node] = precedence
    unparser.traverse(node)
    return "".join(unparser._source)


def _height(node: ast.AST) -> int:
    return 1 + max((_height(child) for child in ast.iter_child_nodes(node)), default=0)


class _Texts:
    """The texts of one scope's nodes, as ``ast._Unparser`` writes them, composed bottom-up;
    attribute, call and subscript texts (those the CSE asks for) remembered with their
    subtree's height. :meth:`of` leaves the height of the node it wrote in ``height``."""

    def __init__(self) -> None:
        self.memo: dict[ast.AST, tuple[str, int]] = {}
        self.height = 0

    def of(self, node: ast.AST, precedence: Any = _TEST) -> str:
        kind = type(node)
        if kind is ast.Name:
            self.height = 1
            return node.id  # type: ignore[attr-defined,no-any-return]
        if kind is ast.Attribute or kind is ast.Call or kind is ast.Subscript:
            held = self.memo.get(node)
            if held is None:
                held = self.memo[node] = self._atom(node, kind)
            self.height = held[1]
            return held[0]
        if kind is ast.Constant:
            value = node.value  # type: ignore[attr-defined]
            if node.kind is None and type(value) in _SCALARS:  # type: ignore[attr-defined]
                self.height = 1
                return repr(value)
        elif kind is ast.Compare:
            return self._parenthesized(self._compare(node), precedence > _CMP)  # type: ignore[arg-type]
        elif kind is ast.UnaryOp and type(node.op) is ast.Not:  # type: ignore[attr-defined]
            text = _NOT + " " + self.of(node.operand, _NOT_PRECEDENCE)  # type: ignore[attr-defined]
            self.height += 1
            return self._parenthesized(text, precedence > _NOT_PRECEDENCE)
        elif kind is ast.BoolOp:
            return self._bool_op(node, precedence)  # type: ignore[arg-type]
        self.height = _height(node)
        return _written(node, precedence)

    @staticmethod
    def _parenthesized(text: str, parenthesize: bool) -> str:
        return "(" + text + ")" if parenthesize else text

    def _atom(self, node: Any, kind: type) -> tuple[str, int]:
        """``visit_Attribute`` / ``visit_Subscript`` / ``visit_Call``'s text and height."""
        if kind is ast.Attribute:
            value = node.value
            head = self.of(value, _ATOM)
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                head += " "
            return head + "." + node.attr, self.height + 1
        if kind is ast.Subscript:
            index = node.slice
            if isinstance(index, ast.Tuple) and index.elts:  # as visit_Subscript tests it
                return _written(node, _TEST), _height(node)
            head = self.of(node.value, _ATOM)
            height = self.height
            text = head + "[" + self.of(index, _TEST) + "]"
            return text, max(height, self.height) + 1
        head = self.of(node.func, _ATOM)
        height = self.height
        parts = []
        for arg in node.args:
            parts.append(self.of(arg, _TEST))
            height = max(height, self.height)
        for keyword in node.keywords:
            value = self.of(keyword.value, _TEST)
            height = max(height, self.height + 1)
            parts.append("**" + value if keyword.arg is None else keyword.arg + "=" + value)
        return head + "(" + ", ".join(parts) + ")", height + 1

    def _compare(self, node: ast.Compare) -> str:
        parts = [self.of(node.left, _CMP_NEXT)]
        height = self.height
        for op, right in zip(node.ops, node.comparators, strict=False):
            parts.append(" " + _UNPARSER.cmpops[type(op).__name__] + " ")
            parts.append(self.of(right, _CMP_NEXT))
            height = max(height, self.height)
        self.height = height + 1
        return "".join(parts)

    def _bool_op(self, node: ast.BoolOp, precedence: Any) -> str:
        operator = _UNPARSER.boolops[type(node.op).__name__]
        outer = level = _UNPARSER.boolop_precedence[operator]
        parts = []
        height = 0
        for value in node.values:
            level = level.next()
            parts.append(self.of(value, level))
            height = max(height, self.height)
        self.height = height + 1
        return self._parenthesized(f" {operator} ".join(parts), precedence > outer)


class _Scope(threading.local):
    """This thread's open :func:`scoped` call: its texts and the nodes already answered (held,
    so that none is freed and another takes its place while the scope is open)."""

    texts: _Texts | None = None
    asked: set[ast.AST] | None = None
    calls = 0
    composed = 0


_scope = _Scope()


def _room(height: int) -> bool:
    """Stock's unparse of a subtree of ``height`` levels, started here, stays below the
    recursion limit (``sys._getframe(n)`` raises where the stack has ``n`` frames or fewer)."""
    frames = sys.getrecursionlimit() - _FRAMES_PER_LEVEL * height - _FRAMES_MARGIN
    if frames <= 0:
        return False
    try:
        sys._getframe(frames)
    except ValueError:
        return True
    return False


def _composed(texts: _Texts, asked: set[ast.AST], node: ast.AST) -> str | None:
    """The text of ``node`` composed, or None where stock's must be taken: asked before, not
    an expression, its unparse could reach the recursion limit, or the composition failed."""
    if node in asked or not isinstance(node, ast.expr):
        return None
    asked.add(node)
    try:
        text = texts.of(node)
    except RecursionError:
        return None  # stock's unparse stacks more frames per level: it fails too
    except Exception as exc:
        if switch.strict():
            raise
        counters.record_fallback(STATS_NAME, f"composing a text failed: {exc!r}")
        return None
    if not _room(texts.height):
        return None
    return text.replace("\n", "")


def unparse(stock: Callable[[ast.AST], str]) -> Callable[[ast.AST], str]:
    """``torch._dynamo.guards._ast_unparse``: inside :func:`scoped`, the first text asked of an
    expression node composed (:class:`_Texts`); stock's everywhere else (the patch table's
    ``export.guard_cse`` rows)."""

    @functools.wraps(stock)
    def _ast_unparse(node: ast.AST) -> str:
        scope = _scope
        texts, asked = scope.texts, scope.asked
        if texts is None or asked is None:
            return stock(node)
        scope.calls += 1
        text = _composed(texts, asked, node)
        if text is None:
            return stock(node)
        scope.composed += 1
        return text

    return _ast_unparse


def scoped(stock: Callable[..., Any]) -> Callable[..., Any]:
    """``PyExprCSEPass.count`` / ``.replace`` run with their own texts (:func:`unparse`) when
    the switch is on; stock's as it is otherwise, and inside another scoped call."""

    @functools.wraps(stock)
    def call(self: Any, exprs: Any) -> Any:
        scope = _scope
        if scope.texts is not None or not switch.is_enabled():
            return stock(self, exprs)
        scope.texts, scope.asked = _Texts(), set()
        scope.calls = scope.composed = 0
        try:
            return stock(self, exprs)
        finally:
            counters.record_calls(STATS_NAME, scope.calls, scope.composed, 0.0)
            scope.texts = scope.asked = None

    return call


__all__ = ["STATS_NAME", "scoped", "unparse"]
