"""Threads: kernels release the GIL; concurrent lowerings give the bytes of sequential
ones; ``arm_accel.stats()`` counts every call exactly once under threads."""

from __future__ import annotations

import copy
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import fuzz_models as fm
import numpy as np
import pytest
import torch
from arm_accel import _native
from arm_accel.control import counters, switch
from arm_accel.native import table
from arm_accel.pipeline.passes.base import GuardedCallMixin
from arm_accel.tools import models
from fuzz_models import Op, Spec
from support.native import needs_testing


def chain_table(n: int) -> types.SimpleNamespace:
    """A valid node table: one placeholder, ``n`` permutes in a chain, the output."""
    total = n + 2
    op = np.full(total, 1, dtype=np.uint8)
    op[0], op[-1] = 0, 3
    target = np.zeros(total, dtype=np.int32)
    target[0] = target[-1] = -1
    in_ptr = np.concatenate([[0], np.arange(total, dtype=np.int64)])
    in_idx = np.arange(total - 1, dtype=np.int64)
    user_ptr = np.concatenate([np.arange(total, dtype=np.int64), [total - 1]])
    user_idx = np.arange(1, total, dtype=np.int64)
    rank = np.full(total, 2, dtype=np.int32)
    rank[-1] = -1
    shape_ptr = np.concatenate([[0], np.cumsum(np.where(rank < 0, 0, rank))]).astype(np.int64)
    return types.SimpleNamespace(
        op=op,
        target=target,
        target_class=np.array([table.Cls.PERMUTE], dtype=np.uint32),
        in_ptr=in_ptr,
        in_idx=in_idx,
        user_ptr=user_ptr,
        user_idx=user_idx,
        rank=rank,
        shape_ptr=shape_ptr,
        shape=np.ones(int(shape_ptr[-1]), dtype=np.int64),
        dtype=np.zeros(total, dtype=np.int32),
        iarg_ptr=np.zeros(total + 1, dtype=np.int64),
        iarg=np.zeros(0, dtype=np.int64),
        flags=np.zeros(total, dtype=np.uint32),
    )


def _progress_during(work: Callable[[], Any]) -> int:
    """How far a pure-Python thread gets while ``work`` runs in this thread.

    With a 10 s switch interval a thread holding the GIL keeps it for the whole of ``work`` unless
    ``work`` releases it; the counter thread only yields (``sleep(0)``) between increments.
    """
    count = [0]
    stop = threading.Event()

    def counter() -> None:
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)

    previous = sys.getswitchinterval()
    thread = threading.Thread(target=counter)
    thread.start()
    try:
        time.sleep(0.05)  # the counter is running
        sys.setswitchinterval(10.0)
        before = count[0]
        work()
        after = count[0]
    finally:
        sys.setswitchinterval(previous)
        stop.set()
        thread.join()
    return after - before


N = 1_000_000
KERNELS: dict[str, Callable[[Any], Any]] = {
    "table_counts": _native.table_counts,
    "collect_chains": lambda t: _native.collect_chains(t, int(table.Cls.PERMUTE)),
    "duplicate_user_candidates": lambda t: _native.duplicate_user_candidates(
        t, np.zeros(1, dtype=np.int64)
    ),
    "constant_mask": _native.constant_mask,
}


@pytest.fixture(scope="module")
def big_table() -> types.SimpleNamespace:
    t = chain_table(N)
    assert _native.table_counts(t)["nodes"] == N + 2
    return t


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=needs_testing) if n == "duplicate_user_candidates" else n
        for n in sorted(KERNELS)
    ],
)
def test_kernels_release_the_gil(name: str, big_table: types.SimpleNamespace) -> None:
    """How far a pure-Python thread gets while the kernel runs on a million-node table,
    against while this thread spins in Python for as long: it must run only beside the kernel."""
    kernel = KERNELS[name]
    t0 = time.perf_counter()
    kernel(big_table)
    seconds = time.perf_counter() - t0

    def hold_gil() -> None:  # pure Python for as long as the kernel took
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    # Load on the other core only adds noise: it can let the counter run while this thread
    # waits to be scheduled (inflating ``held``) or keep it off the CPU while the kernel runs
    # (deflating ``released``). So each side takes its best of three.
    held = min(_progress_during(hold_gil) for _ in range(3))
    released = max(_progress_during(lambda: kernel(big_table)) for _ in range(3))
    assert held <= 3, f"the measurement itself is broken: {held} steps while holding the GIL"
    assert released > 10, f"{name} ({seconds * 1e3:.0f} ms) let Python run {released} steps"


