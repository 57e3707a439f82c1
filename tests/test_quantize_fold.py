"""``convert_pt2e``'s constant fold (weights quantized natively, the discarded dequantize
values not computed) against torchao's own fold on the same graph (acceleration off)."""

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
    def __init__(self, shape: tuple[int, ...], axis: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        channels = shape[axis]
        scales = torch.rand(channels, generator=g) / 50 + 1e-3
        w = torch.randn(shape, generator=g) * 0.05
        # exact ties of channel 0's scale, signed zeros, infinities, huge and subnormal values
        ties = (torch.arange(-8, 8) + 0.5) * scales[0]
        flat = w.view(-1)
        flat[: len(ties)] = ties
        flat[16:22] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 3e38, 1e-40])
        self.w = torch.nn.Parameter(w)
        self.v = torch.randn(shape, generator=g) * 0.3
        self.register_buffer("scales", scales)
        self.register_buffer("zps", torch.randint(-5, 5, (channels,), generator=g))


def _graph(
    dequant_dtype: torch.dtype = torch.int8,
    shape: tuple[int, ...] = (6, 4),
    axis: int = 0,
    seed: int = 0,
) -> fx.GraphModule:
    """x @ dq(q(w)).T + dq(q(v)) with w quantized per channel on ``axis``, v per tensor (the
    pattern convert_pt2e leaves before folding; ``x`` is never run)."""
    root = _Weights(shape, axis, seed)
    g = fx.Graph()
    x = g.placeholder("x")
    w, s, z, v = (g.get_attr(n) for n in ("w", "scales", "zps", "v"))
    qw = g.call_function(QD.quantize_per_channel.default, (w, s, z, axis, -127, 127, torch.int8))
    dw = g.call_function(
        QD.dequantize_per_channel.default, (qw, s, z, axis, -127, 127, dequant_dtype)
    )
    qv = g.call_function(QD.quantize_per_tensor.default, (v, 0.02, 3, -128, 127, torch.int8))
    dv = g.call_function(QD.dequantize_per_tensor.default, (qv, 0.02, 3, -128, 127, torch.int8))
    y = g.call_function(torch.ops.aten.linear.default, (x, dw))
    g.output(g.call_function(torch.ops.aten.add.Tensor, (y, dv)))
    return fx.GraphModule(root, g)


def _state(gm: fx.GraphModule) -> list[tuple[str, torch.dtype, tuple[int, ...], bytes]]:
    return [
        (k, v.dtype, v.stride(), v.detach().contiguous().numpy().tobytes())
        for k, v in gm.state_dict().items()
    ]


def _accelerated(name: str = fold.STATS_NAME) -> int:
    stat = counters.snapshot().get(name)
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
    assert any(k.startswith("_frozen_param") for k, *_ in _state(ours))


@pytest.mark.parametrize(("shape", "axis"), [((6, 4), 0), ((3, 5, 2, 2), 1), ((2, 3, 7), 2)])
def test_folded_quantization_bit_for_bit(shape: tuple[int, ...], axis: int) -> None:
    """Without grad (as a script under ``torch.no_grad()`` quantizes), both weights'
    quantizations (per channel on ``axis``, with ties, signed zeros, infinities, huge and
    subnormal values; per tensor) are computed natively and the folded buffers equal
    torchao's fold bit for bit, strides included; with grad, the weight that requires it is
    left to stock's ops (they record autograd nodes) and the fold still equals."""
    for grad in (False, True):
        stock, ours = _graph(shape=shape, axis=axis), _graph(shape=shape, axis=axis)
        with torch.set_grad_enabled(grad):
            with arm_accel.disabled():
                constant_fold(stock, _quant_node_constraint)
            before = _accelerated(fold.QUANTIZE_STATS_NAME)
            constant_fold(ours, _quant_node_constraint)
        assert _accelerated(fold.QUANTIZE_STATS_NAME) - before == (1 if grad else 2)
        assert ours.code == stock.code
        assert _state(ours) == _state(stock)


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
