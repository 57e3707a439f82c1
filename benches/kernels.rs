//! Criterion benches of the Rust kernels over synthetic node tables (10k, 100k, 1M nodes).
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

criterion_group!(
    benches,
    bench_validate,
    bench_chains,
    bench_duplicate_users,
    bench_signatures,
    bench_membership
);
criterion_main!(benches);
