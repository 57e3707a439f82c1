//! torch's CPU `sum()` and `cumsum()` of a contiguous float32 vector, operation for operation,
//! so that their results are torch's bit for bit.
//!
//! `sum` (ATen/native/cpu/SumKernel.cpp, `cascade_sum`, float32 accumulators): a full
//! reduction of `n < GRAIN_SIZE` elements runs serially as one row. With `n >= V` (`V` the
//! lanes of `Vectorized<float>` of the dispatched CPU capability) the `n / V` whole vectors are
//! summed by `row_sum` (4 interleaved rows, each a 4-level cascade, lane-wise vector adds), the
//! scalar tail is added to a zero scalar, then the vector's lanes in order; below `V` elements
//! the same `row_sum` runs on scalars. The result is added to the zeroed output. Which `V`
//! torch uses is not read here: the caller passes it (probed against `torch.sum`).
//!
//! `cumsum` (ATen/native/cpu/ReduceOpsKernel.cpp, `cumsum_cpu_kernel`): a double accumulator
//! (`acc_type<float, false>`), each prefix cast to float32.

/// Reductions of this many elements or more may run in parallel chunks: not modelled.
pub const GRAIN_SIZE: usize = 32768;

/// The `Vectorized<float>` widths modelled.
pub const LANES: [usize; 4] = [4, 8, 16, 32];

/// c10's `CeilLog2`.
fn ceil_log2(x: usize) -> u32 {
    if x <= 2 {
        1
    } else {
        64 - ((x - 1) as u64).leading_zeros()
    }
}

/// `a += b` lane by lane.
#[inline(always)]
fn add<const L: usize>(a: &mut [f32; L], b: &[f32; L]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += *y;
    }
}

/// `multi_row_sum<acc, 4>`: rows `k = 0..4` of `size` items each, item `i` of row `k` being
/// `item(4 * i + k)`, each row summed by the 4-level cascade.
#[inline(always)]
fn multi_row_sum<const L: usize>(item: &impl Fn(usize) -> [f32; L], size: usize) -> [[f32; L]; 4] {
    const LEVELS: usize = 4;
    let level_power = (ceil_log2(size) / LEVELS as u32).max(4);
    let level_step = 1usize << level_power;
    let level_mask = level_step - 1;
    let mut acc = [[[0f32; L]; 4]; LEVELS];
    let mut i = 0;
    while i + level_step <= size {
        for _ in 0..level_step {
            for (k, a) in acc[0].iter_mut().enumerate() {
                add(a, &item(4 * i + k));
            }
            i += 1;
        }
        for j in 1..LEVELS {
            let (lower, upper) = acc.split_at_mut(j);
            for (here, below) in upper[0].iter_mut().zip(lower[j - 1].iter_mut()) {
                add(here, below);
                *below = [0f32; L];
            }
            let mask = level_mask << (j as u32 * level_power);
            if i & mask != 0 {
                break;
            }
        }
    }
    while i < size {
        for (k, a) in acc[0].iter_mut().enumerate() {
            add(a, &item(4 * i + k));
        }
        i += 1;
    }
    let (first, rest) = acc.split_at_mut(1);
    for level in rest.iter() {
        for (a, u) in first[0].iter_mut().zip(level) {
            add(a, u);
        }
    }
    acc[0]
}

/// `row_sum<acc>`: `count` items as a `(-1, 4)` array summed by [`multi_row_sum`], the items
/// left over added to row 0, then rows 1, 2, 3 added to row 0.
#[inline(always)]
fn row_sum<const L: usize>(item: impl Fn(usize) -> [f32; L], count: usize) -> [f32; L] {
    let size_ilp = count / 4;
    let mut partial = multi_row_sum(&item, size_ilp);
    for i in size_ilp * 4..count {
        add(&mut partial[0], &item(i));
    }
    for k in 1..4 {
        let p = partial[k];
        add(&mut partial[0], &p);
    }
    partial[0]
}

/// `vectorized_inner_sum` with `L` lanes (`x.len() >= L`).
fn vectorized_sum<const L: usize>(x: &[f32]) -> f32 {
    let vectors = x.len() / L;
    let acc = row_sum::<L>(
        |i| {
            let mut v = [0f32; L];
            v.copy_from_slice(&x[i * L..i * L + L]);
            v
        },
        vectors,
    );
    let mut total = 0f32;
    for &t in &x[vectors * L..] {
        total += t;
    }
    for lane in acc {
        total += lane;
    }
    total
}

/// torch's `x.sum()` for a contiguous float32 `x` on a CPU whose `Vectorized<float>` has
/// `lanes` lanes; None where it is not modelled (`n >= GRAIN_SIZE`, `lanes` not in
/// [`LANES`]).
pub fn torch_sum(x: &[f32], lanes: usize) -> Option<f32> {
    if x.len() >= GRAIN_SIZE {
        return None;
    }
    let row = if x.len() < lanes {
        row_sum::<1>(|i| [x[i]], x.len())[0]
    } else {
        match lanes {
            4 => vectorized_sum::<4>(x),
            8 => vectorized_sum::<8>(x),
            16 => vectorized_sum::<16>(x),
            32 => vectorized_sum::<32>(x),
            _ => return None,
        }
    };
    // The output is zero-filled, then the row's sum accumulated into it.
    Some(0.0 + row)
}

/// torch's `torch.cumsum(x, 0)` for a contiguous float32 `x` into `out` (same length).
pub fn torch_cumsum(x: &[f32], out: &mut [f32]) {
    let mut acc = 0f64;
    for (o, &v) in out.iter_mut().zip(x) {
        acc += f64::from(v);
        *o = acc as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_is_c10s() {
        let got: Vec<u32> = [0, 1, 2, 3, 4, 5, 8, 9, 64, 65].map(ceil_log2).to_vec();
        assert_eq!(got, [1, 1, 1, 2, 2, 3, 3, 4, 6, 7]);
    }

    #[test]
    fn small_sums_are_exact() {
        let x: Vec<f32> = (0..1000).map(|i| (i % 7) as f32).collect();
        let exact: f32 = x.iter().sum();
        for lanes in LANES {
            for n in [0, 1, 3, 17, 64, 999, 1000] {
                let want: f32 = x[..n].iter().sum();
                assert_eq!(
                    torch_sum(&x[..n], lanes),
                    Some(want),
                    "lanes {lanes}, n {n}"
                );
            }
        }
        assert_eq!(torch_sum(&x, 16), Some(exact));
    }

    #[test]
    fn declines_what_it_does_not_model() {
        assert_eq!(torch_sum(&[1.0; 4], 3), None);
        assert_eq!(torch_sum(&vec![0.0; GRAIN_SIZE], 8), None);
    }

    #[test]
    fn cumsum_rounds_each_prefix_of_a_double_sum() {
        let x = [1.0f32, 3e-8, 3e-8, 3e-8];
        let mut out = [0f32; 4];
        torch_cumsum(&x, &mut out);
        // A float32 accumulator would stay at 1.0; the double one reaches 1 + 9e-8, which
        // rounds to the float32 above 1.0.
        let tiny = f64::from(3e-8f32);
        assert_eq!(out[3], (1.0 + tiny + tiny + tiny) as f32);
        assert!(out[3] > 1.0);
    }
}
