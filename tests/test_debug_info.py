"""The Arm backend's debug output, stock vs accelerated: with ``dump_debug_info`` each TOSA
operator carries its node's provenance (``from_node``, flattened), whose ``graph_id`` s are
addresses of graph objects. Each test lowers one exported program both ways with the graphs'
ids renamed in order of first appearance (``arm_accel.testing.labelled_debug_info``; the
session numbers every graph object, so a freed graph's address given to a later graph does not
merge the two) and compares the output byte for byte: equal exactly when the records fall into
the same graphs, in the same order, with everything else equal."""

from __future__ import annotations

import copy
import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel.control import counters, switch
from arm_accel.testing import GraphLabels, labelled_debug_info
from arm_accel.tools import models
from executorch.backends.arm.common.arm_compile_spec import ArmCompileSpec


class DepthwiseLayerNorm(torch.nn.Module):
    """Depthwise conv, permute, LayerNorm, permute, 1x1 conv, permute: the permutes the
    pipeline inserts and the LayerNorm's decomposition get their provenance in different
    re-traces, so their records name different graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.norm = torch.nn.LayerNorm(8)
        self.pointwise = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.depthwise(x).permute(0, 2, 3, 1)
        x = self.norm(x).permute(0, 3, 1, 2)
        return self.pointwise(x).permute(0, 2, 3, 1)


def _exported(model: str) -> tuple[Any, str]:
    if model == "depthwise-layernorm":
        torch.manual_seed(0)
        net = DepthwiseLayerNorm().eval()
        return torch.export.export(net, (torch.randn(1, 8, 6, 6),)), "FP"
    net, inputs, mode = models.build(model)
    return models.export_for_arm(net, inputs, mode), mode


def _lower(
    exported: Any, mode: str, debug: ArmCompileSpec.DebugMode, path: Path, accelerated: bool
) -> tuple[list[bytes], str | None]:
    """The TOSA flatbuffers and the ``debug.json`` of one lowering with ``debug`` output, graph
    ids renamed."""
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    path.mkdir()
    spec = models.compile_spec(mode).dump_intermediate_artifacts_to(str(path))
    partitioner = TOSAPartitioner(spec.dump_debug_info(debug))
    with labelled_debug_info(GraphLabels()), nullcontext() if accelerated else switch.disabled():
        edge = to_edge_transform_and_lower(copy.deepcopy(exported), partitioner=[partitioner])
    written = path / "debug.json"
    return models.tosa_bytes(edge), written.read_text() if written.exists() else None


def _graphs_named(debug_json: str) -> dict[str, set[int]]:
    """Per name a provenance record gives its node: the graphs such records name."""
    named: dict[str, set[int]] = {}
    for event in json.loads(debug_json):
        trace = event["torch_info"]["node_trace"]
        for record in trace if isinstance(trace, list) else []:
            named.setdefault(record["name"], set()).add(record["graph_id"])
    return named


@pytest.mark.parametrize("model", ["depthwise-layernorm", "dscnnkws"])
def test_debug_json_and_tosa_locations_equal_stocks(model: str, tmp_path: Path) -> None:
    """``DebugMode.JSON``: ``debug.json`` and the TOSA flatbuffer equal stock's byte for byte
    with graph ids renamed; ``DebugMode.TOSA``: the flatbuffer, whose operators' debug
    locations carry the same records, likewise. The lowering re-traced in place (else stock
    would be compared with stock), and its records name several graphs (the permutes the
    pipeline inserted and the ops the LayerNorm's decomposition made apart, as stock has them)."""
    exported, mode = _exported(model)
    for debug in (ArmCompileSpec.DebugMode.JSON, ArmCompileSpec.DebugMode.TOSA):
        stock = _lower(exported, mode, debug, tmp_path / f"stock-{debug.name}", False)
        counters.reset()
        ours = _lower(exported, mode, debug, tmp_path / f"ours-{debug.name}", True)
        in_place = sum(
            int(v.accelerated) for k, v in counters.snapshot().items() if k.endswith(".retrace")
        )
        assert in_place > 0, "no re-trace ran in place"
        assert (stock[1] is None) == (debug == ArmCompileSpec.DebugMode.TOSA)
        assert ours[1] == stock[1], f"{debug.name}: debug.json differs"
        assert ours[0] == stock[0], f"{debug.name}: TOSA flatbuffers differ"
        if stock[1] is not None:
            named = _graphs_named(stock[1])
            assert len(set().union(*named.values())) > 1, "every record names one graph"
            if model == "depthwise-layernorm":
                permutes = named["aten_permute_copy_default"] | named["aten_permute_copy_default_1"]
                assert (named["aten_mean_dim"] | named["aten_sub_tensor"]).isdisjoint(permutes)