# Two small, different models: permute/reshape traffic around TABLE ops, and a diamond with a
# broadcast constant and a mean.
MODEL_A = Spec(
    inputs=((1, 2, 3, 4),),
    ops=(
        Op("permute", (0,), ((0, 2, 3, 1),)),
        Op("unary", (1,), ("sigmoid",)),
        Op("reshape", (2,), ((1, 12, 2),)),
        Op("transpose", (3,), (1, 2)),
        Op("unary", (4,), ("tanh",)),
    ),
    outputs=(5,),
)
MODEL_B = Spec(
    inputs=((2, 1, 3),),
    ops=(
        Op("transpose", (0,), (0, 2)),
        Op("const", (1,), ("mul", (1, 1, 2))),
        Op("unary", (1,), ("exp",)),
        Op("binary", (2, 3), ("add",)),
        Op("mean", (4,), ((1,),)),
        Op("permute", (5,), ((2, 1, 0),)),
    ),
    outputs=(6, 3),
)


def _export(spec: Spec, mode: str) -> Any:
    model, inputs = fm.build(spec)
    return models.export_for_arm(model, inputs, mode)


def _lower(program: Any, mode: str) -> list[bytes]:
    return models.tosa_bytes(models.lower(copy.deepcopy(program), mode))


def _calls() -> dict[str, int]:
    return {name: s.calls for name, s in counters.snapshot().items()}


@pytest.fixture
def torch_globals_restored() -> Any:
    """When the race below hits, the threads leave torch's module-level state set, and every
    later test in this process inherits it: ``torch.fx.traceback``'s node meta (fx then refuses
    to ``replace_all_uses_with(propagate_meta=True)``) and ``torch.utils._python_dispatch``'s
    "in a dispatch mode" flags, which two threads' modes entering and leaving out of order
    leave True (the observers' native paths then decline). Put them back as they were."""
    from torch.fx import traceback as fx_traceback
    from torch.utils import _python_dispatch

    flags = [n for n in vars(_python_dispatch) if n.startswith("_is_in_")]
    saved = (fx_traceback.current_meta, fx_traceback.should_preserve_node_meta)
    saved_flags = {n: getattr(_python_dispatch, n) for n in flags}
    yield
    fx_traceback.current_meta, fx_traceback.should_preserve_node_meta = saved
    for name, value in saved_flags.items():
        setattr(_python_dispatch, name, value)


