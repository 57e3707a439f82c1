"""Duplicate-user signatures interned in Rust (``_native.user_signatures``) vs stock.

The property: for two users of one producer in one target group, Rust gives them equal codes
exactly when stock's ``_build_user_signature`` gives them equal signatures, and users whose
arguments the tokens do not model come back opaque (Python answers for them). Checked on
hand-built fx graphs whose arguments differ only in kwargs order, floats vs ints vs bools, None,
nested lists/tuples of nodes, strings, dtypes and out-of-range ints; then end to end through
the pass (both screens) against stock.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any

import numpy as np
import pytest
import torch
from arm_accel import _native
from arm_accel.control import counters
from arm_accel.native.table import Flag, export_light, with_int_args
from arm_accel.pipeline.passes import fuse_duplicate_users as fdu
from arm_accel.pipeline.passes.base import _stock_class
from arm_accel.testing import assert_graphs_equal
from executorch.backends.transforms.fuse_duplicate_users_pass import (
    FuseDuplicateUsersPass as BaseFuse,
)
from executorch.exir import EdgeCompileConfig, to_edge
from torch import fx

_Stock = _stock_class(BaseFuse)
_add = torch.ops.aten.add.Tensor
_mul = torch.ops.aten.mul.Tensor


def _codes(gm: fx.GraphModule, excluded: frozenset[Any] = frozenset()) -> tuple[dict, list]:
    """(code per node, candidate producers) from the kernel, as the pass computes them."""
    ours = fdu.BaseFuseDuplicateUsersPass(excluded)
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    table = export_light(gm, lambda _t: 0, nodes=nodes)
    keys = ours._group_keys(table.targets)
    kwarg_keys: dict[Any, int] = {}
    rows = [
        fdu.signature_tokens(n, order, kwarg_keys) if n.op == "call_function" else [] for n in nodes
    ]
    code, cand = _native.user_signatures(with_int_args(table, rows), keys)
    return dict(zip(nodes, code.tolist(), strict=True)), [nodes[i] for i in cand.tolist()]


# Argument variants for a two-input op; all users of ``x``.
_VARIANTS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("y",), {}),
    (("y",), {"alpha": 1}),
    (("y",), {"alpha": 1.0}),  # == 1: equal signature in stock
    (("y",), {"alpha": True}),  # == 1 as well
    (("y",), {"alpha": 2}),
    (("y",), {"alpha": 0.5}),
    (("y",), {"alpha": 0.5}),
    (("y",), {"alpha": -0.0}),
    (("y",), {"alpha": 0}),
    (("y",), {"alpha": float("inf")}),
    (("y",), {"alpha": float("nan")}),  # opaque: nan != nan
    (("y",), {"alpha": None}),
    (("y",), {"alpha": 2**70}),  # opaque: beyond int64
    (("y",), {"alpha": "y"}),  # opaque string (and equal to the node's name in stock)
    (("y",), {"alpha": torch.float32}),  # opaque dtype
    (("y",), {"alpha": 1, "beta": [1, 2]}),
    (("y",), {"beta": (1, 2), "alpha": 1}),  # same as above: kwargs sorted, list == tuple
    (("y",), {"beta": (1, 2, 3), "alpha": 1}),
    (("y",), {"beta": [[1], 2], "alpha": 1}),
    (("y",), {"beta": [(1,), 2], "alpha": 1}),
    (("y",), {"beta": [1, [2]], "alpha": 1}),
    (("y", [1, 2]), {}),  # positional vs kwarg: different
    (("z",), {}),
    ((["y", "z"],), {}),
    ((("y", "z"),), {}),
    ((["z", "y"],), {}),
    ((["y", None],), {}),
    ((["y"],), {}),
    (((),), {}),
    (([],), {}),
    ((None,), {}),
    ((1,), {}),
    ((True,), {}),
    ((1.0,), {}),
    ((1.5,), {}),
]


def _hand_graph(
    variants: list[tuple[tuple[Any, ...], dict[str, Any]]], seed: int
) -> fx.GraphModule:
    g = fx.Graph()
    x, y, z = g.placeholder("x"), g.placeholder("y"), g.placeholder("z")
    env = {"y": y, "z": z}

    def sub(v: Any) -> Any:
        if isinstance(v, str) and v in env:
            return env[v]
        if isinstance(v, list):
            return [sub(e) for e in v]
        if isinstance(v, tuple):
            return tuple(sub(e) for e in v)
        return v

    rng = random.Random(seed)
    order = list(variants) * 2
    rng.shuffle(order)
    outs = []
    for args, kwargs in order:
        target = _add if rng.random() < 0.8 else _mul
        kw = dict(kwargs)
        if rng.random() < 0.5:  # insertion order must not matter
            kw = dict(reversed(list(kw.items())))
        outs.append(g.call_function(target, (x, *sub(args)), {k: sub(v) for k, v in kw.items()}))
    g.output(tuple(outs))
    return fx.GraphModule(torch.nn.Module(), g)


@pytest.mark.parametrize("seed", range(4))
def test_codes_equal_exactly_when_stock_signatures_are(seed: int) -> None:
    gm = _hand_graph(_VARIANTS, seed)
    stock = _Stock()
    code, candidates = _codes(gm)
    users = [n for n in gm.graph.nodes if n.op == "call_function"]
    opaque = [u for u in users if code[u] == -2]
    assert opaque, "the variants include unmodelled arguments"
    modelled = [u for u in users if code[u] >= 0]
    assert len(modelled) + len(opaque) == len(users)
    for a, b in itertools.combinations(modelled, 2):
        same = stock._build_user_signature(a) == stock._build_user_signature(b)
        assert (code[a] == code[b]) == same, (a.format_node(), b.format_node())
    # Only strings, dtypes, nan and huge ints are opaque.
    for u in opaque:
        leaves = [*u.args[1:], *u.kwargs.values()]
        assert any(
            isinstance(v, (str, torch.dtype))
            or (isinstance(v, float) and v != v)
            or (isinstance(v, int) and abs(v) >= 2**63)
            for v in leaves
        ), u.format_node()
    x = next(iter(gm.graph.nodes))
    assert x in candidates  # every variant appears twice


def _plain_graph(*calls: tuple[Any, tuple[str, ...], dict[str, Any]]) -> fx.GraphModule:
    g = fx.Graph()
    env = {name: g.placeholder(name) for name in ("x", "y", "z")}
    outs = [g.call_function(t, tuple(env[a] for a in args), kw) for t, args, kw in calls]
    g.output(tuple(outs))
    return fx.GraphModule(torch.nn.Module(), g)


def test_screen_keeps_only_producers_with_equal_codes() -> None:
    # x feeds add(x, y) and add(x, z): one group, different signatures: not a candidate.
    _, candidates = _codes(_plain_graph((_add, ("x", "y"), {}), (_add, ("x", "z"), {})))
    assert candidates == []
    # The same target key twice with equal arguments: x and y are both candidates.
    gm = _plain_graph((_add, ("x", "y"), {"alpha": 2}), (_add, ("x", "y"), {"alpha": 2.0}))
    _, candidates = _codes(gm)
    assert [n.name for n in candidates] == ["x", "y"]
    # Different targets never group, whatever the arguments.
    _, candidates = _codes(_plain_graph((_add, ("x", "y"), {}), (_mul, ("x", "y"), {})))
    assert candidates == []


def test_excluded_targets_are_not_grouped() -> None:
    gm = _hand_graph([(("y",), {})], 0)
    code, candidates = _codes(gm, excluded=frozenset({_add, _mul}))
    assert all(c == -1 for c in code.values())
    assert candidates == []


def test_opaque_user_makes_its_producer_a_candidate() -> None:
    gm = _hand_graph([(("y",), {"alpha": "s"}), (("y",), {"alpha": 3})], 3)
    code, candidates = _codes(gm)
    assert {c for c in code.values() if c < 0} >= {-2}
    assert any(n.name == "x" for n in candidates)


def test_with_int_args_sets_the_csr_and_opaque_flags() -> None:
    gm = _hand_graph([(("y",), {})], 0)
    nodes = list(gm.graph.nodes)
    t = export_light(gm, lambda _t: 0, nodes=nodes)
    rows: list[list[int] | None] = [[i, i] if i % 3 else None for i in range(len(nodes))]
    t2 = with_int_args(t, rows)
    for i, r in enumerate(rows):
        assert t2.iargs_of(i) == (r or [])
        assert bool(t2.flags[i] & Flag.OPAQUE_ARGS) == (r is None)
    assert _native.table_counts(t2)["opaque_args"] == sum(r is None for r in rows)
    with pytest.raises(ValueError, match="rows"):
        with_int_args(t, rows[:-1])


def test_user_signatures_rejects_malformed_input() -> None:
    gm = _hand_graph([(("y",), {})], 0)
    t = export_light(gm, lambda _t: 0)
    keys = np.arange(len(t.targets), dtype=np.int64)
    code, cand = _native.user_signatures(t, keys)
    assert code.dtype == np.int64 and cand.dtype == np.int64
    with pytest.raises(ValueError, match="group_key"):
        _native.user_signatures(t, keys[:-1])
    with pytest.raises(ValueError, match="group_key"):
        _native.user_signatures(t, keys.astype(np.int32))
    with pytest.raises(ValueError, match="iarg_ptr"):
        _native.user_signatures(dataclasses.replace(t, iarg_ptr=t.iarg_ptr[:-1]), keys)


# -- end to end through the pass -------------------------------------------------------------


class KwargVariants(torch.nn.Module):
    """Duplicate users whose arguments differ in floats, ints, kwargs and lists."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a1 = torch.add(x, y, alpha=2)
        a2 = torch.add(x, y, alpha=2)
        a3 = torch.add(x, y, alpha=3)
        c1 = torch.clamp(x, min=0.0, max=6.0)
        c2 = torch.clamp(x, min=0.0, max=6.0)
        c3 = torch.clamp(x, min=0.5, max=6.0)
        s1 = x.sum(dim=[0], keepdim=True)
        s2 = x.sum(dim=(0,), keepdim=True)
        s3 = x.sum(dim=[1], keepdim=True)
        p1, p2 = x.permute(1, 0), x.permute(1, 0)
        m1, m2 = a1 * p1, a2 * p2  # duplicates once a1/a2 and p1/p2 fuse
        return (m1 + m2 + a3 + c1 + c2 + c3 + s1 + s2 + s3).sum() + x.mean()


def _edge(module: torch.nn.Module, *inputs: torch.Tensor) -> fx.GraphModule:
    ep = torch.export.export(module, inputs)
    return (
        to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
        .exported_program()
        .graph_module
    )


@pytest.mark.parametrize("native_min", [0, 10**9])
def test_pass_equals_stock_on_argument_variants(
    native_min: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fdu, "NATIVE_MIN_PRODUCERS", native_min)
    inputs = (torch.randn(4, 4), torch.randn(4, 4))

    def make() -> fx.GraphModule:
        return _edge(KwargVariants(), *inputs)

    a, b = make(), make()
    counters.reset()
    ra = _Stock().call(a)
    rb = fdu.BaseFuseDuplicateUsersPass().call(b)
    assert ra.modified and rb.modified
    assert_graphs_equal(ra.graph_module, rb.graph_module)
    entry = counters.snapshot()["transforms.FuseDuplicateUsersPass"]
    assert entry.accelerated == 1 and not entry.fallbacks
