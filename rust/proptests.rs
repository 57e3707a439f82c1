//! Property tests over arbitrary node tables: validation either rejects a table, or
//! every kernel runs on it without panicking and returns in-bounds results.
//!
//! Three sources of tables: random columns (almost always rejected, exercising every check),
//! random DAGs built with [`TableBuilder`] (valid, exercising the kernels), and valid tables with
//! one entry of one column overwritten (the near misses validation must catch).

use proptest::prelude::*;

use crate::chains::collect_chains;
use crate::membership::{constant_inputs, constant_set};
use crate::synth::corrupt_column;
use crate::table::{class, flag, op, NodeTable, OwnedTable, TableBuilder};
use crate::worklist::duplicate_user_candidates;

/// Runs every kernel on a table validation accepted and checks its results are in bounds.
fn run_kernels(t: &NodeTable<'_>, member_mask: u32, keys: &[i64]) {
    let n = t.len();
    let counts = t.counts();
    assert_eq!(counts.nodes, n);
    assert!(counts.constants <= n && counts.feeds_output <= n);
    for i in 0..n {
        assert!(t.inputs(i).iter().all(|&j| (j as usize) < i));
        assert!(t
            .users(i)
            .iter()
            .all(|&u| (u as usize) > i && (u as usize) < n));
        let _ = (t.shape_row(i), t.iargs(i), t.class_of(i));
    }

    if let Ok(chains) = collect_chains(t, member_mask) {
        assert_eq!(chains.ptr.first(), Some(&0));
        assert!(
            chains.ptr.windows(2).all(|w| w[0] < w[1]),
            "empty or unordered chain"
        );
        assert_eq!(*chains.ptr.last().unwrap() as usize, chains.nodes.len());
        let mut seen = vec![false; n];
        for &v in &chains.nodes {
            assert!((v as usize) < n, "chain node {v} out of range");
            assert!(!seen[v as usize], "node {v} in two chains");
            seen[v as usize] = true;
            assert!(t.class_of(v as usize) & member_mask != 0);
        }
    }

    match duplicate_user_candidates(t, keys) {
        Ok(out) => {
            assert!(out.windows(2).all(|w| w[0] < w[1]), "not in graph order");
            assert!(out
                .iter()
                .all(|&p| (p as usize) < n && t.users(p as usize).len() >= 2));
        }
        Err(e) => assert_eq!(e.field, "group_key"),
    }

    let consts = constant_set(t);
    assert_eq!(consts.len(), n);
    assert_eq!(consts.count(), counts.constants);
    let with_inputs = constant_inputs(t, &consts);
    assert_eq!(with_inputs.len(), n);
    assert!(consts.iter().all(|i| with_inputs.contains(i)));
}

fn arb_columns() -> impl Strategy<Value = OwnedTable> {
    let ints = |len| prop::collection::vec(-3i64..12, 0..len);
    (
        (
            prop::collection::vec(0u8..8, 0..10),
            prop::collection::vec(-2i32..6, 0..10),
            prop::collection::vec(prop::sample::select(vec![0u32, 1, 2, 4, 1 << 12]), 0..6),
            ints(12),
            ints(12),
            ints(12),
            ints(12),
        ),
        (
            prop::collection::vec(-2i32..4, 0..10),
            ints(12),
            ints(16),
            prop::collection::vec(0i32..3, 0..10),
            ints(12),
            ints(8),
            prop::collection::vec(prop::sample::select(vec![0u32, 1, 2, 32, 1 << 20]), 0..10),
        ),
    )
        .prop_map(|(a, b)| OwnedTable {
            op: a.0,
            target: a.1,
            target_class: a.2,
            in_ptr: a.3,
            in_idx: a.4,
            user_ptr: a.5,
            user_idx: a.6,
            rank: b.0,
            shape_ptr: b.1,
            shape: b.2,
            dtype: b.3,
            iarg_ptr: b.4,
            iarg: b.5,
            flags: b.6,
        })
}

