//! Stock's scans to the fixed point, without the re-trace between them.
//!
//! After each modifying scan stock runs `_retrace`: DCE, lint, and an `ExportPass` re-trace
//! that recomputes every `meta["val"]` and rebuilds every `users` dict in graph order. What
//! the next scan reads of that is modelled here on the same [`Model`] the scan edited: the
//! DCE (fx's reverse sweep over non-impure nodes without users), users in graph order, and
//! the shapes of the nodes a re-trace would recompute (edited nodes and nodes downstream of a
//! changed shape, see [`super::shapes`]). Each scan's [`Between`] tells Python what to mirror
//! on the fx graph before applying the next scan's edits. Where a shape is not modelled (an
//! op outside the moved-through classes, a cat, a non-tensor value, an `ArmPass` special
//! value) the run stops after that scan and Python re-traces, as it would for one scan.

use super::shapes;
use super::{class, form, op, Config, Decline, Edit, Model, ScanInput, NIL};
use crate::table::TableError;

/// Per-node bits of the `retrace` column.
pub mod retrace {
    named_consts! { bits u8;
        /// `node.is_impure()`: fx's DCE keeps it without users.
        IMPURE = 1 << 0;
        /// `ArmPass.call_operator` keeps the old value's shape (a quantized op without a fake
        /// kernel): its value after a re-trace is not modelled.
        KEEPS_VALUE = 1 << 1;
    }
}

/// A scan input plus what the between-scan model needs.
#[derive(Debug, Clone, Copy)]
pub struct RunInput<'a> {
    pub scan: ScanInput<'a>,
    /// [`retrace`] bits per node.
    pub retrace: &'a [u8],
}

impl RunInput<'_> {
    pub fn validate(&self) -> Result<(), TableError> {
        self.scan.validate()?;
        let n = self.scan.table.len();
        if self.retrace.len() != n {
            return Err(TableError::new(
                "retrace",
                format!("length {}, expected {n}", self.retrace.len()),
            ));
        }
        if let Some(i) = self.retrace.iter().position(|&b| b & !retrace::ALL != 0) {
            return Err(TableError::new(
                "retrace",
                format!("node {i} has unknown bits {:#x}", self.retrace[i]),
            ));
        }
        Ok(())
    }
}

/// A node's new value: `base.meta["val"].new_empty(shape)` (base: the node itself, or the
/// input a transform takes its dtype from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeWrite {
    pub node: usize,
    pub shape: Vec<i64>,
    pub base: usize,
}

/// What stock's re-trace after a scan changes that the next scan reads, in apply order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Between {
    /// Erased by the DCE, in erase order (each has no users when its turn comes).
    pub dead: Vec<usize>,
    /// Nodes whose users dict is not in graph order, with the order a re-trace gives.
    pub users: Vec<(usize, Vec<usize>)>,
    /// Values whose shape changes, in graph order.
    pub shapes: Vec<ShapeWrite>,
}

/// One scan of a run. `after`: None when the run ends with this scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStep {
    pub modified: bool,
    pub edits: Vec<Edit>,
    pub after: Option<Between>,
}

/// Consecutive scans of one propagation call. `fixed_point`: the last scan modified nothing
/// (stock goes on to the fusions); otherwise the last scan modified the graph and Python must
/// re-trace before planning on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    pub scans: Vec<ScanStep>,
    pub fixed_point: bool,
}

/// Plans up to `max_scans` consecutive scans (at least one). A decline of the first scan is
/// an `Err`; a later scan that declines, or a re-trace effect not modelled, ends the run.
/// The input's shapes must be what a re-trace gives (stock's scans after the first read
/// re-traced values): with stale input values, plan one scan.
pub fn plan_run(inp: &RunInput<'_>, cfg: Config, max_scans: usize) -> Result<RunPlan, Decline> {
    super::decline_symbolic(&inp.scan.table)?;
    let mut m = Model::new(&inp.scan, cfg, Some(inp.retrace));
    let mut scans: Vec<ScanStep> = Vec::new();
    loop {
        m.stale.iter_mut().for_each(|s| *s = false);
        m.touched.iter_mut().for_each(|s| *s = false);
        let modified = match m.scan() {
            Ok(modified) => modified,
            Err(d) if scans.is_empty() => return Err(d),
            // The model is mid-scan: drop this scan; Python re-traces and plans it again.
            Err(_) => {
                return Ok(RunPlan {
                    scans,
                    fixed_point: false,
                })
            }
        };
        let edits = std::mem::take(&mut m.edits);
        if !modified {
            scans.push(ScanStep {
                modified,
                edits,
                after: None,
            });
            return Ok(RunPlan {
                scans,
                fixed_point: true,
            });
        }
        let after = if scans.len() + 1 < max_scans {
            m.retrace()
        } else {
            None
        };
        let last = after.is_none();
        scans.push(ScanStep {
            modified,
            edits,
            after,
        });
        if last {
            return Ok(RunPlan {
                scans,
                fixed_point: false,
            });
        }
    }
}

