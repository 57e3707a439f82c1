//! PyO3 bindings of the propagation planner ([`crate::propagate`]): one scan, or scans to the
//! fixed point with the re-trace between them modelled. Conversion only.

use numpy::{Element, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::{checked_array, guarded, slice, Borrowed};
use crate::propagate::{self, ArgValue, Config, Direction, Edit, RunInput, ScanInput};

fn array<'py, T: Element>(
    obj: &Bound<'py, PyAny>,
    name: &'static str,
    dtype: &'static str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    checked_array(obj, &format!("field '{name}'"), dtype)
}

// The plan crosses as typed, frozen objects (`_native.pyi` types them): one class per edit
// form, the between-scan changes, a scan, a run, a decline.

/// `node.args = (*args[:pos], *values, *args[pos + len(values):])`.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct ArgsEdit {
    node: usize,
    pos: usize,
    values: Py<PyList>,
}

/// Stock's `_move_node(node, frontier, previous_frontier)`.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct MoveEdit {
    node: usize,
    frontier: usize,
    previous_frontier: usize,
}

/// Stock's `_maybe_split_upwards_cat_fanout(node, cat)`, creating the nodes `created`.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct CatFanoutEdit {
    node: usize,
    cat: usize,
    created: Py<PyList>,
}

/// Stock's `_apply_fork_split(node, frontier, producer, branches)`.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct ForkSplitEdit {
    node: usize,
    frontier: usize,
    producer: usize,
    branches: Py<PyList>,
}

/// One branch of a fork split; `arg_update` the next node's `(pos, values)` or None.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct ForkBranch {
    next_node: usize,
    source_shape: Py<PyList>,
    arg_update: Option<Py<PyTuple>>,
    created: usize,
}

/// A value the modelled re-trace gives `node`: `base`'s value `.new_empty(shape)`.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct ShapeWrite {
    node: usize,
    shape: Py<PyList>,
    base: usize,
}

/// What stock's re-trace between two scans changes that the next scan reads: nodes the DCE
/// erases (in order), `(node, users)` orders, shape writes.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct Between {
    dead: Py<PyList>,
    users: Py<PyList>,
    shapes: Py<PyList>,
}

/// One planned scan: whether stock reports a modification, its edits, and the modelled
/// re-trace after it (None on a run's last scan).
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct ScanStep {
    modified: bool,
    edits: Py<PyList>,
    after: Option<Py<Between>>,
}

/// Scans planned in one run; `fixed_point`: the last one modified nothing.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct RunPlan {
    scans: Py<PyList>,
    fixed_point: bool,
}

/// The first scan cannot be decided exactly: why (a stable category) and where.
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct Decline {
    reason: &'static str,
    node: Option<usize>,
}

fn arg_value<'py>(py: Python<'py>, v: &ArgValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        ArgValue::Int(i) => i.into_pyobject(py)?.into_any(),
        ArgValue::List(l) => PyList::new(py, l)?.into_any(),
    })
}

fn arg_values<'py>(py: Python<'py>, values: &[ArgValue]) -> PyResult<Bound<'py, PyList>> {
    let vals = values
        .iter()
        .map(|v| arg_value(py, v))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, vals)
}

fn fork_branch<'py>(py: Python<'py>, b: &propagate::ForkBranch) -> PyResult<Bound<'py, PyAny>> {
    let arg_update = match &b.arg_update {
        Some((pos, values)) => Some((*pos, arg_values(py, values)?).into_pyobject(py)?.unbind()),
        None => None,
    };
    let branch = ForkBranch {
        next_node: b.next_node,
        source_shape: PyList::new(py, &b.source_shape)?.unbind(),
        arg_update,
        created: b.created,
    };
    Ok(Bound::new(py, branch)?.into_any())
}

fn edit_object<'py>(py: Python<'py>, e: &Edit) -> PyResult<Bound<'py, PyAny>> {
    Ok(match e {
        Edit::SetArgs { node, pos, values } => Bound::new(
            py,
            ArgsEdit {
                node: *node,
                pos: *pos,
                values: arg_values(py, values)?.unbind(),
            },
        )?
        .into_any(),
        Edit::Move {
            node,
            frontier,
            previous_frontier,
        } => Bound::new(
            py,
            MoveEdit {
                node: *node,
                frontier: *frontier,
                previous_frontier: *previous_frontier,
            },
        )?
        .into_any(),
        Edit::CatFanout { node, cat, created } => Bound::new(
            py,
            CatFanoutEdit {
                node: *node,
                cat: *cat,
                created: PyList::new(py, created)?.unbind(),
            },
        )?
        .into_any(),
        Edit::ForkSplit {
            node,
            frontier,
            producer,
            branches,
        } => {
            let items = branches
                .iter()
                .map(|b| fork_branch(py, b))
                .collect::<PyResult<Vec<_>>>()?;
            Bound::new(
                py,
                ForkSplitEdit {
                    node: *node,
                    frontier: *frontier,
                    producer: *producer,
                    branches: PyList::new(py, items)?.unbind(),
                },
            )?
            .into_any()
        }
    })
}

