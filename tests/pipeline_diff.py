"""Lower one exported program stock and accelerated, recording the graph after every pass of
the Arm pipeline, for the pass-by-pass differential tests (issue 13)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from arm_accel import models, switch
from arm_accel.testing import assert_graphs_identical
from torch import fx


@dataclass
class Lowering:
    passes: list[tuple[str, fx.GraphModule, bool]]  # (pass name, graph after it, modified)
    tosa: list[bytes]


@contextmanager
def record_passes() -> Iterator[list[tuple[str, fx.GraphModule, bool]]]:
    """A deep copy of the exported program's graph after each pass the Arm pass manager runs."""
    from executorch.backends.arm._passes import arm_pass_manager as apm

    records: list[tuple[str, fx.GraphModule, bool]] = []
    adapter = apm._ExportedProgramGraphPassAdapter
    original = adapter.call

    def call(self: Any, exported_program: Any) -> Any:
        result = original(self, exported_program)
        gm = result.exported_program.graph_module
        records.append((apm._graph_pass_name(self.graph_pass), copy.deepcopy(gm), result.modified))
        return result

    adapter.call = call  # type: ignore[method-assign]
    try:
        yield records
    finally:
        adapter.call = original  # type: ignore[method-assign]


def lower(exported: Any, mode: str, accelerated: bool) -> Lowering:
    """``models.lower`` of a deep copy of ``exported``, with acceleration on or off."""
    program = copy.deepcopy(exported)
    with record_passes() as records:
        if accelerated:
            edge = models.lower(program, mode)
        else:
            with switch.disabled():
                edge = models.lower(program, mode)
    return Lowering(records, models.tosa_bytes(edge))


def assert_passes_identical(
    stock: list[tuple[str, fx.GraphModule, bool]],
    accelerated: list[tuple[str, fx.GraphModule, bool]],
    where: str = "",
) -> None:
    """Same passes in the same order, each with the same ``modified`` and an identical graph
    after it (``assert_graphs_identical``)."""
    assert [p[0] for p in stock] == [p[0] for p in accelerated], f"{where}pass lists differ"
    for (name, expected, modified), (_, actual, modified_ours) in zip(
        stock, accelerated, strict=True
    ):
        assert modified == modified_ours, f"{where}{name}: modified {modified} != {modified_ours}"
        try:
            assert_graphs_identical(expected, actual)
        except AssertionError as exc:
            raise AssertionError(f"{where}after {name}: {exc}") from None


def assert_lowerings_identical(stock: Lowering, accelerated: Lowering) -> None:
    """Every pass identical (:func:`assert_passes_identical`) and the same TOSA bytes."""
    assert_passes_identical(stock.passes, accelerated.passes)
    assert stock.tosa == accelerated.tosa, "TOSA bytes differ"
