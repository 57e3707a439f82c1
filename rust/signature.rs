//! User signatures for duplicate-user fusion (`FuseDuplicateUsersPass`), on interned codes.
//!
//! Stock groups the users of a producer by target key and, within a group, fuses users whose
//! signature `(op, target key, to_hashable(args), to_hashable(kwargs))` is equal, nodes standing
//! for their names. The Python side encodes each user's arguments, where every leaf is an
//! integer, a float, None or a node (nested in lists/tuples, kwargs sorted as stock sorts them),
//! as a token stream in the table's integer-argument CSR (`iarg_ptr`/`iarg`), built so that two
//! streams are equal exactly when stock's normalized arguments are. Users with any other leaf
//! carry `flag::OPAQUE_ARGS`: Python answers for them.
//!
//! This kernel interns `(group key, token stream)` into one code per user, in O(total tokens),
//! and screens the producers: a stock visit can fuse only when two users of one group have
//! equal codes, or when a group holds an opaque user (then Python decides).

use std::collections::HashMap;

use crate::table::{flag, op, NodeTable, TableError};
use crate::worklist::{screen_producers, UserCode};

/// Code of a node that stock never groups (not a `call_function`, or an excluded target).
pub const NOT_GROUPED: i64 = -1;
/// Code of a grouped user whose arguments Rust cannot compare (`flag::OPAQUE_ARGS`).
pub const OPAQUE: i64 = -2;

/// Interned user signatures and the producers whose stock visit may fuse.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signatures {
    /// Per node: an interned code (>= 0; equal codes mean equal stock signatures),
    /// [`NOT_GROUPED`] or [`OPAQUE`].
    pub code: Vec<i64>,
    /// Producers (graph order) with two users of one group whose codes are equal, or a group
    /// of two or more users holding an opaque one.
    pub candidates: Vec<i64>,
}

/// Checks `group_key` (one per target code; negative: excluded target) against the table.
pub fn check_group_keys(t: &NodeTable<'_>, group_key: &[i64]) -> Result<(), TableError> {
    if group_key.len() != t.target_class.len() {
        return Err(TableError::new(
            "group_key",
            format!(
                "length {}, expected one key per target code ({})",
                group_key.len(),
                t.target_class.len()
            ),
        ));
    }
    Ok(())
}

/// The group key of node `i`, or None when stock does not group it.
pub fn group_of(t: &NodeTable<'_>, group_key: &[i64], i: usize) -> Option<i64> {
    if t.op[i] != op::CALL_FUNCTION || t.target[i] < 0 {
        return None;
    }
    let k = group_key[t.target[i] as usize];
    (k >= 0).then_some(k)
}

/// Interns the signatures of a validated table and screens its producers.
pub fn user_signatures(t: &NodeTable<'_>, group_key: &[i64]) -> Result<Signatures, TableError> {
    check_group_keys(t, group_key)?;
    let n = t.len();
    let mut interned: HashMap<(i64, &[i64]), i64> = HashMap::new();
    let mut code = Vec::with_capacity(n);
    for i in 0..n {
        let c = match group_of(t, group_key, i) {
            None => NOT_GROUPED,
            Some(_) if t.has_flag(i, flag::OPAQUE_ARGS) => OPAQUE,
            Some(k) => {
                let next = interned.len() as i64;
                *interned.entry((k, t.iargs(i))).or_insert(next)
            }
        };
        code.push(c);
    }
    let candidates = screen_producers(t, |u| match code[u] {
        NOT_GROUPED => None,
        c => Some((group_key[t.target[u] as usize], user_code(c))),
    });
    Ok(Signatures { code, candidates })
}

