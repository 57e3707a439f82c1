//! Node tables from fuzz bytes, shared by every target.
//!
//! The first byte picks the shape of the input: raw columns straight from the bytes (lengths and
//! values arbitrary, so validation sees every kind of garbage), or a DAG built front to back with
//! `TableBuilder` (valid by construction) with, optionally, one entry of one column overwritten
//! (the near misses). Every target validates first, as the Python bindings do, and runs its
//! kernel only on tables validation accepts.

#![allow(dead_code)]

use arm_accel::synth::corrupt_column;
use arm_accel::table::{OwnedTable, TableBuilder};

pub struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self(data)
    }

    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// A small signed value, biased to the range indices live in, sometimes extreme.
    pub fn i64(&mut self) -> i64 {
        match self.u8() {
            250 => i64::MAX,
            251 => i64::MIN,
            252 => i32::MAX as i64 + 1,
            253 => -2,
            b => b as i64 - 4,
        }
    }

    pub fn u32(&mut self) -> u32 {
        let b = self.u8();
        if b >= 0xf0 {
            1 << (b & 31)
        } else {
            (b as u32) & 0x7ff
        }
    }

    fn vec<T>(&mut self, f: impl Fn(&mut Self) -> T) -> Vec<T> {
        let n = self.u8() as usize % 48;
        (0..n).map(|_| f(self)).collect()
    }
}

pub fn table(data: &[u8]) -> (OwnedTable, Bytes<'_>) {
    let mut b = Bytes::new(data);
    let t = match b.u8() % 3 {
        0 => raw(&mut b),
        1 => built(&mut b),
        _ => {
            let mut t = built(&mut b);
            corrupt(&mut t, &mut b);
            t
        }
    };
    (t, b)
}

fn raw(b: &mut Bytes<'_>) -> OwnedTable {
    OwnedTable {
        op: b.vec(|b| b.u8() % 8),
        target: b.vec(|b| b.i64() as i32),
        target_class: b.vec(|b| b.u32()),
        in_ptr: b.vec(|b| b.i64()),
        in_idx: b.vec(|b| b.i64()),
        user_ptr: b.vec(|b| b.i64()),
        user_idx: b.vec(|b| b.i64()),
        rank: b.vec(|b| b.i64() as i32),
        shape_ptr: b.vec(|b| b.i64()),
        shape: b.vec(|b| b.i64()),
        dtype: b.vec(|b| b.i64() as i32),
        iarg_ptr: b.vec(|b| b.i64()),
        iarg: b.vec(|b| b.i64()),
        flags: b.vec(|b| b.u32()),
    }
}

fn built(b: &mut Bytes<'_>) -> OwnedTable {
    let n_targets = 1 + b.u8() as usize % 8;
    let classes = (0..n_targets).map(|_| b.u32()).collect();
    let mut t = TableBuilder::new(classes);
    let n = b.u8() as usize;
    for i in 0..n {
        let op = b.u8() % 6;
        let target = (b.u8() as i32 % (n_targets as i32 + 1)) - 1;
        let mut inputs: Vec<i64> = (0..b.u8() % 4)
            .filter_map(|_| {
                let back = 1 + b.u8() as usize % 8;
                (back <= i).then(|| (i - back) as i64)
            })
            .collect();
        inputs.sort_unstable();
        inputs.dedup();
        let rank = b.u8() % 8;
        let shape: Vec<i64> = (0..rank).map(|_| (b.u8() % 5) as i64).collect();
        let shape = (rank < 7).then_some(shape.as_slice());
        let iargs: Vec<i64> = (0..b.u8() % 4).map(|_| b.i64()).collect();
        let flags = b.u32() & 0x3f;
        t.push(op, target, &inputs, shape, &iargs, flags);
    }
    t.finish()
}

fn corrupt(t: &mut OwnedTable, b: &mut Bytes<'_>) {
    let (col, at, value) = (b.u8() % 14, b.u8() as usize, b.i64());
    corrupt_column(t, col as usize, at, value);
}
