"""``runtime/dynamo_header.py``: inside ``torch.export``, dynamo composes a proxy's location
header only where the ``trace_call`` log reads it.

Compared, stock (acceleration off) against accelerated, exporting a module from a source file
no trace in the process read before: the programs (graph, code, every node's meta through the
equality contract), the messages the ``trace_call`` log emits when it is on, and on stand-in
tracers the ``prev_inst`` stock's call sees and leaves. The fast path's effect is observed
directly: with the log off, stock's export tokenized the module's file into dynamo's
``funcname_cache``; the accelerated one did not, and counted the headers it left out."""

from __future__ import annotations

import importlib.util
import logging
import sys
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import arm_accel
import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
import torch
from arm_accel import patches
from arm_accel.runtime import dynamo_header
from arm_accel.testing import GraphLabels, assert_graphs_identical, tracking_graphs
from torch._dynamo import funcname_cache, output_graph

pytestmark = pytest.mark.skipif(
    not patches.installed("export.dynamo_header") or sys.version_info < (3, 11),
    reason="the export.dynamo_header row is not installed (or Python has no header branch)",
)

_SOURCE = textwrap.dedent(
    """
    import torch


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x):
            y = self.linear(x)
            return torch.relu(y) + x.sin()


    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x.cumsum(0)
    """
)


def _fresh_model(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[torch.nn.Module, Path]:
    """A model defined in a new source file, imported as module ``name`` for the test (no
    trace has read the file: its ``funcname_cache`` entry is missing), and that file."""
    path = tmp_path / f"{name}.py"
    path.write_text(_SOURCE)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dynamo imports the globals' module
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return module.Model(), path


def _export(model: torch.nn.Module, enabled: bool) -> Any:
    with arm_accel.enabled() if enabled else arm_accel.disabled():
        return torch.export.export(model, (torch.randn(4, 8),), strict=True)


def _skipped() -> int:
    return arm_accel.stats().get(dynamo_header.STATS_NAME, arm_accel.PassStats()).accelerated


def test_export_equals_stock_without_the_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One model from a new file, exported stock then accelerated with the log off (the file's
    ``funcname_cache`` entry dropped in between, as if no trace had read it): the programs are
    equal (graph, code, signature, every node's meta by the equality contract); stock's export
    tokenized the file, ours left it out and counted the headers it did not compose."""
    model, path = _fresh_model(tmp_path, "header_model", monkeypatch)
    with tracking_graphs():
        stock = _export(model, enabled=False)
        assert str(path) in funcname_cache.cache
        del funcname_cache.cache[str(path)]
        before = _skipped()
        ours = _export(model, enabled=True)
    assert_graphs_identical(stock.graph_module, ours.graph_module, (GraphLabels(), GraphLabels()))
    assert stock.graph_module.code == ours.graph_module.code
    assert str(stock.graph_signature) == str(ours.graph_signature)
    assert str(path) not in funcname_cache.cache
    assert _skipped() - before > 0


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _logged_export(model: torch.nn.Module, enabled: bool) -> list[str]:
    """The ``trace_call`` log's messages (on, at DEBUG) while exporting ``model``."""
    log = output_graph.trace_call_log
    handler = _Messages()
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    try:
        _export(model, enabled)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate
    return handler.messages


def test_with_the_log_on_the_headers_are_stocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ``trace_call`` log on: the accelerated export composes and logs every header stock
    logs (the same messages; the file's ``funcname_cache`` entry dropped before each side), and
    leaves none out."""
    model, path = _fresh_model(tmp_path, "logged_model", monkeypatch)
    stock = _logged_export(model, enabled=False)
    funcname_cache.cache.pop(str(path), None)
    before = _skipped()
    ours = _logged_export(model, enabled=True)
    assert _skipped() == before
    assert any(f"{path}:" in m and "(Block.forward)" in m for m in stock), stock[:3]
    assert ours == stock
    assert str(path) in funcname_cache.cache


def _tracer(inst: Any) -> Any:
    """What the wrapper reads of a ``SubgraphTracer``: the current instruction, ``prev_inst``."""
    tx = SimpleNamespace(current_instruction=inst)
    return SimpleNamespace(output_graph=SimpleNamespace(current_tx=tx), prev_inst=None)


def _instruction(lineno: int | None) -> Any:
    return SimpleNamespace(positions=SimpleNamespace(lineno=lineno))


def test_prev_inst_is_what_stock_leaves() -> None:
    """On stand-in tracers, inside the block: a call proxy at a new instruction reaches stock
    with it as ``prev_inst`` (stock's branch then composes nothing) and leaves it there, as
    stock's branch would; a placeholder, an instruction without a line, or a call stock's
    branch raises in leaves ``prev_inst`` as it was."""
    seen: list[Any] = []

    def stock(self: Any, kind: str, *args: Any) -> str:
        seen.append(self.prev_inst)
        if args == ("raise",):
            raise RuntimeError("stock raised")
        return kind

    wrapped = dynamo_header.create_proxy(stock)
    inst, no_line = _instruction(7), _instruction(None)
    with arm_accel.enabled(), dynamo_header.tracing():
        tracer = _tracer(inst)
        assert wrapped(tracer, "call_function", "target") == "call_function"
        assert seen[-1] is inst and tracer.prev_inst is inst
        placeholder = _tracer(inst)
        wrapped(placeholder, "placeholder", "x")
        assert seen[-1] is None and placeholder.prev_inst is None
        lineless = _tracer(no_line)
        wrapped(lineless, "call_method", "m")
        assert seen[-1] is None and lineless.prev_inst is None
        failing = _tracer(inst)
        with pytest.raises(RuntimeError, match="stock raised"):
            wrapped(failing, "call_module", "raise")
        assert seen[-1] is inst and failing.prev_inst is None


def test_outside_the_block_and_switched_off_stock_runs() -> None:
    """Outside ``tracing()``, or with acceleration off, stock's call sees ``prev_inst``
    untouched."""
    seen: list[Any] = []
    wrapped = dynamo_header.create_proxy(lambda self, kind: seen.append(self.prev_inst))
    inst = _instruction(3)
    with arm_accel.enabled():
        wrapped(_tracer(inst), "call_function")
    with arm_accel.disabled(), dynamo_header.tracing():
        wrapped(_tracer(inst), "call_function")
    assert seen == [None, None]


def test_an_unreadable_tracer_runs_stock_and_counts(lenient: None) -> None:
    """A tracer whose instruction cannot be read: stock's call runs (and meets the failure
    itself, or not), the fallback is counted with its reason; under strict it raises."""
    calls: list[str] = []
    wrapped = dynamo_header.create_proxy(lambda self, kind: calls.append(kind))
    broken = SimpleNamespace(output_graph=SimpleNamespace(current_tx=None), prev_inst=None)

    def failures() -> int:
        entry = arm_accel.stats().get(dynamo_header.STATS_NAME, arm_accel.PassStats())
        return sum(n for why, n in entry.fallbacks.items() if "current_instruction" in why)

    before = failures()
    with arm_accel.enabled(), dynamo_header.tracing():
        wrapped(broken, "call_function")
    assert calls == ["call_function"] and failures() - before == 1


def test_an_unreadable_tracer_raises_under_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tracer under ``ARM_ACCEL_STRICT=1`` raises."""
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    wrapped = dynamo_header.create_proxy(lambda self, kind: kind)
    broken = SimpleNamespace(output_graph=SimpleNamespace(current_tx=None), prev_inst=None)
    with arm_accel.enabled(), dynamo_header.tracing(), pytest.raises(AttributeError):
        wrapped(broken, "call_function")
