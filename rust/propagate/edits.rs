//! The structural edits of a scan: stock's fork split (`_maybe_split_fork`, planned all or
//! nothing), cat fan-out (`_maybe_split_upwards_cat_fanout`) and `_move_node`, applied to the
//! model and recorded as [`Edit`]s.

use super::*;

pub(super) struct CatPlan {
    pub(super) perm: Vec<i64>,
    pub(super) tuple: u32,
    pub(super) new_cat_dim: i64,
    pub(super) inputs: Vec<usize>,
    pub(super) shapes: Vec<Vec<i64>>,
    pub(super) permute_code: i32,
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

pub(super) struct PlannedBranch {
    pub(super) next_node: usize,
    pub(super) source_shape: Vec<i64>,
    pub(super) swap: Option<Swap>,
}

impl Model<'_> {
    // -- forks and cats --------------------------------------------------------------------

    /// Stock's `_maybe_split_fork`: never splits going up; going down, plans every branch
    /// (all or nothing) and applies the plan.
    pub(super) fn maybe_split_fork(
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
    pub(super) fn plan_fork_split(
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
    pub(super) fn apply_fork_split(
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
    pub(super) fn create_node(
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
    pub(super) fn push_node(
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

    pub(super) fn can_split_through_elementwise(&self, frontier: usize, nx: usize) -> bool {
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
    pub(super) fn plan_cat_fanout(&self, node: usize, nx: usize) -> Step<Option<CatPlan>> {
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
    pub(super) fn apply_cat_fanout(&mut self, node: usize, nx: usize, plan: CatPlan) {
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

    pub(super) fn move_node(&mut self, node: usize, frontier: usize, previous: usize) {
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
}
