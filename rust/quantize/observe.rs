//! The calibration side of `HistogramObserver` (torchao 0.18): what its `forward` does to a
//! batch whose values stay inside the observed range (`torch.histc` of the batch added to the
//! histogram), and `_upscale_histogram`'s bucketing (`torch.bucketize` + `torch.bincount`),
//! computed as torch's CPU kernels compute them.
//!
//! `torch.histc(x, bins, min, max)` on float32 (`histogramdd_cpu_contiguous`, linear
//! interpolation): an element outside `[left, right]` (or NaN) is skipped, the others go to
//! `int64((x - left) * bins / (right - left))` in float32 arithmetic, the last edge's element
//! to the last bin. `left`/`right` are the first and last of the float32 bin edges torch's
//! `linspace` makes (the caller takes them from `torch.linspace` itself). Per-thread counts of
//! 1.0 are summed: below 2^24 elements every count is an exact float32 integer, whatever the
//! threads.
//!
//! `torch.bucketize(v, b, right=True)` is torch's own binary search (`cus_upper_bound`):
//! reproduced as is where `b` is not sorted; on sorted `b` its result is the number of `b`
//! not greater than `v`, found by a search started from the previous value's bucket.
//! `torch.bincount(i, weights=w)` on float32 weights adds each weight to its bin in input
//! order (a serial loop): so does [`upscale`].

/// What [`observe_in_range`] did with a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// `out` holds the histogram plus the batch's counts.
    Added,
    /// Left to stock's `forward` (nothing written): a value outside the observed range (the
    /// range grows), an infinite or NaN value, a bin position torch computes with undefined
    /// behaviour (overflow), or a batch of 2^24 elements or more.
    NotModelled(&'static str),
}

/// The observed batch `x` added to `hist` into `out`, if every value is finite and inside
/// `[min_val, max_val]` (stock's forward then takes its "same range" path: `histc` with the
/// current range, added to the histogram). `left`/`right` are `torch.linspace(min_val,
/// max_val, bins + 1)`'s first and last values, `left < right`, both finite.
pub fn observe_in_range(
    x: &[f32],
    min_val: f32,
    max_val: f32,
    left: f32,
    right: f32,
    hist: &[f32],
    out: &mut [f32],
) -> Observed {
    match histc_in_range(x, min_val, max_val, left, right, hist.len()) {
        Ok(counts) => {
            for ((o, &h), &c) in out.iter_mut().zip(hist).zip(&counts) {
                *o = h + c as f32;
            }
            Observed::Added
        }
        Err(why) => Observed::NotModelled(why),
    }
}

/// [`observe_in_range`] with the sum written over `hist` itself: every count is taken before
/// the first write, so `hist` is untouched when the batch is not modelled.
pub fn observe_in_range_in_place(
    x: &[f32],
    min_val: f32,
    max_val: f32,
    left: f32,
    right: f32,
    hist: &mut [f32],
) -> Observed {
    match histc_in_range(x, min_val, max_val, left, right, hist.len()) {
        Ok(counts) => {
            for (h, &c) in hist.iter_mut().zip(&counts) {
                *h += c as f32;
            }
            Observed::Added
        }
        Err(why) => Observed::NotModelled(why),
    }
}

