//! Integer port of the shape math in `executorch/backends/transforms/dim_maps.py` (`ViewMap`,
//! `PermuteMap`) that the view/permute propagation rules use.
//!
//! Same algorithm, same iteration orders (the union-find roots decide the order of mapped dims,
//! so they are reproduced exactly), same outcomes: where dim_maps returns `None` these return
//! `Ok(None)`, where it raises they return `Err`. Only concrete (integer) dims are modelled;
//! symbolic dims are the caller's to decline. Products are checked: Python has big integers,
//! an overflow here is [`DimError::Overflow`] rather than a wrong answer.

use std::collections::HashMap;
use std::fmt;

/// Where dim_maps raises, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DimError {
    /// dim_maps fails an `assert` (a dim outside the rank, several -1 dims in a view shape, a
    /// query that needs groups on an invalid map).
    Assert(&'static str),
    /// `normalize_view_shape` divides by a known numel of zero (ZeroDivisionError).
    ZeroDivision,
    /// `PermuteMap` of dims that are not a permutation (ValueError).
    NotAPermutation,
    /// A product does not fit in i64 (Python would carry on with a big integer).
    Overflow,
}

impl fmt::Display for DimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimError::Assert(what) => write!(f, "dim_maps assertion: {what}"),
            DimError::ZeroDivision => write!(f, "view shape infers a dim from a zero numel"),
            DimError::NotAPermutation => write!(f, "permute dims are not a permutation"),
            DimError::Overflow => write!(f, "shape product overflows int64"),
        }
    }
}

impl std::error::Error for DimError {}

pub type DimResult<T> = Result<Option<T>, DimError>;

fn normalize_dim(dim: i64, rank: usize) -> Result<usize, DimError> {
    let rank = rank as i64;
    let normalized = if dim >= 0 { dim } else { dim + rank };
    if (0..rank).contains(&normalized) {
        Ok(normalized as usize)
    } else {
        Err(DimError::Assert("invalid dim for rank"))
    }
}

fn normalize_dims(dims: &[i64], rank: usize) -> Result<Vec<usize>, DimError> {
    dims.iter().map(|&d| normalize_dim(d, rank)).collect()
}

fn is_permutation(dims: &[usize], rank: usize) -> bool {
    let mut sorted = dims.to_vec();
    sorted.sort_unstable();
    sorted.len() == rank && sorted.iter().enumerate().all(|(i, &d)| i == d)
}

fn normalize_permutation(dims: &[i64], rank: usize) -> Option<Vec<usize>> {
    if dims.len() != rank {
        return None;
    }
    let normalized = normalize_dims(dims, rank).ok()?;
    is_permutation(&normalized, rank).then_some(normalized)
}

/// Insert the axes `dims` misses, which must all be singletons, before the first larger axis.
fn extend_permutation_with_singletons(dims: &[usize], shape: &[i64]) -> Option<Vec<usize>> {
    let rank = shape.len();
    if dims.iter().any(|&d| d >= rank) {
        return None;
    }
    let mut extended = dims.to_vec();
    let mut seen = vec![false; rank];
    for &d in dims {
        if seen[d] {
            return None;
        }
        seen[d] = true;
    }
    let missing: Vec<usize> = (0..rank).filter(|&d| !seen[d]).collect();
    if missing.iter().any(|&d| shape[d] != 1) {
        return None;
    }
    for &dim in missing.iter().rev() {
        let at = extended
            .iter()
            .position(|&e| e > dim)
            .unwrap_or(extended.len());
        extended.insert(at, dim);
    }
    is_permutation(&extended, rank).then_some(extended)
}

fn numel(dims: impl IntoIterator<Item = i64>) -> Result<i64, DimError> {
    dims.into_iter()
        .try_fold(1i64, |acc, d| acc.checked_mul(d))
        .ok_or(DimError::Overflow)
}

