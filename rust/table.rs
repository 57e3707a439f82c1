//! The compact node table: a borrowed, validated view over the columnar arrays that
//! `arm_accel.native.table.export_table` builds from an fx graph.
//!
//! Node ids are positions in graph order. Inputs and users are CSR (`*_ptr` offsets of length
//! N + 1 into a flat index array). Tensor shapes are CSR too, one row per node, of length
//! `rank` (rank -1 means the node has no tensor value and an empty row).

use std::fmt;

/// fx node op kinds, in the order `arm_accel.native.table.OP_KINDS` lists them.
pub mod op {
    named_consts! { u8;
        PLACEHOLDER = 0;
        CALL_FUNCTION = 1;
        GET_ATTR = 2;
        OUTPUT = 3;
        CALL_MODULE = 4;
        CALL_METHOD = 5;
    }
    pub const COUNT: u8 = NAMED.len() as u8;
}

/// Per-node flag bits (`flags` column).
pub mod flag {
    named_consts! { bits u32;
        /// Placeholder or get_attr that is a parameter, buffer or lifted constant.
        CONSTANT = 1 << 0;
        /// `meta["val"]` carries a symbolic dim; its dims are stored as -1.
        SYMBOLIC = 1 << 1;
        /// The tensor is marked as the TOSA INT48 special dtype.
        INT48 = 1 << 2;
        /// `meta["val"]` is not a single tensor (tuple, scalar, missing).
        NON_TENSOR = 1 << 3;
        /// The node's args hold something the table cannot encode (see `iargs`).
        OPAQUE_ARGS = 1 << 4;
        /// A user of this node is the graph output.
        FEEDS_OUTPUT = 1 << 5;
    }
}

/// Per-target class bits (`target_class` column, indexed by target code).
pub mod class {
    named_consts! { bits u32;
        PERMUTE = 1 << 0;
        VIEW = 1 << 1;
        /// Has the `pointwise` op tag.
        ELEMENTWISE = 1 << 2;
        /// `_clone_dim_order`, `_to_dim_order_copy`: layout-only copies.
        TRANSPARENT = 1 << 3;
        REDUCTION = 1 << 4;
        SLICE = 1 << 5;
        CAT = 1 << 6;
        TOSA_TABLE = 1 << 7;
        TOSA_RESCALE = 1 << 8;
        TOSA_SCATTER = 1 << 9;
        /// Never fused by the duplicate-user / identical-input passes.
        EXCLUDED = 1 << 10;
    }
}

/// A table that failed validation: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableError {
    pub field: &'static str,
    pub message: String,
}

impl TableError {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node table field '{}': {}", self.field, self.message)
    }
}

impl std::error::Error for TableError {}

/// Borrowed columns of one exported graph. Build it, then call [`NodeTable::validate`] before
/// any kernel reads it; kernels rely on the invariants checked there.
#[derive(Debug, Clone, Copy)]
pub struct NodeTable<'a> {
    pub op: &'a [u8],
    pub target: &'a [i32],
    pub target_class: &'a [u32],
    pub in_ptr: &'a [i64],
    pub in_idx: &'a [i64],
    pub user_ptr: &'a [i64],
    pub user_idx: &'a [i64],
    pub rank: &'a [i32],
    pub shape_ptr: &'a [i64],
    pub shape: &'a [i64],
    pub dtype: &'a [i32],
    pub iarg_ptr: &'a [i64],
    pub iarg: &'a [i64],
    pub flags: &'a [u32],
}

/// Counts the Rust side reports back, for round-trip checks against fx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableCounts {
    pub nodes: usize,
    pub input_edges: usize,
    pub user_edges: usize,
    pub constants: usize,
    pub symbolic: usize,
    pub int48: usize,
    pub non_tensor: usize,
    pub opaque_args: usize,
    pub feeds_output: usize,
}

fn check_len(field: &'static str, got: usize, want: usize) -> Result<(), TableError> {
    if got != want {
        return Err(TableError::new(
            field,
            format!("length {got}, expected {want}"),
        ));
    }
    Ok(())
}

/// Checks a CSR offset array: length n + 1, starts at 0, never decreases, ends at `flat_len`.
fn check_ptr(
    field: &'static str,
    ptr: &[i64],
    n: usize,
    flat_field: &'static str,
    flat_len: usize,
) -> Result<(), TableError> {
    check_len(field, ptr.len(), n + 1)?;
    if ptr[0] != 0 {
        return Err(TableError::new(
            field,
            format!("starts at {}, expected 0", ptr[0]),
        ));
    }
    for i in 0..n {
        if ptr[i + 1] < ptr[i] {
            return Err(TableError::new(
                field,
                format!("decreases at node {i} ({} then {})", ptr[i], ptr[i + 1]),
            ));
        }
    }
    if ptr[n] as u64 != flat_len as u64 {
        return Err(TableError::new(
            flat_field,
            format!("length {flat_len}, but {field} ends at {}", ptr[n]),
        ));
    }
    Ok(())
}

