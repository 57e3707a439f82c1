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
