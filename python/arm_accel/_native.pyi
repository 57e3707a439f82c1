"""Typed stub of the native module built from ``rust/bindings/``."""

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

__version__: str
#: Whether the test-only bindings are in (cargo feature ``testing``; marked "Test-only" below).
TESTING: bool
#: Every constant Python shares with Rust, ``{group: {name: value}}`` (groups ``op``, ``flag``,
#: ``class``, ``form``, ``extra``, ``retrace``, ``special``): the enums of
#: ``arm_accel.native.table`` and ``pipeline.passes.propagate.scan_plan`` take their values from
#: here.
CONSTANTS: dict[str, dict[str, int]]

class _Table(Protocol):
    op: npt.NDArray[np.uint8]
    target: npt.NDArray[np.int32]
    target_class: npt.NDArray[np.uint32]
    in_ptr: npt.NDArray[np.int64]
    in_idx: npt.NDArray[np.int64]
    user_ptr: npt.NDArray[np.int64]
    user_idx: npt.NDArray[np.int64]
    rank: npt.NDArray[np.int32]
    shape_ptr: npt.NDArray[np.int64]
    shape: npt.NDArray[np.int64]
    dtype: npt.NDArray[np.int32]
    iarg_ptr: npt.NDArray[np.int64]
    iarg: npt.NDArray[np.int64]
    flags: npt.NDArray[np.uint32]

def table_counts(table: _Table) -> dict[str, int]:
    """Validate ``table`` and return its node, edge and flag counts.

    Raises ValueError naming the offending field if the table is malformed.
    """