impl<'a> NodeTable<'a> {
    pub fn len(&self) -> usize {
        self.op.len()
    }

    pub fn is_empty(&self) -> bool {
        self.op.is_empty()
    }

    /// Checks every invariant the kernels rely on, in O(N + E log E). On success every
    /// index is in range, inputs precede their node and users follow it (so the graph is
    /// acyclic), and the user lists are exactly the transpose of the input lists.
    pub fn validate(&self) -> Result<(), TableError> {
        let n = self.op.len();
        if n as u64 >= i64::MAX as u64 / 2 {
            return Err(TableError::new("op", "too many nodes"));
        }
        check_len("target", self.target.len(), n)?;
        check_len("rank", self.rank.len(), n)?;
        check_len("dtype", self.dtype.len(), n)?;
        check_len("flags", self.flags.len(), n)?;
        check_ptr("in_ptr", self.in_ptr, n, "in_idx", self.in_idx.len())?;
        check_ptr(
            "user_ptr",
            self.user_ptr,
            n,
            "user_idx",
            self.user_idx.len(),
        )?;
        check_ptr("shape_ptr", self.shape_ptr, n, "shape", self.shape.len())?;
        check_ptr("iarg_ptr", self.iarg_ptr, n, "iarg", self.iarg.len())?;

        let n_targets = self.target_class.len() as i64;
        for (i, &c) in self.target_class.iter().enumerate() {
            if c & !class::ALL != 0 {
                return Err(TableError::new(
                    "target_class",
                    format!("unknown class bits {c:#x} for target code {i}"),
                ));
            }
        }
        for i in 0..n {
            if self.op[i] >= op::COUNT {
                return Err(TableError::new(
                    "op",
                    format!("node {i} has unknown op kind {}", self.op[i]),
                ));
            }
            let t = self.target[i];
            if t < -1 || t as i64 >= n_targets {
                return Err(TableError::new(
                    "target",
                    format!("node {i} has target code {t}, outside -1..{n_targets}"),
                ));
            }
            if self.flags[i] & !flag::ALL != 0 {
                return Err(TableError::new(
                    "flags",
                    format!("node {i} has unknown flag bits {:#x}", self.flags[i]),
                ));
            }
            self.validate_shape_row(i)?;
        }
        self.validate_edges(n)
    }

    fn validate_shape_row(&self, i: usize) -> Result<(), TableError> {
        let r = self.rank[i];
        let row = (self.shape_ptr[i + 1] - self.shape_ptr[i]) as usize;
        if r < -1 {
            return Err(TableError::new("rank", format!("node {i} has rank {r}")));
        }
        let want = if r < 0 { 0 } else { r as usize };
        if row != want {
            return Err(TableError::new(
                "rank",
                format!("node {i} has rank {r} but {row} dims in shape"),
            ));
        }
        let symbolic = self.flags[i] & flag::SYMBOLIC != 0;
        for &d in self.shape_row(i) {
            if d < -1 || (d == -1 && !symbolic) {
                return Err(TableError::new(
                    "shape",
                    format!("node {i} has dim {d} (-1 only marks symbolic dims)"),
                ));
            }
        }
        Ok(())
    }