/// Python's `//`.
fn floor_div(a: i64, b: i64) -> Result<i64, DimError> {
    if b == 0 {
        return Err(DimError::ZeroDivision);
    }
    let q = a.checked_div(b).ok_or(DimError::Overflow)?;
    Ok(if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

/// `normalize_view_shape`: resolve the one -1 dim of a view shape.
pub fn normalize_view_shape(source: &[i64], target: &[i64]) -> Result<Vec<i64>, DimError> {
    let inferred: Vec<usize> = (0..target.len()).filter(|&i| target[i] == -1).collect();
    let mut shape = target.to_vec();
    match inferred.as_slice() {
        [] => {}
        &[at] => {
            let source_numel = numel(source.iter().copied())?;
            let known = numel((0..target.len()).filter(|&i| i != at).map(|i| target[i]))?;
            shape[at] = if known == 1 {
                source_numel
            } else {
                floor_div(source_numel, known)?
            };
        }
        _ => return Err(DimError::Assert("invalid view shape (several -1 dims)")),
    }
    Ok(shape)
}

/// Prime factors (with multiplicity, ascending) of each axis, as (prime, axis); `None` if an
/// axis is below 1. Singleton axes contribute nothing.
fn factor_shape(shape: &[i64]) -> Option<Vec<(i64, usize)>> {
    let mut factors = Vec::new();
    for (axis, &dim) in shape.iter().enumerate() {
        if dim == 1 {
            continue;
        }
        if dim < 1 {
            return None;
        }
        let mut rest = dim;
        let mut divisor = 2i64;
        while divisor.checked_mul(divisor).is_some_and(|sq| sq <= rest) {
            while rest % divisor == 0 {
                factors.push((divisor, axis));
                rest /= divisor;
            }
            divisor += if divisor == 2 { 1 } else { 2 };
        }
        if rest > 1 {
            factors.push((rest, axis));
        }
    }
    Some(factors)
}

/// dim_maps' `_UnionFind`: the root of a union is the first argument's root.
struct UnionFind {
    parents: Vec<usize>,
}

impl UnionFind {
    fn new(size: usize) -> Self {
        Self {
            parents: (0..size).collect(),
        }
    }

    fn find(&mut self, item: usize) -> usize {
        let mut root = item;
        while self.parents[root] != root {
            root = self.parents[root];
        }
        let mut at = item;
        while self.parents[at] != root {
            let next = self.parents[at];
            self.parents[at] = root;
            at = next;
        }
        root
    }

    fn union(&mut self, first: usize, second: usize) {
        let (a, b) = (self.find(first), self.find(second));
        if a != b {
            self.parents[b] = a;
        }
    }

    fn union_sharing(&mut self, axes: impl IntoIterator<Item = usize>) {
        let mut first_at: HashMap<usize, usize> = HashMap::new();
        for (position, axis) in axes.into_iter().enumerate() {
            match first_at.get(&axis) {
                Some(&first) => self.union(first, position),
                None => {
                    first_at.insert(axis, position);
                }
            }
        }
    }
}

/// `_ViewGroups`; group ids are union-find roots (factor positions), as in dim_maps.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Groups {
    source_axis_to_groups: Vec<Vec<usize>>,
    target_axis_to_groups: Vec<Vec<usize>>,
    group_to_source_axes: Vec<Vec<usize>>,
    group_to_target_axes: Vec<Vec<usize>>,
}

fn sorted_dedup(mut v: Vec<usize>) -> Vec<usize> {
    v.sort_unstable();
    v.dedup();
    v
}

fn build_groups(source: &[i64], target: &[i64]) -> Option<Groups> {
    let source_factors = factor_shape(source)?;
    let target_factors = factor_shape(target)?;
    let mut s_keys: Vec<i64> = source_factors.iter().map(|f| f.0).collect();
    let mut t_keys: Vec<i64> = target_factors.iter().map(|f| f.0).collect();
    s_keys.sort_unstable();
    t_keys.sort_unstable();
    if s_keys != t_keys {
        return None;
    }
    // `_find_permutation`: the k-th occurrence of a prime in X goes to its k-th in Y.
    let mut positions: HashMap<i64, std::collections::VecDeque<usize>> = HashMap::new();
    for (i, f) in target_factors.iter().enumerate() {
        positions.entry(f.0).or_default().push_back(i);
    }
    let mut permutation = Vec::with_capacity(source_factors.len());
    for f in &source_factors {
        permutation.push(positions.get_mut(&f.0)?.pop_front()?);
    }
    let n = source_factors.len();
    let mut uf = UnionFind::new(n);
    uf.union_sharing(source_factors.iter().map(|f| f.1));
    uf.union_sharing(permutation.iter().map(|&p| target_factors[p].1));
    for first in 0..n {
        for second in first + 1..n {
            if permutation[first] > permutation[second] {
                uf.union(first, second);
            }
        }
    }
    let mut g = Groups {
        source_axis_to_groups: vec![Vec::new(); source.len()],
        target_axis_to_groups: vec![Vec::new(); target.len()],
        group_to_source_axes: vec![Vec::new(); n],
        group_to_target_axes: vec![Vec::new(); n],
    };
    for (position, factor) in source_factors.iter().enumerate() {
        let group = uf.find(position);
        let target_axis = target_factors[permutation[position]].1;
        g.source_axis_to_groups[factor.1].push(group);
        g.target_axis_to_groups[target_axis].push(group);
        g.group_to_source_axes[group].push(factor.1);
        g.group_to_target_axes[group].push(target_axis);
    }
    for list in [
        &mut g.source_axis_to_groups,
        &mut g.target_axis_to_groups,
        &mut g.group_to_source_axes,
        &mut g.group_to_target_axes,
    ] {
        for v in list.iter_mut() {
            *v = sorted_dedup(std::mem::take(v));
        }
    }
    Some(g)
}

fn dedupe(items: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

fn map_through(
    dims: &[usize],
    axis_to_groups: &[Vec<usize>],
    group_to_axes: &[Vec<usize>],
) -> Vec<usize> {
    dedupe(
        dims.iter()
            .flat_map(|&d| axis_to_groups[d].iter())
            .flat_map(|&g| group_to_axes[g].iter().copied()),
    )
}

/// `_is_valid_reduction_or_singleton` (and `_is_valid_reduction` with `require_grouped`).
fn covers_whole_groups(
    dims: &[usize],
    axis_to_groups: &[Vec<usize>],
    require_grouped: bool,
) -> bool {
    if dims.is_empty() {
        return false;
    }
    let selected = |axis: usize| dims.contains(&axis);
    if require_grouped && dims.iter().any(|&d| axis_to_groups[d].is_empty()) {
        return false;
    }
    let selected_groups: Vec<usize> = (0..axis_to_groups.len())
        .filter(|&a| selected(a))
        .flat_map(|a| axis_to_groups[a].iter().copied())
        .collect();
    (0..axis_to_groups.len()).all(|a| {
        selected(a)
            || !axis_to_groups[a]
                .iter()
                .any(|g| selected_groups.contains(g))
    })
}

fn is_contiguous_nonempty(dims: &[usize]) -> bool {
    let d = sorted_dedup(dims.to_vec());
    !d.is_empty() && d.last().copied() == Some(d[0] + d.len() - 1)
}

/// The next grouped axis of `permutation` from `index` and its group, skipping singletons.
fn next_group(
    perm: &[usize],
    axis_to_groups: &[Vec<usize>],
    mut index: usize,
) -> Result<(usize, Option<usize>), DimError> {
    while index < perm.len() {
        match axis_to_groups[perm[index]].as_slice() {
            [] => index += 1,
            &[g] => return Ok((index, Some(g))),
            _ => return Err(DimError::Assert("axis in several groups")),
        }
    }
    Ok((index, None))
}

fn consume_group(
    perm: &[usize],
    axis_to_groups: &[Vec<usize>],
    mut index: usize,
    group: usize,
) -> Result<(usize, Vec<usize>), DimError> {
    let mut axes = Vec::new();
    while index < perm.len() {
        let axis = perm[index];
        match axis_to_groups[axis].as_slice() {
            [] => {
                index += 1;
                continue;
            }
            &[g] if g != group => break,
            &[_] => axes.push(axis),
            _ => return Err(DimError::Assert("axis in several groups")),
        }
        index += 1;
    }
    Ok((index, axes))
}

fn is_sorted(v: &[usize]) -> bool {
    v.windows(2).all(|w| w[0] <= w[1])
}

fn matching_permuted_group_blocks(
    source_perm: &[usize],
    target_perm: &[usize],
    s_groups: &[Vec<usize>],
    t_groups: &[Vec<usize>],
) -> Result<bool, DimError> {
    let mut closed: Vec<usize> = Vec::new();
    let (mut si, mut ti) = (0usize, 0usize);
    loop {
        let (s_next, s_group) = next_group(source_perm, s_groups, si)?;
        let (t_next, t_group) = next_group(target_perm, t_groups, ti)?;
        let (sg, tg) = match (s_group, t_group) {
            (Some(s), Some(t)) => (s, t),
            (s, t) => return Ok(s.is_none() && t.is_none()),
        };
        if sg != tg || closed.contains(&sg) {
            return Ok(false);
        }
        let (s_after, s_axes) = consume_group(source_perm, s_groups, s_next, sg)?;
        let (t_after, t_axes) = consume_group(target_perm, t_groups, t_next, tg)?;
        if !is_sorted(&s_axes) || !is_sorted(&t_axes) {
            return Ok(false);
        }
        closed.push(sg);
        si = s_after;
        ti = t_after;
    }
}

/// `ViewMap.from_shapes` over concrete dims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewMap {
    pub source_shape: Vec<i64>,
    pub target_shape: Vec<i64>,
    groups: Option<Groups>,
}

/// (new view shape, new reduction dims) of `map_reduction_after_view`.
pub type ReductionAfterView = (Vec<i64>, Vec<usize>);
/// (new reduction dims, output view shape) of `map_reduction_before_view`.
pub type ReductionBeforeView = (Vec<usize>, Vec<i64>);
/// (new view shape, new slice dim, new start, new end) of `remap_unit_slice`.
pub type UnitSlice = (Vec<i64>, usize, i64, i64);

impl ViewMap {
    /// Raises where `normalize_view_shape` does (several -1 dims, zero known numel).
    pub fn from_shapes(source: &[i64], target: &[i64]) -> Result<Self, DimError> {
        let target_shape = normalize_view_shape(source, target)?;
        let groups = build_groups(source, &target_shape);
        Ok(Self {
            source_shape: source.to_vec(),
            target_shape,
            groups,
        })
    }

    pub fn is_valid_map(&self) -> bool {
        self.groups.is_some()
    }

    pub fn source_rank(&self) -> usize {
        self.source_shape.len()
    }

    pub fn target_rank(&self) -> usize {
        self.target_shape.len()
    }

    fn valid_groups(&self) -> Result<&Groups, DimError> {
        self.groups
            .as_ref()
            .ok_or(DimError::Assert("query on an invalid view map"))
    }

    /// `source_to_target_axes`, singletons paired as dim_maps pairs them.
    pub fn source_to_target_axes(&self) -> Result<Vec<Vec<usize>>, DimError> {
        let g = self.valid_groups()?;
        let mut s2t: Vec<Vec<usize>> = (0..self.source_rank())
            .map(|a| map_through(&[a], &g.source_axis_to_groups, &g.group_to_target_axes))
            .collect();
        let mapped_targets: Vec<usize> = s2t.iter().flatten().copied().collect();
        let source_singletons: Vec<usize> = (0..self.source_rank())
            .filter(|&a| s2t[a].is_empty() && self.source_shape[a] == 1)
            .collect();
        let target_singletons: Vec<usize> = (0..self.target_rank())
            .filter(|&a| !mapped_targets.contains(&a) && self.target_shape[a] == 1)
            .collect();
        let (ns, nt) = (source_singletons.len(), target_singletons.len());
        let pairs: Vec<(usize, usize)> = if ns == nt || (ns != 1 && nt != 1) {
            source_singletons
                .iter()
                .copied()
                .zip(target_singletons.iter().copied())
                .collect()
        } else if ns == 1 {
            target_singletons
                .iter()
                .map(|&t| (source_singletons[0], t))
                .collect()
        } else {
            source_singletons
                .iter()
                .map(|&s| (s, target_singletons[0]))
                .collect()
        };
        for (s, t) in pairs {
            s2t[s].push(t);
        }
        Ok(s2t)
    }

    fn source_axes_for_target_axis(target_axis: usize, s2t: &[Vec<usize>]) -> Vec<usize> {
        (0..s2t.len())
            .filter(|&s| s2t[s].contains(&target_axis))
            .collect()
    }

    pub fn map_source_dims_to_target_axes(&self, source_dims: &[i64]) -> DimResult<Vec<usize>> {
        let Ok(dims) = normalize_dims(source_dims, self.source_rank()) else {
            return Ok(None);
        };
        let s2t = self.source_to_target_axes()?;
        Ok(Some(dedupe(
            dims.iter().flat_map(|&d| s2t[d].iter().copied()),
        )))
    }

    /// `map_dim`: source reduction dims to target reduction dims.
    pub fn map_dim(&self, source_dims: &[i64]) -> DimResult<Vec<usize>> {
        let Ok(dims) = normalize_dims(source_dims, self.source_rank()) else {
            return Ok(None);
        };
        let g = self.valid_groups()?;
        if !covers_whole_groups(&dims, &g.source_axis_to_groups, false) {
            return Ok(None);
        }
        let s2t = self.source_to_target_axes()?;
        let target_dims = sorted_dedup(dims.iter().flat_map(|&d| s2t[d].iter().copied()).collect());
        if target_dims.is_empty()
            || target_dims.iter().any(|&t| {
                Self::source_axes_for_target_axis(t, &s2t)
                    .iter()
                    .any(|s| !dims.contains(s))
            })
        {
            return Ok(None);
        }
        if !covers_whole_groups(&target_dims, &g.target_axis_to_groups, false) {
            return Ok(None);
        }
        Ok(Some(target_dims))
    }

    /// `map_dim_inverse`: target reduction dims to source reduction dims (dedupe order).
    pub fn map_dim_inverse(&self, target_dims: &[i64]) -> DimResult<Vec<usize>> {
        let Ok(dims) = normalize_dims(target_dims, self.target_rank()) else {
            return Ok(None);
        };
        let g = self.valid_groups()?;
        if !covers_whole_groups(&dims, &g.target_axis_to_groups, true) {
            return Ok(None);
        }
        let source_dims = map_through(&dims, &g.target_axis_to_groups, &g.group_to_source_axes);
        if !covers_whole_groups(&source_dims, &g.source_axis_to_groups, true) {
            return Ok(None);
        }
        Ok(Some(source_dims))
    }

    pub fn map_reduction_after_view(
        &self,
        source_shape: &[i64],
        source_dims: &[i64],
    ) -> DimResult<ReductionAfterView> {
        let Some(target_shape) = self.remap_target_shape(source_shape)? else {
            return Ok(None);
        };
        match self.map_dim(source_dims)? {
            Some(dims) if is_contiguous_nonempty(&dims) => Ok(Some((target_shape, dims))),
            _ => Ok(None),
        }
    }

    pub fn map_reduction_before_view(&self, target_dims: &[i64]) -> DimResult<ReductionBeforeView> {
        let source_dims = match self.map_dim_inverse(target_dims)? {
            Some(d) if is_contiguous_nonempty(&d) => d,
            _ => return Ok(None),
        };
        let Ok(normalized) = normalize_dims(target_dims, self.target_rank()) else {
            return Ok(None);
        };
        let mut shape = self.target_shape.clone();
        for d in normalized {
            shape[d] = 1;
        }
        Ok(Some((source_dims, shape)))
    }

    pub fn map_permutation(&self, source_permutation: &[i64]) -> DimResult<Vec<usize>> {
        let Some(source_perm) = normalize_permutation(source_permutation, self.source_rank())
        else {
            return Ok(None);
        };
        let g = self.valid_groups()?;
        let mapped = map_through(
            &source_perm,
            &g.source_axis_to_groups,
            &g.group_to_target_axes,
        );
        let Some(target_perm) = extend_permutation_with_singletons(&mapped, &self.target_shape)
        else {
            return Ok(None);
        };
        let ok = matching_permuted_group_blocks(
            &source_perm,
            &target_perm,
            &g.source_axis_to_groups,
            &g.target_axis_to_groups,
        )?;
        Ok(ok.then_some(target_perm))
    }

    pub fn map_permutation_inverse(&self, target_permutation: &[i64]) -> DimResult<Vec<usize>> {
        let Some(target_perm) = normalize_permutation(target_permutation, self.target_rank())
        else {
            return Ok(None);
        };
        let g = self.valid_groups()?;
        let mapped = map_through(
            &target_perm,
            &g.target_axis_to_groups,
            &g.group_to_source_axes,
        );
        let Some(source_perm) = extend_permutation_with_singletons(&mapped, &self.source_shape)
        else {
            return Ok(None);
        };
        let ok = matching_permuted_group_blocks(
            &source_perm,
            &target_perm,
            &g.source_axis_to_groups,
            &g.target_axis_to_groups,
        )?;
        Ok(ok.then_some(source_perm))
    }

    /// `remap_target_shape`: the view's target shape when its input becomes `source_shape`.
    pub fn remap_target_shape(&self, source_shape: &[i64]) -> DimResult<Vec<i64>> {
        if !self.is_valid_map() || source_shape.len() != self.source_rank() {
            return Ok(None);
        }
        let s2t = self.source_to_target_axes()?;
        let t2s: Vec<Vec<usize>> = (0..self.target_rank())
            .map(|t| Self::source_axes_for_target_axis(t, &s2t))
            .collect();
        let mut target = vec![1i64; self.target_rank()];
        for (source_axis, target_axes) in s2t.iter().enumerate() {
            let Some(updates) =
                self.target_axis_updates(source_shape, source_axis, target_axes, &t2s)?
            else {
                return Ok(None);
            };
            for (axis, dim) in updates {
                target[axis] = dim;
            }
        }
        if numel(source_shape.iter().copied())? != numel(target.iter().copied())?
            || target.contains(&0)
        {
            return Ok(None);
        }
        // `_preserves_source_axis_order` (over the new source shape's non-singleton axes).
        let order: Vec<usize> = (0..s2t.len())
            .filter(|&a| source_shape[a] != 1)
            .flat_map(|a| s2t[a].iter().copied())
            .collect();
        Ok(is_sorted(&order).then_some(target))
    }

    fn target_axis_updates(
        &self,
        source_shape: &[i64],
        source_axis: usize,
        target_axes: &[usize],
        t2s: &[Vec<usize>],
    ) -> DimResult<Vec<(usize, i64)>> {
        match target_axes {
            [] => Ok(Some(Vec::new())),
            &[t] => {
                let sources = &t2s[t];
                if sources[0] != source_axis {
                    return Ok(Some(Vec::new()));
                }
                Ok(Some(vec![(
                    t,
                    numel(sources.iter().map(|&s| source_shape[s]))?,
                )]))
            }
            _ => {
                if target_axes.iter().any(|&t| t2s[t].len() > 1) {
                    return Ok(Some(Vec::new()));
                }
                let dims: Vec<(usize, i64)> = target_axes
                    .iter()
                    .map(|&t| (t, self.target_shape[t]))
                    .collect();
                // dim_maps' order of tests matters: a product of 1 can also equal the old dim.
                if source_shape[source_axis] == self.source_shape[source_axis] {
                    return Ok(Some(dims));
                }
                let product = numel(dims.iter().map(|d| d.1))?;
                if product == 1 {
                    Ok(Some(vec![(target_axes[0], source_shape[source_axis])]))
                } else if product == self.source_shape[source_axis] {
                    Ok(Some(dims))
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// `remap_unit_slice` (integer start/end/step only).
    pub fn remap_unit_slice(
        &self,
        producer_shape: &[i64],
        slice_dim: i64,
        start: i64,
        end: i64,
        step: i64,
    ) -> DimResult<UnitSlice> {
        if producer_shape.len() != self.source_rank()
            || step != 1
            || (end as i128) - (start as i128) != 1
        {
            return Ok(None);
        }
        let Ok(slice_dim) = normalize_dim(slice_dim, self.source_rank()) else {
            return Ok(None);
        };
        let s2t = self.source_to_target_axes()?;
        if !s2t[slice_dim].is_empty() {
            return Ok(None);
        }
        let prev: Vec<usize> = s2t[..slice_dim].iter().flatten().copied().collect();
        if prev.is_empty() {
            return Ok(None);
        }
        let next: Vec<usize> = s2t[slice_dim + 1..].iter().flatten().copied().collect();
        let fold_axis = s2t[slice_dim + 1..]
            .iter()
            .filter_map(|axes| axes.first().copied())
            .find(|&t| prev.iter().all(|&p| p <= t) && next.iter().all(|&n| t <= n));
        let Some(fold_axis) = fold_axis else {
            return Ok(None);
        };
        let mut shape = self.target_shape.clone();
        let chunk = shape[fold_axis];
        let mul = |a: i64, b: i64| a.checked_mul(b).ok_or(DimError::Overflow);
        shape[fold_axis] = mul(chunk, producer_shape[slice_dim])?;
        Ok(Some((
            shape,
            fold_axis,
            mul(start, chunk)?,
            mul(end, chunk)?,
        )))
    }
}

/// `PermuteMap` over normalized permute dims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermuteMap {
    pub permute_dims: Vec<usize>,
}

impl PermuteMap {
    pub fn new(permute_dims: &[i64]) -> Result<Self, DimError> {
        normalize_permutation(permute_dims, permute_dims.len())
            .map(|permute_dims| Self { permute_dims })
            .ok_or(DimError::NotAPermutation)
    }

    /// `x.op(dims).permute(P) == x.permute(P).op(mapped)`.
    pub fn map_dims(&self, dims: &[i64]) -> Result<Vec<usize>, DimError> {
        let dims = normalize_dims(dims, self.permute_dims.len())?;
        let mut inverse = vec![0usize; self.permute_dims.len()];
        for (target, &source) in self.permute_dims.iter().enumerate() {
            inverse[source] = target;
        }
        Ok(dims.iter().map(|&d| inverse[d]).collect())
    }

    /// `x.permute(P).op(dims) == x.op(mapped).permute(P)`.
    pub fn map_dims_inverse(&self, dims: &[i64]) -> Result<Vec<usize>, DimError> {
        let dims = normalize_dims(dims, self.permute_dims.len())?;
        Ok(dims.iter().map(|&d| self.permute_dims[d]).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(s: &[i64], t: &[i64]) -> ViewMap {
        ViewMap::from_shapes(s, t).unwrap()
    }

    #[test]
    fn docstring_example_groups_and_reduction_maps() {
        // dim_maps' own example: [4, 3, 10] -> [2, 2, 1, 5, 3, 2].
        let m = vm(&[4, 3, 10], &[2, 2, 1, 5, 3, 2]);
        assert!(m.is_valid_map());
        assert_eq!(m.map_dim(&[0]).unwrap(), Some(vec![0, 1]));
        assert_eq!(m.map_dim(&[1, 2]).unwrap(), Some(vec![3, 4, 5]));
        assert_eq!(m.map_dim(&[1]).unwrap(), None);
        assert_eq!(m.map_dim_inverse(&[0, 1]).unwrap(), Some(vec![0]));
        assert_eq!(
            m.map_permutation(&[1, 2, 0]).unwrap(),
            Some(vec![2, 3, 4, 5, 0, 1])
        );
        assert_eq!(m.map_permutation(&[2, 0, 1]).unwrap(), None);
        assert_eq!(m.map_permutation(&[0, 2, 1]).unwrap(), None);
    }

    #[test]
    fn inferred_dim_and_its_errors() {
        assert_eq!(normalize_view_shape(&[2, 6], &[3, -1]).unwrap(), vec![3, 4]);
        assert_eq!(
            normalize_view_shape(&[2, 6], &[1, -1]).unwrap(),
            vec![1, 12]
        );
        assert_eq!(normalize_view_shape(&[7], &[2, -1]).unwrap(), vec![2, 3]); // floor, like //
        assert!(matches!(
            normalize_view_shape(&[4], &[-1, -1]),
            Err(DimError::Assert(_))
        ));
        assert_eq!(
            normalize_view_shape(&[4], &[0, -1]),
            Err(DimError::ZeroDivision)
        );
        assert_eq!(floor_div(-7, 2), Ok(-4));
        assert_eq!(floor_div(7, -2), Ok(-4));
    }

    #[test]
    fn invalid_map_returns_none_or_raises_like_dim_maps() {
        let m = vm(&[4, 3], &[5, 2]);
        assert!(!m.is_valid_map());
        assert_eq!(m.remap_target_shape(&[4, 3]).unwrap(), None);
        // A bad dim is checked before the groups, a good one hits the assertion.
        assert_eq!(m.map_dim(&[7]).unwrap(), None);
        assert!(m.map_dim(&[0]).is_err());
        assert!(m.map_permutation(&[1, 0]).is_err());
        assert_eq!(m.map_permutation(&[0, 0]).unwrap(), None);
        assert!(!vm(&[0, 2], &[2, 0]).is_valid_map());
    }

    #[test]
    fn remap_target_shape_follows_the_new_source() {
        // [2, 3, 4] -> [6, 4]: the merged axis takes the new product.
        let m = vm(&[2, 3, 4], &[6, 4]);
        assert_eq!(m.remap_target_shape(&[2, 3, 8]).unwrap(), Some(vec![6, 8]));
        assert_eq!(m.remap_target_shape(&[5, 3, 4]).unwrap(), Some(vec![15, 4]));
        assert_eq!(m.remap_target_shape(&[2, 3]).unwrap(), None);
        // A split axis keeps its split when unchanged, and gives up when it changes.
        let split = vm(&[6, 4], &[2, 3, 4]);
        assert_eq!(
            split.remap_target_shape(&[6, 5]).unwrap(),
            Some(vec![2, 3, 5])
        );
        assert_eq!(split.remap_target_shape(&[7, 4]).unwrap(), None);
    }

    #[test]
    fn singleton_axes_pair_up() {
        let m = vm(&[1, 4], &[4, 1, 1]);
        assert_eq!(
            m.source_to_target_axes().unwrap(),
            vec![vec![1, 2], vec![0]]
        );
        let unsqueeze = vm(&[3, 4], &[3, 1, 4]);
        assert_eq!(
            unsqueeze.source_to_target_axes().unwrap(),
            vec![vec![0], vec![2]]
        );
    }

    #[test]
    fn unit_slice_folds_into_the_next_axis() {
        // slice(x[2, 5, 3], dim 1, 2..3) -> [2, 1, 3] viewed as [2, 3].
        let m = vm(&[2, 1, 3], &[2, 3]);
        assert_eq!(
            m.remap_unit_slice(&[2, 5, 3], 1, 2, 3, 1).unwrap(),
            Some((vec![2, 15], 1, 6, 9))
        );
        assert_eq!(m.remap_unit_slice(&[2, 5, 3], 1, 2, 4, 1).unwrap(), None);
    }

    #[test]
    fn permute_map_both_ways() {
        let p = PermuteMap::new(&[0, 2, 0]).err();
        assert_eq!(p, Some(DimError::NotAPermutation));
        let p = PermuteMap::new(&[0, 2, 1, 4]).err();
        assert_eq!(p, Some(DimError::NotAPermutation));
        let p = PermuteMap::new(&[2, 0, -2]).unwrap();
        assert_eq!(p.permute_dims, vec![2, 0, 1]);
        assert_eq!(p.map_dims(&[0, -1]).unwrap(), vec![1, 0]);
        assert_eq!(p.map_dims_inverse(&[0, 2]).unwrap(), vec![2, 1]);
        assert!(p.map_dims(&[3]).is_err());
    }

    #[test]
    fn overflow_is_an_error_not_a_wrong_answer() {
        let m = vm(&[i64::MAX, 2], &[i64::MAX, 2]);
        assert_eq!(
            m.remap_target_shape(&[i64::MAX, 2]),
            Err(DimError::Overflow)
        );
    }
}
