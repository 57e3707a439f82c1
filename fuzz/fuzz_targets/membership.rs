#![no_main]
//! Constant membership on accepted tables: no panic; sets sized to the table, nested.

use arm_accel::membership::{constant_inputs, constant_set};
use libfuzzer_sys::fuzz_target;

#[path = "decode.rs"]
mod decode;

fuzz_target!(|data: &[u8]| {
    let (t, _) = decode::table(data);
    let view = t.view();
    if view.validate().is_err() {
        return;
    }
    let consts = constant_set(&view);
    let with_inputs = constant_inputs(&view, &consts);
    assert_eq!(consts.len(), view.len());
    assert_eq!(consts.count(), view.counts().constants);
    assert!(consts.iter().all(|i| with_inputs.contains(i)));
});
