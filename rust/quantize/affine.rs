//! Per-tensor affine quantization of constant tensors, as torch's CPU kernels compute it.
//!
//! `quantized_decomposed.quantize_per_tensor(x, scale, zero_point, qmin, qmax, dtype)` on
//! float32 is `clamp(round(x * (1.0 / scale)) + zero_point, qmin, qmax).to(dtype)`. Every step
//! is one float32 operation per element: the Python float `1.0 / scale` and the Python ints
//! meet the tensor as float32 scalars (round to nearest), `*` and `+` round once (torch's add
//! with alpha 1 is an fma with 1.0: one rounding), `round` is round-half-to-even, `clamp` is
//! `min(max(v, qmin), qmax)`, and the cast of an integral value inside the type's range is
//! exact. [`quantize_per_tensor`] does the same steps; a NaN (whose integer cast torch leaves
//! undefined) is not modelled.
//!
//! Dequantizing integer codes is a function of the code alone: [`gather`] maps each code
//! through a table the caller computes with torch's own dequantization of every code.

/// An integer code type of a quantized tensor: int8, uint8 or int16.
pub trait Code: Copy {
    /// The type's smallest value as i32 (the first entry of a code table).
    const MIN: i32;
    /// Number of codes (the length of a code table).
    const COUNT: usize;
    /// `v`, an integral float32 inside the type's range, converted exactly.
    fn from_integral(v: f32) -> Self;
    /// The code's index in a table starting at [`Code::MIN`].
    fn index(self) -> usize;
}

macro_rules! code {
    ($t:ty) => {
        impl Code for $t {
            const MIN: i32 = <$t>::MIN as i32;
            const COUNT: usize = 1 << <$t>::BITS;
            fn from_integral(v: f32) -> Self {
                v as $t
            }
            fn index(self) -> usize {
                (self as i32 - <Self as Code>::MIN) as usize
            }
        }
    };
}
code!(i8);
code!(u8);
code!(i16);

/// Why an input is not computed here (the caller runs torch's code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotModelled(pub &'static str);

/// `clamp(round(x * inv_scale) + zero_point, qmin, qmax)` per element of `x` into `out`, as
/// the type `T` (`inv_scale` the Python float `1.0 / scale`, cast to float32 here as torch
/// casts it): [`quantize_per_channel`] with one channel spanning `x`. `qmin`/`qmax` must lie in
/// `T`'s range and `zero_point` below 2^24 in magnitude; a NaN anywhere on the way is not
/// modelled (`out` is then unspecified).
pub fn quantize_per_tensor<T: Code>(
    x: &[f32],
    inv_scale: f64,
    zero_point: i64,
    qmin: i64,
    qmax: i64,
    out: &mut [T],
) -> Result<(), NotModelled> {
    if zero_point.unsigned_abs() >= 1 << 24 {
        return Err(NotModelled("a zero point of 2^24 or more"));
    }
    let (inv, zp) = (inv_scale as f32, zero_point as f32);
    quantize_per_channel(x, &[inv], &[zp], x.len().max(1), qmin, qmax, out)
}

/// `quantize_per_channel`'s `clamp(round(x * inv) + zero_points, qmin, qmax)` into `out`, for
/// `x` laid out contiguously with the channel axis of `inv.len()` channels followed by `inner`
/// elements per channel step: element `i` is in channel `(i / inner) % inv.len()`. `inv` is
/// torch's `1.0 / scales` and `zero_points` torch's float32 cast of the zero points (the
/// operands stock's elementwise ops see); bounds and NaN as [`quantize_per_tensor`].
pub fn quantize_per_channel<T: Code>(
    x: &[f32],
    inv: &[f32],
    zero_points: &[f32],
    inner: usize,
    qmin: i64,
    qmax: i64,
    out: &mut [T],
) -> Result<(), NotModelled> {
    check_bounds::<T>(qmin, qmax)?;
    let channels = inv.len();
    if zero_points.len() != channels || channels == 0 || inner == 0 {
        return Err(NotModelled("channel parameters do not match"));
    }
    if x.len() != out.len() || x.len() % (channels * inner) != 0 {
        return Err(NotModelled(
            "input and output lengths do not match the channels",
        ));
    }
    let bounds = (qmin as f32, qmax as f32);
    let mut nan = false;
    let (xs, outs) = (x.chunks_exact(inner), out.chunks_exact_mut(inner));
    for (k, (xc, oc)) in xs.zip(outs).enumerate() {
        let c = k % channels;
        let (inv, zp) = (inv[c], zero_points[c]);
        for (o, &v) in oc.iter_mut().zip(xc) {
            *o = quantize_one(v, inv, zp, bounds, &mut nan);
        }
    }
    if nan {
        return Err(NotModelled("a NaN value"));
    }
    Ok(())
}

fn check_bounds<T: Code>(qmin: i64, qmax: i64) -> Result<(), NotModelled> {
    let lo = T::MIN as i64;
    let hi = lo + T::COUNT as i64 - 1;
    if !(lo..=hi).contains(&qmin) || !(lo..=hi).contains(&qmax) {
        return Err(NotModelled("qmin/qmax outside the type's range"));
    }
    Ok(())
}

