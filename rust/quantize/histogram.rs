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
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

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
