//! Criterion benches of the Rust kernels: graph walks over synthetic node tables (10k, 100k,
//! 1M nodes) and the histogram parameter search.
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use arm_accel::synth;
use arm_accel::table::{class, OwnedTable};

const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

/// One benchmark group `name`: `run` on a synthetic transformer-like table of each size.
fn over_sizes<R>(c: &mut Criterion, name: &str, run: impl Fn(&OwnedTable) -> R) {
    let mut g = c.benchmark_group(name);
    g.sample_size(10);
    for &n in &SIZES {
        let t = synth::transformer_like(n, 1);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &t, |b, t| b.iter(|| run(t)));
    }
    g.finish();
}

/// One group key per target code (none excluded).
fn keys(t: &OwnedTable) -> Vec<i64> {
    (0..t.target_class.len() as i64).collect()
}

fn bench_validate(c: &mut Criterion) {
    over_sizes(c, "validate", |t| t.view().validate().unwrap());
}

fn bench_chains(c: &mut Criterion) {
    over_sizes(c, "collect_chains", |t| {
        arm_accel::chains::collect_chains(&t.view(), class::PERMUTE | class::VIEW).unwrap()
    });
}

fn bench_duplicate_users(c: &mut Criterion) {
    over_sizes(c, "duplicate_user_candidates", |t| {
        arm_accel::worklist::duplicate_user_candidates(&t.view(), &keys(t)).unwrap()
    });
}

fn bench_signatures(c: &mut Criterion) {
    over_sizes(c, "user_signatures", |t| {
        arm_accel::signature::user_signatures(&t.view(), &keys(t)).unwrap()
    });
}

fn bench_membership(c: &mut Criterion) {
    over_sizes(c, "constant_membership", |t| {
        let v = t.view();
        let s = arm_accel::membership::constant_set(&v);
        arm_accel::membership::constant_inputs(&v, &s)
    });
}

/// A 2048-bin histogram of 4096 seeded near-normal samples (integer counts, as
/// `HistogramObserver` bins one batch).
fn normal_histogram() -> Vec<f32> {
    let mut h = vec![0f32; 2048];
    let mut state: u64 = 12345;
    for _ in 0..4096 {
        let mut acc = 0.0;
        for _ in 0..12 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            acc += (state >> 11) as f64 / (1u64 << 53) as f64;
        }
        let bin = ((acc - 6.0 + 4.0) / 8.0 * 2048.0) as usize;
        h[bin.min(2047)] += 1.0;
    }
    h
}

/// The parameter search of `HistogramObserver` at 2048 bins (int16 destination): the whole
/// search and its parts.
fn bench_histogram_search(c: &mut Criterion) {
    use arm_accel::quantize::{error, reduce, search};
    let h = normal_histogram();
    let mut out = vec![0f32; h.len()];
    let mut g = c.benchmark_group("histogram_search");
    g.bench_function("torch_sum", |b| b.iter(|| reduce::torch_sum(&h, 8)));
    g.bench_function("torch_cumsum", |b| {
        b.iter(|| reduce::torch_cumsum(&h, &mut out))
    });
    if let error::Setup::Ready(sc) = error::setup(h.len(), -4.0, 4.0, 65536, 0, 2046) {
        let d = error::densities(&h, sc.w);
        g.bench_function("densities", |b| b.iter(|| error::densities(&h, sc.w)));
        g.bench_function("candidate_terms", |b| {
            b.iter(|| error::fast_terms(&d, 0, &sc, &mut out))
        });
    }
    g.bench_function("whole", |b| {
        b.iter(|| search::search(&h, -4.0, 4.0, 65536, 8))
    });
    g.finish();
}

criterion_group!(
    benches,
    bench_validate,
    bench_chains,
    bench_duplicate_users,
    bench_signatures,
    bench_membership,
    bench_histogram_search
);
criterion_main!(benches);
