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
