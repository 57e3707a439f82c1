"""The oracles of ``arm_accel.testing`` on hand-made graph pairs: a copy is equal and identical;
each single difference is caught by the assertion whose contract covers it, and only by it."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from arm_accel.testing import assert_graphs_equal, assert_graphs_identical
from torch import fx


class _Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x).reshape(2, 6)
        return torch.sum(y, dim=1, keepdim=True)


def _graph() -> fx.GraphModule:
    gm = fx.symbolic_trace(_Model())
    vals = {"x": torch.empty(3, 4), "relu": torch.empty(3, 4), "reshape": torch.empty(2, 6)}
    vals["sum_1"] = torch.empty(2, 1)
    for node in gm.graph.nodes:
        if node.op != "output":
            node.meta["val"] = vals[node.name]
    return gm


def _node(gm: fx.GraphModule, name: str) -> fx.Node:
    return next(n for n in gm.graph.nodes if n.name == name)


def _edit_meta(name: str, key: str, value: object) -> Callable[[fx.GraphModule], None]:
    def edit(gm: fx.GraphModule) -> None:
        _node(gm, name).meta[key] = value

    return edit


def _retarget(gm: fx.GraphModule) -> None:
    _node(gm, "relu").target = torch.sigmoid


def _rename(gm: fx.GraphModule) -> None:
    _node(gm, "relu").name = "relu_renamed"


def _kwarg(gm: fx.GraphModule) -> None:
    _node(gm, "sum_1").kwargs = {"keepdim": False}


def _list_for_tuple(gm: fx.GraphModule) -> None:
    node = _node(gm, "sum_1")
    node.args = (node.args[0], [1])


# (difference, equal still holds, identical still holds)
CASES: list[tuple[str, Callable[[fx.GraphModule], None], bool, bool]] = [
    ("target", _retarget, False, False),
    ("kwargs", _kwarg, False, False),
    ("list for tuple", _list_for_tuple, False, False),
    ("name", _rename, True, False),
    ("val shape", _edit_meta("relu", "val", torch.empty(4, 3)), False, False),
    ("val strides", _edit_meta("relu", "val", torch.empty(4, 3).t()), True, False),
    ("extra meta key", _edit_meta("relu", "stack_trace", "here"), True, False),
    ("seq_nr", _edit_meta("relu", "seq_nr", 7), True, True),
]


def _arg_position(gm: fx.GraphModule) -> None:
    # reshape reads the placeholder instead of relu: same op, target, shapes
    node = _node(gm, "reshape")
    node.args = (_node(gm, "x"), *node.args[1:])


CASES.append(("arg points at another node", _arg_position, False, False))


def test_a_copy_is_equal_and_identical() -> None:
    a = _graph()
    b = copy.deepcopy(a)
    assert_graphs_equal(a, b)
    assert_graphs_identical(a, b)


@pytest.mark.parametrize(("what", "edit", "equal", "identical"), CASES, ids=[c[0] for c in CASES])
def test_one_difference(
    what: str, edit: Callable[[fx.GraphModule], None], equal: bool, identical: bool
) -> None:
    a = _graph()
    b = copy.deepcopy(a)
    edit(b)
    for check, holds in ((assert_graphs_equal, equal), (assert_graphs_identical, identical)):
        if holds:
            check(a, b)
        else:
            with pytest.raises(AssertionError):
                check(a, b)


def _sources() -> list[fx.Node]:
    """A node of each of three graphs."""
    return [fx.Graph().placeholder("p") for _ in range(3)]


def _with_provenance(first: fx.Node, second: fx.Node) -> fx.GraphModule:
    """``_graph()`` whose relu and sum records are made from ``first``, reshape's from
    ``second``."""
    from torch.fx.traceback import NodeSource, NodeSourceAction

    gm = _graph()
    for name, source in (("relu", first), ("reshape", second), ("sum_1", first)):
        _node(gm, name).meta["from_node"] = [NodeSource(source, "p", NodeSourceAction.CREATE)]
    return gm


def test_provenance_graphs_compare_up_to_renaming() -> None:
    """Records naming other graphs in the same pattern are identical; records naming one graph
    where the other side's name two are not; labels shared by two comparisons (one lowering)
    hold each side's graphs to one renaming across both."""
    from arm_accel.testing import GraphLabels

    s = _sources()
    assert_graphs_identical(_with_provenance(s[0], s[1]), _with_provenance(s[1], s[2]))
    with pytest.raises(AssertionError, match="from_node"):
        assert_graphs_identical(_with_provenance(s[0], s[1]), _with_provenance(s[0], s[0]))
    labels = (GraphLabels(), GraphLabels())
    assert_graphs_identical(_with_provenance(s[0], s[1]), _with_provenance(s[1], s[2]), labels)
    assert_graphs_identical(_with_provenance(s[1], s[0]), _with_provenance(s[2], s[1]), labels)
    with pytest.raises(AssertionError, match="from_node"):
        assert_graphs_identical(_with_provenance(s[1], s[0]), _with_provenance(s[1], s[2]), labels)


def test_a_graph_at_a_freed_graphs_address_is_another_graph() -> None:
    """A ``graph_id`` is an address, which a later graph takes once the first is freed: with
    the session's ``tracking_graphs`` the records of the two are told apart by the graph's
    number; by ``graph_id`` alone they would name one graph."""
    s = _sources()
    a = _with_provenance(s[0], s[1])
    b = _with_provenance(s[0], s[1])
    reused = _node(b, "reshape").meta["from_node"][0].node_info
    reused.graph_id = id(s[0].graph)  # s[1]'s graph where s[0]'s was
    assert reused.graph_serial is not None
    assert_graphs_identical(a, b)
    for gm in (a, b):
        for node in gm.graph.nodes:
            for record in node.meta.get("from_node", []):
                del record.node_info.graph_serial  # as if made outside tracking_graphs
    with pytest.raises(AssertionError, match="from_node"):
        assert_graphs_identical(a, b)


def _with_records(named: Callable[[fx.GraphModule], fx.Node]) -> fx.GraphModule:
    """``_graph()`` whose relu holds a ``source_fn_stack`` record naming ``named(gm)``."""
    gm = _graph()
    _node(gm, "relu").meta["source_fn_stack"] = [(named(gm), torch.relu)]
    return gm


def _foreign(name: str, target: object = torch.relu) -> Callable[[fx.GraphModule], fx.Node]:
    return lambda gm: fx.Node(fx.Graph(), name, "call_function", target, (), {})


def test_records_naming_nodes_compare_by_name() -> None:
    """``source_fn_stack`` records naming nodes: a node of the graph by name, one of another
    graph by name, op and target (each side's nodes are other objects); a record naming the
    graph's own node differs from one naming another graph's node of that name."""
    assert_graphs_identical(
        _with_records(lambda gm: _node(gm, "relu")), _with_records(lambda gm: _node(gm, "relu"))
    )
    assert_graphs_identical(_with_records(_foreign("relu")), _with_records(_foreign("relu")))
    for other in (
        _foreign("relu_1"),
        _foreign("relu", torch.sigmoid),
        lambda gm: _node(gm, "relu"),
        lambda gm: _node(gm, "x"),
    ):
        with pytest.raises(AssertionError, match="source_fn_stack"):
            assert_graphs_identical(_with_records(_foreign("relu")), _with_records(other))
    with pytest.raises(AssertionError, match="source_fn_stack"):
        assert_graphs_identical(
            _with_records(lambda gm: _node(gm, "relu")), _with_records(lambda gm: _node(gm, "x"))
        )