    fn validate_edges(&self, n: usize) -> Result<(), TableError> {
        // Inputs point backwards, users forwards: this alone rules out cycles.
        for i in 0..n {
            for &j in self.inputs(i) {
                if j < 0 || j as usize >= i {
                    return Err(TableError::new(
                        "in_idx",
                        format!("node {i} has input {j}, expected 0 <= input < {i}"),
                    ));
                }
            }
            for &u in self.users(i) {
                if u as u64 >= n as u64 || u as usize <= i {
                    return Err(TableError::new(
                        "user_idx",
                        format!("node {i} has user {u}, expected {i} < user < {n}"),
                    ));
                }
            }
        }
        if self.in_idx.len() != self.user_idx.len() {
            return Err(TableError::new(
                "user_idx",
                format!(
                    "{} user edges but {} input edges",
                    self.user_idx.len(),
                    self.in_idx.len()
                ),
            ));
        }
        // Users must be the transpose of inputs, as sets (fx keeps each at most once).
        let mut want: Vec<(i64, i64)> = Vec::with_capacity(self.in_idx.len());
        for i in 0..n {
            for &j in self.inputs(i) {
                want.push((j, i as i64));
            }
        }
        let mut got: Vec<(i64, i64)> = Vec::with_capacity(self.user_idx.len());
        for i in 0..n {
            for &u in self.users(i) {
                got.push((i as i64, u));
            }
        }
        want.sort_unstable();
        got.sort_unstable();
        if let Some(w) = want.windows(2).find(|w| w[0] == w[1]) {
            return Err(TableError::new(
                "in_idx",
                format!("node {} lists input {} twice", w[0].1, w[0].0),
            ));
        }
        if let Some(w) = got.windows(2).find(|w| w[0] == w[1]) {
            return Err(TableError::new(
                "user_idx",
                format!("node {} lists user {} twice", w[0].0, w[0].1),
            ));
        }
        if let Some((a, b)) = want.iter().zip(&got).find(|(a, b)| a != b) {
            let (src, dst) = if a < b { *a } else { *b };
            return Err(TableError::new(
                "user_idx",
                format!("edge {src} -> {dst} is not in both the input and user lists"),
            ));
        }
        Ok(())
    }

    #[inline]
    pub fn inputs(&self, i: usize) -> &'a [i64] {
        &self.in_idx[self.in_ptr[i] as usize..self.in_ptr[i + 1] as usize]
    }

    #[inline]
    pub fn users(&self, i: usize) -> &'a [i64] {
        &self.user_idx[self.user_ptr[i] as usize..self.user_ptr[i + 1] as usize]
    }

    #[inline]
    pub fn shape_row(&self, i: usize) -> &'a [i64] {
        &self.shape[self.shape_ptr[i] as usize..self.shape_ptr[i + 1] as usize]
    }

    #[inline]
    pub fn iargs(&self, i: usize) -> &'a [i64] {
        &self.iarg[self.iarg_ptr[i] as usize..self.iarg_ptr[i + 1] as usize]
    }

    /// Class bits of node `i`'s target (0 for nodes without a target code).
    #[inline]
    pub fn class_of(&self, i: usize) -> u32 {
        let t = self.target[i];
        if t < 0 {
            0
        } else {
            self.target_class[t as usize]
        }
    }

    #[inline]
    pub fn has_flag(&self, i: usize, f: u32) -> bool {
        self.flags[i] & f != 0
    }

    /// Counts for round-trip checks; call on a validated table.
    pub fn counts(&self) -> TableCounts {
        let mut c = TableCounts {
            nodes: self.len(),
            input_edges: self.in_idx.len(),
            user_edges: self.user_idx.len(),
            ..TableCounts::default()
        };
        for &f in self.flags {
            c.constants += (f & flag::CONSTANT != 0) as usize;
            c.symbolic += (f & flag::SYMBOLIC != 0) as usize;
            c.int48 += (f & flag::INT48 != 0) as usize;
            c.non_tensor += (f & flag::NON_TENSOR != 0) as usize;
            c.opaque_args += (f & flag::OPAQUE_ARGS != 0) as usize;
            c.feeds_output += (f & flag::FEEDS_OUTPUT != 0) as usize;
        }
        c
    }
}

/// Owned columns, for tests, benches and fuzzing. `view()` borrows them as a [`NodeTable`].
#[derive(Debug, Clone, Default)]
pub struct OwnedTable {
    pub op: Vec<u8>,
    pub target: Vec<i32>,
    pub target_class: Vec<u32>,
    pub in_ptr: Vec<i64>,
    pub in_idx: Vec<i64>,
    pub user_ptr: Vec<i64>,
    pub user_idx: Vec<i64>,
    pub rank: Vec<i32>,
    pub shape_ptr: Vec<i64>,
    pub shape: Vec<i64>,
    pub dtype: Vec<i32>,
    pub iarg_ptr: Vec<i64>,
    pub iarg: Vec<i64>,
    pub flags: Vec<u32>,
}

impl OwnedTable {
    pub fn view(&self) -> NodeTable<'_> {
        NodeTable {
            op: &self.op,
            target: &self.target,
            target_class: &self.target_class,
            in_ptr: &self.in_ptr,
            in_idx: &self.in_idx,
            user_ptr: &self.user_ptr,
            user_idx: &self.user_idx,
            rank: &self.rank,
            shape_ptr: &self.shape_ptr,
            shape: &self.shape,
            dtype: &self.dtype,
            iarg_ptr: &self.iarg_ptr,
            iarg: &self.iarg,
            flags: &self.flags,
        }
    }
}

