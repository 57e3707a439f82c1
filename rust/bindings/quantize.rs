//! Bindings of the quantization kernels ([`crate::quantize`]).

use numpy::PyReadwriteArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::{checked_array, guarded, slice};
use crate::quantize::error::{error_terms, Terms};
use crate::quantize::histogram::{next_candidate, Walk};

/// The next candidate of `HistogramObserver._non_linear_param_search`'s walk.
///
/// `csum` is the float32 cumulative histogram, `total` the histogram's sum as a Python float,
/// the rest the walk's state. Returns `(alpha, beta, next_start_bin, next_end_bin)` for the
/// first step that moves a bin, or None when the loop ends first.
#[pyfunction]
fn histogram_next_candidate(
    py: Python<'_>,
    csum: &Bound<'_, PyAny>,
    total: f64,
    alpha: f64,
    beta: f64,
    start_bin: usize,
    end_bin: usize,
) -> PyResult<Option<(f64, f64, usize, usize)>> {
    guarded("histogram_next_candidate", || {
        let csum = checked_array::<f32>(csum, "csum", "float32")?;
        let csum = slice(&csum);
        let walk = Walk {
            alpha,
            beta,
            start_bin,
            end_bin,
        };
        let found = py
            .detach(|| next_candidate(csum, total, walk))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(found.map(|(w, s, e)| (w.alpha, w.beta, s, e)))
    })
}

/// Stock's per-bin quantization error terms of the candidate `[start_bin, end_bin]` into
/// `out` (float32, the histogram's length). Returns `"filled"`, `"zero"` (stock returns 0.0)
/// or `"not modelled: <why>"` (`out` unspecified: compute the candidate with torch's method).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn histogram_error_terms(
    py: Python<'_>,
    hist: &Bound<'_, PyAny>,
    min_val: f64,
    max_val: f64,
    dst_nbins: u32,
    start_bin: usize,
    end_bin: usize,
    out: &Bound<'_, PyAny>,
) -> PyResult<String> {
    guarded("histogram_error_terms", || {
        let hist = checked_array::<f32>(hist, "hist", "float32")?;
        let hist = slice(&hist);
        let mut out: PyReadwriteArray1<'_, f32> = out.extract().map_err(|_| {
            PyValueError::new_err("out: expected a writeable 1-d numpy array of float32")
        })?;
        let out = out
            .as_slice_mut()
            .map_err(|_| PyValueError::new_err("out: array must be C-contiguous"))?;
        if out.len() != hist.len() {
            return Err(PyValueError::new_err(format!(
                "out has {} elements, hist {}",
                out.len(),
                hist.len()
            )));
        }
        if start_bin > end_bin || end_bin >= hist.len() || hist.len() >= 1 << 24 {
            return Err(PyValueError::new_err(format!(
                "bins out of range: start_bin {start_bin}, end_bin {end_bin}, {} bins",
                hist.len()
            )));
        }
        if dst_nbins == 0 {
            return Err(PyValueError::new_err("dst_nbins must be positive"));
        }
        let terms =
            py.detach(|| error_terms(hist, min_val, max_val, dst_nbins, start_bin, end_bin, out));
        Ok(match terms {
            Terms::Filled => "filled".to_string(),
            Terms::Zero => "zero".to_string(),
            Terms::NotModelled(why) => format!("not modelled: {why}"),
        })
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(histogram_next_candidate, m)?)?;
    m.add_function(wrap_pyfunction!(histogram_error_terms, m)?)?;
    Ok(())
}
