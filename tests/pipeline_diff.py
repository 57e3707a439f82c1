"""Lower one exported program stock and accelerated, recording the graph after every pass of
the Arm pipeline, for the pass-by-pass differential tests."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from arm_accel.control import switch
from arm_accel.runtime import eval_counter
from arm_accel.testing import GraphLabels, assert_graphs_identical, tracking_graphs
from arm_accel.tools import models
from support.eval_keys import file_number
from torch import fx

#: (pass name, graph after it, modified, users order and find_nodes index order after it,
#: ``<eval_with_key>`` numbers the pass took)
PassRecord = tuple[str, fx.GraphModule, bool, tuple[Any, ...], int]


@dataclass
class Lowering:
    passes: list[PassRecord]
    tosa: list[bytes]
    #: ``<eval_with_key>`` numbers: taken by the whole lowering, and those of the edge program's
    #: module and of each lowered module's program's module, counted from the lowering's start
    numbers: tuple[int, ...]


def users_order(graph_module: fx.GraphModule) -> tuple[tuple[int, ...], ...]:
    """Each node's users by position, in ``node.users`` order: later passes iterate it, and a
    deep copy (which rebuilds it in graph order) would not keep it."""
    position = {n: i for i, n in enumerate(graph_module.graph.nodes)}
    return tuple(tuple(position[u] for u in n.users) for n in graph_module.graph.nodes)


def index_order(graph_module: fx.GraphModule) -> tuple[tuple[int, ...], ...]:
    """The nodes by position in each bucket of the graph's find_nodes index, in its order
    (``find_nodes(sort=False)`` returns it; a deep copy rebuilds it), buckets sorted by their
    first node."""
    graph = graph_module.graph
    position = {n: i for i, n in enumerate(graph.nodes)}
    buckets = graph._find_nodes_lookup_table.table.values()
    return tuple(sorted(tuple(position[n] for n in bucket) for bucket in buckets if bucket))


def orders(graph_module: fx.GraphModule) -> tuple[Any, ...]:
    """What a deep copy does not keep: :func:`users_order` and :func:`index_order`."""
    return users_order(graph_module), index_order(graph_module)


@contextmanager
def record_passes() -> Iterator[list[PassRecord]]:
    """A deep copy of the exported program's graph after each pass the Arm pass manager runs,
    with its users and find_nodes index orders and the ``<eval_with_key>`` numbers it took."""
    from executorch.backends.arm._passes import arm_pass_manager as apm

    records: list[PassRecord] = []
    adapter = apm._ExportedProgramGraphPassAdapter
    original = adapter.call

    def call(self: Any, exported_program: Any) -> Any:
        start = eval_counter.position()
        result = original(self, exported_program)
        numbers = eval_counter.position() - start
        gm = result.exported_program.graph_module
        name = apm._graph_pass_name(self.graph_pass)
        records.append((name, copy.deepcopy(gm), result.modified, orders(gm), numbers))
        return result

    adapter.call = call  # type: ignore[method-assign]
    try:
        yield records
    finally:
        adapter.call = original  # type: ignore[method-assign]


def lower(exported: Any, mode: str, accelerated: bool) -> Lowering:
    """``models.lower`` of a deep copy of ``exported``, with acceleration on or off."""
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    program = copy.deepcopy(exported)
    with tracking_graphs(), record_passes() as records:
        start = eval_counter.position()
        if accelerated:
            edge = models.lower(program, mode)
        else:
            with switch.disabled():
                edge = models.lower(program, mode)
        end = eval_counter.position()
    gm = edge.exported_program().graph_module
    lowered = [m.original_module.graph_module for _, m, _ in get_lowered_submodules(gm)]
    numbers = (end - start, *(file_number(m) - start for m in (gm, *lowered)))
    return Lowering(records, models.tosa_bytes(edge), numbers)


def assert_passes_identical(
    stock: list[PassRecord], accelerated: list[PassRecord], where: str = ""
) -> None:
    """Same passes in the same order, each with the same ``modified``, an identical graph after
    it (``assert_graphs_identical``, provenance graphs numbered over the whole lowering: a
    record names the same graph as another, in any pass, exactly when stock's does), the
    same users and find_nodes index orders, and as many ``<eval_with_key>`` numbers taken."""
    assert [p[0] for p in stock] == [p[0] for p in accelerated], f"{where}pass lists differ"
    labels = (GraphLabels(), GraphLabels())
    for (name, expected, modified, order, numbers), (
        _,
        actual,
        modified_ours,
        order_ours,
        ours,
    ) in zip(stock, accelerated, strict=True):
        assert modified == modified_ours, f"{where}{name}: modified {modified} != {modified_ours}"
        assert numbers == ours, (
            f"{where}{name}: took {ours} <eval_with_key> numbers, stock {numbers}"
        )
        try:
            assert_graphs_identical(expected, actual, labels)
        except AssertionError as exc:
            raise AssertionError(f"{where}after {name}: {exc}") from None
        (users, index), (users_ours, index_ours) = order, order_ours
        if users != users_ours:  # same nodes (just checked), so the same length
            first = next(
                i for i, (a, b) in enumerate(zip(users, users_ours, strict=True)) if a != b
            )
            raise AssertionError(f"{where}after {name}: users order differs at node {first}")
        if index != index_ours:
            raise AssertionError(f"{where}after {name}: find_nodes index order differs")


def assert_lowerings_identical(stock: Lowering, accelerated: Lowering) -> None:
    """Every pass identical (:func:`assert_passes_identical`), the same TOSA bytes, and the
    ``<eval_with_key>`` counter moved as stock's (:attr:`Lowering.numbers`)."""
    assert_passes_identical(stock.passes, accelerated.passes)
    assert stock.tosa == accelerated.tosa, "TOSA bytes differ"
    assert stock.numbers == accelerated.numbers, (
        "<eval_with_key> numbers",
        stock.numbers,
        accelerated.numbers,
    )
