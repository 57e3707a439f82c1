"""The garbage collector inside the stages arm-accel serves (``arm_accel.runtime.collector``).

Compares the collector's state (frozen objects, thresholds) inside and after a scope with what
it was before: changed inside only with acceleration on and nothing frozen by the process,
restored exactly when the outermost scope ends, also when the block raises; and which stock
calls run in a scope (``to_backend``, ``torch.export``, ``to_executorch``). That lowerings
through these scopes equal stock's is what the every-pass tests check
(tests/test_retrace_engine.py, tests/test_decompositions.py).
"""

from __future__ import annotations

import gc

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
    assert seen[0] == (seen[0][0], False) and seen[0][0] > 0 and seen[1][0] == 0, seen
    assert gc.get_freeze_count() == 0
