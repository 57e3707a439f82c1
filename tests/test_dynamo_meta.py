"""``runtime/dynamo_meta.py``'s wrapper of ``SubgraphTracer._create_proxy`` on stand-in tracers:
what stock's method sees as ``_cur_code`` on each call (None: it rebuilds its metas list; the
code: it keeps the list it holds), against what stock's own refresh would rebuild. The
programs it helps export are compared with stock's in ``test_export_scoped.py``."""

from __future__ import annotations

import contextlib
import weakref
from types import SimpleNamespace
from typing import Any

import arm_accel
import pytest
import torch
from arm_accel.runtime import dynamo_meta
from torch import fx
from torch._dynamo import output_graph


class _Tracer:
    """What the wrapper reads of a ``SubgraphTracer``: ``output_graph.current_tx.f_code`` and
    ``_cur_code`` (None, as stock's ``__init__`` sets it)."""

    def __init__(self) -> None:
        self.output_graph = SimpleNamespace(current_tx=SimpleNamespace(f_code=None))
        self._cur_code: Any = None

    def trace(self, code: Any) -> None:
        self.output_graph.current_tx.f_code = code


def _graph_module(n: int) -> fx.GraphModule:
    graph = fx.Graph()
    x = graph.placeholder("x")
    for _ in range(n):
        x = graph.call_function(torch.relu, (x,))
    graph.output(x)
    return fx.GraphModule(torch.nn.Module(), graph)


def _register(module: fx.GraphModule) -> Any:
    """Name ``module`` in its forward code's context, as dynamo does before tracing it."""
    code = module.forward.__code__
    output_graph.code_context.get_context(code)["orig_graphmodule"] = weakref.ref(module)
    return code


def _seen(
    tracer: _Tracer, codes: list[Any], enabled: bool = True, in_block: bool = True
) -> list[bool]:
    """Trace ``codes`` one proxy each through the wrapper (with acceleration ``enabled``,
    inside ``tracing()`` or not); for each, whether stock's method rebuilt (saw ``_cur_code``
    None)."""
    rebuilt: list[bool] = []

    def stock(self: _Tracer) -> None:
        rebuilt.append(self._cur_code is None)

    wrapped = dynamo_meta.create_proxy(stock)
    switch = arm_accel.enabled() if enabled else arm_accel.disabled()
    with switch, dynamo_meta.tracing() if in_block else contextlib.nullcontext():
        for code in codes:
            tracer.trace(code)
            wrapped(tracer)
            assert tracer._cur_code is None  # as stock leaves it
    return rebuilt


def test_rebuilds_only_when_what_it_reads_changed() -> None:
    """Two GraphModules' codes and one without a GraphModule, interleaved: stock rebuilds on
    the first proxy of each change of code (and after the code without one, whose refresh set
    the list to None), and keeps its list within a run of one code."""
    a, b = _graph_module(3), _graph_module(2)
    code_a, code_b = _register(a), _register(b)
    plain = (lambda: None).__code__
    rebuilt = _seen(_Tracer(), [code_a, code_a, code_b, code_b, code_a, plain, code_a, code_a])
    assert rebuilt == [True, False, True, False, True, True, True, False]


def test_rebuilds_when_the_module_changed() -> None:
    """The same code naming another module, the module's graph replaced, or a node added:
    each rebuilds."""
    a = _graph_module(3)
    code = _register(a)
    tracer = _Tracer()
    assert _seen(tracer, [code, code]) == [True, False]
    a.graph.call_function(torch.relu, (next(iter(a.graph.nodes)),))  # one more node
    assert _seen(tracer, [code, code]) == [True, False]
    a.graph = _graph_module(3).graph
    assert _seen(tracer, [code]) == [True]
    other = _graph_module(3)
    output_graph.code_context.get_context(code)["orig_graphmodule"] = weakref.ref(other)
    assert _seen(tracer, [code, code]) == [True, False]


def test_outside_the_block_and_switched_off_stock_rebuilds() -> None:
    """Outside ``tracing()``, or with acceleration off, every call is stock's."""
    a = _graph_module(3)
    code = _register(a)
    tracer = _Tracer()
    assert _seen(tracer, [code, code], in_block=False) == [True, True]
    assert _seen(tracer, [code, code], enabled=False) == [True, True]


def test_a_tracer_state_not_stocks_is_left_to_stock() -> None:
    """A ``_cur_code`` already set on entry (no stock source sets it) reaches stock unchanged
    and drops what the wrapper recorded."""
    a = _graph_module(3)
    code = _register(a)
    tracer = _Tracer()
    assert _seen(tracer, [code]) == [True]
    tracer._cur_code = code
    calls: list[Any] = []
    wrapped = dynamo_meta.create_proxy(lambda self: calls.append(self._cur_code))
    with arm_accel.enabled(), dynamo_meta.tracing():
        wrapped(tracer)
    assert calls == [code]
    tracer._cur_code = None
    assert _seen(tracer, [code]) == [True]


def _unreadable() -> tuple[fx.GraphModule, Any]:
    """A GraphModule without a line map (reading it fails), and its code."""
    module = _graph_module(2)
    code = _register(module)
    del module.__dict__["_lineno_map"]
    return module, code


def test_a_failed_read_runs_stock_and_counts(lenient: None) -> None:
    """A module whose line map cannot be read: stock's call runs (it rebuilds, and meets the
    failure itself), the fallback is counted with its reason."""
    _module, code = _unreadable()

    def failures() -> int:
        entry = arm_accel.stats().get(dynamo_meta.STATS_NAME, arm_accel.PassStats())
        return sum(n for why, n in entry.fallbacks.items() if "_lineno_map" in why)

    before = failures()
    assert _seen(_Tracer(), [code, code]) == [True, True]
    assert failures() - before == 2


def test_a_failed_read_raises_under_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same failure under ``ARM_ACCEL_STRICT=1`` raises."""
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    _module, code = _unreadable()
    with pytest.raises(AttributeError, match="_lineno_map"):
        _seen(_Tracer(), [code])


def test_the_block_records_its_proxies() -> None:
    """The outermost block records the proxies it saw and those without a rebuild."""
    a = _graph_module(3)
    code = _register(a)
    before = arm_accel.stats().get(dynamo_meta.STATS_NAME, arm_accel.PassStats())
    _seen(_Tracer(), [code, code, code])
    after = arm_accel.stats()[dynamo_meta.STATS_NAME]
    assert (after.calls - before.calls, after.accelerated - before.accelerated) == (3, 2)