def collect_chains(
    table: _Table, member_mask: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Maximal linear chains of nodes whose class has a bit of ``member_mask``.

    Same chains, same order as stock ``CanonicalizeViewCopyPermutePass._collect_chains``;
    returned as CSR ``(ptr, nodes)``. Raises ValueError naming the field on a malformed table,
    and ValueError starting with ``decline:`` on graphs stock would reject.
    """

def duplicate_user_candidates(
    table: _Table, group_key: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Test-only. Producers (graph order) with two or more call_function users sharing a group
    key.

    ``group_key`` has one int64 per target code; negative keys mark targets never fused.
    """

def user_signatures(
    table: _Table, group_key: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Interned duplicate-user signatures and the producers whose visit may fuse.

    Reads each node's token stream from the ``iarg`` CSR (``OPAQUE_ARGS``: not modelled).
    Returns ``(code, candidates)``: ``code`` per node is >= 0 (equal codes: equal stock
    signatures within one group key), -1 (not grouped: not call_function or excluded key) or
    -2 (opaque: Python must answer); ``candidates`` are producers (graph order) with two users
    of one group whose codes are equal, or a group holding an opaque user.
    """

def constant_mask(table: _Table) -> npt.NDArray[np.bool_]:
    """Per-node constant membership from the table's CONSTANT flags."""

# rust/propagate/dims.rs (bindings in rust/bindings/dims.rs): dim_maps' ViewMap / PermuteMap
# over concrete dims, test-only (the planner uses them inside Rust). Where dim_maps returns None
# these return None; where it raises they raise ValueError (as they do for malformed input and
# for products that overflow int64).
_Dims = int | Sequence[int]

class ViewMap:
    def __init__(self, source_shape: Sequence[int], target_shape: Sequence[int]) -> None: ...
    @property
    def is_valid_map(self) -> bool: ...
    @property
    def source_shape(self) -> list[int]: ...
    @property
    def target_shape(self) -> list[int]: ...
    def source_to_target_axes(self) -> list[list[int]]: ...
    def map_source_dims_to_target_axes(self, source_dims: _Dims) -> list[int] | None: ...
    def map_dim(self, source_dims: _Dims) -> list[int] | None: ...
    def map_dim_inverse(self, target_dims: _Dims) -> list[int] | None: ...
    def map_reduction_after_view(
        self, source_shape: Sequence[int], source_dims: _Dims
    ) -> tuple[list[int], list[int]] | None: ...
    def map_reduction_before_view(
        self, target_dims: _Dims
    ) -> tuple[list[int], list[int]] | None: ...
    def map_permutation(self, permutation: Sequence[int]) -> list[int] | None: ...
    def map_permutation_inverse(self, permutation: Sequence[int]) -> list[int] | None: ...
    def remap_target_shape(self, source_shape: Sequence[int]) -> list[int] | None: ...
    def remap_unit_slice(
        self,
        producer_shape: Sequence[int],
        slice_dim: int,
        start: int,
        end: int,
        step: int | None = None,
    ) -> tuple[list[int], int, int, int] | None: ...

class PermuteMap:
    def __init__(self, permute_dims: Sequence[int]) -> None: ...
    @property
    def permute_dims(self) -> list[int]: ...
    def map_dims(self, dims: _Dims) -> list[int]: ...
    def map_dims_inverse(self, dims: _Dims) -> list[int]: ...

# rust/propagate/ (bindings in rust/bindings/propagate.rs): PropagateViewCopyPermute scans. The
# plan crosses as frozen objects, one class per edit form. Node ids are table positions; nodes an
# edit creates get the ids after the table's, in creation order.
_ArgValue = int | list[int]

class ArgsEdit:
    """``node.args = (*args[:pos], *values, *args[pos + len(values):])``."""

    node: int
    pos: int
    values: list[_ArgValue]

class MoveEdit:
    """Stock's ``_move_node(node, frontier, previous_frontier)``."""

    node: int
    frontier: int
    previous_frontier: int

class CatFanoutEdit:
    """Stock's ``_maybe_split_upwards_cat_fanout(node, cat)``, creating ``created``."""

    node: int
    cat: int
    created: list[int]

class ForkBranch:
    """One branch of a fork split; ``arg_update`` the next node's ``(pos, values)`` or None;
    ``created`` the transform the split creates after it."""

    next_node: int
    source_shape: list[int]
    arg_update: tuple[int, list[_ArgValue]] | None
    created: int

class ForkSplitEdit:
    """Stock's ``_apply_fork_split(node, frontier, producer, branches)``."""

    node: int
    frontier: int
    producer: int
    branches: list[ForkBranch]

Edit = ArgsEdit | MoveEdit | CatFanoutEdit | ForkSplitEdit

class ShapeWrite:
    """The modelled re-trace gives ``node`` ``base``'s value ``.new_empty(shape)``."""

    node: int
    shape: list[int]
    base: int

class Between:
    """Stock's re-trace between two scans, modelled: erase ``dead`` in order, set each
    ``(node, users)`` dict to that order, apply ``shapes``."""

    dead: list[int]
    users: list[tuple[int, list[int]]]
    shapes: list[ShapeWrite]

class ScanStep:
    """One scan of a run: stock's ``modified``, its edits, the re-trace after it (None on the
    run's last scan)."""

    modified: bool
    edits: list[Edit]
    after: Between | None

class RunPlan:
    """``fixed_point``: the last scan modified nothing; otherwise re-trace before planning on."""

    scans: list[ScanStep]
    fixed_point: bool

class ScanPlan:
    """Test-only: one scan planned on its own."""

    modified: bool
    edits: list[Edit]

class Decline:
    """The first scan cannot be decided exactly: ``reason`` a stable category, at ``node``."""

    reason: str
    node: int | None

def plan_propagation_scan(
    table: _Table,
    target_extra: npt.NDArray[np.uint32],
    special: npt.NDArray[np.int32],
    form: npt.NDArray[np.uint32],
    direction: str,
    tosa: bool,
) -> ScanPlan | Decline:
    """Test-only. Plan one stock propagation scan over ``table``.

    ``target_extra`` (uint32 per target code), ``special`` (int32 per node: 0 none, 1 INT48,
    other positive codes for other special dtypes) and ``form`` (uint32 argument-form bits per
    node) are the planner's columns (``arm_accel.pipeline.passes.propagate.scan_plan``);
    ``direction`` is ``"down"`` or ``"up"``, ``tosa`` selects the Arm overrides. Raises
    ValueError naming the field on malformed input.
    """

def plan_propagation_run(
    table: _Table,
    target_extra: npt.NDArray[np.uint32],
    special: npt.NDArray[np.int32],
    form: npt.NDArray[np.uint32],
    retrace: npt.NDArray[np.uint8],
    direction: str,
    tosa: bool,
    max_scans: int,
) -> RunPlan | Decline:
    """Plan up to ``max_scans`` consecutive stock scans, modelling stock's re-trace between
    them (the DCE, users in graph order, recomputed shapes).

    Columns as ``plan_propagation_scan`` plus ``retrace`` (uint8 per node: ``Retrace`` bits,
    impure for fx's DCE, a value ``ArmPass`` keeps). A first scan that cannot be decided is a
    ``Decline``. Raises ValueError on malformed input or ``max_scans < 1``.
    """

def histogram_next_candidate(
    csum: npt.NDArray[np.float32],
    total: float,
    alpha: float,
    beta: float,
    start_bin: int,
    end_bin: int,
) -> tuple[float, float, int, int] | None:
    """``HistogramObserver._non_linear_param_search``'s bound walk from the state
    ``(alpha, beta, start_bin, end_bin)`` up to the next step that moves a bin.

    ``csum`` is the float32 cumulative histogram, ``total`` its sum as a Python float. Returns
    ``(alpha, beta, next_start_bin, next_end_bin)`` for that step (the bounds as stock holds
    them when it computes the candidate's error), or None when the loop ends first. Raises
    ValueError when the bins are out of range.
    """

def histogram_error_terms(
    hist: npt.NDArray[np.float32],
    min_val: float,
    max_val: float,
    dst_nbins: int,
    start_bin: int,
    end_bin: int,
    out: npt.NDArray[np.float32],
) -> str:
    """``HistogramObserver._compute_quantization_error``'s per-bin terms of the candidate
    ``[start_bin, end_bin]`` into ``out`` (float32, the histogram's length), as torch computes
    them (``min_val``/``max_val``: the observer's ``.item()``s).

    Returns ``"filled"`` (torch's ``sum()`` of ``out`` is stock's error), ``"zero"`` (stock
    returns 0.0) or ``"not modelled: <why>"`` (compute it with torch's method). Raises
    ValueError on mismatched lengths or bins out of range.
    """

def histogram_search(
    hist: npt.NDArray[np.float32],
    min_val: float,
    max_val: float,
    dst_nbins: int,
    lanes: int,
) -> tuple[int, int, int, float, float] | str:
    """``HistogramObserver._non_linear_param_search`` whole: torch's ``sum``/``cumsum`` of the
    histogram (``sum`` modelled with ``lanes``-lane vectors), the bound walk, every
    candidate's error summed as torch's ``norm.sum()``, stock's stop, and the float32
    ``(min, max)`` (``min_val``/``max_val``: 0-dim float32 tensors' ``.item()``s).

    Returns ``(start_bin, end_bin, candidates, new_min, new_max)``, or ``"not modelled:
    <why>"`` (nothing changed). Raises ValueError on an empty histogram, 2^24 bins or more,
    ``dst_nbins`` 0 or lanes not modelled.
    """

def histogram_torch_sums(
    x: npt.NDArray[np.float32], lanes: int, out: npt.NDArray[np.float32]
) -> float | None:
    """torch's ``x.sum()`` (``lanes``-lane vectors; None where not modelled: 32768 elements
    or more) and ``torch.cumsum(x, 0)`` into ``out``, as the one-call search models them.
    Raises ValueError on mismatched lengths or lanes not modelled."""

def histogram_observe(
    x: npt.NDArray[np.float32],
    min_val: float,
    max_val: float,
    left: float,
    right: float,
    hist: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
) -> str:
    """``HistogramObserver.forward``'s same-range path: ``x`` counted as ``torch.histc`` with
    the edges ``left``/``right`` (``torch.linspace(min_val, max_val, bins + 1)``'s first and
    last values) and added to ``hist`` into ``out``.

    Returns ``"added"``, or ``"not modelled: <why>"`` (a value outside ``[min_val, max_val]``
    or not finite, edges not a finite increasing range: ``out`` untouched). Raises ValueError
    on mismatched lengths.
    """

def histogram_observe_in_place(
    x: npt.NDArray[np.float32],
    min_val: float,
    max_val: float,
    left: float,
    right: float,
    hist: npt.NDArray[np.float32],
) -> str:
    """:func:`histogram_observe` with the sum written over ``hist``: every count is taken
    before ``hist`` is written, so a batch that is not modelled leaves it untouched. Returns
    ``"added"`` or ``"not modelled: <why>"``."""

def per_channel_minmax(
    x: npt.NDArray[np.float32],
    min: npt.NDArray[np.float32],
    max: npt.NDArray[np.float32],
) -> str:
    """``PerChannelMinMaxObserver._forward`` on a batch after the first: the running extremes
    ``min``/``max`` (one per channel) updated with the rows of the flat contiguous batch ``x``
    (channel axis 0), written only when every value is modelled. Returns ``"updated"`` or
    ``"not modelled: <why>"`` (a NaN, a tie of opposite zeros). Raises ValueError when the
    lengths do not fit."""

def histogram_upscale(
    hist: npt.NDArray[np.float32],
    upsample: int,
    mids: npt.NDArray[np.float32],
    boundaries: npt.NDArray[np.float32],
    out: npt.NDArray[np.float32],
) -> None:
    """``HistogramObserver._upscale_histogram``'s bucketing and sum into ``out`` (the bins):
    ``hist`` repeated ``upsample`` times over ``upsample``, bucketed by
    ``torch.bucketize(mids, boundaries, right=True) - 1`` clamped to the bins, summed per
    bucket in order as ``torch.bincount``. Raises ValueError on mismatched lengths.
    """

class NativePanic(RuntimeError):
    """A Rust panic inside a native kernel (message: ``native kernel NAME panicked: ...``)."""

def _test_panic(message: str) -> None:
    """Test-only: panics inside the binding guard; raises :class:`NativePanic`."""