/// `torch.histc(x, bins)`'s counts with the bin edges `left`/`right`, if every value of `x`
/// is finite and inside `[min_val, max_val]`; else why not.
fn histc_in_range(
    x: &[f32],
    min_val: f32,
    max_val: f32,
    left: f32,
    right: f32,
    bins: usize,
) -> Result<Vec<u32>, &'static str> {
    if x.len() >= 1 << 24 {
        return Err("batch of 2^24 elements or more");
    }
    for &v in x {
        if !v.is_finite() {
            return Err("a value is infinite or NaN");
        }
        if v < min_val || v > max_val {
            return Err("the range grows");
        }
    }
    let last = bins as i64;
    let scale = bins as f32; // `num_bin_edges - 1`, int64 to float
    let width = right - left;
    let mut counts = vec![0u32; bins];
    for &v in x {
        if !(v >= left && v <= right) {
            continue;
        }
        let scaled = (v - left) * scale;
        if !scaled.is_finite() {
            // torch's int64 cast of an overflowed value is undefined (x86: i64::MIN, which its
            // pointer arithmetic happens to wrap onto bin 0): left to stock.
            return Err("a bin position overflows float32");
        }
        // static_cast<int64_t> truncates: 0 <= pos <= bins here (bins: the last edge).
        let mut pos = (scaled / width) as i64;
        if pos == last {
            pos -= 1;
        }
        let Some(count) = usize::try_from(pos).ok().and_then(|p| counts.get_mut(p)) else {
            return Err("a bin position outside the histogram");
        };
        *count += 1;
    }
    Ok(counts)
}

/// torch's `cus_upper_bound`: the binary search of `torch.bucketize(right=True)`. Its
/// negated comparison is torch's: a NaN compares as "not greater".
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn upper_bound(b: &[f32], v: f32) -> usize {
    let (mut start, mut end) = (0usize, b.len());
    while start < end {
        let mid = start + ((end - start) >> 1);
        if !(b[mid] > v) {
            start = mid + 1;
        } else {
            end = mid;
        }
    }
    start
}

/// On sorted `b`: the number of `b` not greater than `v` (what [`upper_bound`] returns
/// there), searched from `hint`.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn upper_bound_from(b: &[f32], v: f32, mut hint: usize) -> usize {
    while hint > 0 && b[hint - 1] > v {
        hint -= 1;
    }
    while hint < b.len() && !(b[hint] > v) {
        hint += 1;
    }
    hint
}