/// One element: `clamp(round(v * inv) + zp, qmin, qmax)` cast to `T`; a NaN sets `nan`.
#[inline]
fn quantize_one<T: Code>(v: f32, inv: f32, zp: f32, bounds: (f32, f32), nan: &mut bool) -> T {
    let q = round_half_even(v * inv) + zp;
    *nan |= q.is_nan();
    T::from_integral(q.max(bounds.0).min(bounds.1))
}

/// `v` rounded to the nearest integer, ties to even (`f32::round_ties_even`, which without
/// SSE4.1 is a library call): below 2^23 in magnitude, adding and subtracting 2^23 with
/// `v`'s sign rounds once, to nearest even, in the default rounding mode (the sum's spacing is
/// 1 and 2^23 is even); from 2^23 on, infinities and NaN, `v` is already integral or stays.
/// A zero's sign may differ from `round_ties_even`'s; the caller adds the zero point and
/// casts, where it does not show.
#[inline]
fn round_half_even(v: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    if v.abs() < TWO_23 {
        let shift = TWO_23.copysign(v);
        (v + shift) - shift
    } else {
        v
    }
}

/// `out[i] = table[codes[i] - T::MIN]`: a dequantization whose value depends on the code only.
pub fn gather<T: Code>(codes: &[T], table: &[f32], out: &mut [f32]) -> Result<(), NotModelled> {
    if table.len() != T::COUNT {
        return Err(NotModelled("the table does not hold one value per code"));
    }
    if codes.len() != out.len() {
        return Err(NotModelled("input and output lengths differ"));
    }
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = table[c.index()];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_half_to_even_and_clamps() {
        let x = [
            0.5f32,
            1.5,
            2.5,
            -0.5,
            -1.5,
            1000.0,
            -1000.0,
            f32::INFINITY,
            -0.0,
        ];
        let mut out = [0i8; 9];
        quantize_per_tensor(&x, 1.0, 0, -128, 127, &mut out).unwrap();
        assert_eq!(out, [0, 2, 2, 0, -2, 127, -128, 127, 0]);
    }

    #[test]
    fn zero_point_and_scale_as_float32() {
        // 1/3 as f64 cast to f32, times 3.0f32, is 1.0000000298 -> rounds to 1; + zp 10
        let mut out = [0u8; 1];
        quantize_per_tensor(&[3.0], 1.0 / 3.0, 10, 0, 255, &mut out).unwrap();
        assert_eq!(out, [11]);
    }

    #[test]
    fn nan_and_out_of_range_bounds_are_not_modelled() {
        let mut out = [0i8; 2];
        assert!(quantize_per_tensor(&[1.0, f32::NAN], 1.0, 0, -128, 127, &mut out).is_err());
        assert!(quantize_per_tensor(&[0.0, f32::INFINITY], 0.0, 0, -128, 127, &mut out).is_err());
        assert!(quantize_per_tensor(&[1.0, 2.0], 1.0, 0, -129, 127, &mut out).is_err());
        let mut out16 = [0i16; 2];
        assert!(quantize_per_tensor(&[1.0, 2.0], 1.0, 1 << 24, -10, 10, &mut out16).is_err());
    }

    #[test]
    fn rounds_as_round_ties_even() {
        // every 101st bit pattern, both signs: the integer (zero's sign aside) and NaN alike
        for bits in (0..=u32::MAX).step_by(101) {
            let v = f32::from_bits(bits);
            let (ours, std) = (round_half_even(v), v.round_ties_even());
            assert!(
                ours == std || (ours.is_nan() && std.is_nan()),
                "{v:e}: {ours} vs {std}"
            );
        }
        for v in [
            0.5f32,
            1.5,
            2.5,
            -2.5,
            8_388_607.5,
            -8_388_607.5,
            4_194_304.5,
        ] {
            assert_eq!(round_half_even(v), v.round_ties_even(), "{v}");
        }
    }

    #[test]
    fn per_channel_parameters_by_position() {
        // 2 channels on axis 1 of a [2, 2, 2] tensor: inner 2, channel = (i / 2) % 2
        let x = [1.0f32; 8];
        let mut out = [0i8; 8];
        quantize_per_channel(&x, &[1.0, 2.0], &[0.0, 10.0], 2, -128, 127, &mut out).unwrap();
        assert_eq!(out, [1, 1, 12, 12, 1, 1, 12, 12]);
        assert!(quantize_per_channel(&x, &[1.0], &[0.0, 1.0], 2, -128, 127, &mut out).is_err());
        assert!(quantize_per_channel(&x, &[1.0; 3], &[0.0; 3], 2, -128, 127, &mut out).is_err());
    }

    #[test]
    fn gathers_by_code() {
        let table: Vec<f32> = (0..256).map(|i| i as f32 * 0.5).collect();
        let mut out = [0f32; 3];
        gather(&[-128i8, 0, 127], &table, &mut out).unwrap();
        assert_eq!(out, [0.0, 64.0, 127.5]);
        assert!(gather(&[0i8], &table[..10], &mut out[..1]).is_err());
    }
}
