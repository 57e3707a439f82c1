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

criterion_group!(benches, bench_validate);
criterion_main!(benches);
