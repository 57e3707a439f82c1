"""Inside ``cia_ops.collecting_once()`` a collection of CompositeImplicitAutograd ops
(``torch._export.utils._collect_all_valid_cia_ops``, run twice per ``run_decompositions``
call) materializes the C++ registrations once instead of once per ``torch.ops`` namespace.

Each test compares the collection in the block with stock's (the same function outside the
block, where every materialization runs) and counts the dispatcher queries each made.
"""

from __future__ import annotations

from collections.abc import Iterator

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import counters, patches
from arm_accel.edge import cia_ops
from torch._export import utils as export_utils


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The dispatch keys of every registration query the materializations make."""
    seen: list[str] = []
    stock = torch._C._dispatch_get_registrations_for_dispatch_key

    def counting(key: str = "") -> list[str]:
        seen.append(key)
        return stock(key)

    monkeypatch.setattr(torch._C, "_dispatch_get_registrations_for_dispatch_key", counting)
    yield seen


def _accelerated() -> int:
    return counters.snapshot().get(cia_ops.STATS_NAME, counters.PassStats()).accelerated


def test_collection_in_the_block_is_stocks_with_one_query(queries: list[str]) -> None:
    """The set of preservable CIA ops collected in the block equals stock's; stock queried the
    dispatcher once per non-aten namespace (more than ten here), the block once; counted."""
    assert export_utils._collect_all_valid_cia_ops is not patches.original(
        "edge.cia_ops.collect.utils"
    )
    stock = export_utils._collect_all_valid_cia_ops()
    stock_queries = len(queries)
    del queries[:]
    before = _accelerated()
    with cia_ops.collecting_once():
        ours = export_utils._collect_all_valid_cia_ops()
    assert ours == stock
    assert stock_queries > 10 and len(queries) == 1, (stock_queries, len(queries))
    assert _accelerated() == before + 1


def test_op_registered_between_collections_is_collected(queries: list[str]) -> None:
    """A CIA op defined between two collections of the same block (a new namespace, functional
    schema, a CompositeImplicitAutograd kernel): the second collection has it, as stock's has."""
    with cia_ops.collecting_once():
        first = export_utils._collect_all_valid_cia_ops()
        lib = torch.library.Library("arm_accel_cia_test", "DEF")
        try:
            lib.define("twice(Tensor x) -> Tensor")
            lib.impl("twice", lambda x: x + x, "CompositeImplicitAutograd")
            second = export_utils._collect_all_valid_cia_ops()
            stock = patches.original("edge.cia_ops.collect.utils")()
            op = torch.ops.arm_accel_cia_test.twice.default
        finally:
            lib._destroy()
    assert len(queries) > 2  # the block's two collections, then stock's per namespace
    assert op not in first and op in second
    assert second == stock


def test_failed_materialization_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A materialization that raises does not count as done: the exception leaves the
    collection (as stock's does) and the next collection materializes again."""
    calls: list[int] = []
    stock = patches.original("edge.cia_ops.materialize")

    def failing_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("registry unavailable")
        stock()

    monkeypatch.setattr(
        export_utils, "_materialize_cpp_cia_ops", cia_ops.materialization(failing_once)
    )
    with cia_ops.collecting_once():
        with pytest.raises(RuntimeError, match="registry unavailable"):
            export_utils._collect_all_valid_cia_ops()
        export_utils._collect_all_valid_cia_ops()
    assert len(calls) == 2
