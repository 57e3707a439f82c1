//! One scan of `PropagateViewCopyPermute{Down,Up}Pass` decided over the node table.
//!
//! Reproduces stock's scan (`for node in graph order: skip stale; if target in _targets and
//! has users: _propagate(node, stale)`) with stock's rules (generic and TOSA overrides) and
//! returns the edits it makes, in order, for Python to apply with stock's own edit methods.
//! The graph is modelled mutably while the scan runs (inputs, users in fx dict order, the
//! integer args the rules read and rewrite) because later decisions of a scan read what earlier
//! edits changed. `meta["val"]` is stale during a scan and stock reads it as is: shapes are
//! the table's.
//!
//! Exactness rule: wherever the table cannot tell what stock would do (an arg form it does not
//! carry, a rule not ported, a place where stock raises), the whole scan declines before any
//! edit is returned; Python then runs stock's walk for that scan.
//!
//! [`plan_run`] (in `propagate/run.rs`) keeps the model across scans: it also models stock's
//! re-trace between two scans (DCE, graph order, users order, recomputed shapes), so a whole
//! run of scans to the fixed point is planned from one export of the table.
//!
//! Files: this one holds the planner's input and output types; `model.rs` the graph the scan
//! edits, `rules.rs` stock's rules and the walk, `edits.rs` the structural edits (fork split,
//! cat fan-out, move), `run.rs` the re-trace between scans, `shapes.rs` the shapes it
//! recomputes, `dims.rs` the view/permute dim maps (`dim_maps`).

use std::fmt;

use crate::table::{class, flag, op, NodeTable, TableError};
use dims::{PermuteMap, ViewMap};

pub mod dims;
mod edits;
mod model;
mod rules;
mod run;
pub mod shapes;
#[cfg(test)]
mod tests;

use model::{Model, NIL};
use rules::Swap;

pub use run::{
    plan_run, plan_run_checked, retrace, Between, RunInput, RunPlan, ScanStep, ShapeWrite,
};

/// Per-node argument-form bits (`form` column of [`ScanInput`]).
pub mod form {
    named_consts! { bits u32;
        /// The args the rules read are positional, plain ints / int lists as the table encodes
        /// them (permute/view: `(x, [ints])`; reduction: `(x, int | [ints], [bool, ...])`;
        /// slice: `(x, dim, start, end[, step])` all ints; cat: `(nodes[, dim])` or a `dim`
        /// kwarg, dim an int).
        EXACT = 1 << 0;
        /// `args[1]` is a single int (reductions, slices), not a list.
        DIM_SCALAR = 1 << 1;
        /// `len(args) > 2 and args[2] is True` (a reduction's keepdim given positionally).
        KEEPDIM_POSITIONAL_TRUE = 1 << 2;
        /// A RESCALE whose args satisfy `_is_per_tensor_rescale`'s static part: at least three
        /// args and a scalar or one-element scales arg.
        RESCALE_PER_TENSOR_ARGS = 1 << 3;
        /// A permute's / view's `args[1]` is a tuple (not a list): equality in Python sees it.
        ARG1_TUPLE = 1 << 4;
    }
}

/// Per-target bits the generic table classes do not carry (`target_extra`, by target code).
pub mod extra {
    named_consts! { bits u32;
        /// In the pass's `_targets` (what the scan starts walks from).
        SCAN_TARGET = 1 << 0;
        /// `_VIEW_TARGET` (view_copy): the only view `ViewMap(node)` accepts.
        VIEW_COPY = 1 << 1;
        /// In the pass's `_ARG_UPDATE_TARGETS`.
        ARG_UPDATE = 1 << 2;
        /// `_PERMUTE_TARGET`: what the cat fan-out creates.
        PERMUTE_TARGET = 1 << 3;
    }
}

/// Special dtype codes of the `special` column (0: none; other positive codes: other dtypes).
pub mod special {
    named_consts! { i32;
        /// `TosaSpecialDtype.INT48`.
        INT48 = 1;
    }
}

pub const SPECIAL_INT48: i32 = special::INT48;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Down,
    Up,
}

/// Which stock configuration to reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub direction: Direction,
    /// The Arm `TosaPropagationOverrides` (INT48, TABLE, RESCALE, SCATTER, keepdim raise).
    pub tosa: bool,
}

/// The table plus the planner's own columns.
#[derive(Debug, Clone, Copy)]
pub struct ScanInput<'a> {
    pub table: NodeTable<'a>,
    /// [`extra`] bits per target code.
    pub target_extra: &'a [u32],
    /// Per node: 0 no special dtype, [`SPECIAL_INT48`], other positive codes for other values.
    pub special: &'a [i32],
    /// [`form`] bits per node.
    pub form: &'a [u32],
}

