#![no_main]
//! Chain collection on accepted tables: no panic; chains are disjoint, non-empty, in range.

use arm_accel::chains::collect_chains;
use libfuzzer_sys::fuzz_target;

#[path = "decode.rs"]
mod decode;

fuzz_target!(|data: &[u8]| {
    let (t, mut rest) = decode::table(data);
    let view = t.view();
    if view.validate().is_err() {
        return;
    }
    let mask = rest.u32();
    if let Ok(chains) = collect_chains(&view, mask) {
        assert!(chains.ptr.windows(2).all(|w| w[0] < w[1]));
        let mut seen = vec![false; view.len()];
        for &v in &chains.nodes {
            let v = v as usize;
            assert!(v < view.len() && !seen[v] && view.class_of(v) & mask != 0);
            seen[v] = true;
        }
    }
});
