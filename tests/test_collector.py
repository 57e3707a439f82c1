"""The garbage collector inside the stages arm-accel serves (``arm_accel.runtime.collector``).

Compares the collector's state (frozen objects, thresholds) inside and after a scope with what
it was before: changed inside only with acceleration on and nothing frozen by the process,
restored exactly when the outermost scope ends, also when the block raises; and which stock
calls run in a scope (``to_backend``, ``torch.export``, ``to_executorch``, the quantization flow's
steps). That lowerings
through these scopes equal stock's is what the every-pass tests check
(tests/test_retrace_engine.py, tests/test_decompositions.py).
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from arm_accel.control import switch
from arm_accel.runtime import collector


def test_freezes_and_restores() -> None:
    """Inside: objects frozen, the old generation's threshold raised; after: as before."""
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with switch.enabled(), collector.lowering():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[2] == max(before[2], collector.OLD_GENERATION_THRESHOLD)
        assert gc.get_threshold()[:2] == before[:2]
        with collector.lowering():  # nested: the outer scope owns the state
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_restores_when_the_block_raises() -> None:
    """An exception in the block: the collector is put back as it was."""
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), switch.enabled(), collector.lowering():
        raise RuntimeError("pass failed")
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_left_alone_when_off_or_already_frozen() -> None:
    """With acceleration off, or objects frozen by the process: nothing changes (an unfreeze
    would undo the process's own freeze)."""
    before = gc.get_threshold()
    with switch.disabled(), collector.lowering():
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    gc.freeze()
    try:
        with switch.enabled(), collector.lowering():
            assert gc.get_threshold() == before
        # Still frozen (freed objects leave the count, so compare with zero, not a number).
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_to_backend_runs_in_a_scope() -> None:
    """After activation ``EdgeProgramManager.to_backend`` opens a scope: a partitioner sees
    objects frozen with acceleration on and none with it off."""
    import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
    import torch
    from executorch.exir import to_edge
    from executorch.exir.backend.partitioner import Partitioner, PartitionResult

    seen: list[int] = []

    class Probe(Partitioner):
        def partition(self, exported_program: object) -> PartitionResult:
            seen.append(gc.get_freeze_count())
            return PartitionResult(tagged_exported_program=exported_program, partition_tags={})

    program = torch.export.export(torch.nn.ReLU(), (torch.randn(2, 3),))
    for on in (True, False):
        with switch.enabled() if on else switch.disabled():
            to_edge(program).to_backend(Probe())
    assert seen[0] > 0 and seen[1] == 0, seen


def test_collecting_less_does_not_mark_a_lowering() -> None:
    """``collecting_less`` freezes and raises the threshold as ``lowering`` does, without
    marking the thread as lowering (what ``in_lowering`` tells other accelerations)."""
    before = gc.get_threshold()
    with switch.enabled(), collector.collecting_less():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[2] == max(before[2], collector.OLD_GENERATION_THRESHOLD)
        assert not collector.in_lowering()
        with collector.lowering():
            assert collector.in_lowering()
        assert not collector.in_lowering() and gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_export_runs_in_a_scope() -> None:
    """After activation ``torch.export.export`` opens a scope, not marked as lowering: the
    traced forward (non-strict, so it runs as Python) sees objects frozen with acceleration on
    and none with it off."""
    import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
    import torch

    seen: list[tuple[int, bool]] = []

    class Probe(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append((gc.get_freeze_count(), collector.in_lowering()))
            return x + 1

    for on in (True, False):
        with switch.enabled() if on else switch.disabled():
            torch.export.export(Probe(), (torch.randn(2, 3),), strict=False)
    assert seen[0][0] > 0 and seen[-1][0] == 0, seen
    assert not any(lowering for _, lowering in seen), seen
    assert gc.get_freeze_count() == 0


def test_to_executorch_runs_in_a_scope() -> None:
    """After activation ``EdgeProgramManager.to_executorch`` opens a scope, not marked as
    lowering: a pass it runs sees objects frozen with acceleration on and none with it off."""
    import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from torch.fx.passes.infra.pass_base import PassResult

    seen: list[tuple[int, bool]] = []

    def probe(gm: torch.fx.GraphModule) -> PassResult:
        seen.append((gc.get_freeze_count(), collector.in_lowering()))
        return PassResult(gm, False)

    program = torch.export.export(torch.nn.ReLU(), (torch.randn(2, 3),))
    for on in (True, False):
        with switch.enabled() if on else switch.disabled():
            to_edge(program).to_executorch(ExecutorchBackendConfig(passes=[probe]))
    assert len(seen) == 2, seen
    assert seen[0][0] > 0 and not seen[0][1] and seen[1][0] == 0, seen
    assert gc.get_freeze_count() == 0


def _constant_graph() -> Any:
    """``w * 2`` on a parameter ``w``: a node the constant fold asks its constraint about."""
    import torch

    graph = torch.fx.Graph()
    doubled = graph.call_function(torch.ops.aten.mul.Tensor, (graph.get_attr("w"), 2))
    graph.output(doubled)
    root = torch.nn.Module()
    root.w = torch.nn.Parameter(torch.ones(3))
    return torch.fx.GraphModule(root, graph)


def test_quantization_steps_run_in_scopes() -> None:
    """After activation the steps ``prepare_pt2e`` and ``convert_pt2e`` look up by name open a
    scope: a probe each step calls (prepare's observer callback, an observer's qparams in the
    conversion, the constant fold's constraint) sees objects frozen with acceleration on and
    none with it off."""
    import copy

    import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
    import torch
    import torchao.quantization.pt2e.quantize_pt2e as quantize_pt2e
    from arm_accel.tools import models
    from torchao.quantization.pt2e.observer import MinMaxObserver, ObserverBase

    seen: dict[str, list[int]] = {"prepare": [], "convert": [], "fold": []}

    class Probe(MinMaxObserver):
        def calculate_qparams(self) -> tuple[torch.Tensor, torch.Tensor]:
            seen["convert"].append(gc.get_freeze_count())
            return super().calculate_qparams()  # type: ignore[no-any-return]

    inputs = (torch.randn(2, 4),)
    graph = torch.export.export(torch.nn.Linear(4, 3), inputs, strict=True).module(
        check_guards=False
    )
    prepared = quantize_pt2e.prepare_pt2e(copy.deepcopy(graph), models.quantizer("INT"))
    prepared(*inputs)
    observer = next(n for n, m in prepared.named_modules() if isinstance(m, ObserverBase))
    for on in (True, False):
        with switch.enabled() if on else switch.disabled():
            quantize_pt2e.prepare(
                copy.deepcopy(graph),
                {},
                False,
                obs_or_fq_callback=lambda *_: seen["prepare"].append(gc.get_freeze_count()),
            )
            module = copy.deepcopy(prepared)
            probe = Probe(dtype=torch.int8, quant_min=-128, quant_max=127)
            probe(torch.randn(4))
            setattr(module, observer, probe)
            quantize_pt2e._convert_to_reference_decomposed_fx(module)

            def constraint(node: torch.fx.Node) -> bool:
                seen["fold"].append(gc.get_freeze_count())
                return True

            quantize_pt2e.constant_fold(_constant_graph(), constraint)
    for step, counts in seen.items():
        assert len(counts) >= 2, (step, counts)
        half = len(counts) // 2
        assert all(c > 0 for c in counts[:half]) and not any(counts[half:]), (step, counts)
    assert gc.get_freeze_count() == 0
