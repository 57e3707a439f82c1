//! The node table borrowed from Python (every column checked on entry) and its validation
//! binding ([`crate::table`]).

use numpy::{Element, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::{checked_array, guarded, slice};
use crate::table::NodeTable;

/// Read-only borrows of every column of a Python `NodeTable`, kept alive while kernels run.
pub(crate) struct Borrowed<'py> {
    op: PyReadonlyArray1<'py, u8>,
    target: PyReadonlyArray1<'py, i32>,
    target_class: PyReadonlyArray1<'py, u32>,
    in_ptr: PyReadonlyArray1<'py, i64>,
    in_idx: PyReadonlyArray1<'py, i64>,
    user_ptr: PyReadonlyArray1<'py, i64>,
    user_idx: PyReadonlyArray1<'py, i64>,
    rank: PyReadonlyArray1<'py, i32>,
    shape_ptr: PyReadonlyArray1<'py, i64>,
    shape: PyReadonlyArray1<'py, i64>,
    dtype: PyReadonlyArray1<'py, i32>,
    iarg_ptr: PyReadonlyArray1<'py, i64>,
    iarg: PyReadonlyArray1<'py, i64>,
    flags: PyReadonlyArray1<'py, u32>,
}

fn column<'py, T: Element>(
    obj: &Bound<'py, PyAny>,
    name: &'static str,
    dtype: &'static str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    let value = obj
        .getattr(name)
        .map_err(|_| PyValueError::new_err(format!("node table field '{name}': missing")))?;
    checked_array(&value, &format!("node table field '{name}'"), dtype)
}

impl<'py> Borrowed<'py> {
    pub(crate) fn new(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        Ok(Self {
            op: column(obj, "op", "uint8")?,
            target: column(obj, "target", "int32")?,
            target_class: column(obj, "target_class", "uint32")?,
            in_ptr: column(obj, "in_ptr", "int64")?,
            in_idx: column(obj, "in_idx", "int64")?,
            user_ptr: column(obj, "user_ptr", "int64")?,
            user_idx: column(obj, "user_idx", "int64")?,
            rank: column(obj, "rank", "int32")?,
            shape_ptr: column(obj, "shape_ptr", "int64")?,
            shape: column(obj, "shape", "int64")?,
            dtype: column(obj, "dtype", "int32")?,
            iarg_ptr: column(obj, "iarg_ptr", "int64")?,
            iarg: column(obj, "iarg", "int64")?,
            flags: column(obj, "flags", "uint32")?,
        })
    }

    pub(crate) fn view(&self) -> NodeTable<'_> {
        NodeTable {
            op: slice(&self.op),
            target: slice(&self.target),
            target_class: slice(&self.target_class),
            in_ptr: slice(&self.in_ptr),
            in_idx: slice(&self.in_idx),
            user_ptr: slice(&self.user_ptr),
            user_idx: slice(&self.user_idx),
            rank: slice(&self.rank),
            shape_ptr: slice(&self.shape_ptr),
            shape: slice(&self.shape),
            dtype: slice(&self.dtype),
            iarg_ptr: slice(&self.iarg_ptr),
            iarg: slice(&self.iarg),
            flags: slice(&self.flags),
        }
    }
}

/// Validates a table and returns its counts as a dict; raises ValueError naming the field.
#[pyfunction]
fn table_counts<'py>(py: Python<'py>, table: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    guarded("table_counts", || {
        let b = Borrowed::new(table)?;
        let view = b.view();
        let counts = py.detach(|| view.validate().map(|_| view.counts()))?;
        let d = PyDict::new(py);
        d.set_item("nodes", counts.nodes)?;
        d.set_item("input_edges", counts.input_edges)?;
        d.set_item("user_edges", counts.user_edges)?;
        d.set_item("constants", counts.constants)?;
        d.set_item("symbolic", counts.symbolic)?;
        d.set_item("int48", counts.int48)?;
        d.set_item("non_tensor", counts.non_tensor)?;
        d.set_item("opaque_args", counts.opaque_args)?;
        d.set_item("feeds_output", counts.feeds_output)?;
        Ok(d)
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(table_counts, m)?)?;
    Ok(())
}
