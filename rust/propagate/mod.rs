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

use std::fmt;

use crate::table::{class, flag, op, NodeTable, TableError};
use dims::{PermuteMap, ViewMap};

pub mod dims;
mod run;
pub mod shapes;

pub use run::{
    plan_run, plan_run_checked, retrace, Between, RunInput, RunPlan, ScanStep, ShapeWrite,
};

/// Per-node argument-form bits (`form` column of [`ScanInput`]).
pub mod form {
    /// The args the rules read are positional, plain ints / int lists as the table encodes
    /// them (permute/view: `(x, [ints])`; reduction: `(x, int | [ints], [bool, ...])`;
    /// slice: `(x, dim, start, end[, step])` all ints; cat: `(nodes[, dim])` or a `dim`
    /// kwarg, dim an int).
    pub const EXACT: u32 = 1 << 0;
    /// `args[1]` is a single int (reductions, slices), not a list.
    pub const DIM_SCALAR: u32 = 1 << 1;
    /// `len(args) > 2 and args[2] is True` (a reduction's keepdim given positionally).
    pub const KEEPDIM_POSITIONAL_TRUE: u32 = 1 << 2;
    /// A RESCALE whose args satisfy `_is_per_tensor_rescale`'s static part: at least three
    /// args and a scalar or one-element scales arg.
    pub const RESCALE_PER_TENSOR_ARGS: u32 = 1 << 3;
    /// A permute's / view's `args[1]` is a tuple (not a list): equality in Python sees it.
    pub const ARG1_TUPLE: u32 = 1 << 4;
    pub const ALL: u32 = (1 << 5) - 1;
}

/// Per-target bits the generic table classes do not carry (`target_extra`, by target code).
pub mod extra {
    /// In the pass's `_targets` (what the scan starts walks from).
    pub const SCAN_TARGET: u32 = 1 << 0;
    /// `_VIEW_TARGET` (view_copy): the only view `ViewMap(node)` accepts.
    pub const VIEW_COPY: u32 = 1 << 1;
    /// In the pass's `_ARG_UPDATE_TARGETS`.
    pub const ARG_UPDATE: u32 = 1 << 2;
    /// `_PERMUTE_TARGET`: what the cat fan-out creates.
    pub const PERMUTE_TARGET: u32 = 1 << 3;
    pub const ALL: u32 = (1 << 4) - 1;
}

/// Special dtype code of `TosaSpecialDtype.INT48` in the `special` column.
pub const SPECIAL_INT48: i32 = 1;

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

struct CatPlan {
    perm: Vec<i64>,
    tuple: u32,
    new_cat_dim: i64,
    inputs: Vec<usize>,
    shapes: Vec<Vec<i64>>,
    permute_code: i32,
}

/// `CanonicalizeViewCopyPermutePass._is_singleton_permutation`; Err where `_normalize_dim`
/// asserts.
fn is_singleton_permutation(shape: &[i64], perm: &[i64]) -> Result<bool, ()> {
    let rank = shape.len() as i64;
    let mut normalized = Vec::with_capacity(perm.len());
    for &d in perm {
        let n = if d >= 0 { d } else { d + rank };
        if !(0..rank).contains(&n) {
            return Err(());
        }
        normalized.push(n as usize);
    }
    let mut sorted = normalized.clone();
    sorted.sort_unstable();
    if sorted.len() != shape.len() || sorted.iter().enumerate().any(|(i, &d)| d != i) {
        return Ok(false);
    }
    let non_singleton: Vec<usize> = (0..shape.len()).filter(|&a| shape[a] != 1).collect();
    let permuted: Vec<usize> = normalized.into_iter().filter(|&a| shape[a] != 1).collect();
    Ok(permuted == non_singleton)
}

struct PlannedBranch {
    next_node: usize,
    source_shape: Vec<i64>,
    swap: Option<Swap>,
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

/// A pending args rewrite: the edit and the model update it implies.
struct Swap {
    node_edit: Edit,
    node_iargs: Option<Vec<i64>>,
    next_edit: Edit,
    next_iargs: Vec<i64>,
    next_scalar: bool,
}

/// The graph as the scan has left it so far. Node ids are table positions; nodes a fork split
/// creates get the next ids.
struct Model<'a> {
    target_class: &'a [u32],
    target_extra: &'a [u32],
    cfg: Config,
    op: Vec<u8>,
    target: Vec<i32>,
    /// `meta["val"]` shape, None when it is not a tensor.
    shapes: Vec<Option<Vec<i64>>>,
    special: Vec<i32>,
    inputs: Vec<Vec<usize>>,
    users: Vec<Vec<usize>>,
    iargs: Vec<Vec<i64>>,
    form: Vec<u32>,
    stale: Vec<bool>,
    edits: Vec<Edit>,
    /// [`retrace`] bits per node (impure for the DCE, value kept by `ArmPass`).
    retrace_bits: Vec<u8>,
    /// Erased from the graph (by an edit or the DCE).
    erased: Vec<bool>,
    /// Args or value written by this scan's edits: what a re-trace recomputes first.
    touched: Vec<bool>,
    /// Graph order as a linked list ([`NIL`] ends it).
    prev: Vec<usize>,
    next: Vec<usize>,
    head: usize,
    tail: usize,
}

const NIL: usize = usize::MAX;

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

impl<'a> Model<'a> {
    /// The model of the exported graph; `retrace_bits` None: placeholders and the output are
    /// the only impure nodes (enough for one scan, which never runs the DCE).
    fn new(inp: &ScanInput<'a>, cfg: Config, retrace_bits: Option<&[u8]>) -> Self {
        let t = inp.table;
        let n = t.len();
        let retrace_bits = match retrace_bits {
            Some(bits) => bits.to_vec(),
            None => (0..n)
                .map(|i| match t.op[i] {
                    op::PLACEHOLDER | op::OUTPUT => retrace::IMPURE,
                    _ => 0,
                })
                .collect(),
        };
        Model {
            target_class: t.target_class,
            target_extra: inp.target_extra,
            cfg,
            op: t.op.to_vec(),
            target: t.target.to_vec(),
            shapes: (0..n)
                .map(|i| (t.rank[i] >= 0).then(|| t.shape_row(i).to_vec()))
                .collect(),
            special: inp.special.to_vec(),
            inputs: (0..n)
                .map(|i| t.inputs(i).iter().map(|&j| j as usize).collect())
                .collect(),
            users: (0..n)
                .map(|i| t.users(i).iter().map(|&j| j as usize).collect())
                .collect(),
            iargs: (0..n).map(|i| t.iargs(i).to_vec()).collect(),
            // Opaque args are as unmodelled as an inexact form.
            form: (0..n)
                .map(|i| {
                    if t.has_flag(i, flag::OPAQUE_ARGS) {
                        inp.form[i] & !form::EXACT
                    } else {
                        inp.form[i]
                    }
                })
                .collect(),
            stale: vec![false; n],
            edits: Vec::new(),
            retrace_bits,
            erased: vec![false; n],
            touched: vec![false; n],
            prev: (0..n).map(|i| i.checked_sub(1).unwrap_or(NIL)).collect(),
            next: (0..n)
                .map(|i| if i + 1 < n { i + 1 } else { NIL })
                .collect(),
            head: if n > 0 { 0 } else { NIL },
            tail: n.checked_sub(1).unwrap_or(NIL),
        }
    }

    /// One stock scan over the graph as it is now: `for node in list(graph.nodes)`, skipping
    /// stale nodes and nodes without users; whether any walk modified the graph.
    fn scan(&mut self) -> Step<bool> {
        let mut modified = false;
        for i in self.order() {
            if self.stale[i] || !self.is_scan_target(i) || self.users[i].is_empty() {
                continue;
            }
            if self.propagate(i)? {
                modified = true;
            }
        }
        Ok(modified)
    }
}

