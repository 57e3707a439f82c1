//! Criterion benches of the Rust kernels over synthetic node tables (10k, 100k, 1M nodes).
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use arm_accel::synth;

fn bench_validate(c: &mut Criterion) {
    let mut g = c.benchmark_group("validate");
    g.sample_size(10);
    for &n in &[10_000usize, 100_000, 1_000_000] {
        let t = synth::transformer_like(n, 1);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &t, |b, t| {
            b.iter(|| t.view().validate().unwrap())
        });
    }
    g.finish();
}

fn bench_chains(c: &mut Criterion) {
    use arm_accel::table::class;
    let mut g = c.benchmark_group("collect_chains");
    g.sample_size(10);
    for &n in &[10_000usize, 100_000, 1_000_000] {
        let t = synth::transformer_like(n, 1);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &t, |b, t| {
            b.iter(|| {
                arm_accel::chains::collect_chains(&t.view(), class::PERMUTE | class::VIEW).unwrap()
            })
        });
    }
    g.finish();
}

fn bench_duplicate_users(c: &mut Criterion) {
    let mut g = c.benchmark_group("duplicate_user_candidates");
    g.sample_size(10);
    for &n in &[10_000usize, 100_000, 1_000_000] {
        let t = synth::transformer_like(n, 1);
        let keys: Vec<i64> = (0..t.target_class.len() as i64).collect();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &t, |b, t| {
            b.iter(|| arm_accel::worklist::duplicate_user_candidates(&t.view(), &keys).unwrap())
        });
    }
    g.finish();
}

fn bench_membership(c: &mut Criterion) {
    let mut g = c.benchmark_group("constant_membership");
    g.sample_size(10);
    for &n in &[10_000usize, 100_000, 1_000_000] {
        let t = synth::transformer_like(n, 1);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &t, |b, t| {
            b.iter(|| {
                let v = t.view();
                let s = arm_accel::membership::constant_set(&v);
                arm_accel::membership::constant_inputs(&v, &s)
            })
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_validate,
    bench_chains,
    bench_duplicate_users,
    bench_membership
);
criterion_main!(benches);
