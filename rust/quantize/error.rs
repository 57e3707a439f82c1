//! The per-bin terms of `HistogramObserver._compute_quantization_error` (torchao 0.18), as
//! torch computes them, so that torch's own `norm.sum()` of them is stock's error bit for bit.
//!
//! Stock evaluates, for a candidate `[start_bin, end_bin]`, a chain of elementwise float32
//! tensor operations over the histogram's bins and sums the result. Every step is an IEEE
//! float32 operation on float32 values: Python floats meeting a float32 tensor are cast to
//! float32 first (type promotion), the int64 bin offsets are cast exactly (|offset| < 2^24),
//! torch's CPU kernels compute `a + b`, `a - b` (an fma with alpha ±1: exact products), `a * b`
//! and `a / b` with one rounding each. [`error_terms`] performs the same operations in the
//! same order on the same values, so each term is the same float32.
//!
//! The two non-IEEE steps:
//! - `torch.div(x, dst_bin_width, rounding_mode="floor")`: c10's `div_floor_floating`
//!   (fmod, then `(a - mod) / b` corrected and rounded to an integer). For a finite `a`, a
//!   finite `b > 0` and `|a / b| < 2^20` it returns the exact `floor(a / b)`: `(a - mod) / b` is
//!   within `|n| * 2^-23 < 1/8` of the integer `n = trunc(a / b)`, the "-1 when the remainder's
//!   sign differs" step and the final "floor, +1 above .5" round it to exactly `n` (a >= 0 or a
//!   remainder of zero) or `n - 1` (a < 0 with a remainder). [`floor_div`] computes that exact
//!   floor with an exact f64 check (products of a < 2^21 integer and a float32 are exact in
//!   f64) and declines outside that domain. The sign of a zero quotient is not modelled: the
//!   quotient only enters `(q + 0.5) * w`, `q * w + h` (h > 0) and `q1 - q0 - 1`, where a zero's
//!   sign cannot show.
//! - `torch.clamp(q, 0, dst_nbins - 1)`: `min(max(q, 0), dst_nbins - 1)` on finite values.
//!
//! A candidate outside that domain (a non-finite bin width or bin edge, a quotient of 2^20 or
//! more, a NaN term: NaN payloads depend on operand order) is [`Terms::NotModelled`]: the
//! caller computes it with torch's own method.

/// What [`error_terms`] did for one candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Terms {
    /// Stock returns `0.0` before computing anything (`dst_bin_width == 0.0`).
    Zero,
    /// `out` holds stock's `norm` tensor, term for term: its torch sum is stock's error.
    Filled,
    /// Outside the modelled domain (the reason): the caller runs stock's computation.
    NotModelled(&'static str),
}

/// Quotients at or above this magnitude are not modelled (see the module docs).
const QUOTIENT_LIMIT: f64 = 1_048_576.0; // 2^20

/// Exact `floor(a / b)` for finite `a`, finite `b > 0`, `|a / b| < 2^20`, which is what torch's
/// `div_floor_floating(a, b)` returns there; None outside that domain.
pub fn floor_div(a: f32, b: f32) -> Option<f32> {
    if !b.is_finite() || b <= 0.0 {
        return None;
    }
    let (q, modelled) = floor_div_flagged(a, f64::from(b));
    modelled.then_some(q)
}

/// [`floor_div`] for a divisor already known finite and positive, without branches (the
/// terms loop stays vectorizable): the quotient, and whether `a` is inside the domain (else
/// the quotient is meaningless).
#[inline(always)]
fn floor_div_flagged(a: f32, b: f64) -> (f32, bool) {
    let a = f64::from(a);
    let q = a / b;
    let modelled = a.is_finite() & (q.abs() < QUOTIENT_LIMIT - 1.0);
    // floor(q) by truncation (|q| < 2^20 here), without libm's floor
    let t = q as i64 as f64;
    let f = t - f64::from(u8::from(t > q));
    // f * b and (f + 1) * b are exact: |f| < 2^20, b has a 24-bit significand.
    let f = f - f64::from(u8::from(f * b > a)) + f64::from(u8::from((f + 1.0) * b <= a));
    (f as f32, modelled)
}

/// C++ `std::min(std::max(a, lo), hi)`, torch's scalar clamp (finite values here).
fn clamp(a: f32, lo: f32, hi: f32) -> f32 {
    let m = if a < lo { lo } else { a };
    if hi < m {
        hi
    } else {
        m
    }
}

