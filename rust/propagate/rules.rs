//! Stock's rules: the predicates (`is_*`, `blocks_*`, `tolerates_*`), the walk from a scan
//! target (`_propagate`, `_advance_through_next_node`) and the args swaps
//! (`_maybe_swap_*_args`), generic and with the TOSA overrides.

use super::*;

/// A pending args rewrite: the edit and the model update it implies.
pub(super) struct Swap {
    pub(super) node_edit: Edit,
    pub(super) node_iargs: Option<Vec<i64>>,
    pub(super) next_edit: Edit,
    pub(super) next_iargs: Vec<i64>,
    pub(super) next_scalar: bool,
}

impl Model<'_> {
    // -- predicates (stock's is_* / blocks_* / tolerates_*) ---------------------------------

    pub(super) fn is_transparent(&self, i: usize) -> bool {
        self.has(i, class::TRANSPARENT) || self.tosa_has(i, class::TOSA_RESCALE)
    }

    pub(super) fn is_per_tensor_rescale(&self, i: usize) -> bool {
        self.form[i] & form::RESCALE_PER_TENSOR_ARGS != 0
            && self.inputs[i].len() == 1
            && self.special[self.inputs[i][0]] == self.special[i]
    }

    pub(super) fn is_elementwise(&self, i: usize) -> bool {
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

    pub(super) fn is_multi_input_elementwise(&self, i: usize) -> bool {
        self.tosa_has(i, class::TOSA_TABLE)
    }

    pub(super) fn blocks_crossing(&self, i: usize) -> bool {
        self.tosa_has(i, class::TOSA_SCATTER)
    }

    pub(super) fn int48_or_inputs(&self, i: usize) -> bool {
        self.special[i] == SPECIAL_INT48
            || self.inputs[i]
                .iter()
                .any(|&j| self.special[j] == SPECIAL_INT48)
    }

    pub(super) fn blocks_moving(&self, moving: usize, frontier: usize, next: &[usize]) -> bool {
        self.cfg.tosa
            && self.is_permute(moving)
            && std::iter::once(&frontier)
                .chain(next)
                .any(|&c| self.int48_or_inputs(c))
    }

    pub(super) fn tolerates_shape_after_move(&self, next: usize, shape: Option<&[i64]>) -> bool {
        if !self.tosa_has(next, class::TOSA_TABLE) {
            return true;
        }
        !matches!(shape, Some(s) if s.len() == 4 && s[0] > 1 && s[1] == 1 && s[2] == 1)
    }

    pub(super) fn shape_seen_by_next_node(&self, moving: usize) -> Option<&[i64]> {
        match self.cfg.direction {
            Direction::Down => self.shape(self.inputs[moving][0]),
            Direction::Up => self.shape(moving),
        }
    }

    pub(super) fn is_layout_invariant(&self, i: usize, rank: usize) -> bool {
        matches!(self.shape(i), Some(s) if s.len() == rank && s.iter().all(|&d| d == 1))
    }

    /// Stock's `is_swappable`; the TOSA keepdim check raises there, so it declines here.
    pub(super) fn is_swappable(&self, next: usize) -> Step<bool> {
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

    pub(super) fn view_map(&self, view: usize) -> Step<ViewMap> {
        self.exact(view)?;
        let Some(source) = self.shape(self.inputs[view][0]) else {
            return decline("view input has no tensor value (stock asserts)", view);
        };
        ViewMap::from_shapes(source, &self.iargs[view])
            .or_else(|_| decline("dim_maps raises on the view", view))
    }

    pub(super) fn permute_map(&self, permute: usize) -> Step<PermuteMap> {
        self.exact(permute)?;
        PermuteMap::new(&self.iargs[permute]).or_else(|_| decline("invalid permute dims", permute))
    }

    // -- walk ------------------------------------------------------------------------------

    pub(super) fn next_nodes(&self, i: usize) -> Vec<usize> {
        match self.cfg.direction {
            Direction::Down => self.users[i].clone(),
            Direction::Up => self.inputs[i].clone(),
        }
    }

    pub(super) fn validated_next_nodes(
        &self,
        node: usize,
        frontier: usize,
    ) -> Step<Option<Vec<usize>>> {
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

    pub(super) fn can_cross_next_nodes(&self, frontier: usize, next: &[usize]) -> bool {
        if self.users[frontier]
            .iter()
            .any(|&u| self.blocks_crossing(u))
        {
            return false;
        }
        next.iter()
            .all(|&x| self.users[x].iter().all(|&u| u == frontier))
    }

    pub(super) fn propagate(&mut self, node: usize) -> Step<bool> {
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

    pub(super) fn advance_through_next_node(
        &mut self,
        node: usize,
        frontier: usize,
        nx: usize,
    ) -> Step<bool> {
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

    pub(super) fn can_move_through_elementwise(
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

    pub(super) fn base_can_move_through_elementwise(&self, moving: usize, nx: usize) -> Step<bool> {
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

    pub(super) fn maybe_swap_args(&self, node: usize, nx: usize) -> Step<Option<Swap>> {
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
    pub(super) fn dim_arg(&self, nx: usize) -> Step<(Vec<i64>, bool)> {
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
    pub(super) fn with_dims(&self, nx: usize, dims: &[i64]) -> Vec<i64> {
        let mut a = self.iargs[nx].clone();
        if self.has(nx, class::REDUCTION) {
            a.truncate(1);
            a.extend_from_slice(dims);
        } else {
            a[0] = dims[0];
        }
        a
    }

    pub(super) fn set_dims_swap(
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

    pub(super) fn maybe_swap_permute_args(&self, node: usize, nx: usize) -> Step<Option<Swap>> {
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

    pub(super) fn maybe_swap_view_args_down(&self, node: usize, nx: usize) -> Step<Option<Swap>> {
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

    pub(super) fn maybe_swap_view_args_up(&self, node: usize, nx: usize) -> Step<Option<Swap>> {
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

    pub(super) fn maybe_swap_slice_view_args_up(
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
