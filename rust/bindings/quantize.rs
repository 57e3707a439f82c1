//! Bindings of the quantization kernels ([`crate::quantize`]).

use numpy::{Element, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::{checked_array, guarded, slice};
use crate::quantize::affine::{self, Code, NotModelled};
use crate::quantize::error::{error_terms, Terms};
use crate::quantize::histogram::{next_candidate, Walk};
use crate::quantize::minmax;
use crate::quantize::observe::{observe_in_range, observe_in_range_in_place, upscale, Observed};
use crate::quantize::reduce::{torch_cumsum, torch_sum, LANES};
use crate::quantize::search::{search, Searched};

/// A writeable 1-d C-contiguous float32 array, or a ValueError naming `label`.
fn writeable<'py>(value: &Bound<'py, PyAny>, label: &str) -> PyResult<PyReadwriteArray1<'py, f32>> {
    let arr: PyReadwriteArray1<'py, f32> = value.extract().map_err(|_| {
        PyValueError::new_err(format!(
            "{label}: expected a writeable 1-d numpy array of float32"
        ))
    })?;
    if arr.as_slice().is_err() {
        return Err(PyValueError::new_err(format!(
            "{label}: array must be C-contiguous"
        )));
    }
    Ok(arr)
}

/// [`writeable`], of the same length as the input named `input` (`len` elements).
fn writeable_like<'py>(
    value: &Bound<'py, PyAny>,
    label: &str,
    len: usize,
    input: &str,
) -> PyResult<PyReadwriteArray1<'py, f32>> {
    let arr = writeable(value, label)?;
    let have = arr
        .as_slice()
        .expect("checked C-contiguous in writeable()")
        .len();
    if have != len {
        return Err(PyValueError::new_err(format!(
            "{label} has {have} elements, {input} {len}"
        )));
    }
    Ok(arr)
}

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
        let mut out = writeable_like(out, "out", hist.len(), "hist")?;
        let out = out
            .as_slice_mut()
            .expect("checked C-contiguous in writeable()");
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

/// `HistogramObserver._non_linear_param_search` whole on a float32 histogram with 0-dim
/// float32 `min_val`/`max_val`, torch's `sum` modelled with `lanes`-lane vectors.
///
/// Returns `(start_bin, end_bin, candidates, new_min, new_max)` (the bins the search ends
/// on, how many candidates' errors it computed, stock's returned values), or
/// `"not modelled: <why>"` (nothing changed: run the search another way).
#[pyfunction]
fn histogram_search(
    py: Python<'_>,
    hist: &Bound<'_, PyAny>,
    min_val: f32,
    max_val: f32,
    dst_nbins: u32,
    lanes: usize,
) -> PyResult<Py<PyAny>> {
    guarded("histogram_search", || {
        let hist = checked_array::<f32>(hist, "hist", "float32")?;
        let hist = slice(&hist);
        if hist.is_empty() || hist.len() >= 1 << 24 {
            return Err(PyValueError::new_err(format!(
                "hist has {} bins (must be 1 to 2^24 - 1)",
                hist.len()
            )));
        }
        if dst_nbins == 0 {
            return Err(PyValueError::new_err("dst_nbins must be positive"));
        }
        check_lanes(lanes)?;
        let found = py.detach(|| search(hist, min_val, max_val, dst_nbins, lanes));
        Ok(match found {
            Searched::Found {
                start_bin,
                end_bin,
                candidates,
                new_min,
                new_max,
            } => (start_bin, end_bin, candidates, new_min, new_max)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            Searched::NotModelled(why) => format!("not modelled: {why}")
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        })
    })
}

/// A ValueError unless `lanes` is a modelled `Vectorized<float>` width.
fn check_lanes(lanes: usize) -> PyResult<()> {
    if LANES.contains(&lanes) {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "lanes must be one of {LANES:?}, got {lanes}"
        )))
    }
}

/// torch's `x.sum()` and `torch.cumsum(x, 0)` of a contiguous float32 vector as the search
/// models them (`lanes`-lane vectors), `cumsum` into `out`: the sum, or None where it is not
/// modelled (too long for a serial reduction). Used to probe which width torch uses.
#[pyfunction]
fn histogram_torch_sums(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    lanes: usize,
    out: &Bound<'_, PyAny>,
) -> PyResult<Option<f32>> {
    guarded("histogram_torch_sums", || {
        let x = checked_array::<f32>(x, "x", "float32")?;
        let x = slice(&x);
        let mut out = writeable_like(out, "out", x.len(), "x")?;
        let out = out
            .as_slice_mut()
            .expect("checked C-contiguous in writeable()");
        check_lanes(lanes)?;
        Ok(py.detach(|| {
            torch_cumsum(x, out);
            torch_sum(x, lanes)
        }))
    })
}

