#![no_main]
//! Duplicate-user screening with arbitrary group keys: no panic; producers in order, in range.

use arm_accel::worklist::duplicate_user_candidates;
use libfuzzer_sys::fuzz_target;

#[path = "decode.rs"]
mod decode;

fuzz_target!(|data: &[u8]| {
    let (t, mut rest) = decode::table(data);
    let view = t.view();
    if view.validate().is_err() {
        return;
    }
    // Usually one key per target code, sometimes a wrong length (must be an error, not a panic).
    let extra = rest.u8();
    let len = match extra % 8 {
        0 => extra as usize / 8,
        _ => view.target_class.len(),
    };
    let keys: Vec<i64> = (0..len).map(|_| rest.i64() % 4).collect();
    match duplicate_user_candidates(&view, &keys) {
        Ok(out) => {
            assert!(out.windows(2).all(|w| w[0] < w[1]));
            assert!(out.iter().all(|&p| (p as usize) < view.len()));
        }
        Err(e) => assert_eq!(e.field, "group_key"),
    }
});
