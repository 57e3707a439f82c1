//! Producer screening for duplicate-user fusion (`FuseDuplicateUsersPass`).
//!
//! Stock visits every node of the graph as a producer, groups its users by target and builds a
//! hashable signature of each grouped user's arguments. A visit can only fuse something when
//! at least two `call_function` users share a (non-excluded) target key, so this kernel finds
//! those producers in one O(N + E log d) scan, d the largest fan-out. The Python pass then
//! replays stock's queue exactly, but spends Python time only on these producers, on nodes
//! that became a fused representative (the only way a node gains users), and on revisits that
//! stock itself queues.

use crate::signature::{check_group_keys, group_of};
use crate::table::{NodeTable, TableError};

/// What a screen knows of a grouped user's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum UserCode {
    /// Not known here: it may equal any other user's signature.
    Unknown,
    /// An interned signature code: equal codes, equal signatures.
    Known(i64),
}

/// Producers whose stock visit may fuse users, in graph order.
///
/// `group_key[t]` is the grouping key of target code `t` (stock groups users by
/// `str(target)` for op overloads, so distinct target objects may share a key), or a negative
/// value for targets that are never fused (the excluded targets).
pub fn duplicate_user_candidates(
    t: &NodeTable<'_>,
    group_key: &[i64],
) -> Result<Vec<i64>, TableError> {
    check_group_keys(t, group_key)?;
    Ok(screen_producers(t, |u| {
        group_of(t, group_key, u).map(|k| (k, UserCode::Unknown))
    }))
}

/// Producers (graph order) with two users that share a group and may share a signature:
/// equal known codes, or an unknown one among them. `user` gives a user's (group, code), or
/// None for users stock never groups. One O(N + E log d) scan, d the largest fan-out.
pub fn screen_producers(
    t: &NodeTable<'_>,
    user: impl Fn(usize) -> Option<(i64, UserCode)>,
) -> Vec<i64> {
    let mut out = Vec::new();
    let mut keys: Vec<(i64, UserCode)> = Vec::new();
    for p in 0..t.len() {
        let users = t.users(p);
        if users.len() < 2 {
            continue;
        }
        keys.clear();
        keys.extend(users.iter().filter_map(|&u| user(u as usize)));
        if keys.len() < 2 {
            continue;
        }
        // Sorted, a group's unknown codes come first: a pair that may fuse is then adjacent.
        keys.sort_unstable();
        if keys
            .windows(2)
            .any(|w| w[0].0 == w[1].0 && (w[0].1 == UserCode::Unknown || w[0].1 == w[1].1))
        {
            out.push(p as i64);
        }
    }
    out
}

/// Target codes of the duplicate-user kernels' unit tests.
#[cfg(test)]
pub(crate) mod test_targets {
    pub const ADD: i32 = 0;
    pub const MUL: i32 = 1;
    pub const RESCALE: i32 = 2;
    /// A distinct target object with the same `str()` as ADD.
    pub const ADD_ALIAS: i32 = 3;
}

#[cfg(test)]
mod tests {
    use super::test_targets::*;
    use super::*;
    use crate::synth;
    use crate::table::{class, op, TableBuilder};

    fn table() -> crate::table::OwnedTable {
        let mut b = TableBuilder::new(vec![class::ELEMENTWISE, class::ELEMENTWISE, 0, 0]);
        let x = b.push(op::PLACEHOLDER, -1, &[], Some(&[4]), &[], 0) as i64; // 0
        let y = b.push(op::PLACEHOLDER, -1, &[], Some(&[4]), &[], 0) as i64; // 1
                                                                             // x: add + mul, distinct targets: not a candidate.
        let a = b.push(op::CALL_FUNCTION, ADD, &[x, y], Some(&[4]), &[], 0) as i64; // 2
        b.push(op::CALL_FUNCTION, MUL, &[x, a], Some(&[4]), &[], 0); // 3
                                                                     // y: add twice (a above, and 4): candidate.
        let a2 = b.push(op::CALL_FUNCTION, ADD, &[y, x], Some(&[4]), &[], 0) as i64; // 4
                                                                                     // a2: two rescales, excluded: not a candidate.
        b.push(op::CALL_FUNCTION, RESCALE, &[a2], Some(&[4]), &[], 0); // 5
        b.push(op::CALL_FUNCTION, RESCALE, &[a2], Some(&[4]), &[], 0); // 6
                                                                       // a: add and its alias: same key, candidate.
        b.push(op::CALL_FUNCTION, ADD_ALIAS, &[a], Some(&[4]), &[], 0); // 7
        b.push(op::CALL_FUNCTION, ADD, &[a, x], Some(&[4]), &[], 0); // 8
        b.push(op::OUTPUT, -1, &[], None, &[], 0);
        b.finish()
    }

    #[test]
    fn screens_by_group_key() {
        let t = table();
        let v = t.view();
        v.validate().unwrap();
        // x (0) has users 2 (add), 3 (mul), 8 (add): candidate.
        let got = duplicate_user_candidates(&v, &[10, 11, -1, 10]).unwrap();
        assert_eq!(got, vec![0, 1, 2]);
        // Without the alias sharing ADD's key, node 2 is no longer a candidate.
        let got = duplicate_user_candidates(&v, &[10, 11, -1, 12]).unwrap();
        assert_eq!(got, vec![0, 1]);
        // Not excluding the rescales makes node 4 a candidate.
        let got = duplicate_user_candidates(&v, &[10, 11, 13, 10]).unwrap();
        assert_eq!(got, vec![0, 1, 2, 4]);
    }

    #[test]
    fn rejects_wrong_key_length() {
        let t = table();
        let e = duplicate_user_candidates(&t.view(), &[1, 2]).unwrap_err();
        assert_eq!(e.field, "group_key");
    }

    #[test]
    fn synthetic_tables_have_candidates() {
        let t = synth::transformer_like(2_000, 3);
        let v = t.view();
        v.validate().unwrap();
        let keys: Vec<i64> = (0..v.target_class.len() as i64).collect();
        let got = duplicate_user_candidates(&v, &keys).unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]));
    }
}