@pytest.mark.usefixtures("torch_globals_restored")
@pytest.mark.xfail(
    strict=False,
    reason="torch/executorch lowering is not thread-safe even all stock: export's "
    "run_decompositions overrides op tables globally ('Trying to override a python impl') and "
    "torch.fx.traceback keeps the node-meta state in module globals (KeyError 'custom'); the "
    "first is serialized below, the second is not ours to fix",
)
def test_concurrent_lowerings_match_sequential_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    assert switch.is_enabled()
    decomp_lock = threading.Lock()
    run_decompositions = torch.export.ExportedProgram.run_decompositions

    def serialized(self: Any, *args: Any, **kwargs: Any) -> Any:
        with decomp_lock:
            return run_decompositions(self, *args, **kwargs)

    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", serialized)
    jobs = [(_export(MODEL_A, "INT"), "INT"), (_export(MODEL_B, "FP"), "FP")]

    counters.reset()
    sequential = [_lower(p, m) for p, m in jobs]
    sequential_calls = _calls()
    sequential_stats = counters.snapshot()

    counters.reset()
    results: list[Any] = [None, None]

    def run(k: int) -> None:
        try:
            results[k] = _lower(*jobs[k])
        except BaseException as exc:  # reported below
            results[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    concurrent_calls = _calls()

    concurrent_stats = counters.snapshot()

    for k in range(2):
        assert not isinstance(results[k], BaseException), results[k]
        assert results[k] == sequential[k], f"model {'AB'[k]}: TOSA bytes differ under threads"
    assert sequential_calls and all(sequential_calls.values()), sequential_calls
    assert concurrent_calls == sequential_calls
    # The fast path ran under threads (not stock twice), and fell back exactly where the
    # sequential lowerings did.
    for name in ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass"):
        assert concurrent_stats[name].accelerated > 0, (name, concurrent_stats[name])
    assert {n: s.fallbacks for n, s in concurrent_stats.items()} == {
        n: s.fallbacks for n, s in sequential_stats.items()
    }


def test_disabled_is_scoped_to_its_thread() -> None:
    """``with disabled():`` in one thread leaves another thread accelerated while the block is
    open (the switch is per thread, not process-wide); ``set_enabled`` inside the block changes the
    block only. Checked by each thread's own accelerated-call count."""
    from arm_accel.pipeline.passes.base import AcceleratedPass

    class Stock:
        def call(self, graph_module: Any) -> str:
            return "stock"

    class Accel(AcceleratedPass, Stock):
        accel_name = "ScopedSwitchPass"

        def accel_plan(self, graph_module: Any) -> None:
            return None

        def accel_apply(self, graph_module: Any, plan: Any, journal: Any) -> str:
            return "accelerated"

    # A timeout: a thread that raised fails the test instead of leaving the other one waiting.
    inside, done = threading.Barrier(2, timeout=120), threading.Barrier(2, timeout=120)
    seen: dict[str, Any] = {}
    # Traced here, not in the threads: symbolic_trace patches torch globals while it traces,
    # so two threads tracing at once may break each other. (A CI dry run hung here once: the
    # "off" thread died before ``done``, its exception unseen; concurrent tracing is the
    # suspect, not proven.)
    graphs = [torch.fx.symbolic_trace(torch.nn.ReLU()) for _ in range(3)]

    def off() -> None:
        with switch.disabled():
            inside.wait()  # the other thread runs while this block is open
            seen["off"] = Accel().call(graphs[0])
            switch.set_enabled(True)  # the block's own setting...
            seen["off_reenabled"] = Accel().call(graphs[1])
            switch.set_enabled(False)
            done.wait()
        seen["off_accelerated"] = counters.accelerated_in_this_thread("ScopedSwitchPass")

    def on() -> None:
        inside.wait()
        seen["on"] = Accel().call(graphs[2])
        seen["on_enabled"] = switch.is_enabled()
        done.wait()
        seen["on_accelerated"] = counters.accelerated_in_this_thread("ScopedSwitchPass")

    assert switch.is_enabled()
    threads = [threading.Thread(target=off), threading.Thread(target=on)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert seen["off"] == "stock" and seen["off_reenabled"] == "accelerated"
    assert seen["on"] == "accelerated" and seen["on_enabled"] is True
    assert seen["off_accelerated"] == 1 and seen["on_accelerated"] == 1
    assert switch.is_enabled()  # ...never leaked out of it


def test_stats_totals_under_threads() -> None:
    counters.reset()
    n_threads, per_thread = 8, 2000

    def work() -> None:
        for i in range(per_thread):
            counters.record_call("ThreadPass", 0.001, accelerated=i % 2 == 0, retraces=1)
            if i % 10 == 0:
                counters.record_fallback("ThreadPass", "threads")

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    s = counters.snapshot()["ThreadPass"]
    total = n_threads * per_thread
    assert s.calls == total and s.retraces == total
    assert s.accelerated == total // 2
    assert s.fallbacks == {"threads": total // 10}
    assert s.seconds == pytest.approx(total * 0.001)
    counters.reset()


def test_guarded_call_counts_each_call_once_under_threads() -> None:
    """A wrapped class that records nothing itself: each call is counted once, even when another
    thread records calls of the same pass in between (the old global before/after check lost
    those)."""
    gate = threading.Barrier(2)

    class Stock:
        def call(self, graph_module: Any) -> str:
            return "done"

    class Silent(Stock):
        def call(self, graph_module: Any) -> str:
            gate.wait()  # both threads are inside call before either returns
            counters.record_call("Other", 0.0, True)  # unrelated records must not matter
            gate.wait()
            return super().call(graph_module)

    class Recording(Stock):
        def call(self, graph_module: Any) -> str:
            gate.wait()
            counters.record_call("GuardedPass", 0.0, True)
            gate.wait()
            return super().call(graph_module)

    def installed(impl: type) -> type:
        attrs = {"_arm_accel_stock": Stock, "_arm_accel_name": "GuardedPass"}
        return type("GuardedPass", (GuardedCallMixin, impl), attrs)

    counters.reset()
    silent, recording = installed(Silent)(), installed(Recording)()
    threads = [
        threading.Thread(target=silent.call, args=(None,)),
        threading.Thread(target=recording.call, args=(None,)),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # One call each: the recording class counted its own, the mixin counted the silent one.
    assert counters.snapshot()["GuardedPass"].calls == 2
    counters.reset()
