//! Binding of the constant membership of `RemovePermutesAroundElementwiseTosaOps`
//! ([`crate::membership`]).

use numpy::PyArray1;
use pyo3::prelude::*;

use super::{guarded, Borrowed};
use crate::table::TableError;

/// Per-node constant membership (bool array) from the table's CONSTANT flags.
#[pyfunction]
fn constant_mask<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<bool>>> {
    guarded("constant_mask", || {
        let b = Borrowed::new(table)?;
        let view = b.view();
        let set = py.detach(|| {
            view.validate()?;
            Ok::<_, TableError>(crate::membership::constant_set(&view))
        })?;
        let mask: Vec<bool> = (0..set.len()).map(|i| set.contains(i)).collect();
        Ok(PyArray1::from_vec(py, mask))
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(constant_mask, m)?)?;
    Ok(())
}
