"""A user's quantization script (export, the Arm quantizer, ``prepare_pt2e``, calibration,
``convert_pt2e``, re-export) accelerated against stock, on a zoo model."""

from __future__ import annotations

import copy
import re
import struct
from typing import Any

import arm_accel
import pytest
import torch
from arm_accel.control import counters
from arm_accel.pipeline import inplace
from arm_accel.quantize import annotation, attr_names, fold, observe, per_channel
from arm_accel.quantize import histogram as qh
from arm_accel.tools import models
from arm_accel.tools.program_compare import graph_differences, program_differences
from support.eval_keys import file_number, relative_stack_traces
from torch import fx
from torchao.quantization.pt2e.observer import ObserverBase
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

pytest.importorskip("executorch.backends.arm.quantizer")

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
QDQ = (
    "quantize_per_tensor",
    "dequantize_per_tensor",
    "quantize_per_channel",
    "dequantize_per_channel",
)


def _bits(value: Any) -> Any:
    """A bit-exact comparable form: tensors by dtype, shape and bytes, floats by their bytes."""
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            value.dtype,
            tuple(value.shape),
            value.detach().contiguous().numpy().tobytes(),
        )
    if isinstance(value, float):
        return ("float", struct.pack("d", value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_bits(v) for v in value))
    if isinstance(value, fx.Node):
        return ("node", value.name)
    return value


def _quantize(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], mode: str
) -> tuple[fx.GraphModule, list[Any], fx.GraphModule, Any, list[Any]]:
    """The prepared module (a copy, before calibration), the observers' qparams after
    calibration, the converted module, its re-export, and the autograd counter's readings
    relative to its value on entry (every ``seq_nr`` of the prepared module and of the
    re-export, the counter after each stage)."""
    start = torch.autograd._get_sequence_nr()

    def counter() -> int:
        return int(torch.autograd._get_sequence_nr() - start)

    def seq_nrs(graph: fx.Graph) -> list[Any]:
        return [(n.name, n.meta["seq_nr"] - start) for n in graph.nodes if "seq_nr" in n.meta]

    torch.manual_seed(0)
    quantizer = models.quantizer(mode)
    graph = torch.export.export(model, inputs, strict=True).module(check_guards=False)
    readings: list[Any] = [counter()]
    prepared = prepare_pt2e(graph, quantizer)
    readings += [counter(), seq_nrs(prepared.graph)]
    prepared_copy = copy.deepcopy(prepared)
    for batch in _calibration(inputs, 4):
        prepared(*batch)
    qparams = [
        (n, type(m).__name__, _bits(m.calculate_qparams()))
        for n, m in prepared.named_modules()
        if isinstance(m, ObserverBase)
    ]
    converted = convert_pt2e(prepared)
    exported = torch.export.export(converted, inputs, strict=True)
    readings += [counter(), seq_nrs(exported.graph)]
    return prepared_copy, qparams, converted, exported, readings


def _calibration(inputs: tuple[torch.Tensor, ...], n: int) -> list[tuple[torch.Tensor, ...]]:
    """``n`` calibration batches: the example inputs, then seeded random ones like them
    (scaled differently, so that observed ranges grow and stay; token ids as the zoo makes
    them)."""
    if any(not t.is_floating_point() for t in inputs):
        return models.calibration_batches(inputs, n)
    g = torch.Generator().manual_seed(1)
    out = [inputs]
    for i in range(1, n):
        scale = (0.5, 1.5, 1.0)[i % 3]
        out.append(tuple(torch.randn(t.shape, generator=g) * scale for t in inputs))
    return out


def _qdq(gm: fx.GraphModule) -> list[Any]:
    """Every quantize/dequantize node with its arguments bit for bit (scales, zero points)."""
    return [
        (n.name, str(n.target), _bits(n.args), _bits(dict(n.kwargs)))
        for n in gm.graph.nodes
        if n.op == "call_function" and any(q in str(n.target) for q in QDQ)
    ]


