"""The edge dialect's dtype check (``_check_tensor_args_matching_op_allowed_dtype``, a fake run
of the whole graph) answered from the memo for a graph it passed before in the lowering
(``edge/dtype_check.py``). Every test compares with what stock's check does on the same graph:
passes, raises, and what the key tells apart."""

from __future__ import annotations

import copy
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import executorch.exir.verification.verifier as verifier
import pytest
import torch
from arm_accel import PassStats, patches
from arm_accel.control import counters
from arm_accel.edge import dtype_check
from arm_accel.runtime import collector
from arm_accel.tools import models
from torch._export.verifier import SpecViolationError


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(self.fc(x)).permute(1, 0) * 2.0


def _edge_gm() -> Any:
    from executorch.exir import to_edge

    torch.manual_seed(0)
    ep = torch.export.export(_Net().eval(), (torch.randn(3, 8),))
    return to_edge(ep).exported_program().graph_module


def _counts() -> PassStats:
    return counters.snapshot().get(dtype_check.STATS_NAME, PassStats())


def _check(gm: Any) -> None:
    """The check as the verifier calls it (the module attribute), inside a lowering's scope."""
    with collector.lowering():
        verifier._check_tensor_args_matching_op_allowed_dtype(gm)


def test_installed_and_pinned() -> None:
    """The row is installed here and replaced stock's function; the stock one is kept."""
    stock = patches.original("verifier.dtype_check")
    assert verifier._check_tensor_args_matching_op_allowed_dtype is not stock
    assert stock.__module__ == "executorch.exir.verification.verifier"


def test_a_graph_checked_again_is_answered_from_the_memo() -> None:
    """The second check of a graph (and of its deep copy, as ``to_backend``'s fake program
    makes) does not run; the first ran stock's check, which passed."""
    gm = _edge_gm()
    patches.original("verifier.dtype_check")(gm)  # stock passes on this graph
    before = _counts()
    _check(gm)
    _check(gm)
    _check(copy.deepcopy(gm))
    after = _counts()
    assert after.calls - before.calls == 3
    assert after.accelerated - before.accelerated == 2


def test_outside_a_lowering_stock_runs() -> None:
    gm = _edge_gm()
    before = _counts()
    verifier._check_tensor_args_matching_op_allowed_dtype(gm)
    verifier._check_tensor_args_matching_op_allowed_dtype(gm)
    assert _counts() == before


def _violating(gm: Any) -> Any:
    """``gm`` with the relu's recorded result in another dtype than its input: stock's check
    finds the operator's dtype constraint broken."""
    gm = copy.deepcopy(gm)
    node = next(n for n in gm.graph.nodes if "relu" in str(n.target))
    node.meta["val"] = node.meta["val"].to(torch.int32)
    return gm


def test_a_check_that_raised_raises_again() -> None:
    """A failing check is never remembered: it raises on every call, as stock's does."""
    bad = _violating(_edge_gm())
    with pytest.raises(SpecViolationError):
        patches.original("verifier.dtype_check")(bad)
    for _ in range(2):
        with pytest.raises(SpecViolationError):
            _check(bad)


def test_the_key_tells_apart_what_the_check_reads() -> None:
    """An edited argument, placeholder value or recorded result dtype gives another key; the
    same graph and its deep copy give the same."""
    gm = _edge_gm()
    mode, key, _ = dtype_check.graph_key(gm)
    assert dtype_check.graph_key(copy.deepcopy(gm))[1] == key
    assert dtype_check.graph_key(_violating(gm))[1] != key

    edited = copy.deepcopy(gm)
    mul = next(n for n in edited.graph.nodes if "mul" in str(n.target))
    mul.args = (mul.args[0], 3.0)
    assert dtype_check.graph_key(edited)[1] != key

    edited = copy.deepcopy(gm)
    x = next(n for n in edited.graph.nodes if n.op == "placeholder" and n.name == "x")
    with mode:
        x.meta["val"] = torch.empty(3, 8, dtype=torch.float64)
    assert dtype_check.graph_key(edited)[1] != key


