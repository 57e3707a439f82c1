//! PyO3 bindings: convert numpy arrays and errors, call the kernels with the GIL released.
//! No graph logic lives here.

use std::panic::{catch_unwind, AssertUnwindSafe};

use numpy::{Element, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::table::{NodeTable, TableError};

mod dims;
mod propagate;

// A Rust panic inside a kernel. pyo3's own `PanicException` derives from `BaseException` and
// would escape every `except Exception` fallback; this one is a `RuntimeError`, so the fallbacks
// handle it like any other failure.
pyo3::create_exception!(
    _native,
    NativePanic,
    PyRuntimeError,
    "A Rust panic inside a native kernel; the message names the kernel."
);

/// Runs `body` (one binding's whole work), turning a panic into `NativePanic("{kernel}: ...")`.
/// Every `#[pyfunction]` and method of the native module goes through here.
pub(crate) fn guarded<T>(kernel: &str, body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".to_string());
        Err(NativePanic::new_err(format!(
            "native kernel {kernel} panicked: {message}"
        )))
    })
}

impl From<TableError> for PyErr {
    fn from(e: TableError) -> PyErr {
        PyValueError::new_err(e.to_string())
    }
}

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

pub(crate) fn column<'py, T: Element>(
    obj: &Bound<'py, PyAny>,
    name: &'static str,
    dtype: &'static str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    let value = obj
        .getattr(name)
        .map_err(|_| PyValueError::new_err(format!("node table field '{name}': missing")))?;
    checked_array(&value, &format!("node table field '{name}'"), dtype)
}

/// A 1-d C-contiguous numpy array of `T`, or a ValueError naming `label`.
pub(crate) fn checked_array<'py, T: Element>(
    value: &Bound<'py, PyAny>,
    label: &str,
    dtype: &'static str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    let arr = value.extract::<PyReadonlyArray1<'py, T>>().map_err(|_| {
        PyValueError::new_err(format!("{label}: expected a 1-d numpy array of {dtype}"))
    })?;
    if arr.as_slice().is_err() {
        return Err(PyValueError::new_err(format!(
            "{label}: array must be C-contiguous"
        )));
    }
    Ok(arr)
}

/// Contiguity was checked in `column`, so this never fails.
pub(crate) fn slice<'a, T: Element>(a: &'a PyReadonlyArray1<'_, T>) -> &'a [T] {
    a.as_slice().expect("checked C-contiguous in column()")
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

/// A CSR pair of int64 arrays: (ptr, flat).
type CsrPair<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>);

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

/// Test-only: panics inside the binding guard, so tests can check that a panic reaches Python
/// as `NativePanic` and that the passes' fallbacks handle it. Never called by the package.
#[pyfunction]
fn _test_panic(message: &str) -> PyResult<()> {
    guarded("_test_panic", || panic!("{message}"))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("NativePanic", m.py().get_type::<NativePanic>())?;
    m.add_function(wrap_pyfunction!(_test_panic, m)?)?;
    m.add_function(wrap_pyfunction!(table_counts, m)?)?;
    m.add_function(wrap_pyfunction!(collect_chains, m)?)?;
    m.add_function(wrap_pyfunction!(duplicate_user_candidates, m)?)?;
    m.add_function(wrap_pyfunction!(user_signatures, m)?)?;
    m.add_function(wrap_pyfunction!(constant_mask, m)?)?;
    dims::register(m)?;
    propagate::register(m)?;
    Ok(())
}
