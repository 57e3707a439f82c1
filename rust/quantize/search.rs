//! `HistogramObserver._non_linear_param_search` whole, in one call: torch's `sum` and `cumsum`
//! of the histogram ([`super::reduce`]), the bound walk ([`super::histogram`]), every
//! candidate's error (the terms of [`super::error`], summed as torch's `norm.sum()`), stock's
//! stop (`norm > norm_min`, on the float32 sums widened to f64 as `.item()` does) and the
//! returned `(min, max)`'s float32 arithmetic.
//!
//! Anything outside the modelled domain (a candidate whose terms are not modelled, a histogram
//! too long for a serial sum) returns [`Searched::NotModelled`]: nothing was changed, the caller
//! runs the search its other way.

use super::error::{densities, fast_terms, setup, Setup};
use super::histogram::{next_candidate, start, Walk};
use super::reduce::{torch_cumsum, torch_sum};

/// The outcome of [`search`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Searched {
    /// Stock's result: the final bins, how many candidates' errors were computed, and
    /// `min_val + bin_width * start_bin`, `min_val + bin_width * (end_bin + 1)` (float32).
    Found {
        start_bin: usize,
        end_bin: usize,
        candidates: usize,
        new_min: f32,
        new_max: f32,
    },
    /// Not modelled (the reason).
    NotModelled(&'static str),
}

