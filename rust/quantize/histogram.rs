//! The bound walk of `HistogramObserver._non_linear_param_search` (torchao 0.18, and its
//! `torch.ao.quantization` twin).
//!
//! Stock walks two quantile bounds `alpha` (up from 0) and `beta` (down from 1) in steps of
//! 1e-5 (Python floats, f64) and, at every step, finds the bins `l`/`r` where the cumulative
//! histogram crosses them. Most steps move neither bin; the few that do yield a candidate whose
//! quantization error stock then computes. [`next_candidate`] runs the steps up to the next
//! candidate, so the caller computes each candidate's error (torch's own code) and decides,
//! as stock does, whether the walk goes on.
//!
//! The comparisons are stock's exactly: `cSum[l] < next_alpha * total` compares a float32 0-dim
//! tensor with a Python float, which torch's type promotion casts to float32 (round to
//! nearest, overflow to infinity, NaN stays NaN) before an IEEE float32 comparison. Here the
//! product is an f64 product and `as f32` is that cast.

/// Where the walk stands between two candidates: the bounds and the bins they last moved to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Walk {
    /// Lower quantile bound (stock's `alpha`).
    pub alpha: f64,
    /// Upper quantile bound (stock's `beta`).
    pub beta: f64,
    /// First bin kept (stock's `start_bin`).
    pub start_bin: usize,
    /// Last bin kept (stock's `end_bin`).
    pub end_bin: usize,
}

/// Stock's step between quantile bounds.
pub const STEP: f64 = 1e-5;

/// The walk's first state for a histogram of `bins` bins (`bins >= 1`).
pub fn start(bins: usize) -> Walk {
    Walk {
        alpha: 0.0,
        beta: 1.0,
        start_bin: 0,
        end_bin: bins - 1,
    }
}

/// A walk state the kernel cannot continue from (stock's bins always satisfy these).
#[derive(Debug, PartialEq, Eq)]
pub enum WalkError {
    /// `start_bin > end_bin` or `end_bin` outside the histogram.
    BinsOutOfRange {
        start: usize,
        end: usize,
        bins: usize,
    },
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WalkError::BinsOutOfRange { start, end, bins } => write!(
                f,
                "walk bins out of range: start_bin {start}, end_bin {end}, {bins} bins"
            ),
        }
    }
}

impl std::error::Error for WalkError {}

/// Stock's `while alpha < beta` loop from `walk` up to the first step that moves a bin.
///
/// Returns `Some((walk', next_start_bin, next_end_bin))` for that step: `walk'` has the bounds
/// stock holds when it computes the candidate's error (the bins still `walk`'s); if stock
/// accepts the candidate its next state is `walk'` with the candidate's bins. Returns `None`
/// when the loop ends first (stock then keeps `walk`'s bins).
pub fn next_candidate(
    csum: &[f32],
    total: f64,
    walk: Walk,
) -> Result<Option<(Walk, usize, usize)>, WalkError> {
    let Walk {
        mut alpha,
        mut beta,
        start_bin,
        end_bin,
    } = walk;
    if start_bin > end_bin || end_bin >= csum.len() {
        return Err(WalkError::BinsOutOfRange {
            start: start_bin,
            end: end_bin,
            bins: csum.len(),
        });
    }
    // The quiet steps below can be skipped where their stop is monotonic (see `skip_quiet`).
    let skippable = total.is_finite() && total >= 0.0;
    while alpha < beta {
        let next_alpha = alpha + STEP;
        let next_beta = beta - STEP;
        // torch casts the Python float to the tensor's float32 before comparing.
        let lower = (next_alpha * total) as f32;
        let upper = (next_beta * total) as f32;
        let mut l = start_bin;
        while l < end_bin && csum[l] < lower {
            l += 1;
        }
        let mut r = end_bin;
        while r > start_bin && csum[r] > upper {
            r -= 1;
        }
        let (mut next_start, mut next_end) = (start_bin, end_bin);
        if l - start_bin > end_bin - r {
            next_start = l;
            alpha = next_alpha;
        } else {
            next_end = r;
            beta = next_beta;
        }
        if next_start != start_bin || next_end != end_bin {
            let moved = Walk {
                alpha,
                beta,
                start_bin,
                end_bin,
            };
            return Ok(Some((moved, next_start, next_end)));
        }
        if skippable {
            // A quiet step (l == start_bin, r == end_bin): until the loop ends or r moves,
            // every step is one more `beta -= STEP` with the same alpha, so the same l.
            let last = csum[end_bin];
            let movable = end_bin > start_bin;
            // The loop's condition `alpha < b` (false on NaN) ends the run as well.
            let loop_ends = |b: f64| alpha.partial_cmp(&b) != Some(std::cmp::Ordering::Less);
            beta = skip_quiet(beta, |b| {
                loop_ends(b) || (movable && last > ((b - STEP) * total) as f32)
            });
        }
    }
    Ok(None)
}

