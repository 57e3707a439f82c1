//! PyO3 bindings: convert numpy arrays and errors, call the kernels with the GIL released.
//! No graph logic lives here. One file per kernel family (`table`, `chains`, `signature`,
//! `membership`, `dims`, `propagate`, `quantize`); this one holds the shared conversions, the panic guard
//! and the module.

use std::panic::{catch_unwind, AssertUnwindSafe};

use numpy::{Element, PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::table::TableError;

mod chains;
#[cfg(feature = "testing")]
mod dims;
mod membership;
mod propagate;
mod quantize;
mod signature;
mod table;

use table::Borrowed;

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

/// A CSR pair of int64 arrays: (ptr, flat).
type CsrPair<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>);

/// Test-only: panics inside the binding guard, so tests can check that a panic reaches Python
/// as `NativePanic` and that the passes' fallbacks handle it. Never called by the package.
#[cfg(feature = "testing")]
#[pyfunction]
fn _test_panic(message: &str) -> PyResult<()> {
    guarded("_test_panic", || panic!("{message}"))
}

/// One group of named constants as a `{name: value}` dict.
fn named<'py, T: Copy + Into<i64>>(
    py: Python<'py>,
    consts: &[(&str, T)],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for &(name, value) in consts {
        d.set_item(name, value.into())?;
    }
    Ok(d)
}

/// Every constant Python and Rust share, by group: `{group: {name: value}}`; the Python enums
/// (`table.Op`/`Flag`/`Cls`, `scan_plan.Form`/`Extra`/`Retrace`/`Special`) take their values
/// from here.
fn constants(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use crate::propagate::{extra, form, retrace, special};
    use crate::table::{class, flag, op};
    let d = PyDict::new(py);
    d.set_item("op", named(py, op::NAMED)?)?;
    d.set_item("flag", named(py, flag::NAMED)?)?;
    d.set_item("class", named(py, class::NAMED)?)?;
    d.set_item("form", named(py, form::NAMED)?)?;
    d.set_item("extra", named(py, extra::NAMED)?)?;
    d.set_item("retrace", named(py, retrace::NAMED)?)?;
    d.set_item("special", named(py, special::NAMED)?)?;
    Ok(d)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("NativePanic", m.py().get_type::<NativePanic>())?;
    m.add("CONSTANTS", constants(m.py())?)?;
    // Whether the test-only bindings are in (feature `testing`).
    m.add("TESTING", cfg!(feature = "testing"))?;
    #[cfg(feature = "testing")]
    m.add_function(wrap_pyfunction!(_test_panic, m)?)?;
    table::register(m)?;
    chains::register(m)?;
    signature::register(m)?;
    membership::register(m)?;
    #[cfg(feature = "testing")]
    dims::register(m)?;
    propagate::register(m)?;
    quantize::register(m)?;
    Ok(())
}