/// `_get_norm`'s `(end^3 - begin^3) / 3`, each product rounded as torch's tensor ops round.
fn cube_difference(begin: f32, end: f32) -> f32 {
    (end * end * end - begin * begin * begin) / 3.0
}

/// A candidate's scalars as stock computes them: the Python floats of
/// `_compute_quantization_error`'s prologue and the float32 values they become where they meet
/// the tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scalars {
    /// `bin_width` as float32.
    pub w: f32,
    /// `dst_bin_width` as float32.
    pub dw: f32,
    /// `dst_bin_width / 2` as float32.
    pub half: f32,
    /// `dst_nbins - 1` as float32 (the clamp's upper bound).
    pub top: f32,
    /// The middle term's factor: `_get_norm(tensor(-dw/2), tensor(dw/2), density)`'s scalar.
    pub middle: f32,
}

/// What stock's prologue decides for a candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Setup {
    /// `dst_bin_width == 0.0`: stock returns `0.0`.
    Zero,
    /// The terms follow from these scalars.
    Ready(Scalars),
    /// Outside the modelled domain (the reason).
    NotModelled(&'static str),
}

/// Stock's prologue for the candidate `[start_bin, end_bin]` of a `bins`-bin histogram with
/// `min_val.item()`, `max_val.item()` and `dst_nbins` (`start_bin <= end_bin`).
pub fn setup(
    bins: usize,
    min_val: f64,
    max_val: f64,
    dst_nbins: u32,
    start_bin: usize,
    end_bin: usize,
) -> Setup {
    // Python floats, as stock computes them.
    let bin_width = (max_val - min_val) / bins as f64;
    let dst_bin_width = bin_width * (end_bin - start_bin + 1) as f64 / f64::from(dst_nbins);
    if dst_bin_width == 0.0 {
        return Setup::Zero;
    }
    // The float32 values those Python floats become in the tensor operations.
    let w = bin_width as f32;
    let dw = dst_bin_width as f32;
    let half = (dst_bin_width / 2.0) as f32;
    if !w.is_finite() {
        return Setup::NotModelled("bin width not finite in float32");
    }
    if !(dw.is_finite() && dw > 0.0) {
        return Setup::NotModelled("destination bin width not a positive float32");
    }
    Setup::Ready(Scalars {
        w,
        dw,
        half,
        top: (dst_nbins - 1) as f32,
        middle: cube_difference(-half, half),
    })
}

/// Stock's `norm` tensor for the candidate `[start_bin, end_bin]` into `out` (one term per
/// bin), from the histogram, `min_val.item()`, `max_val.item()` and `dst_nbins`: the reference
/// model, term by term in stock's order ([`fast_terms`] is its vectorised twin).
///
/// `hist` and `out` have the same length (stock's `bins`), `start_bin <= end_bin < bins`,
/// `bins < 2^24` (the caller checks).
pub fn error_terms(
    hist: &[f32],
    min_val: f64,
    max_val: f64,
    dst_nbins: u32,
    start_bin: usize,
    end_bin: usize,
    out: &mut [f32],
) -> Terms {
    let c = match setup(hist.len(), min_val, max_val, dst_nbins, start_bin, end_bin) {
        Setup::Zero => return Terms::Zero,
        Setup::NotModelled(why) => return Terms::NotModelled(why),
        Setup::Ready(c) => c,
    };
    let Scalars {
        w,
        dw,
        half,
        top,
        middle,
    } = c;
    let dw64 = f64::from(dw);
    let mut nan = false;
    let mut modelled = true;
    for (i, (&h, o)) in hist.iter().zip(out.iter_mut()).enumerate() {
        // (src_bin - next_start_bin) * bin_width: an int64 offset cast to float32.
        let begin = (i as i64 - start_bin as i64) as f32 * w;
        let end = begin + w;
        let (q_begin, begin_modelled) = floor_div_flagged(begin, dw64);
        let (q_end, end_modelled) = floor_div_flagged(end, dw64);
        modelled &= begin_modelled & end_modelled;
        let first = clamp(q_begin, 0.0, top);
        let last = clamp(q_end, 0.0, top);
        let density = h / w;
        let first_center = (first + 0.5) * dw;
        let mut norm = 0.0f32 + density * cube_difference(begin - first_center, half);
        norm += (last - first - 1.0) * (density * middle);
        let last_center = last * dw + half;
        norm += density * cube_difference(-half, end - last_center);
        nan |= norm.is_nan();
        *o = norm;
    }
    if !modelled {
        return Terms::NotModelled("bin edge quotient outside the modelled domain");
    }
    if nan {
        return Terms::NotModelled("a term is NaN");
    }
    Terms::Filled
}