impl ScanInput<'_> {
    pub fn validate(&self) -> Result<(), TableError> {
        self.table.validate()?;
        let n = self.table.len();
        if self.target_extra.len() != self.table.target_class.len() {
            return Err(TableError::new(
                "target_extra",
                format!(
                    "length {}, expected {}",
                    self.target_extra.len(),
                    self.table.target_class.len()
                ),
            ));
        }
        if let Some(b) = self.target_extra.iter().find(|&&b| b & !extra::ALL != 0) {
            return Err(TableError::new(
                "target_extra",
                format!("unknown bits {b:#x}"),
            ));
        }
        if self.special.len() != n {
            return Err(TableError::new(
                "special",
                format!("length {}, expected {n}", self.special.len()),
            ));
        }
        if self.form.len() != n {
            return Err(TableError::new(
                "form",
                format!("length {}, expected {n}", self.form.len()),
            ));
        }
        for i in 0..n {
            let s = self.special[i];
            if s < 0 {
                return Err(TableError::new("special", format!("node {i} has code {s}")));
            }
            if (s == SPECIAL_INT48) != self.table.has_flag(i, flag::INT48) {
                return Err(TableError::new(
                    "special",
                    format!("node {i}: code {s} disagrees with its INT48 flag"),
                ));
            }
            if self.form[i] & !form::ALL != 0 {
                return Err(TableError::new(
                    "form",
                    format!("node {i} has unknown bits {:#x}", self.form[i]),
                ));
            }
            if self.form[i] & form::EXACT != 0 && !self.table.has_flag(i, flag::OPAQUE_ARGS) {
                self.validate_exact_iargs(i)?;
            }
        }
        Ok(())
    }
}

impl ScanInput<'_> {
    /// An exact form promises the integer args the planner indexes.
    fn validate_exact_iargs(&self, i: usize) -> Result<(), TableError> {
        let c = self.table.class_of(i);
        let len = self.table.iargs(i).len();
        let ok = if c & class::SLICE != 0 {
            len == 4
        } else if c & class::REDUCTION != 0 {
            len >= 1
        } else if c & class::CAT != 0 {
            len == 1
        } else {
            true
        };
        if !ok {
            return Err(TableError::new(
                "form",
                format!("node {i} has an exact form but {len} integer args for its class"),
            ));
        }
        Ok(())
    }
}

/// One value written into an args tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgValue {
    Int(i64),
    List(Vec<i64>),
}

/// One graph edit, applied in order with stock's semantics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// `node.args = (*args[:pos], *values, *args[pos + len(values):])`; with no values this is
    /// stock's `node.args = node.args` (which still re-registers the node with its inputs).
    SetArgs {
        node: usize,
        pos: usize,
        values: Vec<ArgValue>,
    },
    /// Stock's `_move_node(node, frontier, previous_frontier)`.
    Move {
        node: usize,
        frontier: usize,
        previous_frontier: usize,
    },
    /// Stock's `_maybe_split_upwards_cat_fanout(node, cat)` (which plans and applies); it
    /// creates one permute per cat input, before the cat, with the ids in `created`.
    CatFanout {
        node: usize,
        cat: usize,
        created: Vec<usize>,
    },
    /// Stock's `_apply_fork_split(node, frontier, producer, branches)`.
    ForkSplit {
        node: usize,
        frontier: usize,
        producer: usize,
        branches: Vec<ForkBranch>,
    },
}

/// One branch of a fork split (stock's `_ForkBranchSplit`) and the id of the transform the
/// split creates after it (ids past the table's nodes, in creation order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkBranch {
    pub next_node: usize,
    pub source_shape: Vec<i64>,
    /// The next node's args rewrite (`arg_update[1]`) as (pos, values); None when the branch
    /// is crossed as an elementwise op.
    pub arg_update: Option<(usize, Vec<ArgValue>)>,
    pub created: usize,
}

/// The edits of one scan and whether stock's scan reports a modification.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanPlan {
    pub edits: Vec<Edit>,
    pub modified: bool,
}

/// Why a scan cannot be decided here; `reason` is a short stable category for stats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decline {
    pub reason: &'static str,
    pub node: Option<usize>,
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.node {
            Some(n) => write!(f, "{} (node {n})", self.reason),
            None => write!(f, "{}", self.reason),
        }
    }
}

fn decline<T>(reason: &'static str, node: usize) -> Result<T, Decline> {
    Err(Decline {
        reason,
        node: Some(node),
    })
}

type Step<T> = Result<T, Decline>;

/// Python's `a % b` for b > 0.
fn py_mod(a: i64, b: i64) -> i64 {
    a.rem_euclid(b)
}

/// Symbolic shapes are not modelled: decline at the first node that has one.
fn decline_symbolic(t: &NodeTable<'_>) -> Step<()> {
    match (0..t.len()).find(|&i| t.has_flag(i, flag::SYMBOLIC)) {
        Some(i) => decline("symbolic shape", i),
        None => Ok(()),
    }
}

/// Plans one stock scan. Call on a validated input (see [`plan_scan_checked`]).
pub fn plan_scan(inp: &ScanInput<'_>, cfg: Config) -> Result<ScanPlan, Decline> {
    decline_symbolic(&inp.table)?;
    let mut m = Model::new(inp, cfg, None);
    let modified = m.scan()?;
    Ok(ScanPlan {
        edits: m.edits,
        modified,
    })
}

/// Validates, then plans. Malformed input is an `Err(TableError)`; a decline is `Ok(Err(_))`.
pub fn plan_scan_checked(
    inp: &ScanInput<'_>,
    cfg: Config,
) -> Result<Result<ScanPlan, Decline>, TableError> {
    inp.validate()?;
    Ok(plan_scan(inp, cfg))
}
