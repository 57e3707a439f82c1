"""``HistogramObserver._non_linear_param_search`` in Rust.

At ``convert_pt2e`` stock walks two quantile bounds in steps of 1e-5 over the cumulative
histogram, up to 10^5 steps of 0-dim tensor operations in Python, and computes each
candidate's quantization error with ~25 tensor operations. Where it is modelled the whole
search is one native call per observer (:func:`_search_whole`: torch's ``sum``/``cumsum``,
the walk, the errors and their sums, the stop and the (min, max) in Rust, stock's arithmetic
operation for operation); elsewhere :func:`_search_stepwise` runs stock's method with the walk
between candidates native and each error's terms native, summed by torch. Why the results are
stock's: design.md, "The quantization flow".
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import torch

from arm_accel import _native
from arm_accel.control import counters, switch
from arm_accel.quantize.patch import (
    NativeFailed,
    native,
    record_native_failure,
    run_accelerated,
    thread_modes_active,
)

#: ``stats()`` entry: one call per parameter search (also the patch table's row).
STATS_NAME = "quantize.histogram_search"
#: ``stats()`` entry: one call per candidate whose error the search computed (accelerated:
#: natively; fallbacks: why torch's method computed it).
ERROR_STATS_NAME = "quantize.histogram_error"
#: ``stats()`` entry: the searches run in one native call (declined ones with why: they run
#: stepwise).
WHOLE_STATS_NAME = "quantize.histogram_search_whole"
#: The patch table's model of the candidates' error computation.
ERROR_MODEL = "torchao.histogram_error"


def decline_reason(observer: Any) -> str | None:
    """Why ``observer``'s search runs stock (None: the native walk models it)."""
    histogram = observer.histogram
    if type(histogram) is not torch.Tensor:
        return "histogram is not a plain tensor"
    if histogram.dim() != 1 or histogram.dtype != torch.float32:
        return "histogram is not a 1-d float32 tensor"
    if histogram.device.type != "cpu":
        return "histogram is not on the CPU"
    if histogram.is_neg() or histogram._is_zerotensor():
        return _NOT_IN_MEMORY
    if not isinstance(observer.bins, int) or observer.bins < 1:
        return "bins is not a positive int"
    if histogram.size()[0] != observer.bins:
        return "bins mismatch"  # stock's assertion raises
    return _modes_reason()


#: A histogram whose memory does not hold its values (``numpy()`` refuses a negative view; a
#: zero tensor has no storage): the search runs stock.
_NOT_IN_MEMORY = "histogram a negative view or a zero tensor"


def _modes_reason() -> str | None:
    """Why torch's ops would not run their CPU kernels here (None: they would)."""
    if thread_modes_active():
        return "a torch function or dispatch mode is active"
    if torch.compiler.is_compiling():
        return "traced by dynamo"
    return None


def _next_candidate(
    csum: Any, total: float, walk: tuple[float, float, int, int]
) -> tuple[float, float, int, int] | None:
    return native(_native.histogram_next_candidate, csum, total, *walk)  # type: ignore[no-any-return]


class _Errors:
    """The quantization error of the search's candidates: each one's terms computed natively
    (``rust/quantize/error.rs``) into a float32 tensor summed by torch, as stock's
    ``norm.sum().item()``; torch's own method where the native terms are not modelled."""

    def __init__(self, observer: Any) -> None:
        self.observer = observer
        self.native = _native_errors(observer)
        self.calls = 0
        self.served = 0  # computed natively
        self.seconds = 0.0
        if self.native:
            self.hist = observer.histogram.detach().numpy()
            self.norm = torch.empty(observer.bins, dtype=torch.float32)
            self.norm_np = self.norm.numpy()
            self.min_val = observer.min_val.item()
            self.max_val = observer.max_val.item()

    def __call__(self, start_bin: int, end_bin: int) -> float:
        t0 = time.perf_counter()
        self.calls += 1
        try:
            return self._error(start_bin, end_bin)
        finally:
            self.seconds += time.perf_counter() - t0

    def _error(self, start_bin: int, end_bin: int) -> float:
        if self.native:
            outcome = native(
                _native.histogram_error_terms,
                self.hist,
                self.min_val,
                self.max_val,
                self.observer.dst_nbins,
                start_bin,
                end_bin,
                self.norm_np,
            )
            if outcome == "filled":
                self.served += 1
                return float(self.norm.sum().item())
            if outcome == "zero":
                self.served += 1
                return 0.0
            counters.record_decline(ERROR_STATS_NAME, outcome)
        return self.observer._compute_quantization_error(start_bin, end_bin)  # type: ignore[no-any-return]


