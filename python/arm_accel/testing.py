"""Graph equality, the project's promise (see design.md)."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx


def _norm(value: Any, index: dict[fx.Node, int]) -> Any:
    if isinstance(value, fx.Node):
        return ("node", index[value])
    if isinstance(value, (list, tuple)):
        return (type(value) is tuple, [_norm(v, index) for v in value])
    if isinstance(value, dict):
        return {k: _norm(v, index) for k, v in value.items()}
    return value


def assert_graphs_equal(a: fx.GraphModule, b: fx.GraphModule) -> None:
    """Same node count and order; op/target/args/kwargs equal with nodes compared by position;
    ``meta["val"]`` shape and dtype equal."""
    na, nb = list(a.graph.nodes), list(b.graph.nodes)
    assert len(na) == len(nb), f"node count {len(na)} != {len(nb)}"
    ia = {n: i for i, n in enumerate(na)}
    ib = {n: i for i, n in enumerate(nb)}
    for i, (x, y) in enumerate(zip(na, nb, strict=True)):
        where = f"node {i} ({x.name} vs {y.name})"
        assert x.op == y.op, f"{where}: op {x.op} != {y.op}"
        assert x.target == y.target, f"{where}: target {x.target} != {y.target}"
        ax, ay = _norm(x.args, ia), _norm(y.args, ib)
        assert ax == ay, f"{where}: args {x.args} != {y.args}"
        kx, ky = _norm(x.kwargs, ia), _norm(y.kwargs, ib)
        assert kx == ky, f"{where}: kwargs {x.kwargs} != {y.kwargs}"
        vx, vy = x.meta.get("val"), y.meta.get("val")
        assert _val_sig(vx) == _val_sig(vy), f"{where}: val {_val_sig(vx)} != {_val_sig(vy)}"


def _val_sig(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), v.dtype)
    if isinstance(v, (list, tuple)):
        return tuple(_val_sig(x) for x in v)
    return type(v).__name__