/// `HistogramObserver.forward`'s same-range path: the batch `x` counted as `torch.histc` with
/// the edges `left`/`right` (`torch.linspace(min_val, max_val, bins + 1)`'s first and last
/// values) and added to `hist` into `out`. Returns `"added"`, or `"not modelled: <why>"` (a
/// value outside `[min_val, max_val]` or not finite: `out` untouched).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn histogram_observe(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    min_val: f32,
    max_val: f32,
    left: f32,
    right: f32,
    hist: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<String> {
    guarded("histogram_observe", || {
        let x = checked_array::<f32>(x, "x", "float32")?;
        let x = slice(&x);
        let hist = checked_array::<f32>(hist, "hist", "float32")?;
        let hist = slice(&hist);
        let mut out = writeable(out, "out")?;
        let out = out
            .as_slice_mut()
            .expect("checked C-contiguous in writeable()");
        if out.len() != hist.len() || hist.is_empty() {
            return Err(PyValueError::new_err(format!(
                "out has {} elements, hist {} (must be equal, not zero)",
                out.len(),
                hist.len()
            )));
        }
        if !(left < right && (right - left).is_finite()) {
            return Ok("not modelled: bin edges are not a finite increasing range".to_string());
        }
        let observed = py.detach(|| observe_in_range(x, min_val, max_val, left, right, hist, out));
        Ok(observed_outcome(observed))
    })
}

/// What the observe bindings return: `"added"` or `"not modelled: <why>"`.
fn observed_outcome(observed: Observed) -> String {
    match observed {
        Observed::Added => "added".to_string(),
        Observed::NotModelled(why) => format!("not modelled: {why}"),
    }
}

/// [`histogram_observe`] with the sum written over `hist` (a writeable float32 array): the
/// batch's counts are all taken before `hist` is written, so a batch that is not modelled
/// leaves it untouched. Returns `"added"` or `"not modelled: <why>"`.
#[pyfunction]
fn histogram_observe_in_place(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    min_val: f32,
    max_val: f32,
    left: f32,
    right: f32,
    hist: &Bound<'_, PyAny>,
) -> PyResult<String> {
    guarded("histogram_observe_in_place", || {
        let x = checked_array::<f32>(x, "x", "float32")?;
        let x = slice(&x);
        let mut hist = writeable(hist, "hist")?;
        let hist = hist
            .as_slice_mut()
            .expect("checked C-contiguous in writeable()");
        if hist.is_empty() {
            return Err(PyValueError::new_err("hist has no elements"));
        }
        if !(left < right && (right - left).is_finite()) {
            return Ok("not modelled: bin edges are not a finite increasing range".to_string());
        }
        let observed =
            py.detach(|| observe_in_range_in_place(x, min_val, max_val, left, right, hist));
        Ok(observed_outcome(observed))
    })
}

/// `PerChannelMinMaxObserver._forward` on a batch after the first: the running extremes
/// `min`/`max` (writeable float32, one per channel) updated with the rows of the flat
/// contiguous batch `x` (channel axis 0), written only when every value is modelled. Returns
/// `"updated"` or `"not modelled: <why>"` (a NaN, a tie of opposite zeros).
#[pyfunction]
fn per_channel_minmax(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    min: &Bound<'_, PyAny>,
    max: &Bound<'_, PyAny>,
) -> PyResult<String> {
    guarded("per_channel_minmax", || {
        let x = checked_array::<f32>(x, "x", "float32")?;
        let x = slice(&x);
        let mut min = writeable(min, "min")?;
        let min = min
            .as_slice_mut()
            .expect("checked C-contiguous in writeable()");
        let mut max = writeable(max, "max")?;
        let max = max
            .as_slice_mut()
            .expect("checked C-contiguous in writeable()");
        if min.is_empty() || max.len() != min.len() || x.is_empty() || x.len() % min.len() != 0 {
            return Err(PyValueError::new_err(format!(
                "x has {} elements for {} and {} channels (must be equal, not zero, dividing x)",
                x.len(),
                min.len(),
                max.len()
            )));
        }
        Ok(match py.detach(|| minmax::update(x, min, max)) {
            Ok(()) => "updated".to_string(),
            Err(why) => format!("not modelled: {why}"),
        })
    })
}