def _native_errors(observer: Any) -> bool:
    """Whether the candidates' errors can be computed natively: the observer's error method
    and ``_get_norm`` are torchao's (not overridden) and the sources modelled
    (``ERROR_MODEL``), the histogram contiguous, the range and ``dst_nbins`` plain numbers."""
    min_val, max_val, dst_nbins = observer.min_val, observer.max_val, observer.dst_nbins
    return (
        _stock_error_methods(observer)
        and _error_model_holds()
        and observer.histogram.is_contiguous()
        and isinstance(dst_nbins, int)
        and 0 < dst_nbins < 2**32
        and type(min_val) is torch.Tensor
        and type(max_val) is torch.Tensor
        and min_val.numel() == 1
        and max_val.numel() == 1
    )


#: torchao's ``_compute_quantization_error`` and ``_get_norm`` (resolved on first use).
_stock_errors: tuple[Any, Any] | None = None


def _stock_error_methods(observer: Any) -> bool:
    """``observer``'s ``_compute_quantization_error`` and ``_get_norm`` are torchao's own."""
    global _stock_errors
    if _stock_errors is None:
        defining = vars(_defining_class())
        _stock_errors = (defining["_compute_quantization_error"], defining["_get_norm"])
    own, cls = vars(observer), type(observer)
    return (
        "_compute_quantization_error" not in own
        and "_get_norm" not in own
        and getattr(cls, "_compute_quantization_error", None) is _stock_errors[0]
        and getattr(cls, "_get_norm", None) is _stock_errors[1]
    )


def _defining_class() -> Any:
    """torchao's ``HistogramObserver`` (the class the methods are defined on)."""
    from arm_accel.patches.sources import resolve

    return resolve("torchao.quantization.pt2e.observer:HistogramObserver")


def search(observer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Stock's ``_non_linear_param_search`` on ``observer`` (one :func:`decline_reason`
    accepts): in one native call (:func:`_search_whole`) where that is modelled, else its bound
    walk run natively and its candidates' errors as :class:`_Errors`."""
    whole = _search_whole(observer)
    if whole is not None:
        return whole
    return _search_stepwise(observer)


_UNPROBED = -1
#: The lanes of torch's ``Vectorized<float>`` in its float32 ``sum`` (None: no width modelled
#: reproduces ``torch.sum``/``torch.cumsum``), probed on first use.
_sum_lanes: int | None = _UNPROBED


def sum_lanes() -> int | None:
    """The vector width with which the native model of ``torch.sum`` (and ``torch.cumsum``)
    gives torch's results bit for bit on probe vectors of many lengths and magnitudes (the
    width depends on the kernel torch dispatches to), or None."""
    global _sum_lanes
    if _sum_lanes == _UNPROBED:
        _sum_lanes = _probe_sum_lanes()
    return _sum_lanes


def _probe_sum_lanes() -> int | None:
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = [*range(1, 70), 127, 255, 256, 257, 1023, 2047, 2048, 2049, 4096, 8191, 32767]
    probes = []
    for n in lengths:
        x = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)
        x = torch.from_numpy(x.astype(np.float32))
        probes.append((x, x.sum(), torch.cumsum(x, dim=0)))
    for lanes in (8, 16, 4, 32):
        if all(_models_sums(x, s, c, lanes) for x, s, c in probes):
            return lanes
    return None


def _models_sums(x: torch.Tensor, total: torch.Tensor, csum: torch.Tensor, lanes: int) -> bool:
    out = torch.empty_like(x)
    got = _native.histogram_torch_sums(x.numpy(), lanes, out.numpy())
    same_sum = got is not None and torch.tensor(got).view(torch.int32) == total.view(torch.int32)
    return bool(same_sum) and torch.equal(out.view(torch.int32), csum.view(torch.int32))


_PLAIN = torch.Tensor
_FLOAT32 = torch.float32
_STRIDED = torch.strided


