//! Maximal linear view/permute chains, in one O(N + E) scan.
//!
//! Mirrors `CanonicalizeViewCopyPermutePass._collect_chains` in executorch: take the member
//! nodes (targets whose class has a bit of `member_mask`) in graph order; each member not
//! already taken starts a chain, which follows the node's single user while that user is a
//! member too. Stock does this with `list.pop(0)` and `list.remove`, quadratic in the number of
//! members; here a taken bitset replaces both, and the chains come out in the same order.

use crate::table::NodeTable;

/// Chains in CSR form: chain `k` is `nodes[ptr[k]..ptr[k + 1]]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chains {
    pub ptr: Vec<i64>,
    pub nodes: Vec<i64>,
}

impl Chains {
    pub fn len(&self) -> usize {
        self.ptr.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn chain(&self, k: usize) -> &[i64] {
        &self.nodes[self.ptr[k] as usize..self.ptr[k + 1] as usize]
    }
}

/// Why a chain walk declined. Stock would raise on these graphs (`list.remove` of a node no
/// longer in the list), so the caller runs stock and lets it report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainDecline {
    /// Member `node` is the single user of two chain nodes.
    TakenTwice { node: usize },
}

impl std::fmt::Display for ChainDecline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainDecline::TakenTwice { node } => {
                write!(f, "node {node} would join two view/permute chains")
            }
        }
    }
}

/// Collects the chains of a validated table. `member_mask` selects the member classes.
pub fn collect_chains(t: &NodeTable<'_>, member_mask: u32) -> Result<Chains, ChainDecline> {
    let n = t.len();
    let is_member = |i: usize| t.class_of(i) & member_mask != 0;
    let mut taken = vec![false; n];
    let mut out = Chains {
        ptr: vec![0],
        nodes: Vec::new(),
    };
    for start in 0..n {
        if taken[start] || !is_member(start) {
            continue;
        }
        taken[start] = true;
        out.nodes.push(start as i64);
        let mut cur = start;
        loop {
            let users = t.users(cur);
            if users.len() != 1 {
                break;
            }
            let u = users[0] as usize;
            if !is_member(u) {
                break;
            }
            if taken[u] {
                return Err(ChainDecline::TakenTwice { node: u });
            }
            taken[u] = true;
            out.nodes.push(u as i64);
            cur = u;
        }
        out.ptr.push(out.nodes.len() as i64);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth;
    use crate::table::{class, op, TableBuilder};

    const P: i32 = 0;
    const V: i32 = 1;
    const ADD: i32 = 2;

    fn builder() -> TableBuilder {
        TableBuilder::new(vec![class::PERMUTE, class::VIEW, class::ELEMENTWISE])
    }

    fn chains_of(c: &Chains) -> Vec<Vec<i64>> {
        (0..c.len()).map(|k| c.chain(k).to_vec()).collect()
    }

    /// The stock algorithm, transcribed literally (pop(0) / remove), as an oracle.
    fn stock(t: &NodeTable<'_>, mask: u32) -> Vec<Vec<i64>> {
        let mut pending: Vec<usize> = (0..t.len())
            .filter(|&i| t.class_of(i) & mask != 0)
            .collect();
        let mut chains = Vec::new();
        while !pending.is_empty() {
            let node = pending.remove(0);
            let mut chain = vec![node as i64];
            let mut cur = node;
            while t.users(cur).len() == 1 {
                let u = t.users(cur)[0] as usize;
                if t.class_of(u) & mask == 0 {
                    break;
                }
                let pos = pending.iter().position(|&x| x == u).expect("in list");
                pending.remove(pos);
                chain.push(u as i64);
                cur = u;
            }
            chains.push(chain);
        }
        chains
    }

    #[test]
    fn linear_chain_and_fanout() {
        let mut b = builder();
        let x = b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3]), &[], 0) as i64;
        let p = b.push(op::CALL_FUNCTION, P, &[x], Some(&[3, 2]), &[1, 0], 0) as i64;
        let v = b.push(op::CALL_FUNCTION, V, &[p], Some(&[6]), &[6], 0) as i64;
        // v has two users: the chain stops at v, and each user starts its own chain.
        let v1 = b.push(op::CALL_FUNCTION, V, &[v], Some(&[2, 3]), &[2, 3], 0) as i64;
        let a = b.push(op::CALL_FUNCTION, ADD, &[v, v1], Some(&[6]), &[], 0) as i64;
        let p2 = b.push(op::CALL_FUNCTION, P, &[a], Some(&[6]), &[0], 0) as i64;
        b.push(op::OUTPUT, -1, &[p2], None, &[], 0);
        let t = b.finish();
        let view = t.view();
        view.validate().unwrap();
        let c = collect_chains(&view, class::PERMUTE | class::VIEW).unwrap();
        assert_eq!(chains_of(&c), vec![vec![p, v], vec![v1], vec![p2]]);
        assert_eq!(chains_of(&c), stock(&view, class::PERMUTE | class::VIEW));
    }

    #[test]
    fn mask_selects_members() {
        let mut b = builder();
        let x = b.push(op::PLACEHOLDER, -1, &[], Some(&[2, 3]), &[], 0) as i64;
        let p = b.push(op::CALL_FUNCTION, P, &[x], Some(&[3, 2]), &[1, 0], 0) as i64;
        let v = b.push(op::CALL_FUNCTION, V, &[p], Some(&[6]), &[6], 0) as i64;
        b.push(op::OUTPUT, -1, &[v], None, &[], 0);
        let t = b.finish();
        let c = collect_chains(&t.view(), class::PERMUTE).unwrap();
        assert_eq!(chains_of(&c), vec![vec![p]]);
        let c = collect_chains(&t.view(), 0).unwrap();
        assert!(c.is_empty());
    }

    #[test]
    fn empty_table() {
        let t = builder().finish();
        let c = collect_chains(&t.view(), class::PERMUTE).unwrap();
        assert_eq!(c.ptr, vec![0]);
        assert!(c.is_empty());
    }

    #[test]
    fn matches_stock_on_synthetic_tables() {
        for seed in 0..5 {
            let t = synth::transformer_like(3_000, seed);
            let view = t.view();
            view.validate().unwrap();
            let mask = class::PERMUTE | class::VIEW;
            let c = collect_chains(&view, mask).unwrap();
            assert_eq!(chains_of(&c), stock(&view, mask));
        }
    }
}