impl Model<'_> {
    // -- classes ---------------------------------------------------------------------------

    fn cls(&self, i: usize) -> u32 {
        match self.target[i] {
            c if c < 0 => 0,
            c => self.target_class[c as usize],
        }
    }

    fn extra(&self, i: usize) -> u32 {
        match self.target[i] {
            c if c < 0 => 0,
            c => self.target_extra[c as usize],
        }
    }

    fn is_call(&self, i: usize) -> bool {
        self.op[i] == op::CALL_FUNCTION
    }

    fn is_scan_target(&self, i: usize) -> bool {
        self.extra(i) & extra::SCAN_TARGET != 0
    }

    fn is_permute(&self, i: usize) -> bool {
        self.cls(i) & class::PERMUTE != 0
    }

    fn has(&self, i: usize, c: u32) -> bool {
        self.cls(i) & c != 0
    }

    fn tosa_has(&self, i: usize, c: u32) -> bool {
        self.cfg.tosa && self.has(i, c)
    }

    fn shape(&self, i: usize) -> Option<&[i64]> {
        self.shapes[i].as_deref()
    }

    fn exact(&self, i: usize) -> Step<()> {
        if self.form[i] & form::EXACT == 0 {
            return decline("args form not modelled", i);
        }
        Ok(())
    }

    // -- predicates (stock's is_* / blocks_* / tolerates_*) ---------------------------------

    fn is_transparent(&self, i: usize) -> bool {
        self.has(i, class::TRANSPARENT) || self.tosa_has(i, class::TOSA_RESCALE)
    }

    fn is_per_tensor_rescale(&self, i: usize) -> bool {
        self.form[i] & form::RESCALE_PER_TENSOR_ARGS != 0
            && self.inputs[i].len() == 1
            && self.special[self.inputs[i][0]] == self.special[i]
    }

    fn is_elementwise(&self, i: usize) -> bool {
        if self.tosa_has(i, class::TOSA_RESCALE) {
            return self.is_per_tensor_rescale(i);
        }
        if self.tosa_has(i, class::TOSA_TABLE) {
            return true;
        }
        if !self.is_call(i) {
            return false;
        }
        self.is_transparent(i) || self.has(i, class::ELEMENTWISE)
    }

    fn is_multi_input_elementwise(&self, i: usize) -> bool {
        self.tosa_has(i, class::TOSA_TABLE)
    }

    fn blocks_crossing(&self, i: usize) -> bool {
        self.tosa_has(i, class::TOSA_SCATTER)
    }

    fn int48_or_inputs(&self, i: usize) -> bool {
        self.special[i] == SPECIAL_INT48
            || self.inputs[i]
                .iter()
                .any(|&j| self.special[j] == SPECIAL_INT48)
    }

    fn blocks_moving(&self, moving: usize, frontier: usize, next: &[usize]) -> bool {
        self.cfg.tosa
            && self.is_permute(moving)
            && std::iter::once(&frontier)
                .chain(next)
                .any(|&c| self.int48_or_inputs(c))
    }

    fn tolerates_shape_after_move(&self, next: usize, shape: Option<&[i64]>) -> bool {
        if !self.tosa_has(next, class::TOSA_TABLE) {
            return true;
        }
        !matches!(shape, Some(s) if s.len() == 4 && s[0] > 1 && s[1] == 1 && s[2] == 1)
    }

    fn shape_seen_by_next_node(&self, moving: usize) -> Option<&[i64]> {
        match self.cfg.direction {
            Direction::Down => self.shape(self.inputs[moving][0]),
            Direction::Up => self.shape(moving),
        }
    }

    fn is_layout_invariant(&self, i: usize, rank: usize) -> bool {
        matches!(self.shape(i), Some(s) if s.len() == rank && s.iter().all(|&d| d == 1))
    }

    /// Stock's `is_swappable`; the TOSA keepdim check raises there, so it declines here.
    fn is_swappable(&self, next: usize) -> Step<bool> {
        if self.cfg.tosa && self.has(next, class::REDUCTION) {
            self.exact(next)?;
            if self.iargs[next][0] != 1 {
                return decline("reduction without keepdim=True (stock raises)", next);
            }
        }
        if self.extra(next) & extra::ARG_UPDATE == 0 {
            return Ok(false);
        }
        if self.has(next, class::REDUCTION) {
            self.exact(next)?;
            if self.iargs[next][0] != 1 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn view_map(&self, view: usize) -> Step<ViewMap> {
        self.exact(view)?;
        let Some(source) = self.shape(self.inputs[view][0]) else {
            return decline("view input has no tensor value (stock asserts)", view);
        };
        ViewMap::from_shapes(source, &self.iargs[view])
            .or_else(|_| decline("dim_maps raises on the view", view))
    }

    fn permute_map(&self, permute: usize) -> Step<PermuteMap> {
        self.exact(permute)?;
        PermuteMap::new(&self.iargs[permute]).or_else(|_| decline("invalid permute dims", permute))
    }

    // -- walk ------------------------------------------------------------------------------

    fn next_nodes(&self, i: usize) -> Vec<usize> {
        match self.cfg.direction {
            Direction::Down => self.users[i].clone(),
            Direction::Up => self.inputs[i].clone(),
        }
    }

    fn validated_next_nodes(&self, node: usize, frontier: usize) -> Step<Option<Vec<usize>>> {
        let next = self.next_nodes(frontier);
        if next.is_empty() {
            let o = self.op[frontier];
            if o != op::PLACEHOLDER && o != op::OUTPUT {
                return decline("walk reached a dead end (stock asserts)", frontier);
            }
            return Ok(None);
        }
        if next.iter().any(|&x| self.stale[x]) {
            return Ok(None);
        }
        if self.cfg.direction == Direction::Up && !self.can_cross_next_nodes(frontier, &next) {
            return Ok(None);
        }
        if self.blocks_moving(node, frontier, &next) {
            return Ok(None);
        }
        Ok(Some(next))
    }

    fn can_cross_next_nodes(&self, frontier: usize, next: &[usize]) -> bool {
        if self.users[frontier]
            .iter()
            .any(|&u| self.blocks_crossing(u))
        {
            return false;
        }
        next.iter()
            .all(|&x| self.users[x].iter().all(|&u| u == frontier))
    }

    fn propagate(&mut self, node: usize) -> Step<bool> {
        self.exact(node)?;
        if self.inputs[node].len() != 1 {
            return decline("transform without exactly one input", node);
        }
        let mut frontier = node;
        let mut previous: Option<usize> = None;
        let mut path = vec![node];
        let mut moved = false;
        while let Some(next) = self.validated_next_nodes(node, frontier)? {
            if next.len() > 1 {
                if !self.maybe_split_fork(node, frontier, previous, &next)? {
                    break;
                }
                path.extend_from_slice(&next);
                self.mark_stale(&path);
                return Ok(true);
            }
            let nx = next[0];
            if self.advance_through_next_node(node, frontier, nx)? {
                previous = Some(frontier);
                frontier = nx;
                path.push(nx);
                moved = true;
                continue;
            }
            if let Some(plan) = self.plan_cat_fanout(node, nx)? {
                self.apply_cat_fanout(node, nx, plan);
                path.push(nx);
                self.mark_stale(&path);
                return Ok(true);
            }
            break;
        }
        if !moved {
            return Ok(false);
        }
        let previous = previous.expect("moved implies a previous frontier");
        self.move_node(node, frontier, previous);
        self.edits.push(Edit::Move {
            node,
            frontier,
            previous_frontier: previous,
        });
        self.mark_stale(&path);
        Ok(true)
    }

    fn advance_through_next_node(&mut self, node: usize, frontier: usize, nx: usize) -> Step<bool> {
        if self.can_move_through_elementwise(node, frontier, nx)? {
            return Ok(true);
        }
        if !self.is_swappable(nx)? {
            return Ok(false);
        }
        let Some(swap) = self.maybe_swap_args(node, nx)? else {
            return Ok(false);
        };
        if let Some(a) = swap.node_iargs {
            self.iargs[node] = a;
            self.form[node] &= !form::ARG1_TUPLE; // a list is written
        }
        self.touch_args(node);
        self.edits.push(swap.node_edit);
        self.iargs[nx] = swap.next_iargs;
        if swap.next_scalar {
            self.form[nx] |= form::DIM_SCALAR;
        } else {
            self.form[nx] &= !form::DIM_SCALAR;
        }
        self.touch_args(nx);
        self.edits.push(swap.next_edit);
        Ok(true)
    }

    fn can_move_through_elementwise(
        &self,
        moving: usize,
        frontier: usize,
        nx: usize,
    ) -> Step<bool> {
        if self.base_can_move_through_elementwise(moving, nx)? {
            return Ok(true);
        }
        if self.cfg.direction == Direction::Down
            || !self.is_permute(moving)
            || !self.is_elementwise(nx)
        {
            return Ok(false);
        }
        let Some(rank) = self.shape(frontier).map(<[i64]>::len) else {
            return Ok(false);
        };
        let dependent = self.inputs[nx]
            .iter()
            .filter(|&&i| !self.is_layout_invariant(i, rank))
            .count();
        Ok(dependent == 1)
    }

    fn base_can_move_through_elementwise(&self, moving: usize, nx: usize) -> Step<bool> {
        if !self.is_elementwise(nx)
            || (self.inputs[nx].len() != 1 && !self.is_multi_input_elementwise(nx))
            || self.shape(nx).is_none()
        {
            return Ok(false);
        }
        if self.extra(moving) & extra::VIEW_COPY != 0 {
            let vm = self.view_map(moving)?;
            if !vm.is_valid_map() {
                return Ok(false);
            }
            if self.is_transparent(nx) && vm.source_rank() != vm.target_rank() {
                return Ok(false);
            }
        }
        if !self.tolerates_shape_after_move(nx, self.shape_seen_by_next_node(moving)) {
            return Ok(false);
        }
        if !self.is_permute(moving) {
            return Ok(true);
        }
        let source_rank = self.iargs[moving].len();
        Ok(self.shape(nx).map(<[i64]>::len) == Some(source_rank))
    }

    // -- swaps -----------------------------------------------------------------------------

    fn maybe_swap_args(&self, node: usize, nx: usize) -> Step<Option<Swap>> {
        if self.is_permute(node) {
            return self.maybe_swap_permute_args(node, nx);
        }
        if self.extra(node) & extra::VIEW_COPY == 0 {
            return decline("swap of a non-view_copy view (ViewMap asserts)", node);
        }
        match self.cfg.direction {
            Direction::Down => self.maybe_swap_view_args_down(node, nx),
            Direction::Up => self.maybe_swap_view_args_up(node, nx),
        }
    }

    /// `next_node.args[1]` as stock's `_dim_arg` sees it: (dims, is a single int).
    fn dim_arg(&self, nx: usize) -> Step<(Vec<i64>, bool)> {
        self.exact(nx)?;
        if self.has(nx, class::REDUCTION) {
            let scalar = self.form[nx] & form::DIM_SCALAR != 0;
            return Ok((self.iargs[nx][1..].to_vec(), scalar));
        }
        if self.has(nx, class::SLICE) {
            return Ok((vec![self.iargs[nx][0]], true));
        }
        decline("swappable target of unknown arg layout", nx)
    }

    /// The model's iargs of `nx` after writing `dims` into `args[1]`.
    fn with_dims(&self, nx: usize, dims: &[i64]) -> Vec<i64> {
        let mut a = self.iargs[nx].clone();
        if self.has(nx, class::REDUCTION) {
            a.truncate(1);
            a.extend_from_slice(dims);
        } else {
            a[0] = dims[0];
        }
        a
    }

    fn set_dims_swap(
        &self,
        node: usize,
        node_values: Option<Vec<i64>>,
        nx: usize,
        dims: Vec<i64>,
        scalar: bool,
    ) -> Swap {
        let value = if scalar {
            ArgValue::Int(dims[0])
        } else {
            ArgValue::List(dims.clone())
        };
        let node_edit = match &node_values {
            Some(v) => Edit::SetArgs {
                node,
                pos: 1,
                values: vec![ArgValue::List(v.clone())],
            },
            None => Edit::SetArgs {
                node,
                pos: 0,
                values: vec![],
            },
        };
        Swap {
            node_edit,
            node_iargs: node_values,
            next_edit: Edit::SetArgs {
                node: nx,
                pos: 1,
                values: vec![value],
            },
            next_iargs: self.with_dims(nx, &dims),
            next_scalar: scalar,
        }
    }

    fn maybe_swap_permute_args(&self, node: usize, nx: usize) -> Step<Option<Swap>> {
        let pm = self.permute_map(node)?;
        let (dims, scalar) = self.dim_arg(nx)?;
        let mapped = match self.cfg.direction {
            Direction::Down => pm.map_dims_inverse(&dims),
            Direction::Up => pm.map_dims(&dims),
        };
        let Ok(mapped) = mapped else {
            return decline("dim_maps raises on the permute swap", nx);
        };
        let mapped: Vec<i64> = mapped.into_iter().map(|d| d as i64).collect();
        Ok(Some(self.set_dims_swap(node, None, nx, mapped, scalar)))
    }

    fn maybe_swap_view_args_down(&self, node: usize, nx: usize) -> Step<Option<Swap>> {
        let vm = self.view_map(node)?;
        if !vm.is_valid_map() {
            return Ok(None);
        }
        if self.has(nx, class::REDUCTION) {
            self.exact(nx)?;
            if self.form[nx] & form::KEEPDIM_POSITIONAL_TRUE == 0 {
                return Ok(None);
            }
            let Ok(swap) = vm.map_reduction_before_view(&self.iargs[nx][1..]) else {
                return decline("dim_maps raises on the reduction swap", nx);
            };
            let Some((new_dims, output_shape)) = swap else {
                return Ok(None);
            };
            let new_dims = new_dims.into_iter().map(|d| d as i64).collect();
            return Ok(Some(self.set_dims_swap(
                node,
                Some(output_shape),
                nx,
                new_dims,
                false,
            )));
        }
        if self.has(nx, class::SLICE) {
            self.exact(nx)?;
            let Ok(mapped) = vm.map_dim_inverse(&self.iargs[nx][..1]) else {
                return decline("dim_maps raises on the slice swap", nx);
            };
            let Some(mapped) = mapped.filter(|m| m.len() == 1) else {
                return Ok(None);
            };
            let Some(output_shape) = self.shape(nx).map(<[i64]>::to_vec) else {
                return decline("slice has no tensor value (stock raises)", nx);
            };
            return Ok(Some(self.set_dims_swap(
                node,
                Some(output_shape),
                nx,
                vec![mapped[0] as i64],
                true,
            )));
        }
        Ok(None)
    }

    fn maybe_swap_view_args_up(&self, node: usize, nx: usize) -> Step<Option<Swap>> {
        let vm = self.view_map(node)?;
        if !vm.is_valid_map() || self.inputs[nx].len() != 1 {
            return Ok(None);
        }
        let Some(input_shape) = self.shape(self.inputs[nx][0]) else {
            return decline(
                "swapped node's input has no tensor value (stock raises)",
                nx,
            );
        };
        let Ok(new_shape) = vm.remap_target_shape(input_shape) else {
            return decline("dim_maps raises on remap_target_shape", nx);
        };
        if self.has(nx, class::REDUCTION) {
            self.exact(nx)?;
            if self.form[nx] & form::KEEPDIM_POSITIONAL_TRUE == 0 {
                return Ok(None);
            }
            let Ok(swap) = vm.map_reduction_after_view(input_shape, &self.iargs[nx][1..]) else {
                return decline("dim_maps raises on the reduction swap", nx);
            };
            let Some((shape, dims)) = swap else {
                return Ok(None);
            };
            let dims = dims.into_iter().map(|d| d as i64).collect();
            return Ok(Some(self.set_dims_swap(node, Some(shape), nx, dims, false)));
        }
        if self.has(nx, class::SLICE) {
            return self.maybe_swap_slice_view_args_up(node, nx, &vm, input_shape, new_shape);
        }
        Ok(None)
    }

    fn maybe_swap_slice_view_args_up(
        &self,
        node: usize,
        nx: usize,
        vm: &ViewMap,
        input_shape: &[i64],
        new_shape: Option<Vec<i64>>,
    ) -> Step<Option<Swap>> {
        self.exact(nx)?;
        let a = &self.iargs[nx];
        let (dim, start, end, step) = (a[0], a[1], a[2], a[3]);
        let Ok(unit) = vm.remap_unit_slice(input_shape, dim, start, end, step) else {
            return decline("dim_maps raises on remap_unit_slice", nx);
        };
        if let Some((shape, new_dim, new_start, new_end)) = unit {
            if !valid_slice_interval(&shape, new_dim as i64, new_start, new_end, nx)? {
                return Ok(None);
            }
            let mut next_iargs = a.clone();
            next_iargs[..3].copy_from_slice(&[new_dim as i64, new_start, new_end]);
            return Ok(Some(Swap {
                node_edit: Edit::SetArgs {
                    node,
                    pos: 1,
                    values: vec![ArgValue::List(shape.clone())],
                },
                node_iargs: Some(shape),
                next_edit: Edit::SetArgs {
                    node: nx,
                    pos: 1,
                    values: vec![
                        ArgValue::Int(new_dim as i64),
                        ArgValue::Int(new_start),
                        ArgValue::Int(new_end),
                    ],
                },
                next_iargs,
                next_scalar: true,
            }));
        }
        let Some(new_shape) = new_shape else {
            return Ok(None);
        };
        let Some(mapped) = map_slice_dim(vm, dim, nx)? else {
            return Ok(None);
        };
        if !valid_slice_interval(&new_shape, mapped as i64, start, end, nx)? {
            return Ok(None);
        }
        Ok(Some(self.set_dims_swap(
            node,
            Some(new_shape),
            nx,
            vec![mapped as i64],
            true,
        )))
    }

    // -- forks and cats --------------------------------------------------------------------

    /// Stock's `_maybe_split_fork`: never splits going up; going down, plans every branch
    /// (all or nothing) and applies the plan.
    fn maybe_split_fork(
        &mut self,
        node: usize,
        frontier: usize,
        previous: Option<usize>,
        next: &[usize],
    ) -> Step<bool> {
        if self.cfg.direction == Direction::Up || (frontier != node && previous.is_none()) {
            return Ok(false);
        }
        let Some((producer, branches)) = self.plan_fork_split(node, frontier, next)? else {
            return Ok(false);
        };
        self.apply_fork_split(node, frontier, producer, branches);
        Ok(true)
    }

    /// Stock's `_plan_fork_split`: the producer and one planned branch per next node.
    fn plan_fork_split(
        &self,
        node: usize,
        frontier: usize,
        next: &[usize],
    ) -> Step<Option<(usize, Vec<PlannedBranch>)>> {
        if !self.is_permute(node) || self.inputs[node].len() != 1 {
            return Ok(None);
        }
        let producer = self.inputs[node][0];
        if self.shape(producer).is_none() {
            return Ok(None);
        }
        self.exact(node)?;
        let dims = &self.iargs[node];
        let rank = dims.len();
        let normalized: Vec<usize> = dims
            .iter()
            .map(|&d| if d >= 0 { d } else { d + rank as i64 })
            .map(|d| d as usize)
            .collect();
        let mut sorted = normalized.clone();
        sorted.sort_unstable();
        if sorted.iter().enumerate().any(|(i, &d)| d != i) {
            return Ok(None);
        }
        let mut branches = Vec::with_capacity(next.len());
        for &nx in next {
            let elementwise = self.can_move_through_elementwise(node, frontier, nx)?
                || self.can_split_through_elementwise(frontier, nx);
            let swap = if elementwise {
                None
            } else if self.is_swappable(nx)? {
                match self.maybe_swap_args(node, nx)? {
                    Some(swap) => Some(swap),
                    None => return Ok(None),
                }
            } else {
                return Ok(None);
            };
            let Some(next_shape) = self.shape(nx).filter(|s| s.len() == rank) else {
                return Ok(None);
            };
            let mut source_shape = vec![1i64; rank];
            for (output_axis, &source_axis) in normalized.iter().enumerate() {
                source_shape[source_axis] = next_shape[output_axis];
            }
            branches.push(PlannedBranch {
                next_node: nx,
                source_shape,
                swap,
            });
        }
        Ok(Some((producer, branches)))
    }

    /// Stock's `_apply_fork_split` on the model, recorded as one edit.
    fn apply_fork_split(
        &mut self,
        node: usize,
        frontier: usize,
        producer: usize,
        branches: Vec<PlannedBranch>,
    ) {
        if frontier != node {
            let original_user = self.users[node][0];
            self.replace_input_with(original_user, node, producer);
        }
        let mut recorded = Vec::with_capacity(branches.len());
        for branch in branches {
            let nx = branch.next_node;
            let old_shape = self.shapes[nx].clone();
            let old_special = self.special[nx];
            if frontier == node {
                self.replace_input_with(nx, node, producer);
            }
            let arg_update = branch.swap.map(|swap| {
                // `next_node.args = (branch_input, *arg_update[1][1:])`; arg_update[1][0] is
                // the next node's first arg at plan time: the frontier.
                let branch_input = if frontier == node { producer } else { frontier };
                self.iargs[nx] = swap.next_iargs;
                if swap.next_scalar {
                    self.form[nx] |= form::DIM_SCALAR;
                } else {
                    self.form[nx] &= !form::DIM_SCALAR;
                }
                self.set_inputs(nx, vec![branch_input]);
                match swap.next_edit {
                    Edit::SetArgs { pos, values, .. } => (pos, values),
                    _ => unreachable!("a swap rewrites the next node's args"),
                }
            });
            self.shapes[nx] = Some(branch.source_shape.clone());
            self.touched[nx] = true;
            let created = self.create_node(node, nx, old_shape, old_special);
            for u in self.users[nx].clone() {
                if u != created {
                    self.replace_input_with(u, nx, created);
                }
            }
            recorded.push(ForkBranch {
                next_node: nx,
                source_shape: branch.source_shape,
                arg_update,
                created,
            });
        }
        if self.users[node].is_empty() {
            self.erase(node);
        }
        self.edits.push(Edit::ForkSplit {
            node,
            frontier,
            producer,
            branches: recorded,
        });
    }

    /// A copy of transform `like` reading `input` (stock's branch transform), with the given
    /// value; returns its id.
    fn create_node(
        &mut self,
        like: usize,
        input: usize,
        shape: Option<Vec<i64>>,
        special: i32,
    ) -> usize {
        let id = self.push_node(
            self.op[like],
            self.target[like],
            shape,
            special,
            self.iargs[like].clone(),
            self.form[like],
        );
        self.set_inputs(id, vec![input]);
        self.insert_after(id, input); // `with graph.inserting_after(next_node)`
        id
    }

    /// A new node without inputs or users; returns its id.
    fn push_node(
        &mut self,
        op: u8,
        target: i32,
        shape: Option<Vec<i64>>,
        special: i32,
        iargs: Vec<i64>,
        form: u32,
    ) -> usize {
        let id = self.op.len();
        self.op.push(op);
        self.target.push(target);
        self.shapes.push(shape);
        self.special.push(special);
        self.inputs.push(Vec::new());
        self.users.push(Vec::new());
        self.iargs.push(iargs);
        self.form.push(form);
        self.stale.push(false);
        self.retrace_bits.push(0);
        self.erased.push(false);
        self.touched.push(true);
        self.prev.push(NIL);
        self.next.push(NIL);
        id
    }

    fn can_split_through_elementwise(&self, frontier: usize, nx: usize) -> bool {
        if !self.is_elementwise(nx) {
            return false;
        }
        let Some(rank) = self.shape(frontier).map(<[i64]>::len) else {
            return false;
        };
        self.inputs[nx]
            .iter()
            .all(|&i| i == frontier || self.is_layout_invariant(i, rank))
    }

    /// Stock's `_maybe_split_upwards_cat_fanout` up to its first edit: the plan when it
    /// applies.
    fn plan_cat_fanout(&self, node: usize, nx: usize) -> Step<Option<CatPlan>> {
        if self.cfg.direction == Direction::Down || !self.is_permute(node) {
            return Ok(None);
        }
        if !self.has(nx, class::CAT) {
            return Ok(None);
        }
        let cat_users = &self.users[nx];
        if cat_users.is_empty() || !cat_users.iter().all(|&u| self.is_permute(u)) {
            return Ok(None);
        }
        for &u in cat_users {
            self.exact(u)?;
        }
        let first = cat_users[0];
        let perm = self.iargs[first].clone();
        let tuple = self.form[first] & form::ARG1_TUPLE;
        if !cat_users
            .iter()
            .all(|&u| self.iargs[u] == perm && self.form[u] & form::ARG1_TUPLE == tuple)
        {
            return Ok(None);
        }
        self.exact(nx)?;
        let cat_dim = self.iargs[nx][0];
        let pm = self.permute_map(node)?;
        let Ok(mapped) = pm.map_dims(&[cat_dim]) else {
            return decline("dim_maps raises on the cat dim", nx);
        };
        let new_cat_dim = mapped[0] as i64;
        let inputs = self.inputs[nx].clone();
        let mut shapes = Vec::with_capacity(inputs.len());
        for &i in &inputs {
            match self.shape(i) {
                Some(s) => shapes.push(s.to_vec()),
                None => return decline("cat input has no tensor value (stock raises)", i),
            }
        }
        for s in &shapes {
            if !is_singleton_permutation(s, &perm).or_else(|_| decline("invalid dim", nx))? {
                return Ok(None);
            }
        }
        let Some(permute_code) = (0..self.target_extra.len())
            .find(|&c| self.target_extra[c] & extra::PERMUTE_TARGET != 0)
        else {
            return decline("cat fan-out creates a permute target the table lacks", nx);
        };
        Ok(Some(CatPlan {
            perm,
            tuple,
            new_cat_dim,
            inputs,
            shapes,
            permute_code: permute_code as i32,
        }))
    }

    /// The edits of stock's cat fan-out, on the model.
    fn apply_cat_fanout(&mut self, node: usize, nx: usize, plan: CatPlan) {
        let cat_users = self.users[nx].clone();
        let mut created = Vec::with_capacity(plan.inputs.len());
        for (&i, shape) in plan.inputs.iter().zip(&plan.shapes) {
            let rank = shape.len() as i64;
            let output: Vec<i64> = plan
                .perm
                .iter()
                .map(|&d| shape[if d >= 0 { d } else { d + rank } as usize])
                .collect();
            let id = self.push_node(
                op::CALL_FUNCTION,
                plan.permute_code,
                Some(output),
                self.special[i],
                plan.perm.clone(),
                form::EXACT | plan.tuple,
            );
            self.set_inputs(id, vec![i]);
            self.insert_before(id, nx); // `with graph.inserting_before(next_node)`
            created.push(id);
        }
        self.set_inputs(nx, created.clone());
        self.iargs[nx] = vec![plan.new_cat_dim];
        self.form[nx] = form::EXACT;
        self.shapes[nx] = self.shapes[node].clone();
        self.special[nx] = self.special[node];
        for &u in &cat_users {
            for w in self.users[u].clone() {
                self.replace_input_with(w, u, nx);
            }
        }
        for &u in &cat_users {
            if self.users[u].is_empty() {
                self.erase(u);
            }
        }
        self.edits.push(Edit::CatFanout {
            node,
            cat: nx,
            created,
        });
    }

    // -- edits on the model ----------------------------------------------------------------

    /// fx's `_update_args_kwargs`: the node leaves every input's users and is re-added at the
    /// end of each new input's users, inputs in first-appearance order.
    fn set_inputs(&mut self, x: usize, new_inputs: Vec<usize>) {
        for &i in &self.inputs[x] {
            self.users[i].retain(|&u| u != x);
        }
        let mut deduped: Vec<usize> = Vec::with_capacity(new_inputs.len());
        for i in new_inputs {
            if !deduped.contains(&i) {
                deduped.push(i);
            }
        }
        for &i in &deduped {
            if !self.users[i].contains(&x) {
                self.users[i].push(x);
            }
        }
        self.inputs[x] = deduped;
        self.touched[x] = true;
    }

    /// `graph.erase_node(x)` of a node without users.
    fn erase(&mut self, x: usize) {
        self.set_inputs(x, Vec::new());
        self.unlink(x);
        self.erased[x] = true;
    }

    // -- graph order -----------------------------------------------------------------------

    fn order(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut i = self.head;
        while i != NIL {
            out.push(i);
            i = self.next[i];
        }
        out
    }

    fn unlink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n] = p;
        }
        self.prev[x] = NIL;
        self.next[x] = NIL;
    }

    /// fx's `anchor.append(x)`: x (moved if linked) right after anchor.
    fn insert_after(&mut self, x: usize, anchor: usize) {
        if x != anchor {
            self.unlink_if_linked(x);
            self.splice(x, anchor, self.next[anchor]);
        }
    }

    /// fx's `anchor.prepend(x)`: x (moved if linked) right before anchor.
    fn insert_before(&mut self, x: usize, anchor: usize) {
        if x != anchor {
            self.unlink_if_linked(x);
            self.splice(x, self.prev[anchor], anchor);
        }
    }

    fn unlink_if_linked(&mut self, x: usize) {
        if self.prev[x] != NIL || self.head == x {
            self.unlink(x);
        }
    }

    /// Links the unlinked `x` between neighbours `p` and `n` ([`NIL`] at an end).
    fn splice(&mut self, x: usize, p: usize, n: usize) {
        self.prev[x] = p;
        self.next[x] = n;
        if p == NIL {
            self.head = x;
        } else {
            self.next[p] = x;
        }
        if n == NIL {
            self.tail = x;
        } else {
            self.prev[n] = x;
        }
    }

    fn touch_args(&mut self, x: usize) {
        let same = self.inputs[x].clone();
        self.set_inputs(x, same);
    }

    fn replace_input_with(&mut self, x: usize, old: usize, new: usize) {
        let mapped = self.inputs[x]
            .iter()
            .map(|&i| if i == old { new } else { i })
            .collect();
        self.set_inputs(x, mapped);
    }

    fn move_node(&mut self, node: usize, frontier: usize, previous: usize) {
        match self.cfg.direction {
            Direction::Down => {
                let original_user = self.users[node][0];
                let producer = self.inputs[node][0];
                let frontier_input = if self.op[frontier] == op::OUTPUT {
                    previous
                } else {
                    frontier
                };
                let frontier_users = self.users[frontier_input].clone();
                self.replace_input_with(original_user, node, producer);
                self.replace_input_with(node, producer, frontier_input);
                for u in frontier_users {
                    if u != node {
                        self.replace_input_with(u, frontier_input, node);
                    }
                }
                if self.op[frontier] == op::OUTPUT {
                    self.insert_before(node, frontier);
                } else {
                    self.insert_after(node, frontier);
                }
            }
            Direction::Up => {
                let original_input = self.inputs[node][0];
                let (producer, frontier_user) = if self.op[frontier] == op::PLACEHOLDER {
                    (frontier, previous)
                } else {
                    (self.inputs[frontier][0], frontier)
                };
                self.replace_input_with(node, original_input, producer);
                self.replace_input_with(frontier_user, producer, node);
                for u in self.users[node].clone() {
                    if u != frontier_user {
                        self.replace_input_with(u, node, original_input);
                    }
                }
                self.insert_before(node, frontier_user);
            }
        }
    }

    fn mark_stale(&mut self, path: &[usize]) {
        let mut pending: Vec<usize> = path.to_vec();
        while let Some(cur) = pending.pop() {
            if self.stale[cur] {
                continue;
            }
            self.stale[cur] = true;
            pending.extend(self.users[cur].iter().copied());
        }
    }
}