/// `HistogramObserver._upscale_histogram`'s bucketing and sum into `out` (float32, `bins`):
/// `hist` repeated `upsample` times over `upsample`, bucketed by
/// `torch.bucketize(mids, boundaries, right=True) - 1` clamped to the bins, summed per bucket
/// in order as `torch.bincount`.
#[pyfunction]
fn histogram_upscale(
    py: Python<'_>,
    hist: &Bound<'_, PyAny>,
    upsample: usize,
    mids: &Bound<'_, PyAny>,
    boundaries: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    guarded("histogram_upscale", || {
        let hist = checked_array::<f32>(hist, "hist", "float32")?;
        let hist = slice(&hist);
        let mids = checked_array::<f32>(mids, "mids", "float32")?;
        let mids = slice(&mids);
        let boundaries = checked_array::<f32>(boundaries, "boundaries", "float32")?;
        let boundaries = slice(&boundaries);
        let mut out = writeable(out, "out")?;
        let out = out
            .as_slice_mut()
            .expect("checked C-contiguous in writeable()");
        if upsample == 0 || hist.len().checked_mul(upsample) != Some(mids.len()) || out.is_empty() {
            return Err(PyValueError::new_err(format!(
                "{} mids for {} bins upsampled {upsample} times, {} output bins",
                mids.len(),
                hist.len(),
                out.len()
            )));
        }
        py.detach(|| upscale(hist, upsample, mids, boundaries, out));
        Ok(())
    })
}

/// A writeable 1-d C-contiguous array of `T`, or None when `value` is not one.
fn writeable_of<'py, T: Element>(value: &Bound<'py, PyAny>) -> Option<PyReadwriteArray1<'py, T>> {
    value
        .extract::<PyReadwriteArray1<'py, T>>()
        .ok()
        .filter(|a| a.as_slice().is_ok())
}

/// `Ok(run(args.., o))` with `o` the array `out` as a writeable 1-d C-contiguous int8, uint8 or
/// int16 array (`run` generic over the code type), or a ValueError naming what `out` must be.
macro_rules! on_codes {
    ($out:expr, $run:ident($($arg:expr),*)) => {
        if let Some(o) = writeable_of::<i8>($out) {
            Ok($run($($arg,)* o))
        } else if let Some(o) = writeable_of::<u8>($out) {
            Ok($run($($arg,)* o))
        } else if let Some(o) = writeable_of::<i16>($out) {
            Ok($run($($arg,)* o))
        } else {
            Err(PyValueError::new_err(
                "out: expected a writeable 1-d C-contiguous numpy array of int8, uint8 or int16",
            ))
        }
    };
}

/// A ValueError when `out` has a length other than `len` (an object without one is left to
/// the array check that follows).
fn same_length(out: &Bound<'_, PyAny>, len: usize) -> PyResult<()> {
    match out.len() {
        Ok(have) if have != len => Err(PyValueError::new_err(format!(
            "out has {have} elements, x {len}"
        ))),
        _ => Ok(()),
    }
}

/// A kernel's outcome as the Python side reads it.
fn outcome(result: Result<(), NotModelled>) -> String {
    match result {
        Ok(()) => "done".to_string(),
        Err(NotModelled(why)) => format!("not modelled: {why}"),
    }
}

fn quantize_into<T: Code + Element>(
    py: Python<'_>,
    x: &[f32],
    params: (f64, i64, i64, i64),
    mut out: PyReadwriteArray1<'_, T>,
) -> String {
    let (inv_scale, zero_point, qmin, qmax) = params;
    let out = out
        .as_slice_mut()
        .expect("checked C-contiguous in writeable_of()");
    outcome(py.detach(|| affine::quantize_per_tensor(x, inv_scale, zero_point, qmin, qmax, out)))
}

/// `quantize_per_tensor` of the float32 array `x` into `out` (int8, uint8 or int16, the same
/// length), `inv_scale` being the Python float `1.0 / scale`. Returns `"done"` or
/// `"not modelled: <why>"` (`out` unspecified: run torch's op).
#[pyfunction]
fn quantize_per_tensor(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    inv_scale: f64,
    zero_point: i64,
    qmin: i64,
    qmax: i64,
    out: &Bound<'_, PyAny>,
) -> PyResult<String> {
    guarded("quantize_per_tensor", || {
        let x = checked_array::<f32>(x, "x", "float32")?;
        let x = slice(&x);
        same_length(out, x.len())?;
        let params = (inv_scale, zero_point, qmin, qmax);
        on_codes!(out, quantize_into(py, x, params))
    })
}

