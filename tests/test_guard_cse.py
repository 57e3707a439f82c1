"""``runtime/guard_cse.py`` against stock: each composed text against ``ast.unparse`` of the
same node on generated expressions; dynamo's ``build_guard_function`` (the CSE pass's caller)
with acceleration on against off, on generated guard lists, on expressions deep enough to meet
the recursion limit, and on a real ``torch.export``'s guards; the composed path counted where it
ran, a failing composition falling back to stock's text."""

from __future__ import annotations

import ast
from typing import Any

import arm_accel
import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import patches
from arm_accel.control import counters
from arm_accel.runtime import guard_cse
from hypothesis import given
from hypothesis import strategies as st
from support import fuzz
from torch._dynamo import guards

FUZZ = fuzz.examples(ci=150, long=1000)


@pytest.fixture(autouse=True)
def _installed() -> None:
    assert patches.installed("export.guard_cse"), [
        s for s in patches.states() if s.group == "export.guard_cse"
    ]


_LEAVES = st.sampled_from(
    [
        "L",
        "G",
        "x",
        "___check_obj_id",
        "0",
        "7",
        "-3",
        "10**30",
        "1.5",
        "1e400",
        "True",
        "None",
        "...",
        "'a'",
        '"it\'s"',
        "'a\\nb'",
        "u'u'",
        "b'by'",
        "f'{x}!'",
        "f'{x!r:>{w}}'",
        "(1, 2)",
        "()",
    ]
)


def _compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    two = st.tuples(inner, inner)
    return st.one_of(
        st.tuples(inner, st.sampled_from(["a", "_modules", "size", "real"])).map(
            lambda t: f"{t[0]}.{t[1]}"
        ),
        two.map(lambda t: f"{t[0]}[{t[1]}]"),
        two.map(lambda t: f"{t[0]}[{t[1]}, {t[0]}]"),
        two.map(lambda t: f"{t[0]}[{t[1]}:]"),
        inner.map(lambda e: f"{e}()"),
        two.map(lambda t: f"{t[0]}({t[1]}, k={t[0]})"),
        two.map(lambda t: f"{t[0]}(*{t[1]}, **{t[0]})"),
        st.tuples(inner, st.sampled_from(["==", "is not", "<", "in", "!="]), inner).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"
        ),
        st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} < {t[1]} <= {t[2]}"),
        st.tuples(inner, st.sampled_from(["and", "or"]), inner).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"
        ),
        two.map(lambda t: f"{t[0]} or {t[1]} and {t[0]}"),
        inner.map(lambda e: f"not {e}"),
        inner.map(lambda e: f"-{e}"),
        st.tuples(inner, st.sampled_from(["+", "*", "**", "|"]), inner).map(
            lambda t: f"{t[0]} {t[1]} {t[2]}"
        ),
        inner.map(lambda e: f"({e})"),
        two.map(lambda t: f"({t[0]}, {t[1]})"),
        inner.map(lambda e: f"[{e}]"),
        two.map(lambda t: f"{{{t[0]}: {t[1]}}}"),
        st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} if {t[1]} else {t[2]}"),
        inner.map(lambda e: f"(lambda: {e})"),
        inner.map(lambda e: f"f'{{{e}}}'"),
    )


#: Deferred, not ``st.recursive``: a failing example's report then names the strategy in a
#: line, where ``recursive``'s repr of the nested maps grows to gigabytes.
EXPRESSIONS: st.SearchStrategy[str] = st.deferred(
    lambda: st.one_of(_LEAVES, _compound(EXPRESSIONS))
)


