//! Binding of the chain collection of `CanonicalizeViewCopyPermutePass` ([`crate::chains`]).

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::{guarded, Borrowed, CsrPair};
use crate::table::TableError;

/// Maximal linear chains of nodes whose target class has a bit of `member_mask`, in stock
/// `_collect_chains` order, as (ptr, nodes) CSR arrays of int64.
#[pyfunction]
fn collect_chains<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    member_mask: u32,
) -> PyResult<CsrPair<'py>> {
    guarded("collect_chains", || {
        let b = Borrowed::new(table)?;
        let view = b.view();
        let res = py.detach(|| {
            view.validate()?;
            Ok::<_, TableError>(crate::chains::collect_chains(&view, member_mask))
        })?;
        let chains = res.map_err(|e| PyValueError::new_err(format!("decline: {e}")))?;
        Ok((
            PyArray1::from_vec(py, chains.ptr),
            PyArray1::from_vec(py, chains.nodes),
        ))
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(collect_chains, m)?)?;
    Ok(())
}
