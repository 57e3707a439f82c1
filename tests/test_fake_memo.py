"""The fake values ``arm_accel.runtime.fake_memo`` remembers are the fake kernels' own.

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
from arm_accel.runtime import fake_memo
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


def calls() -> list[tuple[Any, Any, Any, dict[str, Any]]]:
    """(operator, args, args differing from them only where the kernel does not read, kwargs)
    for every operator the memo serves; tensors made in the active fake mode."""
    x = torch.empty(2, 3, 4)
    xt = torch.empty(4, 3, 2).permute(2, 1, 0)  # non-contiguous: the kernels keep its strides
    q = torch.empty(2, 3, 4, dtype=torch.int8)
    q32 = torch.empty(2, 3, 4, dtype=torch.int32)
    table = torch.empty(256, dtype=torch.int8)

    def i8(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=torch.int8)

    def i32(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=torch.int32)

    nhwc, pool = i8(1, 5, 5, 3), ([2, 2], [2, 2], [0, 0, 0, 0])
    same: list[tuple[Any, Any, dict[str, Any]]] = [
        (TOSA.TABLE.default, (q, table), {}),
        (TOSA.ADD.default, (q32, q32), {}),
        (TOSA.SUB.default, (q32, q32), {}),
        (TOSA.MUL.default, (q32, q32), {}),
        (TOSA.RESHAPE.default, (q, [6, 4]), {}),
        (TOSA.CONV2D.default, (nhwc, i8(4, 3, 3, 3), i32(4), [1, 1], [1, 1, 1, 1], [1, 1]), {}),
        (
            TOSA.DEPTHWISE_CONV2D.default,
            (nhwc, i8(3, 3, 3, 1), i32(3), [2, 2], [1, 1, 1, 1], [1, 1]),
            {},
        ),
        (TOSA.SLICE.default, (q, [0, 1, 0], [2, 2, 4]), {}),
        (TOSA.MATMUL.default, (q, i8(2, 4, 5)), {}),
        (TOSA.TRANSPOSE.default, (q, [2, 0, 1]), {}),
        (TOSA.CONCAT.default, ([i8(2, 3), i8(2, 5)],), {"axis": 1}),
        (TOSA.REDUCE_SUM.default, (q32,), {"axis": 1}),
        (TOSA.CLAMP.default, (q.permute(2, 0, 1), -5, 5), {}),
        (TOSA.AVG_POOL2D.default, (nhwc, i8(1), i8(1), *pool, torch.int32), {}),
        (TOSA.MAX_POOL2D.default, (nhwc, *pool), {}),
        (TOSA.GATHER.default, (i8(1, 10, 4), i32(1, 3)), {}),
        (TOSA.CAST.default, (q.permute(2, 0, 1), torch.int32), {}),
    ]
    return [
        (QD.quantize_per_tensor.default, (x, 0.1, 3, -128, 127, torch.int8),
         (x, 7.5, -9, -100, 100, torch.int8), {}),
        (QD.quantize_per_tensor.default, (xt, 0.1, 3, -128, 127, torch.int8),
         (xt, 0.2, 0, -128, 127, torch.int8), {}),
        (QD.dequantize_per_tensor.default, (q, 0.1, 3, -128, 127, torch.int8),
         (q, 0.5, -3, -10, 10, torch.int8), {}),
        (QD.dequantize_per_channel.default, (q, x[0, :, 0], i32(3), 1, -128, 127, torch.int8),
         (q, x[0, 0, :], None, 1, -128, 127, torch.int8), {}),
        (TOSA.RESCALE.default, (q, torch.int32, [0.25], 3, 0), (q, torch.int32, [8.0], 3, 0), {}),
        *((op, args, args, kwargs) for op, args, kwargs in same),
    ]  # fmt: skip


#: How many calls :func:`calls` makes (the parametrization below).
CALLS = 22


def test_every_operator_is_covered(mode: FakeTensorMode) -> None:
    """The calls below exercise every operator the memo serves."""
    made = calls()
    assert len(made) == CALLS
    assert {fake_memo.qualified(op) for op, _, _, _ in made} == set(fake_memo.OPERATORS)


@pytest.mark.parametrize("index", range(CALLS))
def test_remembered_value_is_the_kernels(mode: FakeTensorMode, index: int) -> None:
    """A call the memo serves (the second, with the ignored arguments changed) gives a new
    fake tensor with the metadata stock dispatch gives for it, in the same fake mode."""
    op, args, other, kwargs = calls()[index]
    memo = interpreter(mode)
    first = memo.call_function(op, args, kwargs)
    served = memo.call_function(op, other, kwargs)
    assert (memo.misses, memo.hits) == (1, 1)
    expected = op(*other, **kwargs)
    assert type(served) is type(expected) and served.fake_mode is mode
    assert served is not first
    assert fake_memo._signature(served) == fake_memo._signature(expected)
    assert fake_memo._signature(first) == fake_memo._signature(op(*args, **kwargs))


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
    per_channel = QD.dequantize_per_channel.default
    expected = sig(
        per_channel(q, torch.empty(7), torch.zeros(7, dtype=torch.int32), 1, *Q8[2:], torch.int8)
    )
    for scales, zero_points in (
        (torch.empty(3, 2), None),
        (torch.empty(0, dtype=torch.float64), torch.empty(9, 9)),
        (torch.empty(7).t(), torch.empty(1, dtype=torch.int8)),
    ):
        assert sig(per_channel(q, scales, zero_points, 1, *Q8[2:], torch.int8)) == expected


def test_read_arguments_are_in_the_key(mode: FakeTensorMode) -> None:
    """Calls differing in an argument the kernel reads are not served from each other: a new
    output dtype, input strides, zero point (``RESCALE`` validates it), a per-channel axis or
    quantization range (validated) or TOSA specification."""
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
    per_channel = QD.dequantize_per_channel.default
    scales = torch.empty(3)
    memo.call_function(per_channel, (q, scales, None, 1, *Q8[2:], torch.int8), {})
    out = memo.call_function(
        per_channel, (q, scales, None, 1, *Q8[2:], torch.int8), {"out_dtype": torch.float16}
    )
    assert out.dtype == torch.float16
    with pytest.raises(Exception, match="axis"):
        memo.call_function(per_channel, (q, scales, None, 2, *Q8[2:], torch.int8), {})
    with pytest.raises(Exception, match="quant_min"):
        memo.call_function(per_channel, (q, scales, None, 1, -129, 127, torch.int8), {})
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
        memo.call_function(torch.ops.prims.neg.default, (x,), {})
        assert (memo.misses, memo.hits) == (2, 0)
    finally:
        fake_memo.ignored.cache_clear()


def test_specifications_differing_in_extensions_do_not_share_values(
    mode: FakeTensorMode,
) -> None:
    """``TosaSpecification.__eq__`` compares version and profiles only, but ``TABLE`` reads the
    ``int16`` extension: an int16 call remembered under ``+int16`` is not served under plain
    ``INT``, where stock's kernel raises, nor under ``+int16+u55``; it is served again under an
    equal ``+int16`` specification."""
    q16 = torch.empty(2, 3, dtype=torch.int16)
    table = torch.empty(513, dtype=torch.int16)
    int16 = TosaSpecification.create_from_string("TOSA-1.0+INT+int16")
    memo = interpreter(mode)
    with TosaLoweringContext(int16):
        memo.call_function(TOSA.TABLE.default, (q16, table), {})
    plain = TosaSpecification.create_from_string("TOSA-1.0+INT")
    assert plain == int16  # what the key must not rely on
    with TosaLoweringContext(plain), pytest.raises(ValueError, match="support int16"):
        TOSA.TABLE.default(q16, table)
    with TosaLoweringContext(plain), pytest.raises(ValueError, match="support int16"):
        memo.call_function(TOSA.TABLE.default, (q16, table), {})
    with TosaLoweringContext(TosaSpecification.create_from_string("TOSA-1.0+INT+int16+u55")):
        memo.call_function(TOSA.TABLE.default, (q16, table), {})
    assert memo.hits == 0
    with TosaLoweringContext(TosaSpecification.create_from_string("TOSA-1.0+INT+int16")):
        memo.call_function(TOSA.TABLE.default, (q16, table), {})
    assert memo.hits == 1


def test_a_mode_propagating_real_tensors_is_not_served(
    mode: FakeTensorMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outputs of a fake mode that propagates real tensors carry one, which a remembered value
    would not: such a mode's calls all go to dispatch (stubbed here, since these inputs have no
    real tensors to propagate), none to the memo."""
    dispatched: list[Any] = []
    monkeypatch.setattr(
        fx.Interpreter, "call_function", lambda self, op, args, kwargs: dispatched.append(op)
    )
    monkeypatch.setattr(mode, "propagate_real_tensors", True)
    memo = interpreter(mode)
    q = torch.empty(2, 3, dtype=torch.int32)
    for _ in range(2):
        memo.call_function(TOSA.ADD.default, (q, q), {})
    assert dispatched == [TOSA.ADD.default] * 2
    assert (memo.misses, memo.hits) == (0, 0)