/// Validates, then plans. Malformed input is an `Err(TableError)`; a decline is `Ok(Err(_))`.
pub fn plan_run_checked(
    inp: &RunInput<'_>,
    cfg: Config,
    max_scans: usize,
) -> Result<Result<RunPlan, Decline>, TableError> {
    inp.validate()?;
    Ok(plan_run(inp, cfg, max_scans))
}

impl Model<'_> {
    /// Stock's `_retrace` on the model; None where a value is not modelled.
    fn retrace(&mut self) -> Option<Between> {
        let dead = self.eliminate_dead_code();
        let order = self.order();
        let mut pos = vec![NIL; self.op.len()];
        for (k, &i) in order.iter().enumerate() {
            pos[i] = k;
        }
        let mut users = Vec::new();
        for &i in &order {
            let mut sorted = self.users[i].clone();
            sorted.sort_unstable_by_key(|&u| pos[u]);
            if sorted != self.users[i] {
                self.users[i] = sorted.clone();
                users.push((i, sorted));
            }
        }
        let shapes = self.recompute_shapes(&order)?;
        Some(Between {
            dead,
            users,
            shapes,
        })
    }

    /// fx's `eliminate_dead_code`: reverse graph order, erase non-impure nodes without users.
    fn eliminate_dead_code(&mut self) -> Vec<usize> {
        let mut dead = Vec::new();
        let mut i = self.tail;
        while i != NIL {
            let prev = self.prev[i];
            if self.retrace_bits[i] & retrace::IMPURE == 0 && self.users[i].is_empty() {
                self.erase(i);
                dead.push(i);
            }
            i = prev;
        }
        dead
    }

    /// The shapes a re-trace gives the touched nodes and those downstream of a changed shape.
    fn recompute_shapes(&mut self, order: &[usize]) -> Option<Vec<ShapeWrite>> {
        let mut changed = vec![false; self.op.len()];
        let mut writes = Vec::new();
        for &i in order {
            if self.op[i] != op::CALL_FUNCTION {
                continue; // placeholders and constants are not recomputed; output has no value
            }
            if !self.touched[i] && !self.inputs[i].iter().any(|&j| changed[j]) {
                continue;
            }
            let shape = self.infer_shape(i)?;
            // A transform takes its dtype from its input, which a move may have changed
            // (a permute moved past a RESCALE): rewrite its value even at the same shape.
            let transform = self.has(i, class::PERMUTE | class::VIEW);
            if self.shapes[i].as_deref() != Some(&shape) {
                changed[i] = true;
            } else if !transform {
                continue;
            }
            writes.push(ShapeWrite {
                node: i,
                shape: shape.clone(),
                base: if transform { self.inputs[i][0] } else { i },
            });
            self.shapes[i] = Some(shape);
        }
        Some(writes)
    }

    /// Node `i`'s output shape from its inputs' shapes; None where not modelled.
    fn infer_shape(&self, i: usize) -> Option<Vec<i64>> {
        if self.retrace_bits[i] & retrace::KEEPS_VALUE != 0 || self.shapes[i].is_none() {
            return None;
        }
        let inputs = &self.inputs[i];
        let input_shape = |k: usize| inputs.get(k).and_then(|&j| self.shape(j));
        let exact = self.form[i] & form::EXACT != 0;
        let a = &self.iargs[i];
        let c = self.cls(i);
        if c & class::PERMUTE != 0 && exact {
            shapes::permute(input_shape(0)?, a)
        } else if c & class::VIEW != 0 && exact {
            shapes::view(input_shape(0)?, a)
        } else if c & class::REDUCTION != 0 && exact && inputs.len() == 1 {
            shapes::reduce(input_shape(0)?, &a[1..], a[0] == 1)
        } else if c & class::SLICE != 0 && exact && inputs.len() == 1 {
            shapes::slice(input_shape(0)?, a[0], a[1], a[2], a[3])
        } else if c & (class::TOSA_TABLE | class::TOSA_RESCALE | class::TRANSPARENT) != 0 {
            // The first input carries the shape (TABLE's second input is the table).
            input_shape(0).map(<[i64]>::to_vec)
        } else if c & class::ELEMENTWISE != 0 && c & (class::CAT | class::EXCLUDED) == 0 {
            let shapes: Option<Vec<&[i64]>> = inputs.iter().map(|&j| self.shape(j)).collect();
            shapes::broadcast(shapes?)
        } else {
            None
        }
    }
}
