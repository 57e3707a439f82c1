//! Planner tests on synthetic tables.

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