def test_dispatch_level_memo_serves_only_inside_its_block(mode: FakeTensorMode) -> None:
    """Under ``FakeTensorMode.dispatch`` (what the edge stage's traces reach): inside
    ``dispatching()`` a repeated quantize call is served from the mode's memo with the kernel's
    metadata; outside the block, and in another thread while this one is inside it, nothing
    is served."""
    import threading

    from arm_accel import PassStats, patches
    from arm_accel.control import counters

    patches.install(("edge.fake_memo",))
    assert patches.installed("edge.fake_memo")

    def served() -> int:
        entry = counters.snapshot().get(fake_memo.DISPATCH_STATS_NAME, PassStats())
        return entry.accelerated

    x = torch.empty(4, 3).t()
    quantize = QD.quantize_per_tensor.default
    expected = sig(quantize(x, *Q8, torch.int8))
    before = served()
    quantize(x, *Q8, torch.int8)
    assert served() == before
    in_thread: list[torch.Tensor] = []

    def elsewhere() -> None:
        in_thread.append(quantize(x, *Q8, torch.int8))

    with fake_memo.dispatching():
        first = quantize(x, *Q8, torch.int8)
        again = quantize(x, 0.7, 1, -128, 127, torch.int8)
        assert served() == before + 1
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        assert served() == before + 1 and sig(in_thread[0]) == expected
    assert sig(first) == sig(again) == expected and again is not first
    assert again.fake_mode is mode