/// Stock's `density = histogram / bin_width` (float32, one division per bin): the same for
/// every candidate of a search.
pub fn densities(hist: &[f32], w: f32) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { densities_avx512(hist, w) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above.
            return unsafe { densities_avx2(hist, w) };
        }
    }
    densities_body(hist, w)
}

/// [`densities`]' loop (IEEE divisions, the same quotients in any vector width).
#[inline(always)]
fn densities_body(hist: &[f32], w: f32) -> Vec<f32> {
    hist.iter().map(|&h| h / w).collect()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn densities_avx512(hist: &[f32], w: f32) -> Vec<f32> {
    densities_body(hist, w)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn densities_avx2(hist: &[f32], w: f32) -> Vec<f32> {
    densities_body(hist, w)
}

/// [`error_terms`]'s terms from the precomputed [`densities`] and the candidate's [`Scalars`],
/// each term the same float32 (the same operations on the same values; what does not depend
/// on the bin computed once, the floor quotients by a reciprocal product and an exact
/// correction), vectorised. Returns whether every term is modelled and not NaN (else `out`
/// is unspecified).
pub fn fast_terms(density: &[f32], start_bin: usize, c: &Scalars, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let fma = std::arch::is_x86_feature_detected!("fma");
        let f32_floor = fma && float32_floor_holds(density.len(), c);
        if std::arch::is_x86_feature_detected!("avx512f") && fma {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { fast_terms_avx512(density, start_bin, c, out, f32_floor) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && fma {
            // SAFETY: as above.
            return unsafe { fast_terms_avx2(density, start_bin, c, out, f32_floor) };
        }
    }
    terms_body::<false>(density, start_bin, c, out)
}

/// Whether the float32 floor ([`floor_div_fma`]) is exact for every bin edge of the
/// candidate: bin and destination widths of at least 2^-100 (so an edge's distance to a
/// multiple of the destination width, if not zero, is a normal float32 whatever the
/// denormal modes), a destination width of at most 2^100 (its reciprocal is a normal
/// float32) and fewer than 2^24 bins.
pub fn float32_floor_holds(bins: usize, c: &Scalars) -> bool {
    const SMALLEST: f32 = f32::from_bits((127 - 100) << 23); // 2^-100
    const LARGEST: f32 = f32::from_bits((127 + 100) << 23); // 2^100
    bins < 1 << 24 && c.w >= SMALLEST && c.dw >= SMALLEST && c.dw <= LARGEST
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
fn fast_terms_avx512(
    density: &[f32],
    start_bin: usize,
    c: &Scalars,
    out: &mut [f32],
    f32_floor: bool,
) -> bool {
    if f32_floor {
        terms_body::<true>(density, start_bin, c, out)
    } else {
        terms_body::<false>(density, start_bin, c, out)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fast_terms_avx2(
    density: &[f32],
    start_bin: usize,
    c: &Scalars,
    out: &mut [f32],
    f32_floor: bool,
) -> bool {
    if f32_floor {
        terms_body::<true>(density, start_bin, c, out)
    } else {
        terms_body::<false>(density, start_bin, c, out)
    }
}

/// The loop of [`fast_terms`], compiled once per instruction set; `F32_FLOOR` takes the
/// floor quotients with [`floor_div_fma`] (the caller checked [`float32_floor_holds`]), else
/// with [`floor_div_reciprocal`]. Rust never contracts `a * b + c` into an fma, so every
/// other operation rounds as its scalar twin in [`error_terms`].
#[inline(always)]
pub fn terms_body<const F32_FLOOR: bool>(
    density: &[f32],
    start_bin: usize,
    c: &Scalars,
    out: &mut [f32],
) -> bool {
    let Scalars {
        w,
        dw,
        half,
        top,
        middle,
    } = *c;
    let dw64 = f64::from(dw);
    let inv = 1.0 / dw64;
    let inv32 = 1.0 / dw;
    // Candidate-wide factors of the cube differences, in stock's operand order.
    let half_cubed = half * half * half;
    let neg_half_cubed = (-half) * (-half) * (-half);
    // Offsets below 2^24 (the caller checks): exact as i32 and as float32.
    let start = start_bin as i32;
    let n = density.len().min(out.len());
    if n == 0 {
        return true;
    }
    let edges = |i: usize| {
        let begin = (i as i32 - start) as f32 * w;
        (begin, begin + w)
    };
    let floor = |a: f32| {
        if F32_FLOOR {
            floor_div_fma(a, dw, inv32)
        } else {
            floor_div_reciprocal(a, dw64, inv)
        }
    };
    // The domain holds for every edge iff it holds for the first bin's begin and the last
    // bin's end (design.md: the edges are monotonic in the bin).
    if !(floor(edges(0).0).1 && floor(edges(n - 1).1).1) {
        return false;
    }
    let mut nan = false;
    for i in 0..n {
        let d = density[i];
        let (begin, end) = edges(i);
        let (q_begin, q_end) = if F32_FLOOR {
            (
                floor_fma_in_domain(begin, dw, inv32),
                floor_fma_in_domain(end, dw, inv32),
            )
        } else {
            (
                floor_reciprocal_in_domain(begin, dw64, inv),
                floor_reciprocal_in_domain(end, dw64, inv),
            )
        };
        let first = clamp(q_begin, 0.0, top);
        let last = clamp(q_end, 0.0, top);
        let first_center = (first + 0.5) * dw;
        let b = begin - first_center;
        let mut norm = 0.0f32 + d * ((half_cubed - b * b * b) / 3.0);
        norm += (last - first - 1.0) * (d * middle);
        let last_center = last * dw + half;
        let e = end - last_center;
        norm += d * ((e * e * e - neg_half_cubed) / 3.0);
        nan |= norm.is_nan();
        out[i] = norm;
    }
    !nan
}

/// The exact `floor(a / b)` in float32 (`b >= 2^-100`, see [`float32_floor_holds`]): the
/// floor of `a * (1 / b)` (within 1/8 of `a / b` for `|a / b| < 2^20`, so off by at most
/// one), corrected by the signs of `f * b - a` and `(f + 1) * b - a`, each computed exactly
/// and rounded once by an fma (rounding keeps a sign, and a nonzero difference here is at
/// least a normal float32). Declines (flag false) where `|q| >= 2^20 - 2` or `a` is not
/// finite, inside [`floor_div`]'s domain.
#[inline(always)]
fn floor_div_fma(a: f32, b: f32, inv: f32) -> (f32, bool) {
    let q = a * inv;
    let limit = QUOTIENT_LIMIT as f32;
    let modelled = a.is_finite() & (q.abs() < limit - 2.0);
    (
        fma_corrected(q.clamp(-limit, limit).floor(), a, b),
        modelled,
    )
}

/// [`floor_div_fma`]'s quotient for an `a` inside its domain (the caller checked the flag on
/// edges bounding `a`): the same operations without the domain test and the bound.
#[inline(always)]
fn floor_fma_in_domain(a: f32, b: f32, inv: f32) -> f32 {
    fma_corrected((a * inv).floor(), a, b)
}

/// `f`, a floor of `a / b` off by at most one, corrected to the exact floor by the signs of
/// `f * b - a` and `(f + 1) * b - a`, each rounded once by an fma.
#[inline(always)]
fn fma_corrected(f: f32, a: f32, b: f32) -> f32 {
    let over = f.mul_add(b, -a) > 0.0;
    let under = (f + 1.0).mul_add(b, -a) <= 0.0;
    f - if over { 1.0 } else { 0.0 } + if under { 1.0 } else { 0.0 }
}

/// [`floor_div_reciprocal`]'s quotient for an `a` inside its domain, as
/// [`floor_fma_in_domain`].
#[inline(always)]
fn floor_reciprocal_in_domain(a: f32, b: f64, inv: f64) -> f32 {
    let a = f64::from(a);
    reciprocal_corrected((a * inv).floor(), a, b) as f32
}

/// `f`, a floor of `a / b` off by at most one, corrected to the exact floor by the exact f64
/// products `f * b` and `(f + 1) * b` (`|f| <= 2^20`, `b` a float32).
#[inline(always)]
fn reciprocal_corrected(f: f64, a: f64, b: f64) -> f64 {
    f - f64::from(u8::from(f * b > a)) + f64::from(u8::from((f + 1.0) * b <= a))
}

/// [`floor_div_flagged`] with the quotient from a product by `inv = 1 / b` (within a few ulps
/// of `a / b`, so its floor is off by at most one for `|q| < 2^20`), corrected by the same
/// exact checks; declines a little earlier (`|q| < 2^20 - 2`) so the domain stays inside
/// [`floor_div`]'s.
#[inline(always)]
fn floor_div_reciprocal(a: f32, b: f64, inv: f64) -> (f32, bool) {
    let a = f64::from(a);
    let q = a * inv;
    let modelled = a.is_finite() & (q.abs() < QUOTIENT_LIMIT - 2.0);
    // Bounded so the products stay exact even where the flag declines.
    let f = q.clamp(-QUOTIENT_LIMIT, QUOTIENT_LIMIT).floor();
    (reciprocal_corrected(f, a, b) as f32, modelled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// c10's `div_floor_floating` (c10/util/generic_math.h), transcribed.
    fn c10_div_floor(a: f32, b: f32) -> f32 {
        if b == 0.0 {
            return a / b;
        }
        let m = a % b; // fmod
        let mut div = (a - m) / b;
        if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
            div -= 1.0;
        }
        if div != 0.0 {
            let mut f = div.floor();
            if div - f > 0.5 {
                f += 1.0;
            }
            f
        } else {
            0.0f32.copysign(a / b)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20000, ..ProptestConfig::default() })]

        /// The exact floor equals c10's algorithm wherever it does not decline.
        #[test]
        fn floor_div_is_c10s(a in any::<f32>(), b in any::<f32>()) {
            if let Some(f) = floor_div(a, b) {
                prop_assert_eq!(f, c10_div_floor(a, b), "a={:e} b={:e}", a, b);
            }
        }

        /// Same, on the quotients histograms make: bin offsets times a width, over a
        /// destination width.
        #[test]
        fn floor_div_on_bin_edges(offset in -2048i32..2048, w in 1e-30f32..1e30,
                                  k in 1u32..2049, dst in prop::sample::select(vec![256u32, 65536])) {
            let a = offset as f32 * w;
            let b = (f64::from(w) * f64::from(k) / f64::from(dst)) as f32;
            for a in [a, a + w] {
                if let Some(f) = floor_div(a, b) {
                    prop_assert_eq!(f, c10_div_floor(a, b), "a={:e} b={:e}", a, b);
                }
            }
        }

        /// Same, next to integer quotients: `a` within two ulps of `n * b`.
        #[test]
        fn floor_div_near_integers(n in -1_048_000i32..1_048_000, b in 1e-30f32..1e30,
                                   nudge in -2i32..=2) {
            let a = (f64::from(n) * f64::from(b)) as f32;
            let a = f32::from_bits((a.to_bits() as i32 + nudge) as u32);
            if let Some(f) = floor_div(a, b) {
                prop_assert_eq!(f, c10_div_floor(a, b), "a={:e} b={:e}", a, b);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 20000, ..ProptestConfig::default() })]

        /// The float32 fma floor equals the exact floor next to integer quotients and on bin
        /// edges, wherever it does not decline, for divisors in its domain.
        #[test]
        fn fma_floor_is_the_exact_floor(n in -1_048_000i32..1_048_000, b in 7.9e-31f32..1.2e30,
                                        nudge in -3i32..=3, offset in -2048i32..2048,
                                        w in 7.9e-31f32..1e30) {
            let a = (f64::from(n) * f64::from(b)) as f32;
            let a = f32::from_bits((a.to_bits() as i32 + nudge) as u32);
            let edge = offset as f32 * w;
            for (a, b) in [(a, b), (edge, b), (edge + w, b)] {
                let (f, ok) = floor_div_fma(a, b, 1.0 / b);
                if ok {
                    prop_assert_eq!(Some(f), floor_div(a, b), "a={:e} b={:e}", a, b);
                }
            }
        }
    }

    #[test]
    fn floor_div_declines_outside_its_domain() {
        assert_eq!(floor_div(f32::INFINITY, 1.0), None);
        assert_eq!(floor_div(1.0, 0.0), None);
        assert_eq!(floor_div(1.0, -1.0), None);
        assert_eq!(floor_div(2e6, 1.0), None);
        assert_eq!(floor_div(-7.0, 2.0), Some(-4.0));
    }

    #[test]
    fn zero_width_is_zero() {
        let mut out = [0f32; 4];
        assert_eq!(
            error_terms(&[1.0; 4], 1.0, 1.0, 256, 0, 3, &mut out),
            Terms::Zero
        );
    }

    #[test]
    fn infinite_range_is_not_modelled() {
        let mut out = [0f32; 4];
        let got = error_terms(&[1.0; 4], -3e38, 3e38, 256, 0, 3, &mut out);
        assert!(matches!(got, Terms::NotModelled(_)), "{got:?}");
    }
}