def test_a_new_graph_is_served_the_calls_run_before() -> None:
    """A graph checked for the first time (a relu added at its end) is run, with the operator
    calls on the same fake values as the earlier check's served from it: the new call runs,
    and a broken dtype constraint is still found."""
    from executorch.exir.dialects._ops import ops as exir_ops

    gm = _edge_gm()
    _check(gm)
    edited = copy.deepcopy(gm)
    output = next(n for n in edited.graph.nodes if n.op == "output")
    (last,) = output.args[0]
    with edited.graph.inserting_before(output):
        relu = edited.graph.call_function(exir_ops.edge.aten.relu.default, (last,))
    relu.meta["val"] = last.meta["val"]
    output.args = ((relu,),)
    edited.recompile()
    _check(edited)
    served, run = dtype_check.last_calls()
    assert served == 5 and run == 1, (served, run)
    with pytest.raises(SpecViolationError):
        _check(_violating(edited))
    assert dtype_check.last_calls()[0] >= 2


class _QuantizableNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x))).relu()


def test_quantize_calls_are_served_by_the_fake_memo() -> None:
    """An INT edge graph checked for the first time inside a lowering: it passes, as stock's
    check does outside one, and the fake mode's memo served quantize/dequantize calls that
    repeat on the same fake values with other scales (counted under ``fake_memo.dispatch``);
    stock's check served none."""
    from arm_accel.runtime import fake_memo
    from executorch.exir import to_edge

    def served() -> int:
        return counters.snapshot().get(fake_memo.DISPATCH_STATS_NAME, PassStats()).accelerated

    torch.manual_seed(0)
    inputs = (torch.randn(3, 8),)
    gm = to_edge(models.export_for_arm(_QuantizableNet().eval(), inputs, "INT"))
    gm = gm.exported_program().graph_module
    assert any("quantize_per_tensor" in str(n.target) for n in gm.graph.nodes)
    before = served()
    verifier._check_tensor_args_matching_op_allowed_dtype(copy.deepcopy(gm))  # stock's
    assert served() == before
    _check(gm)
    assert dtype_check.last_calls()[1] > 0
    assert served() > before


def test_validator_sits_above_the_interpreter() -> None:
    """The verifier's module builds the stock validator with the remembering interpreter
    under it: stock's ``call_function`` runs first and reaches ours through ``super()``."""
    from executorch.exir.verification.arg_validator import EdgeOpArgValidator

    mro = verifier.EdgeOpArgValidator.__mro__
    assert mro[1] is EdgeOpArgValidator
    assert mro.index(EdgeOpArgValidator) < mro.index(torch.fx.Interpreter)
    assert any(c.__name__ == "_Remembering" for c in mro)


def test_symbolic_shapes_decline() -> None:
    """A program exported with a dynamic dimension declines (stock's check runs), counted."""
    from executorch.exir import to_edge

    batch = torch.export.Dim("batch", min=2, max=8)
    ep = torch.export.export(_Net().eval(), (torch.randn(3, 8),), dynamic_shapes=({0: batch},))
    gm = to_edge(ep).exported_program().graph_module
    before = _counts()
    _check(gm)
    after = _counts()
    assert sum(after.fallbacks.values()) - sum(before.fallbacks.values()) == 1
    assert after.accelerated == before.accelerated


def test_lowering_is_identical_and_checks_are_remembered() -> None:
    """llama1 lowered stock and accelerated: the TOSA bytes are equal, and the accelerated
    lowering answered checks from the memo and served operator calls to the others."""
    import arm_accel

    model, inputs, mode = models.build("llama1")
    exported = models.export_for_arm(model, inputs, mode)
    with arm_accel.disabled():
        stock = models.tosa_bytes(models.lower(copy.deepcopy(exported), mode))
    before, served = _counts(), dtype_check.served_calls()
    accel = models.tosa_bytes(models.lower(copy.deepcopy(exported), mode))
    assert accel == stock
    assert _counts().accelerated - before.accelerated >= 4
    assert dtype_check.served_calls() - served > 100
