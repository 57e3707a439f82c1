//! `PerChannelMinMaxObserver._forward` (torchao 0.18) on a batch after the first, channel
//! axis 0, contiguous float32: each channel's `torch.aminmax` over its row, then
//! `torch.min`/`torch.max` with the running extremes.
//!
//! Minimum and maximum are exact whatever the order torch reduces in, except for which zero a
//! tie between `+0.0` and `-0.0` keeps and which NaN propagates: those depend on torch's
//! vector width and tail handling. A row holding both zeros where its extreme is zero, a NaN
//! anywhere, or a tie of opposite zeros against the running extreme is not modelled (stock
//! runs), so every value written is the one torch computes.

/// Why a batch is not modelled.
pub type NotModelled = &'static str;

/// The running per-channel extremes `min`/`max` (one per channel) updated with the rows of
/// `x` (`min.len()` rows, row-major): written only if every value is modelled.
pub fn update(x: &[f32], min: &mut [f32], max: &mut [f32]) -> Result<(), NotModelled> {
    let channels = min.len();
    if channels == 0 || max.len() != channels || x.is_empty() || x.len() % channels != 0 {
        return Err("rows do not split the batch into the channels");
    }
    let row_len = x.len() / channels;
    let mut lows = Vec::with_capacity(channels);
    let mut highs = Vec::with_capacity(channels);
    for (c, row) in x.chunks_exact(row_len).enumerate() {
        let (lo, hi) = row_extremes(row)?;
        lows.push(combined(lo, min[c], f32::lt)?);
        highs.push(combined(hi, max[c], f32::gt)?);
    }
    min.copy_from_slice(&lows);
    max.copy_from_slice(&highs);
    Ok(())
}

/// The row's minimum and maximum, if no NaN and no tie of opposite zeros decides them.
fn row_extremes(row: &[f32]) -> Result<(f32, f32), NotModelled> {
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    let (mut positive_zero, mut negative_zero, mut nan) = (false, false, false);
    for &v in row {
        lo = lo.min(v);
        hi = hi.max(v);
        nan |= v.is_nan();
        positive_zero |= v.to_bits() == 0;
        negative_zero |= v.to_bits() == 0x8000_0000;
    }
    if nan {
        return Err("a NaN value");
    }
    if positive_zero && negative_zero && (lo == 0.0 || hi == 0.0) {
        return Err("a channel's extreme is a zero of either sign");
    }
    // Both zeros present only matter when one is the extreme (checked above); otherwise the
    // extreme is the one value `min`/`max` agree on.
    Ok((lo, hi))
}

/// `torch.min(current, running)` (with `f32::lt`) or `torch.max` (with `f32::gt`): the
/// strictly smaller (larger) value, or either when they are the same value and the same bits.
fn combined(current: f32, running: f32, wins: fn(&f32, &f32) -> bool) -> Result<f32, NotModelled> {
    if running.is_nan() {
        return Err("a running extreme is NaN");
    }
    if current == running && current.to_bits() != running.to_bits() {
        return Err("a tie of opposite zeros with the running extreme");
    }
    Ok(if wins(&current, &running) {
        current
    } else {
        running
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_each_channel_with_its_row() {
        let x = [1.0f32, -2.0, 3.0, 0.5, 7.0, -1.0];
        let (mut lo, mut hi) = ([0.0f32, -5.0], [2.0f32, 6.0]);
        assert_eq!(update(&x, &mut lo, &mut hi), Ok(()));
        assert_eq!((lo, hi), ([-2.0, -5.0], [3.0, 7.0]));
    }

    #[test]
    fn ambiguous_batches_leave_the_extremes() {
        let cases: [(&[f32], [f32; 1], [f32; 1]); 4] = [
            (&[1.0, f32::NAN], [0.0], [1.0]),
            (&[0.0, -0.0, 1.0], [5.0], [9.0]),
            (&[-0.0, 3.0], [0.0], [9.0]),
            (&[1.0, 2.0], [f32::NAN], [9.0]),
        ];
        for (x, lo0, hi0) in cases {
            let (mut lo, mut hi) = (lo0, hi0);
            assert!(update(x, &mut lo, &mut hi).is_err(), "{x:?}");
            assert_eq!(
                (lo[0].to_bits(), hi[0].to_bits()),
                (lo0[0].to_bits(), hi0[0].to_bits())
            );
        }
    }

    #[test]
    fn both_zeros_away_from_the_extremes_are_modelled() {
        let (mut lo, mut hi) = ([0.5f32], [0.5f32]);
        assert_eq!(update(&[-1.0, 0.0, -0.0, 2.0], &mut lo, &mut hi), Ok(()));
        assert_eq!((lo, hi), ([-1.0], [2.0]));
    }
}
