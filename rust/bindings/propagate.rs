//! PyO3 bindings of the propagation planner ([`crate::propagate`]): one scan, or scans to the
//! fixed point with the re-trace between them modelled. Conversion only.

use numpy::{Element, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::{checked_array, guarded, slice, Borrowed};
use crate::propagate::{self, ArgValue, Between, Config, Direction, Edit, RunInput, ScanInput};

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

/// The table and the planner's per-target / per-node columns, borrowed from Python.
struct Columns<'py> {
    table: Borrowed<'py>,
    extra: PyReadonlyArray1<'py, u32>,
    special: PyReadonlyArray1<'py, i32>,
    form: PyReadonlyArray1<'py, u32>,
}

impl<'py> Columns<'py> {
    fn new(
        table: &Bound<'py, PyAny>,
        target_extra: &Bound<'py, PyAny>,
        special: &Bound<'py, PyAny>,
        form: &Bound<'py, PyAny>,
    ) -> PyResult<Self> {
        Ok(Self {
            table: Borrowed::new(table)?,
            extra: array(target_extra, "target_extra", "uint32")?,
            special: array(special, "special", "int32")?,
            form: array(form, "form", "uint32")?,
        })
    }

    fn input(&self) -> ScanInput<'_> {
        ScanInput {
            table: self.table.view(),
            target_extra: slice(&self.extra),
            special: slice(&self.special),
            form: slice(&self.form),
        }
    }
}

fn direction(name: &str) -> PyResult<Direction> {
    match name {
        "down" => Ok(Direction::Down),
        "up" => Ok(Direction::Up),
        other => Err(PyValueError::new_err(format!(
            "direction: expected 'down' or 'up', got {other:?}"
        ))),
    }
}

fn edit_list<'py>(py: Python<'py>, edits: &[Edit]) -> PyResult<Bound<'py, PyList>> {
    let items = edits
        .iter()
        .map(|e| edit_tuple(py, e))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

/// `(dead, [(node, users)], [(node, shape, base)])`.
fn between_tuple<'py>(py: Python<'py>, b: &Between) -> PyResult<Bound<'py, PyTuple>> {
    let users = b
        .users
        .iter()
        .map(|(i, u)| (*i, PyList::new(py, u)?).into_pyobject(py))
        .collect::<PyResult<Vec<_>>>()?;
    let shapes = b
        .shapes
        .iter()
        .map(|w| (w.node, PyList::new(py, &w.shape)?, w.base).into_pyobject(py))
        .collect::<PyResult<Vec<_>>>()?;
    (
        PyList::new(py, &b.dead)?,
        PyList::new(py, users)?,
        PyList::new(py, shapes)?,
    )
        .into_pyobject(py)
}

/// Plans one stock propagation scan. Returns `("plan", modified, edits)` or
/// `("decline", reason, node_or_None)`; ValueError on malformed input. Test-only: the pass
/// plans runs (`plan_propagation_run`).
#[cfg(feature = "testing")]
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
    guarded("plan_propagation_scan", || {
        let cfg = Config {
            direction: self::direction(direction)?,
            tosa,
        };
        let columns = Columns::new(table, target_extra, special, form)?;
        let input = columns.input();
        let result = py.detach(|| propagate::plan_scan_checked(&input, cfg))?;
        match result {
            Ok(plan) => ("plan", plan.modified, edit_list(py, &plan.edits)?).into_pyobject(py),
            Err(d) => ("decline", d.reason, d.node).into_pyobject(py),
        }
    })
}

/// Plans up to `max_scans` consecutive stock scans, modelling the re-trace between them.
/// Returns `("plan", [(modified, edits, between_or_None)], fixed_point)` or
/// `("decline", reason, node_or_None)` (the first scan declined); ValueError on malformed
/// input.
#[pyfunction]
#[pyo3(signature = (table, target_extra, special, form, retrace, direction, tosa, max_scans))]
#[allow(clippy::too_many_arguments)]
fn plan_propagation_run<'py>(
    py: Python<'py>,
    table: &Bound<'py, PyAny>,
    target_extra: &Bound<'py, PyAny>,
    special: &Bound<'py, PyAny>,
    form: &Bound<'py, PyAny>,
    retrace: &Bound<'py, PyAny>,
    direction: &str,
    tosa: bool,
    max_scans: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    guarded("plan_propagation_run", || {
        let cfg = Config {
            direction: self::direction(direction)?,
            tosa,
        };
        if max_scans == 0 {
            return Err(PyValueError::new_err("max_scans: expected at least 1"));
        }
        let columns = Columns::new(table, target_extra, special, form)?;
        let retrace = array::<u8>(retrace, "retrace", "uint8")?;
        let input = RunInput {
            scan: columns.input(),
            retrace: slice(&retrace),
        };
        let result = py.detach(|| propagate::plan_run_checked(&input, cfg, max_scans))?;
        match result {
            Ok(run) => {
                let scans = run
                    .scans
                    .iter()
                    .map(|s| {
                        let after = match &s.after {
                            Some(b) => Some(between_tuple(py, b)?),
                            None => None,
                        };
                        (s.modified, edit_list(py, &s.edits)?, after).into_pyobject(py)
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                ("plan", PyList::new(py, scans)?, run.fixed_point).into_pyobject(py)
            }
            Err(d) => ("decline", d.reason, d.node).into_pyobject(py),
        }
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(feature = "testing")]
    m.add_function(wrap_pyfunction!(plan_propagation_scan, m)?)?;
    m.add_function(wrap_pyfunction!(plan_propagation_run, m)?)?;
    Ok(())
}