def _whole_inputs(observer: Any) -> tuple[Any, float, float, int] | str:
    """The one-call search's arguments (the histogram as a numpy array, ``min_val.item()``,
    ``max_val.item()``, ``dst_nbins``), or why it does not model ``observer``: what
    :func:`decline_reason` and :func:`_native_errors` ask, and a 0-dim float32 CPU range
    without grad (the (min, max) it returns are such tensors), each attribute read once.
    The conditions are tested at once first; only a decline asks them one by one
    (:func:`_whole_decline`), for its reason."""
    state = read_state(observer)
    hist, lo, hi, bins, dst_nbins = state
    if (
        type(hist) is _PLAIN
        and type(lo) is _PLAIN
        and type(hi) is _PLAIN
        and hist.layout is _STRIDED
        and lo.layout is _STRIDED
        and hi.layout is _STRIDED
        and hist.dtype is _FLOAT32
        and lo.dtype is _FLOAT32
        and hi.dtype is _FLOAT32
        and hist.is_cpu
        and lo.is_cpu
        and hi.is_cpu
        and not (hist.requires_grad or lo.requires_grad or hi.requires_grad)
        and hist.dim() == 1
        and lo.dim() == 0
        and hi.dim() == 0
        and hist.is_contiguous()
        and not hist.is_neg()
        and not hist._is_zerotensor()
        and type(bins) is int
        and 1 <= bins < 2**24
        and type(dst_nbins) is int
        and 0 < dst_nbins < 2**32
        and not thread_modes_active()
        and not torch.compiler.is_compiling()
        and _stock_error_methods(observer)
        and _error_model_holds()
        and _sum_lanes is not None
        and _sum_lanes != _UNPROBED
    ):
        values = hist.numpy()
        if len(values) == bins:
            return values, lo.item(), hi.item(), dst_nbins
    return _whole_decline(observer, state)


def _whole_decline(
    observer: Any, state: tuple[Any, Any, Any, Any, Any]
) -> tuple[Any, float, float, int] | str:
    """:func:`_whole_inputs`'s conditions one by one: the first that fails, or the arguments
    (where the lanes were not probed yet)."""
    hist, lo, hi, bins, dst_nbins = state
    plain = torch.Tensor
    if type(hist) is not plain or type(lo) is not plain or type(hi) is not plain:
        return "histogram or range not plain tensors"
    strided = torch.strided
    if hist.layout is not strided or lo.layout is not strided or hi.layout is not strided:
        return "histogram or range not strided tensors"
    if hist.dtype != torch.float32 or hist.dim() != 1 or not hist.is_cpu:
        return "histogram is not a 1-d float32 CPU tensor"
    if type(bins) is not int or not 1 <= bins < 2**24 or hist.size(0) != bins:
        return "bins not an int from 1 to 2^24 - 1, or not the histogram's size"
    if not hist.is_contiguous() or hist.requires_grad:
        return "histogram not contiguous, or requires grad"
    if hist.is_neg() or hist._is_zerotensor():
        return _NOT_IN_MEMORY
    for value in (lo, hi):
        if value.dim() != 0 or value.dtype != torch.float32 or not value.is_cpu:
            return "min_val/max_val not 0-dim float32 CPU tensors"
        if value.requires_grad:
            return "min_val/max_val require grad"
    if type(dst_nbins) is not int or not 0 < dst_nbins < 2**32:
        return "dst_nbins not a positive 32-bit int"
    reason = _modes_reason()
    if reason is not None:
        return reason
    if not _stock_error_methods(observer) or not _error_model_holds():
        return "error computation not modelled"
    if sum_lanes() is None:
        return "torch.sum not modelled on this CPU"
    return hist.numpy(), lo.item(), hi.item(), dst_nbins


#: Per observer class: whether its attributes resolve by ``nn.Module``'s own lookup (no class
#: attribute named like the search's state, ``object.__getattribute__``,
#: ``Module.__getattr__``), so that the state can be read from the instance's dicts directly.
_module_lookup: dict[type, bool] = {}


def read_state(observer: Any) -> tuple[Any, Any, Any, Any, Any]:
    """``observer``'s histogram, min_val, max_val, bins and dst_nbins, as attribute reads give
    them: from the instance's ``_buffers`` and ``__dict__`` where that is what
    ``Module.__getattr__`` would return (the buffers not shadowed by an instance attribute or
    a parameter), which costs a fraction of the five attribute reads."""
    cls = type(observer)
    plain = _module_lookup.get(cls)
    if plain is None:
        plain = _module_lookup[cls] = (
            cls.__getattribute__ is object.__getattribute__
            and getattr(cls, "__getattr__", None) is torch.nn.Module.__getattr__
            and not any(
                hasattr(cls, n) for n in ("histogram", "min_val", "max_val", "bins", "dst_nbins")
            )
        )
    if plain:
        own = vars(observer)
        buffers, params = own.get("_buffers"), own.get("_parameters")
        if (
            buffers is not None
            and params is not None
            and "bins" in own
            and "dst_nbins" in own
            and "histogram" not in own
            and "min_val" not in own
            and "max_val" not in own
            and "histogram" not in params
            and "min_val" not in params
            and "max_val" not in params
        ):
            hist, lo, hi = buffers.get("histogram"), buffers.get("min_val"), buffers.get("max_val")
            if hist is not None and lo is not None and hi is not None:
                return hist, lo, hi, own["bins"], own["dst_nbins"]
    return observer.histogram, observer.min_val, observer.max_val, observer.bins, observer.dst_nbins


