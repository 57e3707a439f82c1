"""``arm_accel.fxstock``, the model of stock fx behaviour every re-trace model shares, against
torch's own code: the names a fresh namespace gives, the meta ``TracerBase.create_node`` writes,
and the journal's rollback to the graph as it came (orders and names included)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from arm_accel.fxstock import GraphJournal, names
from arm_accel.fxstock import meta as fxmeta
from pipeline_diff import orders
from torch import fx
from torch.fx import traceback as fx_traceback
from torch.fx.proxy import _get_seq_nr


def test_fresh_names_are_a_fresh_namespaces() -> None:
    """``fxstock.names.fresh_names`` against torch's own ``_Namespace.create_name`` on sequences of
    candidates with clashes, numeric suffixes, illegal characters and builtins: the same names
    and the same namespace state, on a first call and on a repeated (remembered) one, and a
    namespace handed out and then used does not change what a later call hands out."""
    import random

    from torch.fx.graph import _Namespace

    rng = random.Random(7)
    pool = ["x", "x_1", "x_01", "add", "add_1", "add_2", "1abc", "", "list", "a.b", "mul_10"]
    pool += ["torch", "inf", "class", "_1", "x__1", "list_1", "a_b_2", "__x__", "9"]
    for _ in range(200):
        candidates = [rng.choice(pool) for _ in range(rng.randint(0, 16))]
        expected = _Namespace()
        expected_names = tuple(expected.create_name(c, None) for c in candidates)
        for _repeat in range(2):
            got, namespace = names.fresh_names(candidates)
            assert got == expected_names
            assert namespace._used_names == expected._used_names
            assert namespace._base_count == expected._base_count
            assert namespace._obj_to_name == {}
            namespace.create_name("x", None)  # the caller goes on naming in it


def test_renamed_by_fx_is_the_namespaces_rename() -> None:
    """``renamed_by_fx`` says whether ``_Namespace.create_name`` on a fresh namespace keeps a
    name: builtins and illegal names are renamed, ordinary ones kept."""
    from torch.fx.graph import _Namespace

    for name in ["x", "input", "list", "add_1", "1abc", "a.b", "torch", "p_weight", "_1"]:
        assert names.renamed_by_fx(name) == (_Namespace().create_name(name, None) != name)
    assert names.renamed_by_fx("input") and not names.renamed_by_fx("x")


_CURRENT_METAS: list[dict[str, Any]] = [
    {},
    {"stack_trace": "File x.py, line 1"},
    {"stack_trace": f"a {fx_traceback.GRADIENT_ACC_SPECIAL_STACK} b", "custom": {"k": 1}},
    {
        "nn_module_stack": {"m": ("m", "M")},
        "source_fn_stack": [("f", torch.relu)],
        "original_aten": torch.ops.aten.relu.default,
        "autograd_backward": True,
        "from_node": [],
        "val": 1,
    },
]


@pytest.mark.parametrize("current", _CURRENT_METAS, ids=range(len(_CURRENT_METAS)))
@pytest.mark.parametrize("old", [{}, {"from_node": ["mine"], "custom": "mine", "val": 2}])
def test_traced_meta_is_what_the_tracer_writes(
    current: dict[str, Any], old: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``traced_meta`` under a preserved current meta, with an old meta written over it, equals
    the meta torch's ``TracerBase.create_node`` gives a node with the old meta written over it:
    keys in order, values equal."""
    tracer = fx.proxy.GraphAppendingTracer(fx.Graph())
    with fx_traceback.preserve_node_meta():
        monkeypatch.setattr(fx_traceback, "current_meta", current)
        node = tracer.create_node("call_function", torch.relu, (), {}, "relu")
        expected = {**node.meta}
        expected.update(old)
        got = fxmeta.traced_meta(current, _get_seq_nr(node.name), placed=old)
        got.update(old)
    assert list(got) == list(expected)
    for key, value in got.items():  # copy.copy of an operator is another, equal-looking object
        assert type(value) is type(expected[key]) and repr(value) == repr(expected[key]), key


def _graph() -> fx.GraphModule:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> Any:
            y = torch.relu(x)
            d = torch.abs(y)
            b = torch.neg(i)
            z = torch.sigmoid(x)
            return d + b + z + y

    return fx.symbolic_trace(M())


