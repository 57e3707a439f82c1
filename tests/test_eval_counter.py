"""torch's ``<eval_with_key>.N`` counter: the numbers ``arm_accel.runtime.eval_counter`` says
stock's operations take, measured on stock's; and the counter's own operations.

The whole lowering's and each Arm pass's numbers against stock's: ``pipeline_diff`` (used by
``test_retrace_engine.py::test_every_pass_identical_to_stock``, the fuzz and the decoder
tests); a rolled-back call's: ``test_fault_injection.py``; the quantize flow's:
``test_quantize_flow.py::test_eval_counter_moves_as_stocks``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from arm_accel.control import switch
from arm_accel.edge import decompositions
from arm_accel.runtime import eval_counter
from executorch.exir import to_edge
from executorch.exir.pass_base import ExportPass
from support.eval_keys import relative_stack_traces
from torch import fx


def _numbers(action: Callable[[], Any]) -> int:
    start = eval_counter.position()
    action()
    return eval_counter.position() - start


class _Conv(torch.nn.Module):
    """Parameters and a batch-norm's buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x))).flatten(1)


class _Constant(torch.nn.Module):
    """A lifted tensor constant and a decomposed op."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.tensor([2.0, 3.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.hardswish(x * self.scale)


class _Mutation(torch.nn.Module):
    """A buffer the program mutates."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("seen", torch.zeros(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.add_(1)
        return x + self.seen


PROGRAMS: dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...]]] = {
    "conv": (_Conv().eval(), (torch.randn(1, 3, 8, 8),)),
    "constant": (_Constant(), (torch.randn(4, 2),)),
    "mutation": (_Mutation(), (torch.randn(2),)),
}


def _edge_graph() -> fx.GraphModule:
    torch.manual_seed(0)
    module, inputs = PROGRAMS["conv"]
    return to_edge(torch.export.export(module, inputs)).exported_program().graph_module


def test_export_pass_numbers_are_stocks() -> None:
    """Stock's ``ExportPass()``, its ``call`` on a graph without submodules, and a
    ``GraphModule.recompile()`` (acceleration off) take the numbers ``EXPORT_PASS_INIT``,
    ``EXPORT_PASS_CALL`` and ``RECOMPILE`` say."""
    gm = _edge_graph()
    with switch.disabled():
        assert _numbers(ExportPass) == eval_counter.EXPORT_PASS_INIT
        export_pass = ExportPass()
        assert _numbers(lambda: export_pass.call(gm)) == eval_counter.EXPORT_PASS_CALL
        assert _numbers(gm.recompile) == eval_counter.RECOMPILE


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_decomposition_numbers_are_stocks(name: str) -> None:
    """Stock's ``run_decompositions`` (acceleration off) takes its unlift's numbers (what
    ``ep.module()`` takes on the same program) and ``DECOMPOSITION_NUMBERS`` more, on programs
    with parameters and buffers, a lifted constant, a mutated buffer."""
    torch.manual_seed(0)
    module, inputs = PROGRAMS[name]
    ep = torch.export.export(module, inputs)
    with switch.disabled():
        unlift = _numbers(ep.module)
        table = torch.export.default_decompositions()
        whole = _numbers(lambda: ep.run_decompositions(table))
    assert whole - unlift == decompositions.DECOMPOSITION_NUMBERS, (whole, unlift)


def test_take_rewind_numbered_scratch() -> None:
    """``take`` moves the counter by its count and returns the first number; ``rewind`` moves
    it back and refuses to move forward; ``numbered`` compiles under a given number and
    ``scratch`` gives back what its block took, leaving the counter where it was; a negative
    count is refused."""
    start = eval_counter.position()
    assert eval_counter.take(3) == start
    assert eval_counter.position() == start + 3
    with pytest.raises(ValueError, match="rewind forward"):
        eval_counter.rewind(start + 4)
    eval_counter.rewind(start + 1)
    assert eval_counter.position() == start + 1
    with pytest.raises(ValueError, match="cannot take"):
        eval_counter.take(-1)
    graph = fx.Graph()  # code no earlier compile had (so no memo serves it)
    graph.output(graph.placeholder(f"x_{start}"))
    with eval_counter.numbered(start):
        gm = fx.GraphModule(torch.nn.Module(), graph)
    assert gm.forward.__code__.co_filename == f"<eval_with_key>.{start}"
    assert eval_counter.position() == start + 1
    with eval_counter.scratch():
        fx.GraphModule(torch.nn.Module(), fx.Graph())
        assert eval_counter.position() == start + 2
    assert eval_counter.position() == start + 1


def test_a_second_models_stack_traces_after_a_lowering_are_stocks() -> None:
    """One script lowers a first model (``convnet``, FP) and then quantizes and re-exports a
    second (``dscnnkws``), stock then accelerated in one process: the second's re-exported
    stack traces, which name the converted module's generated file ``<eval_with_key>.N``,
    are stock's with each ``N`` counted from the script's start (they were not while the
    lowering's modelled re-traces took no numbers)."""
    import arm_accel
    from arm_accel.tools import models

    first, first_inputs, first_mode = models.build("convnet")
    second, second_inputs, second_mode = models.build("dscnnkws")
    runs = []
    for accelerated in (False, True):
        with arm_accel.enabled() if accelerated else arm_accel.disabled():
            start = eval_counter.position()
            torch.manual_seed(0)
            models.lower(models.export_for_arm(first, first_inputs, first_mode), first_mode)
            program = models.export_for_arm(second, second_inputs, second_mode)
        traces = relative_stack_traces(program, start)
        assert any("<eval_with_key>.+" in t for t in traces), "no trace names generated code"
        runs.append(traces)
    assert runs[0] == runs[1]