/// Where a run of quiet steps ends: the first of `b_0 = beta`, `b_{j+1} = b_j - STEP` (f64
/// subtractions) at which `stops` holds. `stops` must be monotonic along the sequence (false,
/// then true from some step on) and must hold once `b` is at or below 0.
///
/// Within a binade the sequence is arithmetic (design.md): `b_j - STEP` rounds to
/// `b_j - D`, `D` the multiple of the binade's ulp nearest `STEP`, as long as it stays in the
/// binade and `STEP` is not halfway between two multiples. Such a stretch is searched by
/// bisection; the steps that leave a binade, and every step below `2^-15` or in a binade
/// where `STEP` is a tie, are taken one at a time.
pub fn skip_quiet(mut b: f64, stops: impl Fn(f64) -> bool) -> f64 {
    loop {
        if stops(b) {
            return b;
        }
        if let Some(stretch) = Stretch::from_beta(b) {
            let m = stretch.steps;
            if m > 0 {
                if stops(stretch.at(m)) {
                    // the first j in 1..=m where stops holds (it fails at 0)
                    let (mut lo, mut hi) = (0u64, m);
                    while hi - lo > 1 {
                        let mid = lo + (hi - lo) / 2;
                        if stops(stretch.at(mid)) {
                            hi = mid;
                        } else {
                            lo = mid;
                        }
                    }
                    return stretch.at(hi);
                }
                b = stretch.at(m);
                continue;
            }
        }
        b -= STEP;
    }
}

/// An arithmetic stretch of the quiet steps from `b_0` (see [`skip_quiet`]), in units of the
/// binade's ulp `u`: `b_j = (start - j * step) * u` for `j` in `0..=steps`.
struct Stretch {
    start: i64,
    step: i64,
    steps: u64,
    ulp: f64,
}

impl Stretch {
    /// The stretch from `b` (None: take the step one at a time).
    fn from_beta(b: f64) -> Option<Stretch> {
        // Binades from 2^-15 up: their ulp 2^(e-52) is at least 4x STEP's (2^-69).
        if !(b >= f64::powi(2.0, -15) && b < f64::powi(2.0, 1023)) {
            return None;
        }
        let bits = b.to_bits();
        let e = ((bits >> 52) & 0x7ff) as i32 - 1023;
        let start = ((bits & ((1 << 52) - 1)) | (1 << 52)) as i64; // b / u
        let s_bits = STEP.to_bits();
        let s_exp = ((s_bits >> 52) & 0x7ff) as i32 - 1023 - 52; // STEP's ulp: 2^s_exp
        let s_int = ((s_bits & ((1 << 52) - 1)) | (1 << 52)) as i128; // STEP / 2^s_exp
        let shift = (e - 52) - s_exp; // u = 2^shift STEP-ulps
        if !(2..64).contains(&shift) {
            return None;
        }
        let unit = 1i128 << shift;
        let (whole, rest) = (s_int >> shift, s_int & (unit - 1));
        if rest == unit / 2 {
            return None; // a tie: the rounding depends on b's last bit
        }
        let step = (whole + i128::from(rest > unit / 2)) as i64; // nearest multiple: D / u
        if step == 0 {
            return None;
        }
        // Steps from b_j stay in the binade while b_j - STEP >= 2^e, in STEP-ulps:
        // (start - j * step) * unit - s_int >= 2^52 * unit.
        let room = i128::from(start) * unit - s_int - (1i128 << 52) * unit;
        let steps = if room < 0 {
            0
        } else {
            (room / (i128::from(step) * unit)) as u64 + 1
        };
        Some(Stretch {
            start,
            step,
            steps,
            ulp: f64::powi(2.0, e - 52),
        })
    }