fn quantize_channels_into<T: Code + Element>(
    py: Python<'_>,
    x: &[f32],
    channels: (&[f32], &[f32], usize),
    bounds: (i64, i64),
    mut out: PyReadwriteArray1<'_, T>,
) -> String {
    let (inv, zero_points, inner) = channels;
    let out = out
        .as_slice_mut()
        .expect("checked C-contiguous in writeable_of()");
    outcome(py.detach(|| {
        affine::quantize_per_channel(x, inv, zero_points, inner, bounds.0, bounds.1, out)
    }))
}

/// `quantize_per_channel` of the float32 array `x` into `out` (int8, uint8 or int16, the same
/// length): `inv` and `zero_points` are float32, one per channel, and each channel step spans
/// `inner` elements. Returns `"done"` or `"not modelled: <why>"` (`out` unspecified).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn quantize_per_channel(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    inv: &Bound<'_, PyAny>,
    zero_points: &Bound<'_, PyAny>,
    inner: usize,
    qmin: i64,
    qmax: i64,
    out: &Bound<'_, PyAny>,
) -> PyResult<String> {
    guarded("quantize_per_channel", || {
        let x = checked_array::<f32>(x, "x", "float32")?;
        let inv = checked_array::<f32>(inv, "inv", "float32")?;
        let zero_points = checked_array::<f32>(zero_points, "zero_points", "float32")?;
        let (x, channels) = (slice(&x), (slice(&inv), slice(&zero_points), inner));
        same_length(out, x.len())?;
        let steps = channels.0.len() * inner;
        if channels.0.len() != channels.1.len() || steps == 0 || x.len() % steps != 0 {
            return Err(PyValueError::new_err(format!(
                "{} inv values, {} zero points and {inner} inner elements do not divide the \
                 {} elements of x",
                channels.0.len(),
                channels.1.len(),
                x.len()
            )));
        }
        let bounds = (qmin, qmax);
        on_codes!(out, quantize_channels_into(py, x, channels, bounds))
    })
}

fn gather_into<T: Code + Element>(
    py: Python<'_>,
    codes: PyReadonlyArray1<'_, T>,
    table: &[f32],
    out: &mut [f32],
) -> PyResult<String> {
    let codes = codes
        .as_slice()
        .map_err(|_| PyValueError::new_err("codes: array must be C-contiguous"))?;
    if table.len() != T::COUNT {
        return Err(PyValueError::new_err(format!(
            "table has {} values, the codes' type {}",
            table.len(),
            T::COUNT
        )));
    }
    Ok(outcome(py.detach(|| affine::gather(codes, table, out))))
}

/// `out[i] = table[codes[i] - min]` for int8, uint8 or int16 `codes` (`table`: float32, one
/// value per code from the type's minimum). Returns `"done"` or `"not modelled: <why>"`.
#[pyfunction]
fn dequantize_gather(
    py: Python<'_>,
    codes: &Bound<'_, PyAny>,
    table: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<String> {
    guarded("dequantize_gather", || {
        let table = checked_array::<f32>(table, "table", "float32")?;
        let table = slice(&table);
        let mut out = writeable(out, "out")?;
        let out = out
            .as_slice_mut()
            .expect("checked C-contiguous in writeable()");
        if codes.len().ok() != Some(out.len()) {
            return Err(PyValueError::new_err("codes and out differ in length"));
        }
        if let Ok(c) = codes.extract::<PyReadonlyArray1<'_, i8>>() {
            gather_into(py, c, table, out)
        } else if let Ok(c) = codes.extract::<PyReadonlyArray1<'_, u8>>() {
            gather_into(py, c, table, out)
        } else if let Ok(c) = codes.extract::<PyReadonlyArray1<'_, i16>>() {
            gather_into(py, c, table, out)
        } else {
            Err(PyValueError::new_err(
                "codes: expected a 1-d numpy array of int8, uint8 or int16",
            ))
        }
    })
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quantize_per_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(quantize_per_channel, m)?)?;
    m.add_function(wrap_pyfunction!(dequantize_gather, m)?)?;
    m.add_function(wrap_pyfunction!(histogram_next_candidate, m)?)?;
    m.add_function(wrap_pyfunction!(histogram_error_terms, m)?)?;
    m.add_function(wrap_pyfunction!(histogram_search, m)?)?;
    m.add_function(wrap_pyfunction!(histogram_torch_sums, m)?)?;
    m.add_function(wrap_pyfunction!(histogram_observe, m)?)?;
    m.add_function(wrap_pyfunction!(histogram_observe_in_place, m)?)?;
    m.add_function(wrap_pyfunction!(histogram_upscale, m)?)?;
    m.add_function(wrap_pyfunction!(per_channel_minmax, m)?)?;
    Ok(())
}
