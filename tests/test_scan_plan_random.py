"""Random view/permute graphs, scan by scan: the native planner against stock's walk.

Each graph is built from permutes, views, elementwise ops (unary, binary with a layout-invariant
or same-shape operand), keepdim reductions, slices and cats, with values computed by running
the ops on real tensors. Both directions run to their fixed point (scans only, no fusions);
every scan the planner answers is compared with stock's walk on a deep copy
(``checked_scans``), and between scans the graph is refreshed as a re-trace would: DCE and new
values in graph order. The same graphs also run in native runs of scans (the re-trace between
scans modelled in Rust), checked the same way against stock's scans with ``refresh`` between.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
import torch
from arm_accel.pipeline.passes.propagate import accelerated, scan_plan
from executorch.backends.transforms import propagate_view_copy_permute_pass as generic
from executorch.exir.dialects._ops import ops as exir_ops
from support.scans import checked_scans
from torch import fx

edge = exir_ops.edge.aten
UNARY = (edge.relu.default, edge.neg.default, edge.abs.default)


def _reshape(rng: random.Random, shape: list[int]) -> list[int]:
    """A view target: merge two adjacent dims, split a dim, or add/drop a singleton."""
    choice = rng.randrange(4)
    if choice == 0 and len(shape) >= 2:
        i = rng.randrange(len(shape) - 1)
        return [*shape[:i], shape[i] * shape[i + 1], *shape[i + 2 :]]
    if choice == 1:
        splittable = [i for i, d in enumerate(shape) if d in (4, 6)]
        if splittable:
            i = rng.choice(splittable)
            return [*shape[:i], 2, shape[i] // 2, *shape[i + 1 :]]
    if choice == 2 and len(shape) < 5:
        i = rng.randrange(len(shape) + 1)
        return [*shape[:i], 1, *shape[i:]]
    ones = [i for i, d in enumerate(shape) if d == 1]
    if ones and len(shape) > 1:
        i = rng.choice(ones)
        return [*shape[:i], *shape[i + 1 :]]
    return [*shape[::-1]] if len(shape) == 1 else [shape[0], -1]


def random_graph(seed: int) -> fx.GraphModule:
    rng = random.Random(seed)
    g = fx.Graph()
    vals: dict[fx.Node, torch.Tensor] = {}

    def add(target: Any, args: tuple[Any, ...]) -> fx.Node:
        real = fx.node.map_arg(args, lambda n: vals[n])
        node = g.call_function(target, args)
        vals[node] = target(*real)
        node.meta["val"] = vals[node]
        return node

    pool: list[fx.Node] = []
    for k in range(rng.randint(1, 2)):
        shape = [rng.choice((1, 2, 3, 4, 6)) for _ in range(rng.randint(2, 4))]
        x = g.placeholder(f"x{k}")
        vals[x] = torch.randn(shape)
        x.meta["val"] = vals[x]
        pool.append(x)
    for _ in range(rng.randint(3, 12)):
        src = pool[-1] if rng.random() < 0.6 else rng.choice(pool)
        shape = list(vals[src].shape)
        rank = len(shape)
        kind = rng.randrange(8)
        if kind == 0:
            perm = list(range(rank))
            rng.shuffle(perm)
            node = add(edge.permute_copy.default, (src, perm))
        elif kind == 1:
            node = add(edge.view_copy.default, (src, _reshape(rng, shape)))
        elif kind == 2:
            node = add(rng.choice(UNARY), (src,))
        elif kind == 3:
            same = [n for n in pool if list(vals[n].shape) == shape and n is not src]
            if same and rng.random() < 0.5:
                other = rng.choice(same)
            else:
                other = g.placeholder(f"c{len(vals)}")
                vals[other] = torch.randn([1] * rank)
                other.meta["val"] = vals[other]
            node = add(edge.add.Tensor, (src, other) if rng.random() < 0.7 else (other, src))
        elif kind == 4:
            dims = sorted(rng.sample(range(rank), rng.randint(1, rank)))
            node = add(edge.mean.dim, (src, dims, True))
        elif kind == 5:
            dim = rng.randrange(rank)
            start = rng.randrange(shape[dim])
            end = rng.randint(start + 1, shape[dim])
            args = (src, dim, start, end) if rng.random() < 0.5 else (src, dim, start, end, 1)
            node = add(edge.slice_copy.Tensor, args)
        elif kind == 6:
            same = [n for n in pool if list(vals[n].shape) == shape]
            node = add(edge.cat.default, ([src, rng.choice(same)], rng.randrange(rank)))
        else:
            node = add(edge.sum.dim_IntList, (src, [rng.randrange(rank)], True))
        pool.append(node)
    outs = [n for n in pool if not n.users and n.op != "placeholder"] or [pool[-1]]
    g.output(tuple(outs))
    return fx.GraphModule(torch.nn.Module(), g)


def refresh(gm: fx.GraphModule) -> None:
    """What a re-trace gives the next scan: dead code gone, values recomputed, users in graph
    order."""
    gm.graph.eliminate_dead_code()
    vals: dict[fx.Node, Any] = {}
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.meta["val"] = node.target(*fx.node.map_arg(node.args, lambda n: vals[n]))
        vals[node] = node.meta.get("val")
        node.users = dict(sorted(node.users.items(), key=lambda kv: order[kv[0]]))


def _passes() -> list[Any]:
    return [
        accelerated.PropagateViewCopyPermuteDownPass,
        accelerated.PropagateViewCopyPermuteUpPass,
        accelerated.accelerate(generic.PropagateViewCopyPermuteDownPass),
        accelerated.accelerate(generic.PropagateViewCopyPermuteUpPass),
    ]


def _tosa() -> Any:
    from executorch.backends.arm.tosa.specification import TosaLoweringContext, TosaSpecification

    return TosaLoweringContext(TosaSpecification.create_from_string("TOSA-1.0+FP"))


@pytest.mark.parametrize("chunk", range(4))
def test_random_graphs(chunk: int) -> None:
    counts: Counter[str] = Counter()
    with _tosa(), checked_scans(counts):
        for seed in range(chunk * 60, (chunk + 1) * 60):
            for cls in _passes():
                gm = random_graph(seed)
                pass_ = cls()
                for _ in range(20):  # scans to the fixed point
                    try:
                        planned = scan_plan.run_scan(pass_, gm, cls.__name__)
                    except RuntimeError:  # the planner declined, stock raised (keepdim)
                        break
                    modified = pass_._python_scan(gm) if planned is None else planned
                    if not modified:
                        break
                    refresh(gm)
    print(dict(counts))
    assert counts["native"] > 100, counts
    assert counts["edit: MoveEdit"] > 0 and counts["edit: ArgsEdit"] > 0, counts


def _refreshed(_pass: Any, gm: fx.GraphModule) -> fx.GraphModule:
    refresh(gm)
    return gm


@pytest.mark.parametrize("chunk", range(4))
def test_random_graphs_in_runs(chunk: int) -> None:
    """Scans to the fixed point in native runs: after each run the graph, its values (the
    shapes the model wrote) and users order equal stock's scans with a re-trace between."""
    counts: Counter[str] = Counter()
    with _tosa(), checked_scans(counts, retrace=_refreshed):
        for seed in range(chunk * 60, (chunk + 1) * 60):
            for cls in _passes():
                gm = random_graph(seed)
                pass_ = cls()
                for _ in range(20):
                    try:
                        run = scan_plan.run_scans(pass_, gm, cls.__name__, max_scans=20)
                    except RuntimeError:  # the planner declined, stock raised (keepdim)
                        break
                    if run is None:
                        modified = pass_._python_scan(gm)
                        fixed_point = not modified
                    else:
                        modified, fixed_point = run.modified, run.fixed_point
                    if modified:
                        refresh(gm)
                    if fixed_point:
                        break
    print(dict(counts))
    assert counts["scans in multi-scan runs"] > 50, counts