#: ``arm_accel.patches.holds`` (imported on first use: the patch table imports this module).
_holds: Any = None


def _error_model_holds() -> bool:
    global _holds
    if _holds is None:
        from arm_accel.patches import holds

        _holds = holds
    return _holds(ERROR_MODEL)  # type: ignore[no-any-return]


def _search_whole(observer: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The search in one native call (``rust/quantize/search.rs``): stock's (min, max), its
    call counted under ``STATS_NAME`` too, or None where it is not modelled or the kernel
    failed (recorded; nothing changed)."""
    t0 = time.perf_counter()
    inputs = _whole_inputs(observer)
    if type(inputs) is tuple:
        try:
            found = native(_native.histogram_search, *inputs, _sum_lanes)
        except NativeFailed as exc:
            counters.record_calls(WHOLE_STATS_NAME, 1, 0, 0.0)
            record_native_failure(WHOLE_STATS_NAME, exc)
            return None
        if type(found) is tuple:
            # Stock's values are 0-dim float32 tensors: the float32 values, exactly.
            result = (
                torch.scalar_tensor(found[3], dtype=torch.float32),
                torch.scalar_tensor(found[4], dtype=torch.float32),
            )
            counters.record_call_with(
                STATS_NAME,
                time.perf_counter() - t0,
                ((WHOLE_STATS_NAME, 1), (ERROR_STATS_NAME, found[2])),
            )
            return result
        inputs = found
    counters.record_calls(WHOLE_STATS_NAME, 1, 0, 0.0)
    counters.record_decline(WHOLE_STATS_NAME, str(inputs))
    return None


def _search_stepwise(observer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The search with its bound walk run natively between candidates, each candidate's
    error as :class:`_Errors`, the stop and the (min, max) stock's code."""
    # Stock's assertion (histogram size == bins) holds: decline_reason sends a mismatch to stock.
    bin_width = (observer.max_val - observer.min_val) / observer.bins

    total = torch.sum(observer.histogram).item()
    c_sum = torch.cumsum(observer.histogram, dim=0)
    csum = c_sum.detach().numpy()

    error = _Errors(observer)
    walk = (0.0, 1.0, 0, observer.bins - 1)  # alpha, beta, start_bin, end_bin
    norm_min = math.inf
    while (found := _next_candidate(csum, total, walk)) is not None:
        norm = error(found[2], found[3])
        if norm > norm_min:
            break
        norm_min = norm
        walk = found
    start_bin, end_bin = walk[2], walk[3]
    counters.record_calls(ERROR_STATS_NAME, error.calls, error.served, error.seconds)

    new_min = observer.min_val + bin_width * start_bin
    new_max = observer.min_val + bin_width * (end_bin + 1)
    return new_min, new_max


def dispatching(stock: Any) -> Any:
    """The method the patch table installs on the class: :func:`search` when the switch is on
    and the observer is modelled, stock's method otherwise."""

    @functools.wraps(stock)
    def _non_linear_param_search(self: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if switch.is_enabled():
            whole = _search_whole(self)
            if whole is not None:
                return whole
        return run_accelerated(  # type: ignore[no-any-return]
            STATS_NAME,
            lambda: decline_reason(self),
            lambda: (True, _search_stepwise(self)),
            lambda: stock(self),
        )

    return _non_linear_param_search


def compares_in_float32() -> bool:
    """torch compares a float32 0-dim tensor with a Python float in float32 (the Python float
    rounded), as the native walk models: probed once at install."""
    half = torch.tensor(0.5, dtype=torch.float32)
    above = 0.5 + 1e-12  # above 0.5 as an f64, 0.5 as an f32
    return not bool(half < above) and bool(torch.tensor(1.0) < 1e39)


def install_check() -> str | None:
    """The patch table's check of the group: torch compares as the walk models."""
    if not compares_in_float32():
        return "torch does not compare float32 tensors with Python floats in float32"
    return None


def stock_method() -> Any:
    """torchao's own ``_non_linear_param_search`` (installed or not)."""
    from arm_accel import patches

    try:
        return patches.original(STATS_NAME)
    except KeyError:
        return vars(_defining_class())["_non_linear_param_search"]


__all__ = [
    "ERROR_MODEL",
    "ERROR_STATS_NAME",
    "STATS_NAME",
    "WHOLE_STATS_NAME",
    "compares_in_float32",
    "decline_reason",
    "dispatching",
    "install_check",
    "read_state",
    "search",
    "stock_method",
    "sum_lanes",
]
