//! Synthetic node tables shaped like transformer stacks, for benches, tests and fuzzing.
//! Not a model of any real graph's semantics, only of its view/permute traffic.

use crate::table::{class, flag, op, OwnedTable, TableBuilder};

/// Target codes used by the synthetic tables, indexed into [`TARGET_CLASSES`].
pub mod target {
    pub const PERMUTE: i32 = 0;
    pub const VIEW: i32 = 1;
    pub const ADD: i32 = 2;
    pub const MUL: i32 = 3;
    pub const MEAN: i32 = 4;
    pub const LINEAR: i32 = 5;
    pub const CLONE: i32 = 6;
}

pub const TARGET_CLASSES: [u32; 7] = [
    class::PERMUTE,
    class::VIEW,
    class::ELEMENTWISE,
    class::ELEMENTWISE,
    class::REDUCTION,
    0,
    class::TRANSPARENT,
];

/// Small deterministic PRNG (xorshift64*), so synthetic tables need no dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// About `n` nodes of attention-like blocks: view/permute chains around matmul-like
/// nodes, elementwise ops with shared constants, fan-outs and residual adds.
pub fn transformer_like(n: usize, seed: u64) -> OwnedTable {
    let mut rng = Rng::new(seed);
    let mut b = TableBuilder::new(TARGET_CLASSES.to_vec());
    let x = b.push(op::PLACEHOLDER, -1, &[], Some(&[1, 16, 64]), &[], 0);
    let w = b.push(
        op::PLACEHOLDER,
        -1,
        &[],
        Some(&[64, 64]),
        &[],
        flag::CONSTANT,
    );
    let s = b.push(op::PLACEHOLDER, -1, &[], Some(&[1]), &[], flag::CONSTANT);
    let mut cur = x as i64;
    let mut count = 3;
    while count + 12 < n {
        let lin = b.push(
            op::CALL_FUNCTION,
            target::LINEAR,
            &[cur, w as i64],
            Some(&[1, 16, 64]),
            &[],
            0,
        );
        let v = b.push(
            op::CALL_FUNCTION,
            target::VIEW,
            &[lin as i64],
            Some(&[1, 16, 4, 16]),
            &[1, 16, 4, 16],
            0,
        );
        let p = b.push(
            op::CALL_FUNCTION,
            target::PERMUTE,
            &[v as i64],
            Some(&[1, 4, 16, 16]),
            &[0, 2, 1, 3],
            0,
        );
        let k = b.push(
            op::CALL_FUNCTION,
            target::PERMUTE,
            &[v as i64],
            Some(&[1, 4, 16, 16]),
            &[0, 2, 1, 3],
            0,
        );
        let m = b.push(
            op::CALL_FUNCTION,
            target::MUL,
            &[p as i64, s as i64],
            Some(&[1, 4, 16, 16]),
            &[],
            0,
        );
        let c = b.push(
            op::CALL_FUNCTION,
            target::CLONE,
            &[k as i64],
            Some(&[1, 4, 16, 16]),
            &[],
            0,
        );
        let a = b.push(
            op::CALL_FUNCTION,
            target::ADD,
            &[m as i64, c as i64],
            Some(&[1, 4, 16, 16]),
            &[],
            0,
        );
        let r = if rng.below(4) == 0 {
            b.push(
                op::CALL_FUNCTION,
                target::MEAN,
                &[a as i64],
                Some(&[1, 4, 16, 1]),
                &[3, 1],
                0,
            )
        } else {
            b.push(
                op::CALL_FUNCTION,
                target::MUL,
                &[a as i64, s as i64],
                Some(&[1, 4, 16, 16]),
                &[],
                0,
            )
        };
        let back = b.push(
            op::CALL_FUNCTION,
            target::PERMUTE,
            &[a as i64],
            Some(&[1, 16, 4, 16]),
            &[0, 2, 1, 3],
            0,
        );
        let v2 = b.push(
            op::CALL_FUNCTION,
            target::VIEW,
            &[back as i64],
            Some(&[1, 16, 64]),
            &[1, 16, 64],
            0,
        );
        let add = b.push(
            op::CALL_FUNCTION,
            target::ADD,
            &[v2 as i64, cur],
            Some(&[1, 16, 64]),
            &[],
            0,
        );
        let _ = r;
        cur = add as i64;
        count += 11;
    }
    b.push(op::OUTPUT, -1, &[cur], None, &[], flag::NON_TENSOR);
    b.finish()
}

/// Overwrites entry `at` (modulo the column's length) of column `col` (0..=13, in
/// `OwnedTable` field order, 13 and above = flags) with `value`, if the column has entries and
/// the value fits its type: one corrupted entry for the fuzz targets and property tests.
pub fn corrupt_column(t: &mut OwnedTable, col: usize, at: usize, value: i64) {
    fn set<T: TryFrom<i64>>(v: &mut [T], at: usize, value: i64) {
        if !v.is_empty() {
            if let Ok(x) = T::try_from(value) {
                let k = at % v.len();
                v[k] = x;
            }
        }
    }
    match col {
        0 => set(&mut t.op, at, value),
        1 => set(&mut t.target, at, value),
        2 => set(&mut t.target_class, at, value),
        3 => set(&mut t.in_ptr, at, value),
        4 => set(&mut t.in_idx, at, value),
        5 => set(&mut t.user_ptr, at, value),
        6 => set(&mut t.user_idx, at, value),
        7 => set(&mut t.rank, at, value),
        8 => set(&mut t.shape_ptr, at, value),
        9 => set(&mut t.shape, at, value),
        10 => set(&mut t.dtype, at, value),
        11 => set(&mut t.iarg_ptr, at, value),
        12 => set(&mut t.iarg, at, value),
        _ => set(&mut t.flags, at, value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_tables_validate_and_have_the_requested_size() {
        for n in [20, 1000, 5000] {
            let t = transformer_like(n, 7);
            t.view().validate().unwrap();
            assert!(
                t.op.len() <= n && t.op.len() + 12 >= n,
                "{} vs {n}",
                t.op.len()
            );
        }
    }
}