fn user_code(c: i64) -> UserCode {
    if c == OPAQUE {
        UserCode::Unknown
    } else {
        UserCode::Known(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth;
    use crate::table::{OwnedTable, TableBuilder};
    use crate::worklist::test_targets::*;

    const KEYS: [i64; 4] = [10, 11, -1, 10];

    /// x, y placeholders; the users below, with token streams standing for their arguments.
    fn table(users: &[(i32, &[i64], &[i64], u32)]) -> OwnedTable {
        let mut b = TableBuilder::new(vec![0; 4]);
        let x = b.push(op::PLACEHOLDER, -1, &[], Some(&[4]), &[], 0) as i64;
        b.push(op::PLACEHOLDER, -1, &[], Some(&[4]), &[], 0);
        for &(target, inputs, toks, flags) in users {
            let ins: Vec<i64> = if inputs.is_empty() {
                vec![x]
            } else {
                inputs.to_vec()
            };
            b.push(op::CALL_FUNCTION, target, &ins, Some(&[4]), toks, flags);
        }
        b.push(op::OUTPUT, -1, &[], None, &[], 0);
        b.finish()
    }

    fn run(t: &OwnedTable) -> Signatures {
        let v = t.view();
        v.validate().unwrap();
        user_signatures(&v, &KEYS).unwrap()
    }

    #[test]
    fn equal_streams_of_one_group_share_a_code() {
        let t = table(&[
            (ADD, &[0, 1], &[1, 0, 0, 1], 0),       // 2
            (ADD, &[0, 1], &[1, 0, 0, 1], 0),       // 3: same as 2
            (ADD_ALIAS, &[0, 1], &[1, 0, 0, 1], 0), // 4: same key, same stream
            (MUL, &[0, 1], &[1, 0, 0, 1], 0),       // 5: other key
            (ADD, &[0, 1], &[1, 0, 0, 2], 0),       // 6: other stream
        ]);
        let s = run(&t);
        let c = &s.code;
        assert_eq!(&c[..2], &[NOT_GROUPED, NOT_GROUPED]);
        assert_eq!(c[2], c[3]);
        assert_eq!(c[2], c[4]);
        assert_ne!(c[2], c[5]);
        assert_ne!(c[2], c[6]);
        assert!(c[2..7].iter().all(|&k| k >= 0));
        assert_eq!(c[7], NOT_GROUPED); // output
        assert_eq!(s.candidates, vec![0, 1]);
    }

    #[test]
    fn same_key_but_different_streams_is_not_a_candidate() {
        let t = table(&[(ADD, &[], &[0, 1], 0), (ADD, &[], &[0, 2], 0)]);
        assert_eq!(run(&t).candidates, Vec::<i64>::new());
    }

    #[test]
    fn opaque_user_in_a_group_makes_a_candidate() {
        let t = table(&[(ADD, &[], &[0, 1], 0), (ADD, &[], &[], flag::OPAQUE_ARGS)]);
        let s = run(&t);
        assert_eq!(s.code[3], OPAQUE);
        assert_eq!(s.candidates, vec![0]);
        // An opaque user alone in its group cannot fuse.
        let t = table(&[(ADD, &[], &[0, 1], 0), (MUL, &[], &[], flag::OPAQUE_ARGS)]);
        assert_eq!(run(&t).candidates, Vec::<i64>::new());
    }

    #[test]
    fn excluded_targets_are_not_grouped() {
        let t = table(&[(RESCALE, &[], &[0, 1], 0), (RESCALE, &[], &[0, 1], 0)]);
        let s = run(&t);
        assert_eq!(&s.code[2..4], &[NOT_GROUPED, NOT_GROUPED]);
        assert!(s.candidates.is_empty());
    }

    #[test]
    fn a_prefix_stream_is_a_different_signature() {
        // The CSR bounds separate the streams: [0, 1] is not [0, 1, 0].
        let t = table(&[(ADD, &[], &[0, 1], 0), (ADD, &[], &[0, 1, 0], 0)]);
        let s = run(&t);
        assert_ne!(s.code[2], s.code[3]);
    }

    #[test]
    fn rejects_wrong_key_length() {
        let t = table(&[]);
        let e = user_signatures(&t.view(), &[1]).unwrap_err();
        assert_eq!(e.field, "group_key");
    }

    #[test]
    fn synthetic_tables_intern_consistently() {
        let t = synth::transformer_like(5_000, 7);
        let v = t.view();
        v.validate().unwrap();
        let keys: Vec<i64> = (0..v.target_class.len() as i64).collect();
        let s = user_signatures(&v, &keys).unwrap();
        // Equal codes exactly when (key, stream) are equal, checked pairwise on a sample.
        let grouped: Vec<usize> = (0..v.len()).filter(|&i| s.code[i] >= 0).take(300).collect();
        for &a in &grouped {
            for &b in &grouped {
                let same = v.target[a] == v.target[b] && v.iargs(a) == v.iargs(b);
                assert_eq!(s.code[a] == s.code[b], same, "nodes {a} {b}");
            }
        }
        assert!(s.candidates.windows(2).all(|w| w[0] < w[1]));
    }
}