    /// `b_j`, exactly: an integer below 2^53 times a power of two.
    fn at(&self, j: u64) -> f64 {
        (self.start - j as i64 * self.step) as f64 * self.ulp
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Stock's loop with every candidate's error given by `error(start, end)`: the (start, end)
    /// bins the search ends with.
    fn search(csum: &[f32], total: f64, error: impl Fn(usize, usize) -> f64) -> (usize, usize) {
        let mut walk = start(csum.len());
        let mut norm_min = f64::INFINITY;
        while let Some((moved, s, e)) = next_candidate(csum, total, walk).unwrap() {
            let norm = error(s, e);
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
        (walk.start_bin, walk.end_bin)
    }

    fn cumsum(h: &[f32]) -> Vec<f32> {
        h.iter()
            .scan(0f32, |acc, &x| {
                *acc += x;
                Some(*acc)
            })
            .collect()
    }

    /// Stock's loop one step at a time (no quiet steps skipped): the reference.
    fn stepwise(csum: &[f32], total: f64, walk: Walk) -> Option<(Walk, usize, usize)> {
        let Walk {
            mut alpha,
            mut beta,
            start_bin,
            end_bin,
        } = walk;
        while alpha < beta {
            let (next_alpha, next_beta) = (alpha + STEP, beta - STEP);
            let (lower, upper) = ((next_alpha * total) as f32, (next_beta * total) as f32);
            let mut l = start_bin;
            while l < end_bin && csum[l] < lower {
                l += 1;
            }
            let mut r = end_bin;
            while r > start_bin && csum[r] > upper {
                r -= 1;
            }
            let (mut next_start, mut next_end) = (start_bin, end_bin);
            if l - start_bin > end_bin - r {
                next_start = l;
                alpha = next_alpha;
            } else {
                next_end = r;
                beta = next_beta;
            }
            if next_start != start_bin || next_end != end_bin {
                let moved = Walk {
                    alpha,
                    beta,
                    start_bin,
                    end_bin,
                };
                return Some((moved, next_start, next_end));
            }
        }
        None
    }

    /// The bits of a candidate (f64 bounds compared bit for bit).
    fn bits(c: Option<(Walk, usize, usize)>) -> Option<(u64, u64, usize, usize, usize, usize)> {
        c.map(|(w, s, e)| {
            (
                w.alpha.to_bits(),
                w.beta.to_bits(),
                w.start_bin,
                w.end_bin,
                s,
                e,
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        /// The walk with its quiet steps skipped finds stock's next candidate, bounds bit for
        /// bit, from walks anywhere in the loop: random counts (negative and non-finite
        /// ones too), totals of either sign, bounds and bins.
        #[test]
        fn skipped_walk_is_the_stepwise_walk(
            counts in prop::collection::vec(-3i16..60, 1..48),
            special in prop::sample::select(vec![None, Some(f32::NAN), Some(f32::INFINITY), Some(-1e30)]),
            at in any::<prop::sample::Index>(),
            total_factor in prop::sample::select(vec![1.0f64, 1.0000001, 0.999, 2.0, 0.0, -1.0]),
            alpha in prop::sample::select(vec![0.0f64, 1e-5, 0.013, 0.2, 0.4999]),
            beta in prop::sample::select(vec![1.0f64, 0.99999, 0.75, 0.5, 0.5000001, 0.25, 3.1e-5, 1e-5]),
            bins in (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
        ) {
            let mut h: Vec<f32> = counts.iter().map(|&c| f32::from(c)).collect();
            if let Some(v) = special {
                let i = at.index(h.len());
                h[i] = v;
            }
            let c = cumsum(&h);
            let total = f64::from(*c.last().unwrap()) * total_factor;
            let (a, b) = (bins.0.index(h.len()), bins.1.index(h.len()));
            let walk = Walk { alpha, beta, start_bin: a.min(b), end_bin: a.max(b) };
            prop_assert_eq!(bits(next_candidate(&c, total, walk).unwrap()), bits(stepwise(&c, total, walk)));
        }

        /// Skipping reaches the first value of the f64 sequence `b -= STEP` at which a
        /// threshold stops it, from any start, as stepping does.
        #[test]
        fn skip_quiet_is_stepping(b0 in 1e-7f64..1.5, cut in 0.0f64..1.0, over in prop::bool::ANY) {
            let t = b0 * cut;
            let stops = |b: f64| if over { b - STEP <= t } else { b <= t };
            let mut want = b0;
            while !stops(want) {
                want -= STEP;
            }
            prop_assert_eq!(skip_quiet(b0, stops).to_bits(), want.to_bits());
        }
    }

    #[test]
    fn stretches_are_the_f64_sequence() {
        // Every binade the walk meets: each stretch's closed form is the subtraction's result.
        for e in -15..=0 {
            for b0 in [
                f64::powi(2.0, e),
                f64::powi(2.0, e) * 1.7,
                f64::powi(2.0, e + 1) - 1e-12,
            ] {
                let s = Stretch::from_beta(b0).expect("modelled binade");
                let mut b = b0;
                for j in 0..=s.steps.min(200_000) {
                    assert_eq!(s.at(j).to_bits(), b.to_bits(), "e {e} b0 {b0} j {j}");
                    b -= STEP;
                }
            }
        }
    }

    #[test]
    fn one_bin_never_moves() {
        assert_eq!(next_candidate(&[3.0], 3.0, start(1)).unwrap(), None);
    }

    #[test]
    fn all_mass_in_one_bin_closes_below_it() {
        // Stock ends on the bin before the spike: cSum is 0 there, the spike's cSum is above
        // every upper bound (checked against torchao's loop with a zero error).
        let mut h = vec![0f32; 16];
        h[5] = 10.0;
        let c = cumsum(&h);
        assert_eq!(search(&c, 10.0, |_, _| 0.0), (4, 4));
    }

    #[test]
    fn nan_total_moves_nothing() {
        let c = cumsum(&[1.0, f32::NAN, 2.0]);
        assert_eq!(next_candidate(&c, f64::NAN, start(3)).unwrap(), None);
    }

    #[test]
    fn first_candidate_moves_the_end_on_ties() {
        // Uniform: the first step moves neither side further than the other; stock moves the end.
        let c = cumsum(&[1.0; 4]);
        let (moved, s, e) = next_candidate(&c, 4.0, start(4)).unwrap().unwrap();
        assert_eq!((s, e), (0, 2));
        assert_eq!(moved.beta, 1.0 - STEP);
        assert_eq!(moved.alpha, 0.0);
    }

    #[test]
    fn comparison_is_in_float32() {
        // next_alpha * total is 0.5 + 1e-12 in f64, 0.5 in f32: compared in f64 the start bin
        // would move to 3; in f32 (torch) it stays and the end bin moves.
        let c = [0.5f32, 0.5, 0.5, 1.0];
        let walk = Walk {
            alpha: 0.5 + 1e-12 - STEP,
            ..start(4)
        };
        let (_, s, e) = next_candidate(&c, 1.0, walk).unwrap().unwrap();
        assert_eq!((s, e), (0, 2));
    }

    #[test]
    fn rejects_bins_outside_the_histogram() {
        let walk = Walk {
            end_bin: 4,
            ..start(4)
        };
        assert!(next_candidate(&[0.0; 4], 0.0, walk).is_err());
        let walk = Walk {
            start_bin: 3,
            end_bin: 2,
            ..start(4)
        };
        assert!(next_candidate(&[0.0; 4], 0.0, walk).is_err());
    }
}