fn decline_object<'py>(py: Python<'py>, d: &propagate::Decline) -> PyResult<Bound<'py, PyAny>> {
    let decline = Decline {
        reason: d.reason,
        node: d.node,
    };
    Ok(Bound::new(py, decline)?.into_any())
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
        .map(|e| edit_object(py, e))
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}

fn between_object<'py>(py: Python<'py>, b: &propagate::Between) -> PyResult<Bound<'py, Between>> {
    let users = b
        .users
        .iter()
        .map(|(i, u)| (*i, PyList::new(py, u)?).into_pyobject(py))
        .collect::<PyResult<Vec<_>>>()?;
    let shapes = b
        .shapes
        .iter()
        .map(|w| {
            let write = ShapeWrite {
                node: w.node,
                shape: PyList::new(py, &w.shape)?.unbind(),
                base: w.base,
            };
            Bound::new(py, write)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let between = Between {
        dead: PyList::new(py, &b.dead)?.unbind(),
        users: PyList::new(py, users)?.unbind(),
        shapes: PyList::new(py, shapes)?.unbind(),
    };
    Bound::new(py, between)
}

/// One planned scan on its own (test-only, as its binding).
#[cfg(feature = "testing")]
#[pyclass(module = "arm_accel._native", frozen, get_all)]
struct ScanPlan {
    modified: bool,
    edits: Py<PyList>,
}

/// Plans one stock propagation scan: a `ScanPlan` or a `Decline`; ValueError on malformed
/// input. Test-only: the pass plans runs (`plan_propagation_run`).
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
) -> PyResult<Bound<'py, PyAny>> {
    guarded("plan_propagation_scan", || {
        let cfg = Config {
            direction: self::direction(direction)?,
            tosa,
        };
        let columns = Columns::new(table, target_extra, special, form)?;
        let input = columns.input();
        let result = py.detach(|| propagate::plan_scan_checked(&input, cfg))?;
        match result {
            Ok(plan) => {
                let plan = ScanPlan {
                    modified: plan.modified,
                    edits: edit_list(py, &plan.edits)?.unbind(),
                };
                Ok(Bound::new(py, plan)?.into_any())
            }
            Err(d) => decline_object(py, &d),
        }
    })
}

/// Plans up to `max_scans` consecutive stock scans, modelling the re-trace between them.
/// Returns a `RunPlan`, or a `Decline` (the first scan declined); ValueError on malformed
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
) -> PyResult<Bound<'py, PyAny>> {
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
                            Some(b) => Some(between_object(py, b)?.unbind()),
                            None => None,
                        };
                        let step = ScanStep {
                            modified: s.modified,
                            edits: edit_list(py, &s.edits)?.unbind(),
                            after,
                        };
                        Bound::new(py, step)
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                let run = RunPlan {
                    scans: PyList::new(py, scans)?.unbind(),
                    fixed_point: run.fixed_point,
                };
                Ok(Bound::new(py, run)?.into_any())
            }
            Err(d) => decline_object(py, &d),
        }
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(feature = "testing")]
    m.add_function(wrap_pyfunction!(plan_propagation_scan, m)?)?;
    m.add_function(wrap_pyfunction!(plan_propagation_run, m)?)?;
    m.add_class::<ArgsEdit>()?;
    m.add_class::<MoveEdit>()?;
    m.add_class::<CatFanoutEdit>()?;
    m.add_class::<ForkSplitEdit>()?;
    m.add_class::<ForkBranch>()?;
    m.add_class::<ShapeWrite>()?;
    m.add_class::<Between>()?;
    m.add_class::<ScanStep>()?;
    m.add_class::<RunPlan>()?;
    m.add_class::<Decline>()?;
    #[cfg(feature = "testing")]
    m.add_class::<ScanPlan>()?;
    Ok(())
}
