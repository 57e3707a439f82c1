//! PyO3 binding of the one-scan propagation planner ([`crate::propagate`]). Conversion only.

use numpy::{Element, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::propagate::{self, ArgValue, Config, Direction, Edit, ScanInput};
use crate::python::{checked_array, slice, Borrowed};

fn array<'py, T: Element>(
    obj: &Bound<'py, PyAny>,
    name: &'static str,
    dtype: &'static str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    checked_array(obj, &format!("field '{name}'"), dtype)
}

fn arg_value<'py>(py: Python<'py>, v: &ArgValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        ArgValue::Int(i) => i.into_pyobject(py)?.into_any(),
        ArgValue::List(l) => PyList::new(py, l)?.into_any(),
    })
}

fn edit_tuple<'py>(py: Python<'py>, e: &Edit) -> PyResult<Bound<'py, PyTuple>> {
    match e {
        Edit::SetArgs { node, pos, values } => {
            let vals = values
                .iter()
                .map(|v| arg_value(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            ("args", *node, *pos, PyList::new(py, vals)?).into_pyobject(py)
        }
        Edit::Move {
            node,
            frontier,
            previous_frontier,
        } => ("move", *node, *frontier, *previous_frontier).into_pyobject(py),
        Edit::CatFanout { node, cat, created } => {
            ("cat", *node, *cat, PyList::new(py, created)?).into_pyobject(py)
        }
        Edit::ForkSplit {
            node,
            frontier,
            producer,
            branches,
        } => {
            let items = branches
                .iter()
                .map(|b| {
                    let update = match &b.arg_update {
                        Some((pos, values)) => {
                            let vals = values
                                .iter()
                                .map(|v| arg_value(py, v))
                                .collect::<PyResult<Vec<_>>>()?;
                            Some((*pos, PyList::new(py, vals)?))
                        }
                        None => None,
                    };
                    let shape = PyList::new(py, &b.source_shape)?;
                    (b.next_node, shape, update, b.created).into_pyobject(py)
                })
                .collect::<PyResult<Vec<_>>>()?;
            ("fork", *node, *frontier, *producer, PyList::new(py, items)?).into_pyobject(py)
        }
    }
}

/// Plans one stock propagation scan. Returns `("plan", modified, edits)` or
/// `("decline", reason, node_or_None)`; ValueError on malformed input.
#[pyfunction]
#[pyo3(signature = (table, target_extra, special, form, direction, tosa))]
fn plan_propagation_scan<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    target_extra: &Bound<'py, PyAny>,
    special: &Bound<'py, PyAny>,
    form: &Bound<'py, PyAny>,
    direction: &str,
    tosa: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let direction = match direction {
        "down" => Direction::Down,
        "up" => Direction::Up,
        other => {
            return Err(PyValueError::new_err(format!(
                "direction: expected 'down' or 'up', got {other:?}"
            )))
        }
    };
    let b = Borrowed::new(table)?;
    let extra = array::<u32>(target_extra, "target_extra", "uint32")?;
    let special = array::<i32>(special, "special", "int32")?;
    let form = array::<u32>(form, "form", "uint32")?;
    let input = ScanInput {
        table: b.view(),
        target_extra: slice(&extra),
        special: slice(&special),
        form: slice(&form),
    };
    let cfg = Config { direction, tosa };
    let result = py.detach(|| propagate::plan_scan_checked(&input, cfg))?;
    match result {
        Ok(plan) => {
            let edits = plan
                .edits
                .iter()
                .map(|e| edit_tuple(py, e))
                .collect::<PyResult<Vec<_>>>()?;
            ("plan", plan.modified, PyList::new(py, edits)?).into_pyobject(py)
        }
        Err(d) => ("decline", d.reason, d.node).into_pyobject(py),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(plan_propagation_scan, m)?)?;
    Ok(())
}
