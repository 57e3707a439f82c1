//! PyO3 bindings of the view/permute propagation kernels ([`crate::propagate::dims`]). Conversion only.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::guarded;
use crate::propagate::dims::{self, DimError};

fn dim_err(e: DimError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// `int | Sequence[int]` as dim_maps accepts it; anything else is a ValueError.
fn dims_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i64>> {
    if let Ok(d) = obj.extract::<i64>() {
        return Ok(vec![d]);
    }
    int_list(obj, what)
}

fn int_list(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i64>> {
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyValueError::new_err(format!(
            "{what}: expected a sequence of int"
        )));
    }
    obj.extract::<Vec<i64>>()
        .map_err(|_| PyValueError::new_err(format!("{what}: expected a sequence of int")))
}

fn int_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
    obj.extract::<i64>()
        .map_err(|_| PyValueError::new_err(format!("{what}: expected an int")))
}

/// `dim_maps.ViewMap.from_shapes` over concrete dims (see `rust/propagate/dims.rs`).
#[pyclass(name = "ViewMap", module = "arm_accel._native", frozen)]
struct PyViewMap {
    inner: dims::ViewMap,
}

#[pymethods]
impl PyViewMap {
    #[new]
    fn new(source_shape: &Bound<'_, PyAny>, target_shape: &Bound<'_, PyAny>) -> PyResult<Self> {
        guarded("ViewMap.new", || {
            let source = int_list(source_shape, "source_shape")?;
            let target = int_list(target_shape, "target_shape")?;
            let inner = dims::ViewMap::from_shapes(&source, &target).map_err(dim_err)?;
            Ok(Self { inner })
        })
    }

    #[getter]
    fn is_valid_map(&self) -> PyResult<bool> {
        guarded("ViewMap.is_valid_map", || Ok(self.inner.is_valid_map()))
    }

    #[getter]
    fn source_shape(&self) -> PyResult<Vec<i64>> {
        guarded("ViewMap.source_shape", || {
            Ok(self.inner.source_shape.clone())
        })
    }

    #[getter]
    fn target_shape(&self) -> PyResult<Vec<i64>> {
        guarded("ViewMap.target_shape", || {
            Ok(self.inner.target_shape.clone())
        })
    }

    fn source_to_target_axes(&self) -> PyResult<Vec<Vec<usize>>> {
        guarded("ViewMap.source_to_target_axes", || {
            self.inner.source_to_target_axes().map_err(dim_err)
        })
    }

    fn map_source_dims_to_target_axes(
        &self,
        source_dims: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Vec<usize>>> {
        guarded("ViewMap.map_source_dims_to_target_axes", || {
            let d = dims_arg(source_dims, "source_dims")?;
            self.inner
                .map_source_dims_to_target_axes(&d)
                .map_err(dim_err)
        })
    }

    fn map_dim(&self, source_dims: &Bound<'_, PyAny>) -> PyResult<Option<Vec<usize>>> {
        guarded("ViewMap.map_dim", || {
            let d = dims_arg(source_dims, "source_dims")?;
            self.inner.map_dim(&d).map_err(dim_err)
        })
    }

    fn map_dim_inverse(&self, target_dims: &Bound<'_, PyAny>) -> PyResult<Option<Vec<usize>>> {
        guarded("ViewMap.map_dim_inverse", || {
            let d = dims_arg(target_dims, "target_dims")?;
            self.inner.map_dim_inverse(&d).map_err(dim_err)
        })
    }

    fn map_reduction_after_view(
        &self,
        source_shape: &Bound<'_, PyAny>,
        source_dims: &Bound<'_, PyAny>,
    ) -> PyResult<Option<dims::ReductionAfterView>> {
        guarded("ViewMap.map_reduction_after_view", || {
            let s = int_list(source_shape, "source_shape")?;
            let d = dims_arg(source_dims, "source_dims")?;
            self.inner.map_reduction_after_view(&s, &d).map_err(dim_err)
        })
    }

    fn map_reduction_before_view(
        &self,
        target_dims: &Bound<'_, PyAny>,
    ) -> PyResult<Option<dims::ReductionBeforeView>> {
        guarded("ViewMap.map_reduction_before_view", || {
            let d = dims_arg(target_dims, "target_dims")?;
            self.inner.map_reduction_before_view(&d).map_err(dim_err)
        })
    }

    fn map_permutation(&self, permutation: &Bound<'_, PyAny>) -> PyResult<Option<Vec<usize>>> {
        guarded("ViewMap.map_permutation", || {
            let p = int_list(permutation, "permutation")?;
            self.inner.map_permutation(&p).map_err(dim_err)
        })
    }

    fn map_permutation_inverse(
        &self,
        permutation: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Vec<usize>>> {
        guarded("ViewMap.map_permutation_inverse", || {
            let p = int_list(permutation, "permutation")?;
            self.inner.map_permutation_inverse(&p).map_err(dim_err)
        })
    }

    fn remap_target_shape(&self, source_shape: &Bound<'_, PyAny>) -> PyResult<Option<Vec<i64>>> {
        guarded("ViewMap.remap_target_shape", || {
            let s = int_list(source_shape, "source_shape")?;
            self.inner.remap_target_shape(&s).map_err(dim_err)
        })
    }

    #[pyo3(signature = (producer_shape, slice_dim, start, end, step=None))]
    fn remap_unit_slice(
        &self,
        producer_shape: &Bound<'_, PyAny>,
        slice_dim: &Bound<'_, PyAny>,
        start: &Bound<'_, PyAny>,
        end: &Bound<'_, PyAny>,
        step: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<dims::UnitSlice>> {
        guarded("ViewMap.remap_unit_slice", || {
            let shape = int_list(producer_shape, "producer_shape")?;
            let step = match step {
                Some(s) => int_arg(s, "step")?,
                None => 1,
            };
            self.inner
                .remap_unit_slice(
                    &shape,
                    int_arg(slice_dim, "slice_dim")?,
                    int_arg(start, "start")?,
                    int_arg(end, "end")?,
                    step,
                )
                .map_err(dim_err)
        })
    }
}

/// `dim_maps.PermuteMap` built from permute dims (ValueError if they are not a permutation).
#[pyclass(name = "PermuteMap", module = "arm_accel._native", frozen)]
struct PyPermuteMap {
    inner: dims::PermuteMap,
}

#[pymethods]
impl PyPermuteMap {
    #[new]
    fn new(permute_dims: &Bound<'_, PyAny>) -> PyResult<Self> {
        guarded("PermuteMap.new", || {
            let p = int_list(permute_dims, "permute_dims")?;
            let inner = dims::PermuteMap::new(&p).map_err(dim_err)?;
            Ok(Self { inner })
        })
    }

    #[getter]
    fn permute_dims(&self) -> PyResult<Vec<usize>> {
        guarded("PermuteMap.permute_dims", || {
            Ok(self.inner.permute_dims.clone())
        })
    }

    fn map_dims(&self, dims: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
        guarded("PermuteMap.map_dims", || {
            let d = dims_arg(dims, "dims")?;
            self.inner.map_dims(&d).map_err(dim_err)
        })
    }

    fn map_dims_inverse(&self, dims: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
        guarded("PermuteMap.map_dims_inverse", || {
            let d = dims_arg(dims, "dims")?;
            self.inner.map_dims_inverse(&d).map_err(dim_err)
        })
    }
}

/// Adds this file's classes and functions to the native module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyViewMap>()?;
    m.add_class::<PyPermuteMap>()?;
    Ok(())
}
