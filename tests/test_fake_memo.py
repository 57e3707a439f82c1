"""Issue 13: the fake values ``retrace_engine.fake_memo`` remembers are the fake kernels' own.

Each test calls an operator through the memo's interpreter and through stock dispatch on the
same fake inputs, in one fake mode, and compares the two results' metadata
(``fake_memo._signature``: shape, strides, offset, dtype, device, layout, grad, storage size,
view/conj/neg bits), checking that the memo served the call (a miss would compare stock with
stock).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel.retrace_engine import fake_memo
from executorch.backends.arm.tosa.specification import TosaLoweringContext, TosaSpecification
from executorch.exir.dialects._ops import ops as exir_ops
from torch import fx
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode

QD = torch.ops.quantized_decomposed
TOSA = exir_ops.backend.tosa
#: Scale, zero point, quant_min, quant_max of an int8 quantization.
Q8 = (0.1, 0, -128, 127)
sig = fake_memo._signature


@pytest.fixture
def mode() -> Iterator[FakeTensorMode]:
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    spec = TosaSpecification.create_from_string("TOSA-1.0+INT")
    with TosaLoweringContext(spec), fake, enable_python_dispatcher():
        yield fake


def interpreter(mode: FakeTensorMode) -> fake_memo.Interpreter:
    return fake_memo.Interpreter(fx.GraphModule(torch.nn.Module(), fx.Graph()), mode)


def calls() -> list[tuple[Any, Any, Any]]:
    """(operator, args, args differing from them only where the kernel does not read) for
    every operator the memo serves; tensors made in the active fake mode."""
    x = torch.empty(2, 3, 4)
    xt = torch.empty(4, 3, 2).permute(2, 1, 0)  # non-contiguous: the kernels keep its strides
    q = torch.empty(2, 3, 4, dtype=torch.int8)
    q32 = torch.empty(2, 3, 4, dtype=torch.int32)
    table = torch.empty(256, dtype=torch.int8)
    return [
        (QD.quantize_per_tensor.default, (x, 0.1, 3, -128, 127, torch.int8),
         (x, 7.5, -9, -100, 100, torch.int8)),
        (QD.quantize_per_tensor.default, (xt, 0.1, 3, -128, 127, torch.int8),
         (xt, 0.2, 0, -128, 127, torch.int8)),
        (QD.dequantize_per_tensor.default, (q, 0.1, 3, -128, 127, torch.int8),
         (q, 0.5, -3, -10, 10, torch.int8)),
        (TOSA.RESCALE.default, (q, torch.int32, [0.25], 3, 0), (q, torch.int32, [8.0], 3, 0)),
        (TOSA.TABLE.default, (q, table), (q, table)),
        (TOSA.ADD.default, (q32, q32), (q32, q32)),
        (TOSA.SUB.default, (q32, q32), (q32, q32)),
        (TOSA.MUL.default, (q32, q32), (q32, q32)),
    ]  # fmt: skip


def test_every_operator_is_covered(mode: FakeTensorMode) -> None:
    """The calls below exercise every operator the memo serves."""
    served = {fake_memo.qualified(op) for op, _, _ in calls()}
    assert served == set(fake_memo.OPERATORS)


@pytest.mark.parametrize("index", range(8))
def test_remembered_value_is_the_kernels(mode: FakeTensorMode, index: int) -> None:
    """A call the memo serves (the second, with the ignored arguments changed) gives a new
    fake tensor with the metadata stock dispatch gives for it, in the same fake mode."""
    op, args, other = calls()[index]
    memo = interpreter(mode)
    first = memo.call_function(op, args, {})
    served = memo.call_function(op, other, {})
    assert (memo.misses, memo.hits) == (1, 1)
    expected = op(*other)
    assert type(served) is type(expected) and served.fake_mode is mode
    assert served is not first
    assert fake_memo._signature(served) == fake_memo._signature(expected)
    assert fake_memo._signature(first) == fake_memo._signature(op(*args))


def test_ignored_arguments_are_not_read(mode: FakeTensorMode) -> None:
    """The installed fake kernels give the same value whatever the arguments the memo leaves
    out of its key (so the table of ignored positions holds for this torch and executorch)."""
    x = torch.empty(5, 7)
    q = torch.empty(5, 7, dtype=torch.int8)
    odd = [(float("nan"), 10**6, -(10**6), 10**6), (-1.0, -5, 5, -5)]
    for a, b, c, d in odd:
        for op, t in ((QD.quantize_per_tensor.default, x), (QD.dequantize_per_tensor.default, q)):
            assert sig(op(t, a, b, c, d, torch.int8)) == sig(op(t, *Q8, torch.int8))
        rescale = TOSA.RESCALE.default
        assert sig(rescale(q, torch.int32, [a], 0, 0)) == sig(rescale(q, torch.int32, [0.5], 0, 0))


def test_read_arguments_are_in_the_key(mode: FakeTensorMode) -> None:
    """Calls differing in an argument the kernel reads are not served from each other: a new
    output dtype, input strides, zero point (``RESCALE`` validates it) or TOSA specification."""
    x = torch.empty(2, 3)
    q = torch.empty(2, 3, dtype=torch.int8)
    memo = interpreter(mode)
    quantize = QD.quantize_per_tensor.default
    memo.call_function(quantize, (x, *Q8, torch.int8), {})
    assert memo.call_function(quantize, (x, *Q8, torch.int16), {}).dtype == torch.int16
    xt = torch.empty(3, 2).t()
    assert memo.call_function(quantize, (xt, *Q8, torch.int8), {}).stride() == xt.stride()
    memo.call_function(TOSA.RESCALE.default, (q, torch.int32, [0.5], 3, 0), {})
    with pytest.raises(Exception, match="outside valid range"):
        memo.call_function(TOSA.RESCALE.default, (q, torch.int32, [0.5], 200, 0), {})
    fp = TosaSpecification.create_from_string("TOSA-1.0+FP")
    with TosaLoweringContext(fp), pytest.raises(Exception, match="support integers"):
        memo.call_function(TOSA.RESCALE.default, (q, torch.int32, [0.5], 3, 0), {})
    assert memo.hits == 0
    rescaled = memo.call_function(TOSA.RESCALE.default, (q, torch.int32, [2.0], 3, 0), {})
    assert rescaled.dtype == torch.int32 and memo.hits == 1


def test_not_remembered_when_the_output_is_not_a_new_dense_tensor(
    mode: FakeTensorMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator whose value is a view of its input is dispatched every time (served as a new
    tensor it would lose the aliasing), as are arguments the key does not model (a real
    tensor) and operators outside the list."""
    monkeypatch.setitem(fake_memo.OPERATORS, "aten::t.default", frozenset())
    fake_memo.ignored.cache_clear()
    try:
        memo = interpreter(mode)
        x = torch.empty(2, 3)
        for _ in range(2):
            assert memo.call_function(torch.ops.aten.t.default, (x,), {})._is_view()
        assert (memo.misses, memo.hits) == (2, 0)
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            real = torch.ones(2, 3)
        for _ in range(2):
            memo.call_function(QD.quantize_per_tensor.default, (real, *Q8, torch.int8), {})
        memo.call_function(torch.ops.aten.neg.default, (x,), {})
        assert (memo.misses, memo.hits) == (2, 0)
    finally:
        fake_memo.ignored.cache_clear()
