"""``convert_pt2e``'s constant fold with the discarded dequantize values not computed, against
torchao's own fold on the same graph (acceleration off)."""

from __future__ import annotations

import arm_accel
import pytest
import torch
from arm_accel.control import counters
from arm_accel.quantize import fold
from torch import fx
from torchao.quantization.pt2e.constant_fold import ConstantFolder, constant_fold
from torchao.quantization.pt2e.quantize_pt2e import _quant_node_constraint

pytest.importorskip("executorch.backends.arm.quantizer")  # the activation's trigger

QD = torch.ops.quantized_decomposed


class _Weights(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(6, 4, generator=g))
        self.v = torch.randn(6, 4, generator=g)
        self.register_buffer("scales", torch.rand(6, generator=g) / 50 + 1e-3)
        self.register_buffer("zps", torch.zeros(6, dtype=torch.int64))


def _graph(dequant_dtype: torch.dtype = torch.int8) -> fx.GraphModule:
    """x @ dq(q(w)).T + dq(q(v)) with w quantized per channel, v per tensor (the pattern
    convert_pt2e leaves before folding)."""
    root = _Weights()
    g = fx.Graph()
    x = g.placeholder("x")
    w, s, z, v = (g.get_attr(n) for n in ("w", "scales", "zps", "v"))
    qw = g.call_function(QD.quantize_per_channel.default, (w, s, z, 0, -127, 127, torch.int8))
    dw = g.call_function(QD.dequantize_per_channel.default, (qw, s, z, 0, -127, 127, dequant_dtype))
    qv = g.call_function(QD.quantize_per_tensor.default, (v, 0.02, 0, -128, 127, torch.int8))
    dv = g.call_function(QD.dequantize_per_tensor.default, (qv, 0.02, 0, -128, 127, torch.int8))
    y = g.call_function(torch.ops.aten.linear.default, (x, dw))
    g.output(g.call_function(torch.ops.aten.add.Tensor, (y, dv)))
    return fx.GraphModule(root, g)


def _state(gm: fx.GraphModule) -> list[tuple[str, torch.dtype, bytes]]:
    return [
        (k, v.dtype, v.detach().contiguous().numpy().tobytes()) for k, v in gm.state_dict().items()
    ]


def _accelerated() -> int:
    stat = counters.snapshot().get(fold.STATS_NAME)
    return stat.accelerated if stat else 0


def test_fold_equals_stock_without_computing_dequantize() -> None:
    """The folded graph (code, node names), its buffers bit for bit and the frozen constants
    equal torchao's fold of the same graph; both dequantize nodes were not computed."""
    stock, ours = _graph(), _graph()
    with arm_accel.disabled():
        constant_fold(stock, _quant_node_constraint)
    before = _accelerated()
    constant_fold(ours, _quant_node_constraint)
    assert _accelerated() - before == 2
    assert ours.code == stock.code
    assert [n.name for n in ours.graph.nodes] == [n.name for n in stock.graph.nodes]
    assert _state(ours) == _state(stock)
    assert any(k.startswith("_frozen_param") for k, _, _ in _state(ours))


def test_failing_checks_raise_as_stock() -> None:
    """A dequantize whose dtype argument does not match its input: stock's fold raises, and
    the accelerated fold raises the same exception (the meta check declines, stock's code
    runs), counted as a decline."""
    with arm_accel.disabled(), pytest.raises(AssertionError) as stock_exc:
        constant_fold(_graph(torch.uint8), _quant_node_constraint)
    before = counters.snapshot().get(fold.STATS_NAME)
    declines = dict(before.fallbacks) if before else {}
    with pytest.raises(AssertionError) as ours_exc:
        constant_fold(_graph(torch.uint8), _quant_node_constraint)
    assert str(ours_exc.value) == str(stock_exc.value)
    after = counters.snapshot()[fold.STATS_NAME].fallbacks
    assert any(after[k] > declines.get(k, 0) for k in after if "meta" in k)


def test_a_folder_subclass_computes_as_stock() -> None:
    """A ConstantFolder subclass (its is_impure may keep the value) declines: every dequantize
    is computed by stock's code, and the replacements it finds equal torchao's (names, values
    bit for bit)."""

    class Folder(ConstantFolder):
        pass

    def replacements(folder: ConstantFolder) -> list[tuple[str, bytes]]:
        folder.run()
        return [(n.name, v.numpy().tobytes()) for n, v in folder.node_replacements.items()]

    with arm_accel.disabled():
        stock = replacements(Folder(_graph(), skip_constructors=True))
    before = _accelerated()
    ours = replacements(Folder(_graph(), skip_constructors=True))
    assert _accelerated() == before
    assert ours == stock and stock