/// Stock's `_valid_slice_interval` (a rank-0 shape divides by zero there: decline).
fn valid_slice_interval(shape: &[i64], dim: i64, start: i64, end: i64, at: usize) -> Step<bool> {
    if shape.is_empty() {
        return decline("slice interval on a rank-0 shape (stock raises)", at);
    }
    let d = py_mod(dim, shape.len() as i64) as usize;
    Ok(0 <= start && start < end && end <= shape[d])
}

/// Stock's `_map_slice_dim`.
fn map_slice_dim(vm: &ViewMap, slice_dim: i64, at: usize) -> Step<Option<usize>> {
    let Ok(new_dims) = vm.map_source_dims_to_target_axes(&[slice_dim]) else {
        return decline("dim_maps raises on the slice dim", at);
    };
    let Some(new_dims) = new_dims.filter(|d| d.len() == 1) else {
        return Ok(None);
    };
    let new_dim = new_dims[0];
    if vm.source_rank() == 0 {
        return decline("slice dim on a rank-0 view source (stock raises)", at);
    }
    let normalized = py_mod(slice_dim, vm.source_rank() as i64) as usize;
    let Ok(s2t) = vm.source_to_target_axes() else {
        return decline("dim_maps raises on source_to_target_axes", at);
    };
    let crosses = (0..s2t.len()).any(|s| s2t[s].contains(&new_dim) && s != normalized);
    Ok((!crosses).then_some(new_dim))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{OwnedTable, TableBuilder};

    // Target codes of the synthetic tables.
    const PERMUTE: i32 = 0;
    const RELU: i32 = 1;
    const MEAN: i32 = 2;
    const TABLE_OP: i32 = 3;
    const VIEW: i32 = 4;
    const ADD: i32 = 5;
    /// An op the between-scan model has no shape rule for (a convolution, say).
    const OPAQUE_OP: i32 = 6;

    fn builder() -> TableBuilder {
        TableBuilder::new(vec![
            class::PERMUTE,
            class::ELEMENTWISE,
            class::REDUCTION,
            class::TOSA_TABLE,
            class::VIEW,
            class::ELEMENTWISE,
            0,
        ])
    }

    fn target_extra() -> Vec<u32> {
        vec![
            extra::SCAN_TARGET,
            0,
            extra::ARG_UPDATE,
            0,
            extra::SCAN_TARGET | extra::VIEW_COPY,
            0,
            0,
        ]
    }

    struct Case {
        t: OwnedTable,
        special: Vec<i32>,
        form: Vec<u32>,
        extra: Vec<u32>,
    }

    impl Case {
        fn new(t: OwnedTable, form: Vec<u32>) -> Self {
            let special = (0..t.op.len())
                .map(|i| {
                    if t.flags[i] & flag::INT48 != 0 {
                        SPECIAL_INT48
                    } else {
                        0
                    }
                })
                .collect();
            Self {
                t,
                special,
                form,
                extra: target_extra(),
            }
        }

        fn input(&self) -> ScanInput<'_> {
            ScanInput {
                table: self.t.view(),
                target_extra: &self.extra,
                special: &self.special,
                form: &self.form,
            }
        }

        /// Scans to the fixed point; placeholders and the output are the impure nodes.
        fn run(&self, direction: Direction, max_scans: usize) -> Result<RunPlan, Decline> {
            let retrace: Vec<u8> = self
                .t
                .op
                .iter()
                .map(|&o| match o {
                    op::PLACEHOLDER | op::OUTPUT => retrace::IMPURE,
                    _ => 0,
                })
                .collect();
            let input = RunInput {
                scan: self.input(),
                retrace: &retrace,
            };
            let cfg = Config {
                direction,
                tosa: true,
            };
            plan_run_checked(&input, cfg, max_scans).expect("valid input")
        }

        fn plan(&self, direction: Direction) -> Result<ScanPlan, Decline> {
            let cfg = Config {
                direction,
                tosa: true,
            };
            plan_scan_checked(&self.input(), cfg).expect("valid input")
        }
    }

    const E: u32 = form::EXACT;

    /// x -> permute -> relu -> output
    fn permute_then_relu(relu_flags: u32) -> Case {
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3, 4]), &[], 0);
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[0],
            Some(&[2, 4, 3]),
            &[0, 2, 1],
            0,
        );
        b.push(
            op::CALL_FUNCTION,
            RELU,
            &[1],
            Some(&[2, 4, 3]),
            &[],
            relu_flags,
        );
        b.push(op::OUTPUT, -1, &[2], None, &[], flag::NON_TENSOR);
        Case::new(b.finish(), vec![0, E, 0, 0])
    }

    #[test]
    fn down_moves_a_permute_past_an_elementwise_op() {
        let plan = permute_then_relu(0).plan(Direction::Down).unwrap();
        assert!(plan.modified);
        assert_eq!(
            plan.edits,
            vec![Edit::Move {
                node: 1,
                frontier: 2,
                previous_frontier: 1
            }]
        );
    }

    #[test]
    fn int48_blocks_a_permute() {
        let plan = permute_then_relu(flag::INT48)
            .plan(Direction::Down)
            .unwrap();
        assert_eq!(plan, ScanPlan::default());
    }

    #[test]
    fn up_moves_a_permute_above_an_elementwise_op() {
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3, 4]), &[], 0);
        b.push(op::CALL_FUNCTION, RELU, &[0], Some(&[2, 3, 4]), &[], 0);
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[1],
            Some(&[2, 4, 3]),
            &[0, 2, 1],
            0,
        );
        b.push(op::OUTPUT, -1, &[2], None, &[], flag::NON_TENSOR);
        let plan = Case::new(b.finish(), vec![0, 0, E, 0])
            .plan(Direction::Up)
            .unwrap();
        assert_eq!(
            plan.edits,
            vec![Edit::Move {
                node: 2,
                frontier: 1,
                previous_frontier: 2
            }]
        );
    }

    /// x -> permute -> mean(dims, keepdim) -> output
    fn permute_then_mean(keep: i64, dims: &[i64]) -> Case {
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3, 4]), &[], 0);
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[0],
            Some(&[4, 2, 3]),
            &[2, 0, 1],
            0,
        );
        let mut iargs = vec![keep];
        iargs.extend_from_slice(dims);
        b.push(op::CALL_FUNCTION, MEAN, &[1], Some(&[4, 1, 3]), &iargs, 0);
        b.push(op::OUTPUT, -1, &[2], None, &[], flag::NON_TENSOR);
        let keep_form = if keep == 1 {
            form::KEEPDIM_POSITIONAL_TRUE
        } else {
            0
        };
        Case::new(b.finish(), vec![0, E, E | keep_form, 0])
    }

    #[test]
    fn down_swaps_a_permute_with_a_keepdim_reduction() {
        let plan = permute_then_mean(1, &[1]).plan(Direction::Down).unwrap();
        assert_eq!(
            plan.edits,
            vec![
                Edit::SetArgs {
                    node: 1,
                    pos: 0,
                    values: vec![]
                },
                Edit::SetArgs {
                    node: 2,
                    pos: 1,
                    values: vec![ArgValue::List(vec![0])]
                },
                Edit::Move {
                    node: 1,
                    frontier: 2,
                    previous_frontier: 1
                },
            ]
        );
    }

    #[test]
    fn reduction_without_keepdim_declines_where_stock_raises() {
        let d = permute_then_mean(0, &[1])
            .plan(Direction::Down)
            .unwrap_err();
        assert_eq!(d.reason, "reduction without keepdim=True (stock raises)");
        assert_eq!(d.node, Some(2));
    }

    #[test]
    fn unmodelled_arg_form_declines() {
        let mut c = permute_then_relu(0);
        c.form[1] = 0;
        let d = c.plan(Direction::Down).unwrap_err();
        assert_eq!(d.reason, "args form not modelled");
    }

    #[test]
    fn down_fork_split_splits_and_a_failed_plan_is_exact() {
        // x -> permute -> {relu, relu}: one permute after each branch, the original erased.
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3, 4]), &[], 0);
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[0],
            Some(&[2, 4, 3]),
            &[0, 2, 1],
            0,
        );
        b.push(op::CALL_FUNCTION, RELU, &[1], Some(&[2, 4, 3]), &[], 0);
        b.push(op::CALL_FUNCTION, RELU, &[1], Some(&[2, 4, 3]), &[], 0);
        b.push(op::OUTPUT, -1, &[2, 3], None, &[], flag::NON_TENSOR);
        let t = b.finish();
        let c = Case::new(t.clone(), vec![0, E, 0, 0, 0]);
        let plan = c.plan(Direction::Down).unwrap();
        assert!(plan.modified);
        let branch = |next_node, created| ForkBranch {
            next_node,
            source_shape: vec![2, 3, 4],
            arg_update: None,
            created,
        };
        assert_eq!(
            plan.edits,
            vec![Edit::ForkSplit {
                node: 1,
                frontier: 1,
                producer: 0,
                branches: vec![branch(2, 5), branch(3, 6)],
            }]
        );
        // One branch is a view (neither elementwise nor swappable): no plan, no move.
        let mut t2 = t;
        t2.target[3] = VIEW;
        t2.iarg_ptr = vec![0, 0, 3, 3, 6, 6];
        t2.iarg = vec![0, 2, 1, 2, 4, 3];
        let c = Case::new(t2, vec![0, E, 0, E, 0]);
        assert_eq!(c.plan(Direction::Down).unwrap(), ScanPlan::default());
    }

    #[test]
    fn up_cat_fanout_puts_a_permute_on_each_input() {
        // a, b [2,1,3] -> cat(dim 0) [4,1,3] -> permute [1,0,2]: singleton moves only.
        let mut b = TableBuilder::new(vec![class::PERMUTE, class::CAT]);
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 1, 3]), &[], 0);
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 1, 3]), &[], 0);
        b.push(op::CALL_FUNCTION, 1, &[0, 1], Some(&[4, 1, 3]), &[0], 0);
        b.push(op::CALL_FUNCTION, 0, &[2], Some(&[1, 4, 3]), &[1, 0, 2], 0);
        b.push(op::OUTPUT, -1, &[3], None, &[], flag::NON_TENSOR);
        let mut c = Case::new(b.finish(), vec![0, 0, E, E, 0]);
        c.extra = vec![extra::SCAN_TARGET | extra::PERMUTE_TARGET, 0];
        let plan = c.plan(Direction::Up).unwrap();
        assert!(plan.modified);
        assert_eq!(
            plan.edits,
            vec![Edit::CatFanout {
                node: 3,
                cat: 2,
                created: vec![5, 6]
            }]
        );
        // A non-singleton move of the inputs: no fan-out, nothing moves.
        c.t.shape[..3].copy_from_slice(&[2, 2, 3]);
        c.t.shape[3..6].copy_from_slice(&[2, 2, 3]);
        assert_eq!(c.plan(Direction::Up).unwrap(), ScanPlan::default());
    }

    #[test]
    fn unsafe_table_operand_shape_keeps_the_view() {
        // x[2,1,1,8] -> view[2,8] -> TABLE -> output; moving the view down leaves TABLE
        // reading [2,1,1,8], which Ethos-U85 miscompiles.
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 1, 1, 8]), &[], 0);
        b.push(op::CALL_FUNCTION, VIEW, &[0], Some(&[2, 8]), &[2, 8], 0);
        b.push(op::CALL_FUNCTION, TABLE_OP, &[1], Some(&[2, 8]), &[], 0);
        b.push(op::OUTPUT, -1, &[2], None, &[], flag::NON_TENSOR);
        let c = Case::new(b.finish(), vec![0, E, 0, 0]);
        assert_eq!(c.plan(Direction::Down).unwrap(), ScanPlan::default());
    }

    #[test]
    fn stale_region_skips_the_second_permute() {
        // x -> p1 -> relu -> p2 -> neg -> output: p1 moves past relu and stops at p2 (not
        // elementwise); p2 is then downstream of the path, so it waits for the next scan.
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3, 4]), &[], 0);
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[0],
            Some(&[2, 4, 3]),
            &[0, 2, 1],
            0,
        );
        b.push(op::CALL_FUNCTION, RELU, &[1], Some(&[2, 4, 3]), &[], 0);
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[2],
            Some(&[2, 3, 4]),
            &[0, 2, 1],
            0,
        );
        b.push(op::CALL_FUNCTION, ADD, &[3], Some(&[2, 3, 4]), &[], 0);
        b.push(op::OUTPUT, -1, &[4], None, &[], flag::NON_TENSOR);
        let plan = Case::new(b.finish(), vec![0, E, 0, E, 0, 0])
            .plan(Direction::Down)
            .unwrap();
        assert_eq!(
            plan.edits,
            vec![Edit::Move {
                node: 1,
                frontier: 2,
                previous_frontier: 1
            }]
        );
    }

    #[test]
    fn move_rewires_users_in_fx_order() {
        // Down move of p (x -> p -> relu -> {a, b}): a and b now read p, and p reads relu.
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3]), &[], 0);
        b.push(op::CALL_FUNCTION, PERMUTE, &[0], Some(&[3, 2]), &[1, 0], 0);
        b.push(op::CALL_FUNCTION, RELU, &[1], Some(&[3, 2]), &[], 0);
        b.push(op::CALL_FUNCTION, ADD, &[2], Some(&[3, 2]), &[], 0);
        b.push(op::CALL_FUNCTION, ADD, &[2], Some(&[3, 2]), &[], 0);
        b.push(op::OUTPUT, -1, &[3, 4], None, &[], flag::NON_TENSOR);
        let c = Case::new(b.finish(), vec![0, E, 0, 0, 0, 0]);
        let input = c.input();
        let cfg = Config {
            direction: Direction::Down,
            tosa: true,
        };
        let mut m = Model::new(&input, cfg, None);
        m.move_node(1, 2, 1);
        assert_eq!(m.inputs[2], vec![0]);
        assert_eq!(m.inputs[1], vec![2]);
        assert_eq!(m.users[2], vec![1]);
        assert_eq!(m.users[1], vec![3, 4]);
        assert_eq!(m.users[0], vec![2]);
    }

    #[test]
    fn malformed_planner_columns_are_errors() {
        let c = permute_then_relu(0);
        let cfg = Config {
            direction: Direction::Down,
            tosa: true,
        };
        let mut bad = Case::new(c.t.clone(), c.form.clone());
        bad.form.pop();
        assert_eq!(
            plan_scan_checked(&bad.input(), cfg).unwrap_err().field,
            "form"
        );
        let mut bad = Case::new(c.t.clone(), c.form.clone());
        bad.special[2] = SPECIAL_INT48;
        assert_eq!(
            plan_scan_checked(&bad.input(), cfg).unwrap_err().field,
            "special"
        );
        let mut bad = Case::new(c.t.clone(), c.form.clone());
        bad.extra[0] = 1 << 9;
        assert_eq!(
            plan_scan_checked(&bad.input(), cfg).unwrap_err().field,
            "target_extra"
        );
        let mut bad = permute_then_mean(1, &[1]);
        bad.t.iarg_ptr = vec![0, 0, 3, 3, 3];
        bad.t.iarg.truncate(3);
        assert_eq!(
            plan_scan_checked(&bad.input(), cfg).unwrap_err().field,
            "form"
        );
        let mut bad = Case::new(c.t.clone(), c.form.clone());
        bad.form[1] = 1 << 7;
        assert_eq!(
            plan_scan_checked(&bad.input(), cfg).unwrap_err().field,
            "form"
        );
    }

    /// x -> permute -> relu -> permute -> relu -> output, plus a dead relu of x.
    fn two_permutes_and_dead_code(last: i32) -> Case {
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3, 4]), &[], 0); // 0
        b.push(op::CALL_FUNCTION, RELU, &[0], Some(&[2, 3, 4]), &[], 0); // 1: dead
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[0],
            Some(&[2, 4, 3]),
            &[0, 2, 1],
            0,
        ); // 2
        b.push(op::CALL_FUNCTION, RELU, &[2], Some(&[2, 4, 3]), &[], 0); // 3
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[3],
            Some(&[2, 3, 4]),
            &[0, 2, 1],
            0,
        ); // 4
        b.push(op::CALL_FUNCTION, last, &[4], Some(&[2, 3, 4]), &[], 0); // 5
        b.push(op::OUTPUT, -1, &[5], None, &[], flag::NON_TENSOR); // 6
        Case::new(b.finish(), vec![0, 0, E, 0, E, 0, 0])
    }

    #[test]
    fn run_models_the_retrace_between_scans() {
        let run = two_permutes_and_dead_code(RELU)
            .run(Direction::Down, 100)
            .unwrap();
        assert!(run.fixed_point);
        let moves: Vec<Vec<&Edit>> = run.scans.iter().map(|s| s.edits.iter().collect()).collect();
        // Scan 1 moves the first permute below the relu (the second is in its stale region);
        // scan 2 moves the second permute; the last scan modifies nothing.
        assert!(matches!(
            moves[0][..],
            [Edit::Move {
                node: 2,
                frontier: 3,
                ..
            }]
        ));
        assert!(matches!(
            moves[1][..],
            [Edit::Move {
                node: 4,
                frontier: 5,
                ..
            }]
        ));
        assert!(moves.last().unwrap().is_empty() && !run.scans.last().unwrap().modified);
        let first = run.scans[0].after.as_ref().expect("modelled");
        assert_eq!(first.dead, vec![1]);
        // The relu now reads x: its value takes x's layout; both permutes are rewritten (a
        // transform takes its input's dtype) at the same shape.
        let writes: Vec<(usize, &[i64], usize)> = first
            .shapes
            .iter()
            .map(|w| (w.node, &w.shape[..], w.base))
            .collect();
        assert_eq!(
            writes,
            vec![
                (3, &[2, 3, 4][..], 3),
                (2, &[2, 4, 3][..], 3),
                (4, &[2, 3, 4][..], 2)
            ]
        );
        // x's users were [dead relu, permute]: after the DCE and the move, [relu].
        assert!(first.users.is_empty());
        // One scan per run when asked: the run ends without a modelled re-trace.
        let single = two_permutes_and_dead_code(RELU)
            .run(Direction::Down, 1)
            .unwrap();
        assert_eq!(single.scans.len(), 1);
        assert!(!single.fixed_point && single.scans[0].after.is_none());
    }

    #[test]
    fn run_stops_where_a_value_is_not_modelled() {
        // x -> permute -> relu -> opaque op: the move rewires the opaque op, which has no
        // shape rule, so the run ends after the first scan for a real re-trace.
        let mut b = builder();
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3, 4]), &[], 0);
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[0],
            Some(&[2, 4, 3]),
            &[0, 2, 1],
            0,
        );
        b.push(op::CALL_FUNCTION, RELU, &[1], Some(&[2, 4, 3]), &[], 0);
        b.push(op::CALL_FUNCTION, OPAQUE_OP, &[2], Some(&[2, 4, 3]), &[], 0);
        b.push(op::OUTPUT, -1, &[3], None, &[], flag::NON_TENSOR);
        let run = Case::new(b.finish(), vec![0, E, 0, 0, 0])
            .run(Direction::Down, 100)
            .unwrap();
        assert!(!run.fixed_point);
        assert_eq!(run.scans.len(), 1);
        assert!(run.scans[0].modified && run.scans[0].after.is_none());
    }

    #[test]
    fn run_input_rejects_a_malformed_retrace_column() {
        let case = two_permutes_and_dead_code(RELU);
        let cfg = Config {
            direction: Direction::Down,
            tosa: true,
        };
        for bad in [vec![0u8; 3], vec![4u8; 7]] {
            let input = RunInput {
                scan: case.input(),
                retrace: &bad,
            };
            assert!(plan_run_checked(&input, cfg, 10).is_err());
        }
    }

    #[test]
    fn symbolic_shapes_decline_before_any_scan() {
        let mut b = builder();
        b.push(
            op::PLACEHOLDER,
            -1,
            &[],
            Some(&[2, 3, 4]),
            &[],
            flag::SYMBOLIC,
        );
        b.push(
            op::CALL_FUNCTION,
            PERMUTE,
            &[0],
            Some(&[2, 4, 3]),
            &[0, 2, 1],
            0,
        );
        b.push(op::CALL_FUNCTION, RELU, &[1], Some(&[2, 4, 3]), &[], 0);
        b.push(op::OUTPUT, -1, &[2], None, &[], flag::NON_TENSOR);
        let case = Case::new(b.finish(), vec![0, E, 0, 0]);
        let run = case.run(Direction::Down, 10).unwrap_err();
        assert_eq!((run.reason, run.node), ("symbolic shape", Some(0)));
        assert_eq!(
            case.plan(Direction::Down).unwrap_err().reason,
            "symbolic shape"
        );
    }
}
