//! Bindings of the duplicate-user kernels of `FuseDuplicateUsersPass` ([`crate::worklist`],
//! [`crate::signature`]).

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::{guarded, slice, Borrowed, CsrPair};
use crate::table::{NodeTable, TableError};

/// Borrows the int64 `group_key` array (one key per target code) of the duplicate-user kernels.
fn group_keys<'py>(group_key: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray1<'py, i64>> {
    let keys: PyReadonlyArray1<'py, i64> = group_key.extract().map_err(|_| {
        PyValueError::new_err("field 'group_key': expected a 1-d numpy array of int64")
    })?;
    if keys.as_slice().is_err() {
        return Err(PyValueError::new_err(
            "field 'group_key': array must be C-contiguous",
        ));
    }
    Ok(keys)
}

/// Runs a duplicate-user kernel on a validated table and its `group_key`, GIL released.
fn with_group_keys<'py, R: Send>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    group_key: &Bound<'py, PyAny>,
    kernel: impl FnOnce(&NodeTable<'_>, &[i64]) -> Result<R, TableError> + Send,
) -> PyResult<R> {
    let b = Borrowed::new(table)?;
    let keys = group_keys(group_key)?;
    let keys = slice(&keys);
    let view = b.view();
    Ok(py.detach(|| {
        view.validate()?;
        kernel(&view, keys)
    })?)
}

/// Producers whose duplicate-user fusion visit may fuse something (int64 ids, graph order).
/// `group_key` (int64, one per target code) groups targets; negative keys are never fused.
/// Test-only: the pass calls `user_signatures`, which screens the same way.
#[cfg(feature = "testing")]
#[pyfunction]
fn duplicate_user_candidates<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    group_key: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    guarded("duplicate_user_candidates", || {
        let out = with_group_keys(py, table, group_key, |view, keys| {
            crate::worklist::duplicate_user_candidates(view, keys)
        })?;
        Ok(PyArray1::from_vec(py, out))
    })
}

/// Interned user signatures (int64 per node; -1 not grouped, -2 opaque) from the table's
/// integer-argument token streams, and the producers whose visit may fuse (graph order).
#[pyfunction]
fn user_signatures<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    group_key: &Bound<'py, PyAny>,
) -> PyResult<CsrPair<'py>> {
    guarded("user_signatures", || {
        let s = with_group_keys(py, table, group_key, |view, keys| {
            crate::signature::user_signatures(view, keys)
        })?;
        Ok((
            PyArray1::from_vec(py, s.code),
            PyArray1::from_vec(py, s.candidates),
        ))
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(feature = "testing")]
    m.add_function(wrap_pyfunction!(duplicate_user_candidates, m)?)?;
    m.add_function(wrap_pyfunction!(user_signatures, m)?)?;
    Ok(())
}