/// Stock's search on a float32 histogram (`1 <= hist.len() < 2^24`) with 0-dim float32
/// `min_val`/`max_val`, `dst_nbins >= 1`, on a CPU whose `Vectorized<float>` has `lanes` lanes.
pub fn search(hist: &[f32], min_val: f32, max_val: f32, dst_nbins: u32, lanes: usize) -> Searched {
    let bins = hist.len();
    let Some(total) = torch_sum(hist, lanes) else {
        return Searched::NotModelled("histogram sum not modelled (length or lanes)");
    };
    let total = f64::from(total);
    let mut csum = vec![0f32; bins];
    torch_cumsum(hist, &mut csum);
    let (lo, hi) = (f64::from(min_val), f64::from(max_val));
    let mut density: Option<Vec<f32>> = None;
    let mut terms = vec![0f32; bins];
    let mut walk = start(bins);
    let mut norm_min = f64::INFINITY;
    let mut candidates = 0;
    loop {
        let (moved, next_start, next_end) = match next_candidate(&csum, total, walk) {
            Ok(Some(found)) => found,
            Ok(None) => break,
            Err(_) => return Searched::NotModelled("walk left the histogram"),
        };
        candidates += 1;
        let norm = match setup(bins, lo, hi, dst_nbins, next_start, next_end) {
            Setup::Zero => 0.0,
            Setup::NotModelled(why) => return Searched::NotModelled(why),
            Setup::Ready(c) => {
                let d = density.get_or_insert_with(|| densities(hist, c.w));
                if !fast_terms(d, next_start, &c, &mut terms) {
                    return Searched::NotModelled("a candidate's terms are not modelled");
                }
                match torch_sum(&terms, lanes) {
                    Some(s) => f64::from(s),
                    None => return Searched::NotModelled("error sum not modelled"),
                }
            }
        };
        if norm > norm_min {
            break;
        }
        norm_min = norm;
        walk = Walk {
            start_bin: next_start,
            end_bin: next_end,
            ..moved
        };
    }
    // Stock's tensor expressions on 0-dim float32 tensors, a Python int operand cast to
    // float32 (exact below 2^24): (max - min) / bins, then min + bin_width * bin.
    let bin_width = (max_val - min_val) / bins as f32;
    Searched::Found {
        start_bin: walk.start_bin,
        end_bin: walk.end_bin,
        candidates,
        new_min: min_val + bin_width * walk.start_bin as f32,
        new_max: min_val + bin_width * (walk.end_bin + 1) as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::super::error::{error_terms, float32_floor_holds, terms_body, Terms};
    use super::*;
    use proptest::prelude::*;

    /// The search with the reference terms ([`error_terms`]) and a plain serial sum in place
    /// of torch's: the same candidates, so the same walk wherever the sums order the same.
    fn reference_bins(hist: &[f32], lo: f32, hi: f32, dst: u32) -> Option<(usize, usize)> {
        let bins = hist.len();
        let mut csum = vec![0f32; bins];
        torch_cumsum(hist, &mut csum);
        let total = f64::from(torch_sum(hist, 8)?);
        let mut walk = start(bins);
        let mut norm_min = f64::INFINITY;
        let mut out = vec![0f32; bins];
        while let Some((moved, s, e)) = next_candidate(&csum, total, walk).unwrap() {
            let norm = match error_terms(hist, lo.into(), hi.into(), dst, s, e, &mut out) {
                Terms::Zero => 0.0,
                Terms::Filled => f64::from(torch_sum(&out, 8)?),
                Terms::NotModelled(_) => return None,
            };
            if norm > norm_min {
                break;
            }
            norm_min = norm;
            walk = Walk {
                start_bin: s,
                end_bin: e,
                ..moved
            };
        }
        Some((walk.start_bin, walk.end_bin))
    }

    fn histogram(counts: &[u16], spike: usize) -> Vec<f32> {
        let mut h: Vec<f32> = counts.iter().map(|&c| f32::from(c % 50)).collect();
        let n = h.len();
        h[spike % n] += 1000.0;
        h
    }

    /// Counts with values near float32's limits, negative and non-finite ones at drawn bins.
    fn with_specials(mut h: Vec<f32>, specials: &[(usize, f32)]) -> Vec<f32> {
        let n = h.len();
        for &(at, v) in specials {
            h[at % n] = v;
        }
        h
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// The vectorised terms equal the reference terms bit for bit, and decline alike.
        #[test]
        fn fast_terms_are_the_reference_terms(
            counts in prop::collection::vec(any::<u16>(), 1..600),
            lo in -1e4f32..1e4,
            span in prop::sample::select(vec![0.0f32, 1e-35, 1e-30, 1e-6, 1.0, 7e3, 1e28, 1e30, 3e38]),
            start_frac in 0.0f64..1.0, len_frac in 0.0f64..1.0,
            dst in prop::sample::select(vec![1u32, 256, 65536]),
            specials in prop::collection::vec((any::<usize>(), prop::sample::select(vec![
                0.0f32, -0.0, 1e-45, 1e-38, 3e38, -1.0, 0.0625, f32::INFINITY, f32::NAN,
            ])), 0..4),
        ) {
            let hist = with_specials(histogram(&counts, 0), &specials);
            let bins = hist.len();
            let s = ((bins as f64 * start_frac) as usize).min(bins - 1);
            let e = s + ((bins - s) as f64 * len_frac) as usize;
            let e = e.min(bins - 1);
            let (lo64, hi64) = (f64::from(lo), f64::from(lo + span));
            let mut want = vec![0f32; bins];
            let reference = error_terms(&hist, lo64, hi64, dst, s, e, &mut want);
            if let Setup::Ready(c) = setup(bins, lo64, hi64, dst, s, e) {
                let d = densities(&hist, c.w);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let mut got = vec![0f32; bins];
                let ok = fast_terms(&d, s, &c, &mut got);
                let mut plain = vec![0f32; bins];
                let plain_ok = terms_body::<false>(&d, s, &c, &mut plain);
                // Never accepts what the reference declines.
                prop_assert!(reference == Terms::Filled || !(ok || plain_ok));
                if reference == Terms::Filled {
                    prop_assert!(ok && plain_ok);
                    prop_assert_eq!(bits(&got), bits(&want));
                    prop_assert_eq!(bits(&plain), bits(&want));
                }
                if float32_floor_holds(bins, &c) {
                    // The float32 floor, vectorised or not (std's mul_add is an exact fma).
                    let mut f32_floor = vec![0f32; bins];
                    let f32_ok = terms_body::<true>(&d, s, &c, &mut f32_floor);
                    prop_assert!(reference == Terms::Filled || !f32_ok);
                    if reference == Terms::Filled {
                        prop_assert!(f32_ok);
                        prop_assert_eq!(bits(&f32_floor), bits(&want));
                    }
                }
            }
        }

        /// The fused search ends on the reference's bins.
        #[test]
        fn search_is_the_reference(
            counts in prop::collection::vec(any::<u16>(), 1..400), spike in any::<usize>(),
            lo in -10f32..0.0, span in 0.1f32..20.0,
        ) {
            let hist = histogram(&counts, spike);
            if let Some(want) = reference_bins(&hist, lo, lo + span, 256) {
                match search(&hist, lo, lo + span, 256, 8) {
                    Searched::Found { start_bin, end_bin, .. } => {
                        prop_assert_eq!((start_bin, end_bin), want);
                    }
                    Searched::NotModelled(why) => prop_assert!(false, "{}", why),
                }
            }
        }
    }

    #[test]
    fn zero_range_returns_the_walks_bins() {
        // Every error is 0.0: the walk runs to the end as stock's does.
        let mut h = vec![1f32; 16];
        h[3] = 50.0;
        let got = search(&h, 2.0, 2.0, 256, 8);
        assert!(
            matches!(got, Searched::Found { new_min, new_max, .. }
            if new_min == 2.0 && new_max == 2.0),
            "{got:?}"
        );
    }

    #[test]
    fn infinite_range_is_not_modelled() {
        let got = search(&[1.0, 2.0, 1.0, 3.0], -3e38, 3e38, 256, 8);
        assert!(matches!(got, Searched::NotModelled(_)), "{got:?}");
    }
}