/// `_upscale_histogram`'s bucketing and sum: `hist` repeated `upsample` times and divided by
/// it, each piece put in `torch.bucketize(mids, boundaries, right=True) - 1` clamped to
/// `[0, bins - 1]`, summed per bucket in order (`torch.bincount`). `mids` has
/// `hist.len() * upsample` values, `out` `bins` (zeroed here).
pub fn upscale(hist: &[f32], upsample: usize, mids: &[f32], boundaries: &[f32], out: &mut [f32]) {
    out.fill(0.0);
    let bins = out.len();
    let sorted = boundaries.windows(2).all(|w| w[0] <= w[1]);
    let divisor = upsample as f32;
    let mut hint = 0;
    // The running sum of the current bucket is kept in `sum` and stored when the bucket
    // changes: the same float32 additions in the same order, without a store and reload
    // between consecutive pieces of one bucket.
    let (mut current, mut sum) = (0usize, 0.0f32);
    // The `upsample` pieces of one source bin are one float32 quotient: divided once.
    for (&h, pieces) in hist.iter().zip(mids.chunks(upsample.max(1))) {
        let weight = h / divisor;
        for &v in pieces {
            let found = if sorted && !v.is_nan() {
                hint = upper_bound_from(boundaries, v, hint);
                hint
            } else {
                upper_bound(boundaries, v)
            };
            let bucket = (found as i64 - 1).clamp(0, bins as i64 - 1) as usize;
            if bucket != current {
                out[current] = sum;
                current = bucket;
                sum = out[bucket];
            }
            sum += weight;
        }
    }
    out[current] = sum;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// The hinted search equals torch's binary search on sorted boundaries.
        #[test]
        fn hinted_search_is_torchs(mut b in prop::collection::vec(-1e3f32..1e3, 1..64),
                                   vs in prop::collection::vec(-2e3f32..2e3, 1..64),
                                   dup in 0usize..8) {
            b.sort_by(f32::total_cmp);
            if dup < b.len() {
                let d = b[dup];
                b.insert(dup, d);
            }
            let mut hint = 0;
            for v in vs.iter().copied().chain(b.iter().copied()) {
                hint = upper_bound_from(&b, v, hint);
                prop_assert_eq!(hint, upper_bound(&b, v));
            }
        }
    }

    #[test]
    fn histc_puts_the_right_edge_in_the_last_bin() {
        let hist = [0.0f32; 4];
        let mut out = [0.0f32; 4];
        let got = observe_in_range(&[0.0, 1.0, 0.5, 0.25], 0.0, 1.0, 0.0, 1.0, &hist, &mut out);
        assert_eq!(got, Observed::Added);
        assert_eq!(out, [1.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn in_place_equals_the_two_buffer_form_and_leaves_declined_batches() {
        let hist = [3.0f32, 0.0, 1.0, 7.0];
        let x = [0.1f32, 0.9, 0.5, 0.5, 1.0];
        let mut out = [0.0f32; 4];
        let mut in_place = hist;
        let a = observe_in_range(&x, 0.0, 1.0, 0.0, 1.0, &hist, &mut out);
        let b = observe_in_range_in_place(&x, 0.0, 1.0, 0.0, 1.0, &mut in_place);
        assert_eq!((a, b), (Observed::Added, Observed::Added));
        assert_eq!(out, in_place);
        let mut kept = hist;
        let got = observe_in_range_in_place(&[0.5, 2.0], 0.0, 1.0, 0.0, 1.0, &mut kept);
        assert!(matches!(got, Observed::NotModelled(_)));
        assert_eq!(kept, hist);
    }

    #[test]
    fn values_outside_the_range_are_not_modelled() {
        let hist = [0.0f32; 4];
        let mut out = [0.0f32; 4];
        for x in [[2.0f32], [-0.5], [f32::NAN], [f32::INFINITY]] {
            let got = observe_in_range(&x, 0.0, 1.0, 0.0, 1.0, &hist, &mut out);
            assert!(matches!(got, Observed::NotModelled(_)), "{x:?}");
        }
    }

    /// The per-piece form [`upscale`] replaced: each mid point's weight divided on its own.
    fn upscale_per_piece(hist: &[f32], upsample: usize, mids: &[f32], b: &[f32], out: &mut [f32]) {
        out.fill(0.0);
        let bins = out.len() as i64;
        for (j, &v) in mids.iter().enumerate() {
            let bucket = (upper_bound(b, v) as i64 - 1).clamp(0, bins - 1) as usize;
            out[bucket] += hist[j / upsample] / upsample as f32;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// [`upscale`] equals the per-piece form bit for bit, on sorted and unsorted
        /// boundaries and NaN mid points.
        #[test]
        fn upscale_is_the_per_piece_sum(hist in prop::collection::vec(0f32..1e6, 1..40),
                                        upsample in 1usize..20,
                                        mut b in prop::collection::vec(-2f32..2.0, 2..40),
                                        sort in any::<bool>(), nan in any::<bool>()) {
            if sort {
                b.sort_by(f32::total_cmp);
            }
            let n = hist.len() * upsample;
            let mut mids: Vec<f32> = (0..n).map(|j| -2.5 + 5.0 * j as f32 / n as f32).collect();
            if nan {
                mids[n / 2] = f32::NAN;
            }
            let bins = b.len() - 1;
            let (mut got, mut want) = (vec![0f32; bins], vec![0f32; bins]);
            upscale(&hist, upsample, &mids, &b, &mut got);
            upscale_per_piece(&hist, upsample, &mids, &b, &mut want);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&got), bits(&want));
        }
    }

    #[test]
    fn upscale_sums_in_order() {
        let mut out = [0.0f32; 2];
        upscale(
            &[2.0, 4.0],
            2,
            &[0.1, 0.3, 0.6, 0.9],
            &[0.0, 0.5, 1.0],
            &mut out,
        );
        assert_eq!(out, [2.0, 4.0]);
    }
}