def _graph_differences(a: fx.GraphModule, b: fx.GraphModule) -> list[str]:
    """``graph_differences`` with the quantizer's annotations compared by ``repr`` (without
    addresses): they key their specs by node objects (printed by name), which differ between
    the two graphs, and hold a closure made per quantizer."""
    key = "quantization_annotation"
    out = []
    for x, y in zip(a.graph.nodes, b.graph.nodes, strict=True):
        if _ADDRESS.sub("", repr(x.meta.get(key))) != _ADDRESS.sub("", repr(y.meta.get(key))):
            out.append(f"{x.name}: {key} differs")
    stripped = []
    for gm in (a, b):
        copy = fx.GraphModule(gm, copy_graph(gm.graph))
        for n in copy.graph.nodes:
            n.meta.pop(key, None)
        stripped.append(copy)
    return out + graph_differences(*stripped, separately_exported=True)


def copy_graph(graph: fx.Graph) -> fx.Graph:
    """A copy of ``graph`` with node names kept and each node's meta copied (shallow)."""
    new = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in graph.nodes:
        env[n] = new.node_copy(n, lambda m: env[m])
        env[n].meta = dict(n.meta)
    return new


def _accelerated(snapshot: dict[str, Any], name: str) -> int:
    """``name``'s accelerated calls in a counters snapshot (0 where it has no entry)."""
    return snapshot[name].accelerated if name in snapshot else 0


def _state(gm: fx.GraphModule) -> list[Any]:
    return [(k, _bits(v)) for k, v in gm.state_dict().items()]


@pytest.mark.parametrize("name", ["dscnnkws", "llama1"])
def test_quantized_program_identical(name: str) -> None:
    """A zoo model (DS-CNN; a llama block, whose annotation pipeline decomposes SDPA into
    nodes whose ``source_fn_stack`` names themselves and re-traces graphs holding parameters
    as ``get_attr``) quantized with ``TOSAQuantizer`` stock (acceleration off) and
    accelerated, four calibration batches: the prepared module (graph, names, meta, code),
    every observer's qparams after calibration, the converted module (graph, names, meta, q/dq
    nodes' scales and zero points bit for bit, folded constants) and the re-exported program
    are identical; so are the autograd counter's readings from the start of each side (every
    ``seq_nr`` of the prepared module and the re-export, the counter after each stage), which
    the in-place re-traces move without dispatching where they keep values requiring grad;
    and the annotation pipeline (some of its re-traces in place), the parameter search, the
    observers' forward, the histogram upscale, the constant fold's discarded dequantize
    values, the observers' fresh names and the weights' per-channel observers ran accelerated
    (llama1: values requiring grad kept, and values of nodes reading a parameter)."""
    model, inputs, mode = models.build(name)  # one model: its modules' ids are in meta
    with arm_accel.disabled():
        stock_p, stock_q, stock, stock_ep, stock_counter = _quantize(model, inputs, mode)
    snapshot = counters.snapshot()
    before = snapshot.get(qh.STATS_NAME)
    ours_p, ours_q, ours, ours_ep, ours_counter = _quantize(model, inputs, mode)
    now = counters.snapshot()
    after = now[qh.STATS_NAME]
    for stat in (
        observe.FORWARD_STATS_NAME,
        observe.UPSCALE_STATS_NAME,
        annotation.STATS_NAME,
        fold.STATS_NAME,
        attr_names.STATS_NAME,
        per_channel.STATS_NAME,
    ):
        assert _accelerated(now, stat) > _accelerated(snapshot, stat), stat
    in_place = {
        k: v.accelerated - _accelerated(snapshot, k)
        for k, v in now.items()
        if k.endswith(".retrace")
    }
    assert sum(in_place.values()) > 0, in_place
    if name == "llama1":
        for kept in (inplace.GRAD_KEPT_STATS_NAME, inplace.STOWED_KEPT_STATS_NAME):
            assert _accelerated(now, kept) > _accelerated(snapshot, kept), kept
    assert ours_counter == stock_counter

    assert _graph_differences(stock_p, ours_p) == []
    assert stock_p.code == ours_p.code
    assert ours_q == stock_q
    assert any(kind == "HistogramObserver" for _, kind, _ in ours_q)
    assert _graph_differences(stock, ours) == []
    assert stock.code == ours.code
    assert _qdq(ours) == _qdq(stock) and _qdq(ours)
    assert _state(ours) == _state(stock)
    assert program_differences(stock_ep, ours_ep, separately_exported=True) == []
    for table in ("state_dict", "constants"):
        ours_t, stock_t = getattr(ours_ep, table), getattr(stock_ep, table)
        assert [(k, _bits(v)) for k, v in ours_t.items()] == [
            (k, _bits(v)) for k, v in stock_t.items()
        ], table
    # Every search ran accelerated: once per HistogramObserver for the qparams above, and in
    # convert_pt2e (again for each observer a bias's qparams derive from).
    histograms = sum(kind == "HistogramObserver" for _, kind, _ in ours_q)
    accelerated = after.accelerated - (before.accelerated if before else 0)
    assert accelerated == after.calls - (before.calls if before else 0)
    assert accelerated >= 2 * histograms


