#![no_main]
//! Validation never panics; on an accepted table the accessors and counts stay in bounds.

use libfuzzer_sys::fuzz_target;

#[path = "decode.rs"]
mod decode;

fuzz_target!(|data: &[u8]| {
    let (t, _) = decode::table(data);
    let view = t.view();
    if view.validate().is_ok() {
        let n = view.len();
        assert_eq!(view.counts().nodes, n);
        for i in 0..n {
            assert!(view.inputs(i).iter().all(|&j| (j as usize) < i));
            assert!(view
                .users(i)
                .iter()
                .all(|&u| (u as usize) > i && (u as usize) < n));
            let _ = (view.shape_row(i), view.iargs(i), view.class_of(i));
        }
    }
});
