"""Typed stub of the native module built from ``rust/python.rs``."""

from typing import Protocol

import numpy as np
import numpy.typing as npt

__version__: str

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
    """Producers (graph order) with two or more call_function users sharing a group key.

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