/// Builds tables node by node, deriving the user CSR from the inputs (users in insertion
/// order of the consuming node, which is fx's order for graphs built front to back).
#[derive(Debug, Default)]
pub struct TableBuilder {
    t: OwnedTable,
}

impl TableBuilder {
    pub fn new(target_class: Vec<u32>) -> Self {
        let mut t = OwnedTable {
            target_class,
            ..OwnedTable::default()
        };
        t.in_ptr.push(0);
        t.shape_ptr.push(0);
        t.iarg_ptr.push(0);
        Self { t }
    }

    /// Appends a node and returns its id.
    pub fn push(
        &mut self,
        op: u8,
        target: i32,
        inputs: &[i64],
        shape: Option<&[i64]>,
        iargs: &[i64],
        flags: u32,
    ) -> usize {
        let t = &mut self.t;
        t.op.push(op);
        t.target.push(target);
        t.in_idx.extend_from_slice(inputs);
        t.in_ptr.push(t.in_idx.len() as i64);
        match shape {
            Some(s) => {
                t.rank.push(s.len() as i32);
                t.shape.extend_from_slice(s);
            }
            None => t.rank.push(-1),
        }
        t.shape_ptr.push(t.shape.len() as i64);
        t.dtype.push(0);
        t.iarg.extend_from_slice(iargs);
        t.iarg_ptr.push(t.iarg.len() as i64);
        t.flags.push(flags);
        t.op.len() - 1
    }

    pub fn finish(mut self) -> OwnedTable {
        let n = self.t.op.len();
        let mut users: Vec<Vec<i64>> = vec![Vec::new(); n];
        for i in 0..n {
            let (a, b) = (self.t.in_ptr[i] as usize, self.t.in_ptr[i + 1] as usize);
            for &j in &self.t.in_idx[a..b] {
                if j >= 0 && (j as usize) < n {
                    users[j as usize].push(i as i64);
                }
            }
        }
        self.t.user_ptr.push(0);
        for u in users {
            self.t.user_idx.extend(u);
            self.t.user_ptr.push(self.t.user_idx.len() as i64);
        }
        self.t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize) -> OwnedTable {
        let mut b = TableBuilder::new(vec![class::PERMUTE, class::VIEW]);
        b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3]), &[], 0);
        for i in 1..n {
            b.push(
                op::CALL_FUNCTION,
                (i % 2) as i32,
                &[i as i64 - 1],
                Some(&[3, 2]),
                &[1, 0],
                0,
            );
        }
        b.push(op::OUTPUT, -1, &[n as i64 - 1], None, &[], flag::NON_TENSOR);
        b.finish()
    }

    #[test]
    fn valid_chain_passes_and_counts() {
        let t = chain(5);
        t.view().validate().unwrap();
        let c = t.view().counts();
        assert_eq!(c.nodes, 6);
        assert_eq!(c.input_edges, 5);
        assert_eq!(c.user_edges, 5);
        assert_eq!(c.non_tensor, 1);
    }

    fn expect_err(t: &OwnedTable, field: &str, needle: &str) {
        let e = t.view().validate().unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(needle), "{e}");
    }

    #[test]
    fn rejects_forward_input() {
        let mut t = chain(4);
        t.in_idx[1] = 3;
        expect_err(&t, "in_idx", "expected 0 <= input < 2");
    }

    #[test]
    fn rejects_users_not_transpose() {
        let mut t = chain(4);
        t.user_idx[0] = 2;
        expect_err(&t, "user_idx", "not in both");
    }

    #[test]
    fn rejects_rank_mismatch() {
        let mut t = chain(3);
        t.rank[1] = 3;
        expect_err(&t, "rank", "rank 3 but 2 dims");
    }

    #[test]
    fn rejects_bad_ptrs() {
        let mut t = chain(3);
        t.in_ptr[2] = 3;
        expect_err(&t, "in_ptr", "decreases");
        let mut t = chain(3);
        t.in_ptr.pop();
        expect_err(&t, "in_ptr", "length");
        let mut t = chain(3);
        t.iarg.push(7);
        expect_err(&t, "iarg", "but iarg_ptr ends at");
    }

    #[test]
    fn rejects_unknown_codes() {
        let mut t = chain(3);
        t.op[1] = 9;
        expect_err(&t, "op", "unknown op kind 9");
        let mut t = chain(3);
        t.target[1] = 5;
        expect_err(&t, "target", "target code 5");
        let mut t = chain(3);
        t.flags[1] = 1 << 31;
        expect_err(&t, "flags", "unknown flag bits");
        let mut t = chain(3);
        t.shape[0] = -1;
        expect_err(&t, "shape", "dim -1");
    }
}