def _parsed(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return None


#: Where ``ast._Unparser`` writes something its children's texts alone do not give.
EDGES = [
    "True.a",
    "1 .real",
    "(-1).a",
    "1.5.a",
    "u'x'.y",
    "f'{x}'.y",
    "not not x",
    "not (x and y)",
    "(not x) == y",
    "x or y and z",
    "(x or y) and z",
    "(x == y) == z",
    "(x < y) < z",
    "x < y < z",
    "(a, b)[0]",
    "a[b, c]",
    "a[(b, c)]",
    "a[()]",
    "a[b:c, d]",
    "a[*b]",
    "f(*a, **k, x=1)",
    "f((a, b))",
    "(a if b else c).d",
    "(lambda: x).y",
    "(-x).y",
    "(x + y)[0]",
    "L['a\\nb'].c",
]


@pytest.mark.parametrize("source", EDGES)
def test_composed_edge_cases(source: str) -> None:
    """Parentheses, spacing and quoting that depend on a node's parent: composed as
    ``ast.unparse`` writes them (see :func:`test_composed_texts_are_unparse`)."""
    tree = _parsed(source)
    assert tree is not None
    _assert_composed(tree)


@FUZZ
@given(EXPRESSIONS)
def test_composed_texts_are_unparse(source: str) -> None:
    """Every expression node's composed text, asked of one shared ``_Texts`` in preorder (as
    the CSE pass asks) and of a fresh one, is ``ast.unparse``'s."""
    tree = _parsed(source)
    if tree is not None:
        _assert_composed(tree)


def _assert_composed(tree: ast.Module) -> None:
    source = ast.unparse(tree)
    shared = guard_cse._Texts()
    for node in ast.walk(tree):
        if isinstance(node, ast.expr):
            want = ast.unparse(node)
            assert shared.of(node) == want, source
            assert guard_cse._Texts().of(node) == want, source


def _guard_functions(exprs: list[str]) -> tuple[Any, Any]:
    """``build_guard_function`` over ``exprs`` stock, then accelerated."""
    with arm_accel.disabled():
        stock = guards.build_guard_function(exprs, "___a, ___b")
    return stock, guards.build_guard_function(exprs, "___a, ___b")


@FUZZ
@given(st.lists(EXPRESSIONS, min_size=1, max_size=6), st.data())
def test_build_guard_function_identical(sources: list[str], data: st.DataObject) -> None:
    """The guard function's source, accelerated, is stock's: lists of generated expressions
    sharing sub-expressions (each repeated or extended by an attribute), so that the pass
    names some; the composed path ran."""
    exprs = [s for s in sources if _parsed(s) is not None]
    if not exprs:
        return
    extended = [f"({e}).size()[0] == {i}" for i, e in enumerate(exprs)]
    exprs = data.draw(st.permutations(exprs + extended + exprs[:1]))
    before = counters.snapshot().get(guard_cse.STATS_NAME)
    stock, ours = _guard_functions(exprs)
    assert ours == stock
    after = counters.snapshot()[guard_cse.STATS_NAME]
    assert after.accelerated > (before.accelerated if before else 0)


@pytest.mark.parametrize("depth", [40, 120, 200, 260, 300, 330, 360, 420])
@pytest.mark.parametrize("shape", ["chain", "calls", "not"])
def test_deep_expressions_identical(depth: int, shape: str) -> None:
    """Expressions deep enough that stock's unparse meets the recursion limit (the pass then
    gives up and names nothing) give stock's guard function: where stock's unparse could meet
    the limit, stock's text is taken."""
    if shape == "chain":
        expr = "L['x']" + ".a" * depth + " == 1"
    elif shape == "calls":  # the parser refuses 200 nested parentheses
        expr = "f(" * (depth // 3) + "x" + ")" * (depth // 3)
    else:
        expr = "not " * depth + "L['x'].a"
    assert _parsed(expr) is not None
    stock, ours = _guard_functions([expr, expr, "L['x'].a.a == 2"])
    assert ours == stock


def test_room_declines_near_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """An attribute chain whose unparse could reach the recursion limit gets stock's text
    (``_room`` said no), one far from it the composed text; both guard functions stock's."""
    seen: list[bool] = []
    room = guard_cse._room

    def spy(height: int) -> bool:
        seen.append(room(height))
        return seen[-1]

    monkeypatch.setattr(guard_cse, "_room", spy)
    for depth in (20, 300):
        stock, ours = _guard_functions(["L['x']" + ".a" * depth, "L['x'].a"])
        assert ours == stock
    assert True in seen and False in seen


def test_failing_composition_falls_back(lenient: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A composition that raises (not strict) takes stock's text, counted as a fallback;
    under ``ARM_ACCEL_STRICT=1`` it raises."""

    def fail(self: Any, node: ast.AST, precedence: Any = None) -> str:
        raise ValueError("injected")

    exprs = ["L['x'].a.b == 1", "L['x'].a.c == 2"]
    with arm_accel.disabled():
        stock = guards.build_guard_function(exprs, "")
    monkeypatch.setattr(guard_cse._Texts, "of", fail)
    assert guards.build_guard_function(exprs, "") == stock
    reasons = counters.snapshot()[guard_cse.STATS_NAME].fallbacks
    assert any(r.startswith("composing a text failed") for r in reasons), reasons
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    with pytest.raises(ValueError, match="injected"):
        guards.build_guard_function(exprs, "")


def test_disabled_is_stock() -> None:
    """With acceleration off nothing is composed."""
    before = counters.snapshot().get(guard_cse.STATS_NAME)
    with arm_accel.disabled():
        guards.build_guard_function(["L['x'].a.b == 1", "L['x'].a.c == 2"], "")
    assert counters.snapshot().get(guard_cse.STATS_NAME) == before


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


def test_export_guards_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """A strict ``torch.export`` builds the same guard functions accelerated as stock (every
    ``build_guard_function`` call recorded), with texts composed."""
    built: list[tuple[bool, list[str], Any]] = []
    stock_build = guards.build_guard_function

    def recording(code_parts: list[str], closure_args: str) -> Any:
        out = stock_build(code_parts, closure_args)
        built.append((arm_accel.is_enabled(), list(code_parts), out))
        return out

    monkeypatch.setattr(guards, "build_guard_function", recording)
    torch.manual_seed(0)
    net, x = _Net(), torch.randn(2, 8)
    with arm_accel.disabled():
        torch.export.export(net, (x,), strict=True)
    before = counters.snapshot()[guard_cse.STATS_NAME].accelerated
    torch.export.export(net, (x,), strict=True)
    stock = [(parts, out) for on, parts, out in built if not on]
    ours = [(parts, out) for on, parts, out in built if on]
    assert stock and ours == stock
    assert counters.snapshot()[guard_cse.STATS_NAME].accelerated > before
