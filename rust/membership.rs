//! Constant membership: one bitset per call, built from the `CONSTANT` flag column that
//! `export_table` sets from the graph signature (parameters, buffers, lifted constants) and for
//! get_attr nodes. Replaces a per-node `is_param_node` / name-set lookup during graph walks.

use crate::table::{flag, NodeTable};

/// A fixed-size bitset over node ids.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BitSet {
    words: Vec<u64>,
    len: usize,
}

impl BitSet {
    pub fn new(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn insert(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    #[inline]
    pub fn contains(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Member ids in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len).filter(move |&i| self.contains(i))
    }
}

/// The constant nodes of a validated table.
pub fn constant_set(t: &NodeTable<'_>) -> BitSet {
    let mut s = BitSet::new(t.len());
    for (i, &f) in t.flags.iter().enumerate() {
        if f & flag::CONSTANT != 0 {
            s.insert(i);
        }
    }
    s
}

/// For each node, whether it is constant or has a constant among its inputs; the per-node
/// question the permute-removal walk asks about every node it reaches.
pub fn constant_inputs(t: &NodeTable<'_>, constants: &BitSet) -> BitSet {
    let mut s = BitSet::new(t.len());
    for i in 0..t.len() {
        if constants.contains(i) || t.inputs(i).iter().any(|&j| constants.contains(j as usize)) {
            s.insert(i);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth;
    use crate::table::{op, TableBuilder};

    #[test]
    fn bitset_basics() {
        let mut s = BitSet::new(130);
        assert!(!s.contains(0));
        s.insert(0);
        s.insert(64);
        s.insert(129);
        assert!(s.contains(64) && s.contains(129) && !s.contains(128));
        assert!(!s.contains(1000));
        assert_eq!(s.count(), 3);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 64, 129]);
        assert!(BitSet::new(0).is_empty());
    }

    #[test]
    fn constants_from_flags() {
        let mut b = TableBuilder::new(vec![0]);
        let w = b.push(op::PLACEHOLDER, -1, &[], Some(&[2]), &[], flag::CONSTANT) as i64;
        let x = b.push(op::PLACEHOLDER, -1, &[], Some(&[2]), &[], 0) as i64;
        let a = b.push(op::CALL_FUNCTION, 0, &[x, w], Some(&[2]), &[], 0) as i64;
        let c = b.push(op::CALL_FUNCTION, 0, &[x, a], Some(&[2]), &[], 0) as i64;
        b.push(op::OUTPUT, -1, &[c], None, &[], 0);
        let t = b.finish();
        let v = t.view();
        v.validate().unwrap();
        let s = constant_set(&v);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![w as usize]);
        let ci = constant_inputs(&v, &s);
        assert_eq!(ci.iter().collect::<Vec<_>>(), vec![w as usize, a as usize]);
    }

    #[test]
    fn synthetic_count_matches_counts() {
        let t = synth::transformer_like(5_000, 2);
        let v = t.view();
        v.validate().unwrap();
        assert_eq!(constant_set(&v).count(), v.counts().constants);
    }
}
