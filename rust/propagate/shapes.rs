//! Output shapes of the ops a propagation scan moves transforms through, as fake-tensor
//! execution computes them (what a re-trace writes into `meta["val"]`).
//!
//! Every function returns `None` where torch would raise or where the rule is not certain;
//! the caller then stops modelling and lets a (virtual) re-trace compute the values.

/// Normalizes `d` against `rank` (Python's negative dims); None when out of range.
fn normalize(d: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let n = if d < 0 { d + r } else { d };
    (0..r).contains(&n).then_some(n as usize)
}

/// Broadcast of several shapes (elementwise ops).
pub fn broadcast<'a>(shapes: impl IntoIterator<Item = &'a [i64]>) -> Option<Vec<i64>> {
    let mut out: Vec<i64> = Vec::new();
    for s in shapes {
        if s.len() > out.len() {
            let mut grown = vec![1; s.len() - out.len()];
            grown.extend_from_slice(&out);
            out = grown;
        }
        let offset = out.len() - s.len();
        for (k, &d) in s.iter().enumerate() {
            let o = &mut out[offset + k];
            if *o == d || d == 1 {
                continue;
            }
            if *o == 1 {
                *o = d;
            } else {
                return None;
            }
        }
    }
    Some(out)
}

/// `permute_copy(x, dims)`.
pub fn permute(input: &[i64], dims: &[i64]) -> Option<Vec<i64>> {
    if dims.len() != input.len() {
        return None;
    }
    let mut seen = vec![false; input.len()];
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let n = normalize(d, input.len())?;
        if std::mem::replace(&mut seen[n], true) {
            return None;
        }
        out.push(input[n]);
    }
    Some(out)
}

/// `view_copy(x, size)`, with one `-1` inferred.
pub fn view(input: &[i64], size: &[i64]) -> Option<Vec<i64>> {
    let numel: i64 = input.iter().product();
    let mut inferred = None;
    let mut known: i64 = 1;
    for (k, &d) in size.iter().enumerate() {
        match d {
            -1 if inferred.is_none() => inferred = Some(k),
            d if d >= 0 => known = known.checked_mul(d)?,
            _ => return None,
        }
    }
    let mut out = size.to_vec();
    match inferred {
        Some(k) => {
            if known == 0 || numel % known != 0 {
                return None;
            }
            out[k] = numel / known;
        }
        None if known != numel => return None,
        None => {}
    }
    Some(out)
}

/// `mean.dim` / `sum.dim_IntList` with explicit dims; `keepdim` absent means false. An empty
/// dim list (a full reduction) is not modelled.
pub fn reduce(input: &[i64], dims: &[i64], keepdim: bool) -> Option<Vec<i64>> {
    if dims.is_empty() {
        return None;
    }
    let mut reduced = vec![false; input.len()];
    for &d in dims {
        if std::mem::replace(&mut reduced[normalize(d, input.len())?], true) {
            return None;
        }
    }
    Some(
        input
            .iter()
            .zip(&reduced)
            .filter_map(|(&s, &r)| match (r, keepdim) {
                (false, _) => Some(s),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect(),
    )
}

/// `slice_copy.Tensor(x, dim, start, end, step)` with torch's clamping of start and end.
pub fn slice(input: &[i64], dim: i64, start: i64, end: i64, step: i64) -> Option<Vec<i64>> {
    if step <= 0 {
        return None;
    }
    let d = normalize(dim, input.len())?;
    let size = input[d];
    let clamp = |v: i64| {
        let v = if v < 0 { v + size } else { v };
        v.clamp(0, size)
    };
    let start = clamp(start);
    let end = clamp(end).max(start);
    let mut out = input.to_vec();
    out[d] = (end - start + step - 1) / step;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_aligns_right_and_rejects_mismatches() {
        let a: &[i64] = &[2, 1, 4];
        let b: &[i64] = &[3, 1];
        assert_eq!(broadcast([a, b]), Some(vec![2, 3, 4]));
        assert_eq!(broadcast([a, &[5][..]]), None);
        assert_eq!(broadcast([a]), Some(vec![2, 1, 4]));
        assert_eq!(broadcast([&[][..], a]), Some(vec![2, 1, 4]));
    }

    #[test]
    fn permute_and_view() {
        assert_eq!(permute(&[2, 3, 4], &[2, 0, -2]), Some(vec![4, 2, 3]));
        assert_eq!(permute(&[2, 3, 4], &[0, 0, 1]), None);
        assert_eq!(permute(&[2, 3], &[0, 1, 2]), None);
        assert_eq!(view(&[2, 3, 4], &[6, -1]), Some(vec![6, 4]));
        assert_eq!(view(&[2, 3, 4], &[5, -1]), None);
        assert_eq!(view(&[2, 3, 4], &[24]), Some(vec![24]));
        assert_eq!(view(&[2, 3, 4], &[-1, -1]), None);
        assert_eq!(view(&[0, 3], &[0, -1]), None);
    }

    #[test]
    fn reductions_keep_or_drop_dims() {
        assert_eq!(reduce(&[2, 3, 4], &[-1, 0], true), Some(vec![1, 3, 1]));
        assert_eq!(reduce(&[2, 3, 4], &[1], false), Some(vec![2, 4]));
        assert_eq!(reduce(&[2, 3, 4], &[], true), None);
        assert_eq!(reduce(&[2, 3, 4], &[1, -2], true), None);
    }

    #[test]
    fn slices_clamp_like_torch() {
        assert_eq!(slice(&[2, 10], 1, 2, 7, 2), Some(vec![2, 3]));
        assert_eq!(slice(&[2, 10], -1, -3, i64::MAX, 1), Some(vec![2, 3]));
        assert_eq!(slice(&[2, 10], 1, 8, 3, 1), Some(vec![2, 0]));
        assert_eq!(slice(&[2, 10], 1, -20, 20, 3), Some(vec![2, 4]));
        assert_eq!(slice(&[2, 10], 1, 0, 4, 0), None);
        assert_eq!(slice(&[2, 10], 2, 0, 4, 1), None);
    }
}