/// One node of a random DAG: op kind, target code, inputs as back-offsets, shape, flags.
type NodeSpec = (u8, i32, Vec<usize>, Option<Vec<i64>>, Vec<i64>, u32);

fn arb_node() -> impl Strategy<Value = NodeSpec> {
    (
        0u8..op::COUNT,
        -1i32..6,
        prop::collection::vec(1usize..6, 0..4),
        prop::option::of(prop::collection::vec(0i64..5, 0..7)),
        prop::collection::vec(-4i64..8, 0..4),
        0u32..=flag::ALL,
    )
}

fn arb_valid() -> impl Strategy<Value = (OwnedTable, u32, Vec<i64>)> {
    let classes = prop::collection::vec(0u32..=class::ALL, 6);
    let nodes = prop::collection::vec(arb_node(), 0..40);
    (
        classes,
        nodes,
        0u32..=class::ALL,
        prop::collection::vec(-2i64..3, 6),
    )
        .prop_map(|(classes, nodes, mask, keys)| (build(classes, &nodes), mask, keys))
}

fn build(classes: Vec<u32>, nodes: &[NodeSpec]) -> OwnedTable {
    let mut b = TableBuilder::new(classes);
    for (i, (kind, target, back, shape, iargs, flags)) in nodes.iter().enumerate() {
        // Distinct earlier nodes (fx keeps each input once); -1 dims only on symbolic nodes.
        let mut inputs: Vec<i64> = back
            .iter()
            .filter(|&&d| d <= i)
            .map(|&d| (i - d) as i64)
            .collect();
        inputs.sort_unstable();
        inputs.dedup();
        let shape = shape.as_deref();
        b.push(*kind, *target, &inputs, shape, iargs, *flags);
    }
    b.finish()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_columns_are_rejected_or_safe(t in arb_columns(), mask in 0u32..=class::ALL) {
        let view = t.view();
        if view.validate().is_ok() {
            let keys = vec![0; view.target_class.len()];
            run_kernels(&view, mask, &keys);
        }
    }

    #[test]
    fn valid_dags_run_every_kernel((t, mask, keys) in arb_valid()) {
        let view = t.view();
        // The builder makes backward inputs, transposed users, in-range target codes and
        // non-negative dims: validation must accept it.
        prop_assert_eq!(view.validate(), Ok(()));
        run_kernels(&view, mask, &keys);
    }

    #[test]
    fn corrupted_tables_are_rejected_or_safe(
        (t, mask, keys) in arb_valid(),
        col in 0usize..14,
        at in any::<usize>(),
        value in prop::sample::select(vec![-1i64, 0, 1, 2, 5, 39, 40, 41, i64::MAX, i64::MIN]),
    ) {
        let mut t = t;
        corrupt_column(&mut t, col, at, value);
        let view = t.view();
        if view.validate().is_ok() {
            run_kernels(&view, mask, &keys);
        }
    }

    #[test]
    fn truncated_or_extended_columns_are_rejected(
        (t, _mask, _keys) in arb_valid(),
        col in 0usize..14,
        grow in any::<bool>(),
    ) {
        let mut t = t;
        prop_assume!(!t.op.is_empty());
        fn edit<T: Copy + Default>(v: &mut Vec<T>, grow: bool) {
            if grow { v.push(T::default()) } else { v.pop(); }
        }
        match col {
            0 => edit(&mut t.op, grow),
            1 => edit(&mut t.target, grow),
            3 => edit(&mut t.in_ptr, grow),
            5 => edit(&mut t.user_ptr, grow),
            7 => edit(&mut t.rank, grow),
            8 => edit(&mut t.shape_ptr, grow),
            10 => edit(&mut t.dtype, grow),
            11 => edit(&mut t.iarg_ptr, grow),
            _ => edit(&mut t.flags, grow),
        }
        prop_assert!(t.view().validate().is_err());
    }
}