def test_convert_generates_its_code_once() -> None:
    """``convert_pt2e`` of one calibrated DS-CNN copy stock (acceleration off) and of another
    accelerated: the accelerated run defers its recompiles (its conversion's, its two
    ``PassManager`` runs', its constant fold's) and generates the code once, at first use; the
    converted modules have the same graph and code, consumed as many ``<eval_with_key>``
    numbers, and their code is compiled under the same number relative to each run's start."""
    from arm_accel.runtime import deferred
    from torch.fx import graph_module

    model, inputs, mode = models.build("dscnnkws")
    torch.manual_seed(0)
    exported = torch.export.export(model, inputs, strict=True).module(check_guards=False)
    with arm_accel.disabled():
        prepared = prepare_pt2e(exported, models.quantizer(mode))
        prepared(*inputs)
    runs = []
    for accelerated in (False, True):
        module = copy.deepcopy(prepared)
        deferred_before = deferred.counts["deferred"]
        start = graph_module._loader.next_id
        with arm_accel.enabled() if accelerated else arm_accel.disabled():
            converted = convert_pt2e(module)
        deferred_in_convert = deferred.counts["deferred"] - deferred_before
        code = converted.code  # first use
        runs.append(
            (converted, deferred_in_convert, graph_module._loader.next_id - start, code, start)
        )
    (stock, stock_deferred, stock_keys, stock_code, stock_start) = runs[0]
    (ours, ours_deferred, ours_keys, ours_code, ours_start) = runs[1]
    assert stock_deferred == 0
    assert ours_deferred >= 4, ours_deferred
    assert _graph_differences(stock, ours) == []
    assert ours_code == stock_code
    assert ours_keys == stock_keys
    assert file_number(ours) - ours_start == file_number(stock) - stock_start


@pytest.mark.parametrize("name", ["dscnnkws", "llama1"])
def test_eval_counter_moves_as_stocks(name: str) -> None:
    """The user's script, stock then accelerated in one process (export, ``prepare_pt2e``,
    calibration, ``convert_pt2e``, re-export): torch's ``<eval_with_key>`` counter moves as
    far in each stage, and the re-exported program's stack traces (which name the converted
    module's generated file, ``<eval_with_key>.N``) are stock's with each ``N`` taken relative
    to the run's start. A fresh process running one side gives the same absolute numbers
    then: with the in-place re-traces' recompiles deferred without their numbers, the
    prepared module's code took fewer, and every later file number (so the re-export's stack
    traces) differed from stock's."""
    from torch.fx import graph_module

    loader = graph_module._loader
    model, inputs, mode = models.build(name)
    runs = []
    for accelerated in (False, True):
        with arm_accel.enabled() if accelerated else arm_accel.disabled():
            start = loader.next_id
            moved = []
            torch.manual_seed(0)
            exported = torch.export.export(model, inputs, strict=True).module(check_guards=False)
            moved.append(loader.next_id - start)
            prepared = prepare_pt2e(exported, models.quantizer(mode))
            moved.append(loader.next_id - start)
            prepared(*inputs)
            converted = convert_pt2e(prepared)
            moved.append(loader.next_id - start)
            program = torch.export.export(converted, inputs, strict=True)
            moved.append(loader.next_id - start)
        traces = relative_stack_traces(program, start)
        runs.append((moved, traces))
    (stock_moved, stock_traces), (ours_moved, ours_traces) = runs
    assert ours_moved == stock_moved
    assert any("<eval_with_key>" in t for t in stock_traces)
    assert ours_traces == stock_traces
