"""Inside ``param_meta.looking_up_once()`` the decomposition call's write-back of
param/buffer placeholder metadata (``_populate_param_buffer_metadata_to_new_gm``, bound in
``torch.export.exported_program``) builds the signature's mappings once. Every test compares
with stock's function on the same input."""

from __future__ import annotations

import copy
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import PassStats, patches
from arm_accel.control import counters, switch
from arm_accel.edge import param_meta


class _Net(torch.nn.Module):
    """Parameters (conv, linear), buffers (batch norm's running stats and counter) and a user
    input: placeholders of every kind the write-back looks up."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(self.conv(x)).mean((2, 3)))


def _inputs() -> tuple[dict[str, Any], Any, Any]:
    """What a decomposition call hands the write-back: the unlifted module's param/buffer
    metadata, the traced module and its new signature."""
    from torch._export.utils import _collect_param_buffer_metadata

    torch.manual_seed(0)
    ep = torch.export.export(_Net().eval(), (torch.randn(1, 3, 8, 8),))
    metadata = _collect_param_buffer_metadata(ep.module())
    gm = copy.deepcopy(ep.graph_module)
    for node in gm.graph.nodes:
        node.meta = {"val": node.meta.get("val")}
    return metadata, gm, ep.graph_signature


def _state(metadata: dict[str, Any], gm: Any) -> tuple[Any, ...]:
    """The metadata left after the call (keys in order, values by identity) and every node's
    meta (keys in order, values by identity)."""
    return (
        [(name, [(k, id(v)) for k, v in meta.items()]) for name, meta in metadata.items()],
        [[(k, id(v)) for k, v in n.meta.items()] for n in gm.graph.nodes],
    )


def _populated() -> int:
    return counters.snapshot().get(param_meta.STATS_NAME, PassStats()).accelerated


def test_populate_equals_stock() -> None:
    """:func:`param_meta.populate` against stock's function on copies of the same inputs: the
    metadata dicts popped alike and every node's meta written with the same keys, in the same
    order, to the same value objects; the program has parameters and buffers to write."""
    from torch._export.utils import _populate_param_buffer_metadata_to_new_gm as stock

    metadata, gm, sig = _inputs()
    assert sig.inputs_to_parameters and sig.inputs_to_buffers
    stock_meta = {k: dict(v) for k, v in metadata.items()}
    ours_meta = {k: dict(v) for k, v in metadata.items()}
    stock_gm, ours_gm = copy.deepcopy(gm), copy.deepcopy(gm)
    for a, b in zip(stock_gm.graph.nodes, ours_gm.graph.nodes, strict=True):
        b.meta = dict(a.meta)  # same value objects on both sides
    before = _state(ours_meta, ours_gm)
    stock(stock_meta, stock_gm, sig)
    param_meta.populate(ours_meta, ours_gm, sig)
    assert _state(ours_meta, ours_gm) == _state(stock_meta, stock_gm)
    assert _state(ours_meta, ours_gm)[1] != before[1], "no placeholder meta was written"


def test_bound_function_runs_ours_in_the_block_only() -> None:
    """The function ``run_decompositions`` calls by name: inside the block with acceleration on
    it is ours (counted), outside it or with acceleration off it is stock's (not counted); the
    node metas it writes are the same either way. Where the row is stock by design (torch's own
    function already looks the signature up once), the bound function is torch's."""
    from torch.export import exported_program

    bound = exported_program._populate_param_buffer_metadata_to_new_gm
    if not patches.installed("edge.param_meta"):
        (state,) = [s for s in patches.states() if s.row == "edge.param_meta"]
        assert state.expected and not state.installed, state
        assert bound.__module__ == "torch._export.utils"
        pytest.skip(f"edge.param_meta: {state.reason}")
    assert bound is not patches.original("edge.param_meta")
    results = []
    for inside, enabled in ((True, True), (False, True), (True, False)):
        metadata, gm, sig = _inputs()
        before = _populated()
        previous = switch.set_enabled(enabled)
        try:
            if inside:
                with param_meta.looking_up_once():
                    bound(metadata, gm, sig)
            else:
                bound(metadata, gm, sig)
        finally:
            switch.set_enabled(previous)
        assert (_populated() - before) == (1 if inside and enabled else 0), (inside, enabled)
        results.append([sorted(n.meta) for n in gm.graph.nodes])
    assert results[0] == results[1] == results[2]