def _state(gm: fx.GraphModule) -> tuple[Any, ...]:
    """What rollback must put back: nodes with names, args and meta, orders, name space."""
    graph = gm.graph
    nodes = [
        (n.name, n.op, n.target, str(n.args), str(n.kwargs), dict(n.meta)) for n in graph.nodes
    ]
    return nodes, orders(gm), names.save(graph)


def test_rollback_restores_orders_after_crossing_edits() -> None:
    """Edits through the journal that make one node an input of another and then take it from
    a third, retarget, re-meta, move and create nodes: ``rollback`` gives back the graph's
    nodes, each node's users order, the find_nodes index order and the name space as they were
    (a rollback that saved users orders after the first edit touched them would leave a user
    that no longer uses the node)."""
    gm = _graph()
    before = _state(gm)
    by = {n.name: n for n in gm.graph.nodes}
    y, d, b, i, z = by["relu"], by["abs_1"], by["neg"], by["i"], by["sigmoid"]
    journal = GraphJournal(gm)
    journal.set_args(b, (y,))  # y gains a user
    journal.set_args(d, (z,))  # and loses the one it had
    journal.set_target(z, torch.tanh)
    journal.set_meta(y, "tag", 1)
    journal.replace_meta(i, {"other": True})
    new = journal.call_function(torch.exp, (y,), after=y)
    journal.replace_all_uses_with(z, new)
    journal.move_before(b, y)
    assert _state(gm) != before
    journal.rollback()
    assert _state(gm) == before
    gm.graph.lint()


def test_checkpoint_rollback_restores_edits_made_by_fx() -> None:
    """Edits made with fx's own methods after a checkpoint (a created node, a rewired user, an
    erased node, a rename): ``rollback`` gives back the graph as the checkpoint saw it."""
    gm = _graph()
    before = _state(gm)
    by = {n.name: n for n in gm.graph.nodes}
    journal = GraphJournal(gm)
    journal.checkpoint()
    with gm.graph.inserting_after(by["relu"]):
        new = gm.graph.call_function(torch.exp, (by["relu"],))
    by["abs_1"].replace_input_with(by["relu"], new)
    by["sigmoid"].replace_all_uses_with(by["relu"])
    gm.graph.erase_node(by["sigmoid"])
    by["neg"].name = "renamed"
    journal.rollback()
    assert _state(gm) == before
    gm.graph.lint()


def test_journal_does_not_rollback_twice_or_after_commit() -> None:
    """A committed journal refuses to roll back; its edits stay."""
    gm = _graph()
    journal = GraphJournal(gm)
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    journal.set_meta(relu, "tag", 1)
    journal.commit()
    with pytest.raises(RuntimeError, match="committed"):
        journal.rollback()
    assert relu.meta["tag"] == 1
    assert copy.copy(gm.graph) is not None


class _Buckets(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.relu(x) + torch.relu(y)
        return torch.relu(a) + x


def _shuffled_index() -> fx.Graph:
    """``_Buckets`` traced, then some nodes re-filed last in their buckets (new meta dicts,
    new args), as passes leave them."""
    graph = fx.symbolic_trace(_Buckets()).graph
    nodes = list(graph.nodes)
    for i in (0, 2, 1, 5):
        nodes[i].meta = dict(nodes[i].meta)
    nodes[4].args = tuple(nodes[4].args)
    return graph


def _index(graph: fx.Graph) -> list[tuple[str, list[str]]]:
    table = graph._find_nodes_lookup_table.table
    return [(str(key), [n.name for n in bucket]) for key, bucket in table.items()]


def test_refile_as_python_code_is_what_python_code_leaves() -> None:
    """A graph whose find_nodes buckets are out of graph order: ``refile_as_python_code``
    leaves the index (buckets, their order, each bucket's nodes) as stock's
    ``Graph.python_code`` does, on two graphs made the same way."""
    from arm_accel.fxstock import order

    stock, ours = _shuffled_index(), _shuffled_index()
    assert _index(stock) == _index(ours)
    assert _index(stock) != _index(fx.symbolic_trace(_Buckets()).graph), "not shuffled"
    stock.python_code(root_module="self")
    order.refile_as_python_code(ours)
    assert _index(ours) == _index(stock)
