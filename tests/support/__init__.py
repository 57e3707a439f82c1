"""Helpers the tests share (benchmarks may import them too: ``sys.path`` gets ``tests/``)."""