# -- aten calls: stock's own cache hits ------------------------------------------------------

ATEN = torch.ops.aten


def test_aten_call_is_served_as_stocks_cache_hit(mode: FakeTensorMode) -> None:
    """An ``aten`` call (and its edge wrapper) repeated on inputs of equal metadata is served
    while stock's cache holds its entry, with the metadata stock dispatch gives (a new tensor);
    once stock's cache drops the entry the call is dispatched again, then served again."""
    x = torch.empty(4, 3, 2).permute(2, 1, 0)
    y = torch.empty(4, 3, 2).permute(2, 1, 0)
    for op in (ATEN.mul.Tensor, exir_ops.edge.aten.mul.Tensor):
        memo = interpreter(mode)
        first = memo.call_function(op, (x, x), {})
        served = memo.call_function(op, (y, y), {})
        assert (memo.misses, memo.hits) == (1, 1)
        assert served is not first and served.fake_mode is mode
        assert sig(served) == sig(first) == sig(ATEN.mul.Tensor(y, y))
    FakeTensorMode.cache_clear()
    memo.call_function(op, (y, y), {})
    assert (memo.misses, memo.hits) == (2, 1)
    memo.call_function(op, (x, x), {})
    assert (memo.misses, memo.hits) == (2, 2)


def test_aten_key_holds_what_stocks_key_reads(mode: FakeTensorMode) -> None:
    """Calls differing only in what stock's cache key reads beyond shape and strides (the
    input's storage size) or in a scalar's type are not served from each other."""
    memo = interpreter(mode)
    x = torch.empty(2, 3)
    wide = torch.empty(2, 4)[:, :3].contiguous()  # same metadata as x
    part = torch.empty(12)[:6]  # a view of a larger storage: another key
    larger = torch.empty(12).resize_(2, 3)  # x's metadata but for its storage: not a view
    assert not larger._is_view() and larger.stride() == x.stride()
    memo.call_function(ATEN.add.Tensor, (x, x), {})
    memo.call_function(ATEN.add.Tensor, (wide, wide), {})
    assert memo.hits == 1
    memo.call_function(ATEN.add.Tensor, (part.view(2, 3), part.view(2, 3)), {})
    memo.call_function(ATEN.add.Tensor, (larger, larger), {})
    memo.call_function(ATEN.mul.Scalar, (x, 2), {})
    assert memo.call_function(ATEN.mul.Scalar, (x, 2.0), {}).dtype == torch.float32
    assert memo.call_function(ATEN.mul.Scalar, (x.int(), 2.5), {}).dtype == torch.float32
    assert memo.hits == 1


