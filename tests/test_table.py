"""Node table export: round trips on captured real graphs and malformed-input rejection."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from arm_accel import _native
from arm_accel.native import table
from support.native import needs_testing
from torch import fx


@functools.cache
def _tiny_graph() -> fx.GraphModule:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.permute(0, 2, 1).reshape(2, 12)
            return torch.sigmoid(y) + y

    from executorch.exir import to_edge

    edge = to_edge(torch.export.export(M(), (torch.randn(2, 3, 4),)))
    return edge.exported_program().graph_module


def test_round_trip_on_captured_graphs(captured) -> None:
    assert captured, "the lowering reached none of the view/permute passes"
    for record in captured:
        gm = record.graph_module
        constants = table.constant_names(getattr(record.pass_instance, "exported_program", None))
        t = table.export_table(gm, constants)
        assert _native.table_counts(t) == table.fx_counts(gm, constants), record.pass_name


def test_columns_match_fx() -> None:
    gm = _tiny_graph()
    t = table.export_table(gm)
    nodes = list(gm.graph.nodes)
    assert t.nodes == nodes
    index = t.index()
    for i, node in enumerate(nodes):
        assert table.OP_KINDS[t.op[i]] == node.op
        ins = t.in_idx[t.in_ptr[i] : t.in_ptr[i + 1]].tolist()
        assert ins == [index[a] for a in node.all_input_nodes]
        users = t.user_idx[t.user_ptr[i] : t.user_ptr[i + 1]].tolist()
        assert users == [index[u] for u in node.users]
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            assert t.shape_of(i) == list(val.shape)
            assert table.DTYPES[t.dtype[i]] == val.dtype
        else:
            assert t.shape_of(i) is None
        if node.op == "call_function":
            assert t.targets[t.target[i]] is node.target
    permutes = [i for i, n in enumerate(nodes) if "permute" in str(n.target)]
    views = [i for i, n in enumerate(nodes) if "view" in str(n.target)]
    assert permutes and views
    assert t.iargs_of(permutes[0]) == [0, 2, 1]
    assert t.iargs_of(views[0]) == [2, 12]


def test_classes_use_executorch_predicates() -> None:
    from executorch.exir.dialects._ops import ops as exir_ops

    e = exir_ops.edge.aten
    assert table.classify(e.permute_copy.default) == table.Cls.PERMUTE
    assert table.classify(e.view_copy.default) == table.Cls.VIEW
    assert table.classify(e.sigmoid.default) & table.Cls.ELEMENTWISE
    assert table.classify(e.mean.dim) == table.Cls.REDUCTION
    assert table.classify(e.convolution.default) == 0
    assert table.classify(exir_ops.backend.tosa.TABLE.default) & table.Cls.TOSA_TABLE
    assert table.classify(e.add.Tensor, excluded={e.add.Tensor}) & table.Cls.EXCLUDED


def test_symbolic_dims_are_flagged() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.permute(1, 0) * 2

    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(M(), (torch.randn(4, 3),), dynamic_shapes=({0: batch},))
    t = table.export_table(ep.graph_module)
    counts = _native.table_counts(t)
    assert counts["symbolic"] >= 2
    assert counts == table.fx_counts(ep.graph_module)
    sym = [i for i in range(len(t)) if t.flags[i] & table.Flag.SYMBOLIC]
    assert all(-1 in t.shape_of(i) for i in sym)


# Every column, a way to break it, and the message that must name the problem.
MALFORMED = [
    ("op", lambda t: t.op.astype(np.int64), "expected a 1-d numpy array of uint8"),
    ("op", lambda t: np.full_like(t.op, 9), "unknown op kind 9"),
    ("op", lambda t: t.op[:-1].copy(), "length"),
    ("target", lambda t: np.full_like(t.target, 99), "target code 99"),
    ("target", lambda t: t.target.astype(np.float32), "int32"),
    ("target_class", lambda t: np.full_like(t.target_class, 1 << 30), "unknown class bits"),
    ("in_ptr", lambda t: t.in_ptr[::-1].copy(), "starts at"),
    ("in_ptr", lambda t: t.in_ptr[:-1].copy(), "length"),
    ("in_idx", lambda t: -np.ones_like(t.in_idx), "expected 0 <= input"),
    ("in_idx", lambda t: np.full_like(t.in_idx, len(t.op) - 1), "expected 0 <= input"),
    ("user_ptr", lambda t: np.zeros_like(t.user_ptr), "ends at"),
    ("user_idx", lambda t: np.zeros_like(t.user_idx), "expected"),
    ("rank", lambda t: t.rank + 1, "dims in shape"),
    ("rank", lambda t: np.full_like(t.rank, -5), "rank -5"),
    ("shape_ptr", lambda t: t.shape_ptr + 1, "starts at"),
    ("shape", lambda t: -np.ones_like(t.shape), "dim -1"),
    ("dtype", lambda t: t.dtype[1:].copy(), "length"),
    ("iarg_ptr", lambda t: np.zeros_like(t.iarg_ptr), "ends at"),
    ("iarg", lambda t: np.concatenate([t.iarg, [1]]), "ends at"),
    ("flags", lambda t: t.flags | np.uint32(1 << 31), "unknown flag bits"),
    ("flags", lambda t: t.flags[::2], "C-contiguous|length"),
]


@pytest.mark.parametrize(("field", "breaker", "message"), MALFORMED)
def test_malformed_tables_raise_value_error(field, breaker, message) -> None:
    t = table.export_table(_tiny_graph())
    _native.table_counts(t)  # the unbroken table is valid
    setattr(t, field, breaker(t))
    with pytest.raises(ValueError, match=message) as info:
        _native.table_counts(t)
    assert field.split("_")[0] in str(info.value) or "node table" in str(info.value)


def test_non_contiguous_column_is_rejected() -> None:
    t = table.export_table(_tiny_graph())
    t.in_ptr = np.repeat(t.in_ptr, 2)[::2]
    assert not t.in_ptr.flags.c_contiguous
    with pytest.raises(ValueError, match="'in_ptr': array must be C-contiguous"):
        _native.table_counts(t)


def test_missing_column_is_rejected() -> None:
    t = table.export_table(_tiny_graph())
    del t.flags
    with pytest.raises(ValueError, match="'flags': missing"):
        _native.table_counts(t)


def test_cycle_in_csr_is_rejected() -> None:
    t = table.export_table(_tiny_graph())
    # Point the first node with an input at a later node: a back edge, i.e. a cycle.
    i = next(i for i in range(len(t)) if t.in_ptr[i + 1] > t.in_ptr[i])
    t.in_idx = t.in_idx.copy()
    t.in_idx[t.in_ptr[i]] = len(t) - 1
    with pytest.raises(ValueError, match="in_idx"):
        _native.table_counts(t)


# -- every native entry point rejects the same malformed tables ----------------------

BINDINGS = {
    "table_counts": lambda t: _native.table_counts(t),
    "collect_chains": lambda t: _native.collect_chains(t, int(table.Cls.PERMUTE | table.Cls.VIEW)),
    "duplicate_user_candidates": lambda t: _native.duplicate_user_candidates(
        t, np.zeros(len(t.target_class), dtype=np.int64)
    ),
    "constant_mask": lambda t: _native.constant_mask(t),
    "user_signatures": lambda t: _native.user_signatures(
        t, np.zeros(len(t.target_class), dtype=np.int64)
    ),
}
TEST_ONLY = {"duplicate_user_candidates"}


def _swap_user_lists(t: table.NodeTable) -> np.ndarray:
    """Users that no longer match the inputs: reverse the flat user list."""
    return t.user_idx[::-1].copy()


def _negative_ptr(t: table.NodeTable) -> np.ndarray:
    ptr = t.in_ptr.copy()
    ptr[1] = -3
    return ptr


def _self_loop(t: table.NodeTable) -> np.ndarray:
    """A node listed as its own input: the shortest cycle."""
    i = next(i for i in range(len(t)) if t.in_ptr[i + 1] > t.in_ptr[i])
    idx = t.in_idx.copy()
    idx[t.in_ptr[i]] = i
    return idx


def _backward_user(t: table.NodeTable) -> np.ndarray:
    """A user pointing back to an earlier node: a cycle through the user CSR."""
    i = next(i for i in range(len(t)) if t.user_ptr[i + 1] > t.user_ptr[i])
    idx = t.user_idx.copy()
    idx[t.user_ptr[i]] = 0
    return idx


EXTRA_MALFORMED = [
    ("user_idx", _swap_user_lists, "user_idx"),
    ("in_ptr", _negative_ptr, "in_ptr"),
    ("in_idx", _self_loop, "in_idx"),
    ("user_idx", _backward_user, "user_idx"),
    ("in_idx", lambda t: t.in_idx.astype(np.int32), "int64"),
    ("flags", lambda t: t.flags.reshape(1, -1), "1-d numpy array"),
    ("rank", lambda t: t.rank.tolist(), "numpy array"),
    ("shape", lambda t: np.repeat(t.shape, 2)[::2], "C-contiguous"),
]


@pytest.mark.parametrize(
    "binding",
    [pytest.param(b, marks=needs_testing) if b in TEST_ONLY else b for b in sorted(BINDINGS)],
)
@pytest.mark.parametrize(("field", "breaker", "message"), MALFORMED + EXTRA_MALFORMED)
def test_every_binding_rejects_malformed_tables(binding, field, breaker, message) -> None:
    call = BINDINGS[binding]
    t = table.export_table(_tiny_graph())
    call(t)  # the unbroken table is accepted
    setattr(t, field, breaker(t))
    with pytest.raises(ValueError, match=message) as info:
        call(t)
    # A CSR pointer/flat mismatch names both arrays; a short ``op`` (it sets the node count)
    # makes the next column the odd one out, and that is the field named.
    named = str(info.value)
    assert field in named or (field == "op" and "'target'" in named), f"{binding}: {named}"


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (np.zeros(3, dtype=np.int32), "expected a 1-d numpy array of int64"),
        (np.zeros((2, 2), dtype=np.int64), "expected a 1-d numpy array of int64"),
        ("not an array", "expected a 1-d numpy array of int64"),
        (np.zeros(99, dtype=np.int64), "length 99"),
        (np.zeros(0, dtype=np.int64), "length 0"),
        (np.zeros(64, dtype=np.int64)[::2], "C-contiguous|length"),
    ],
)
def test_group_key_is_checked(key, message) -> None:
    t = table.export_table(_tiny_graph())
    with pytest.raises(ValueError, match=message) as info:
        _native.user_signatures(t, key)
    assert "group_key" in str(info.value)