def test_aten_views_tuples_and_uncached_calls_are_dispatched(mode: FakeTensorMode) -> None:
    """Views (a hit shares the input's storage), tuple outputs, and a mode whose cache is off
    are dispatched on every call, never served."""
    memo = interpreter(mode)
    x = torch.empty(2, 3)
    assert fake_memo.cached_aten(ATEN.view.default) is None
    for _ in range(2):
        assert memo.call_function(ATEN.view.default, (x, [3, 2]), {})._is_view()
        assert type(memo.call_function(ATEN.sort.default, (x,), {})) is tuple
    assert (memo.misses, memo.hits) == (1, 0)  # sort keyed once, then never again
    mode.cache_enabled = False
    try:
        for _ in range(2):
            memo.call_function(ATEN.neg.default, (x,), {})
        assert memo.hits == 0
    finally:
        mode.cache_enabled = True


def test_aten_key_capture_is_undone(mode: FakeTensorMode) -> None:
    """Remembering a call captures stock's cache key on the mode for that call only: the mode
    has no instance attribute left afterwards, also when the kernel raises."""
    memo = interpreter(mode)
    memo.call_function(ATEN.neg.default, (torch.empty(2),), {})
    assert "_cache_key" not in vars(mode)
    with pytest.raises(RuntimeError):
        memo.call_function(ATEN.mm.default, (torch.empty(2, 3), torch.empty(2, 3)), {})
    assert "_cache_key" not in vars(mode)


def test_aten_key_captures_nest(mode: FakeTensorMode) -> None:
    """A call keyed while another call's capture is active (a kernel dispatching inside the
    block) captures its own first key and leaves the outer capture in place, then none."""
    outer: list[Any] = []
    inner: list[Any] = []
    x = torch.empty(2, 3)
    with fake_memo._capturing_cache_keys(mode, outer):
        ATEN.neg.default(x)
        with fake_memo._capturing_cache_keys(mode, inner):
            ATEN.abs.default(x)
        assert "_cache_key" in vars(mode)
        ATEN.exp.default(x)
    assert "_cache_key" not in vars(mode)
    assert [op for op, _ in outer] == [ATEN.neg.default]
    assert [op for op, _ in inner] == [ATEN.abs.default]


def test_aten_key_captures_in_two_threads(mode: FakeTensorMode) -> None:
    """Captures on one mode in two threads, overlapping: each records its own thread's first
    key only, and the mode's ``_cache_key`` is its own again when both have ended."""
    import threading

    x = torch.empty(2, 3)
    inside, release = threading.Event(), threading.Event()
    theirs: list[Any] = []

    def other() -> None:
        with mode:
            y = torch.empty(2, 3)
            with fake_memo._capturing_cache_keys(mode, theirs):
                inside.set()
                release.wait(10)
                ATEN.abs.default(y)

    worker = threading.Thread(target=other)
    ours: list[Any] = []
    with fake_memo._capturing_cache_keys(mode, ours):
        worker.start()
        assert inside.wait(10)
        ATEN.neg.default(x)
    release.set()
    worker.join()
    assert [op for op, _ in ours] == [ATEN.neg.default]
    assert [op for op, _ in theirs] == [ATEN.abs.default]
    assert not {"_cache_key", fake_memo._CAPTURE_COUNT} & set(vars(mode))


def test_static_shape_on_symbolic_strides_is_dispatched() -> None:
    """A tensor of static shape whose strides and storage are symbolic (a column of a tensor
    with a dynamic dimension): its calls are dispatched, not keyed (a symbol in the key is
    unhashable; upstream ``test_decompose_adaptive_avg_pool2d_pass`` met one)."""
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    fake = FakeTensorMode(shape_env=ShapeEnv())
    dynamic = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.STATIC, DimDynamic.DYNAMIC])
    x = fake.from_tensor(torch.empty(4, 5, dtype=torch.int8), symbolic_context=dynamic)
    spec = TosaSpecification.create_from_string("TOSA-1.0+INT")
    with TosaLoweringContext(spec), fake:
        column = x[:, 0]
        memo = interpreter(fake)
        for _ in range(2):
            assert memo.call_function(ATEN.neg.default, (column,), {}).shape == (4,)
            memo.call_function(TOSA.CAST.default, (column, torch.int32), {})
    assert type(column.stride()[0]) is torch.SymInt
    assert (memo.misses, memo.hits) == (0, 0)
