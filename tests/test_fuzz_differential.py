"""Random models lowered stock and accelerated must give equal graphs and TOSA bytes.

Each example (a :class:`fuzz_models.Spec`) is exported once per mode (FP, and INT quantized with
the TOSA quantizer) and taken through the edge-dialect stage of ``to_edge_transform_and_lower``
once (none of our passes runs there), then ``to_backend`` runs twice on deep copies of that
edge program: with acceleration off and on, in this process. Every call of the five accelerated
passes records the graph it returns, and so does every pass of the Arm pipeline (all of them
re-trace through the re-trace engine); the two lowerings must record the same calls with equal
graphs (``assert_graphs_equal`` for the five, ``assert_graphs_identical`` -- names and every
meta key -- after every pass) and end in equal TOSA bytes, and the accelerated lowering must
have run some call accelerated (``stats()``: not stock twice, e.g. without the activation hook)
and fallen back only by declining (no failure, no misprediction; the suite runs strict). When
the stock lowering raises, the accelerated one must raise the same type.

CI runs the ``fuzz-ci`` hypothesis profile; ``ARM_ACCEL_FUZZ=long`` runs ``fuzz-long`` (2000
examples, see docs/development.md, "Fuzzing"). Failures found by hypothesis are kept below as
named regressions.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import fuzz_models as fm
import pytest
import torch
from arm_accel import PassStats, Stats
from arm_accel.control import counters, switch
from arm_accel.testing import assert_graphs_equal
from arm_accel.tools import capture, models
from fuzz_models import Op, Spec
from hypothesis import given, settings
from pipeline_diff import assert_passes_identical, record_passes
from torch import fx

PASSES = tuple(capture.STOCK_PASSES)


@dataclass
class Outcome:
    calls: list[tuple[str, fx.GraphModule]]  # (pass name, graph it returned), in call order
    tosa: list[bytes] | None
    error: BaseException | None
    # (pass, graph after it, modified) for every pass of the Arm pipeline
    pipeline: list[tuple[str, fx.GraphModule, bool]] = field(default_factory=list)


@contextmanager
def record_outputs() -> Iterator[list[tuple[str, fx.GraphModule]]]:
    """Record a deep copy of the graph each outermost call of the five passes returns."""
    records: list[tuple[str, fx.GraphModule]] = []
    depth = [0]

    def wrap(name: str, original: Any) -> Any:
        def call(self: Any, graph_module: fx.GraphModule) -> Any:
            depth[0] += 1
            try:
                result = original(self, graph_module)
            finally:
                depth[0] -= 1
            if depth[0] == 0 and type(self).__name__ == name:
                out = getattr(result, "graph_module", None) or graph_module
                records.append((name, copy.deepcopy(out)))
            return result

        return call

    with capture.patched_calls(PASSES, wrap):
        yield records


def edge_stage(program: Any, mode: str) -> Any:
    """``to_edge_transform_and_lower`` up to ``to_backend``: the decompositions to the edge
    dialect, about 60% of a small model's lowering. None of the five passes runs in it (checked
    here), so stock and accelerated lower deep copies of one result."""
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program._program import _gen_edge_manager_for_partitioners

    with switch.disabled(), record_outputs() as calls:
        edge = _gen_edge_manager_for_partitioners(
            {"forward": [models.partitioner(mode)]},
            {"forward": program},
            EdgeCompileConfig(),
            None,
            False,
        )
    assert not calls, f"a pass of ours ran before to_backend: {[n for n, _ in calls]}"
    return edge


def lower_once(edge: Any, mode: str, accelerated: bool) -> Outcome:
    """The rest of ``to_edge_transform_and_lower`` (``to_backend`` with the TOSA partitioner:
    the Arm pass pipeline and serialization) on a deep copy of ``edge``."""
    torch.manual_seed(0)
    previous = switch.set_enabled(accelerated)
    try:
        with record_outputs() as calls, record_passes() as pipeline:
            try:
                lowered = copy.deepcopy(edge).to_backend({"forward": models.partitioner(mode)})
            except Exception as exc:  # compared with the other lowering's outcome
                return Outcome(calls, None, exc, pipeline)
            return Outcome(calls, models.tosa_bytes(lowered), None, pipeline)
    finally:
        switch.set_enabled(previous)


def check_spec(spec: Spec, modes: tuple[str, ...] = ("FP", "INT")) -> None:
    """Export once per mode, lower stock and accelerated, and compare pass by pass."""
    for mode in modes:
        model, inputs = fm.build(spec)
        with switch.disabled():
            program = models.export_for_arm(model, inputs, mode)
        try:
            edge = edge_stage(program, mode)
        except Exception:  # noqa: BLE001 - no pass of ours ran: both lowerings would raise it
            continue
        stock = lower_once(edge, mode, accelerated=False)
        before = counters.snapshot()
        ours = lower_once(edge, mode, accelerated=True)
        compare(stock, ours, mode)
        assert_fast_path_ran(before, counters.snapshot(), ours, mode)
        if stock.error is not None:
            fm.log_outcome(f"{mode}: both raised {type(stock.error).__name__}: {stock.error}"[:300])


def _delta(before: Stats, after: Stats, key: str) -> Counter[str]:
    """Per pass (``key`` an int field) or per pass and reason (a mapping field): after - before."""
    out: Counter[str] = Counter()
    for name, s in after.items():
        new, old = getattr(s, key), getattr(before.get(name, PassStats()), key)
        if isinstance(new, Mapping):
            for reason, n in new.items():
                out[f"{name}: {reason}"] += n - old.get(reason, 0)
        else:
            out[name] += new - old
    return +out


def assert_fast_path_ran(before: Stats, after: Stats, ours: Outcome, mode: str) -> None:
    """Equal output is not enough: some call of ours ran accelerated, none fell back for a
    failure or a misprediction, and the between-scan model predicted every value the closing
    re-traces computed."""
    if ours.error is not None or not ours.calls:
        return
    assert sum(_delta(before, after, "accelerated").values()) > 0, (
        f"{mode}: no call ran accelerated (is the activation hook installed?)"
    )
    unexpected = [
        r
        for r in _delta(before, after, "fallbacks")
        if "failed" in r or "misprediction" in r or "strict" in r
    ]
    assert not unexpected, f"{mode}: unexpected fallbacks {unexpected}"
    assert not _delta(before, after, "shape_mismatches"), f"{mode}: the model mispredicted"


def compare(stock: Outcome, ours: Outcome, mode: str) -> None:
    if stock.error is not None or ours.error is not None:
        assert type(ours.error) is type(stock.error), (
            f"{mode}: stock raised {stock.error!r}, accelerated raised {ours.error!r}"
        )
        return
    names_stock = [n for n, _ in stock.calls]
    names_ours = [n for n, _ in ours.calls]
    assert names_ours == names_stock, f"{mode}: pass calls differ"
    for k, ((name, a), (_, b)) in enumerate(zip(stock.calls, ours.calls, strict=True)):
        try:
            assert_graphs_equal(a, b)
        except AssertionError as exc:
            raise AssertionError(f"{mode}: call {k} ({name}) differs: {exc}") from None
    # Every pass of the pipeline (the re-trace engine touches them all): identical graphs.
    assert_passes_identical(stock.pipeline, ours.pipeline, f"{mode}: ")
    assert ours.tosa == stock.tosa, f"{mode}: TOSA bytes differ"


@fm.fuzz_settings()
@given(spec=fm.specs())
def test_random_models_lower_like_stock(spec: Spec) -> None:
    fm.log_example(spec)
    check_spec(spec)


# -- regressions found by the long run ------------------------------------------------------


def test_regression_identity_permute_leaves_no_call_node() -> None:
    """A long-run example, shrunk by hypothesis: ``permute(1, 0)`` of a 1x1 input is removed
    before propagation, which then saw a graph without call nodes; the scan planner's exporter
    indexed an empty class column and the accelerated FP lowering raised where stock did not."""
    check_spec(Spec(inputs=((1, 1),), ops=(Op("permute", (0,), ((1, 0),)),), outputs=(1,)))


def test_regression_retargeted_node_keeps_the_provenance_of_its_first_retrace() -> None:
    """A long-run example, shrunk by hypothesis: FP, the Up pass moves ``permute(1, 0)`` of
    ``cat(x, x)`` (x 1x2) above the cat; the in-loop canonicalization turns the new permute into
    a view. Stock's re-trace after the scan recorded the node's provenance (``from_node``) as the
    permute; the virtual re-trace recorded none, so the closing re-trace recorded the view."""
    check_spec(
        Spec(
            inputs=((1, 2),),
            ops=(Op("cat", (0, 0), (0,)), Op("permute", (1,), ((1, 0),))),
            outputs=(2,),
        ),
        ("FP",),
    )


def test_regression_deferred_recompile_refiles_the_find_nodes_index() -> None:
    """A long-run example, shrunk by hypothesis: FP, ``FuseConsecutiveClampsPass`` rewires the
    second of two clamps (``Node.__setattr__`` re-files it last among the clamps) and
    recompiles. Stock's recompile generates the code, which re-files every node in graph
    order; the deferred recompile did not, so the clamps' find_nodes order differed."""
    check_spec(
        Spec(
            inputs=((1,), (1, 1, 1, 1, 1, 1)),
            ops=(
                Op("transpose", (1,), (0, 1)),
                Op("unary", (2,), ("relu",)),
                Op("permute", (3,), ((0, 1, 2, 3, 4, 5),)),
                Op("unary", (4,), ("relu",)),
                Op("unary", (5,), ("relu",)),
                Op("permute", (6,), ((0, 1, 2, 3, 4, 5),)),
                Op("transpose", (7,), (0, 1)),
                Op("unary", (8,), ("relu",)),
                Op("transpose", (9,), (0, 1)),
            ),
            outputs=(10,),
        ),
        ("FP",),
    )


# -- the checker itself must be able to fail ---------------------------------------------------


def test_compare_catches_a_different_graph() -> None:
    spec = Spec(inputs=((2, 3),), ops=(Op("permute", (0,), ((1, 0),)),), outputs=(1,))
    model, inputs = fm.build(spec)
    edge = edge_stage(models.export_for_arm(model, inputs, "FP"), "FP")
    stock = lower_once(edge, "FP", accelerated=False)
    assert stock.error is None and stock.calls, "the five passes never ran"
    before = counters.snapshot()
    ours = lower_once(edge, "FP", accelerated=True)
    compare(stock, ours, "FP")
    assert_fast_path_ran(before, counters.snapshot(), ours, "FP")
    # A lowering with acceleration off fails the fast-path check.
    before = counters.snapshot()
    again = lower_once(edge, "FP", accelerated=False)
    with pytest.raises(AssertionError, match="no call ran accelerated"):
        assert_fast_path_ran(before, counters.snapshot(), again, "FP")
    # Tamper with one recorded graph: an extra node must be reported.
    name, gm = ours.calls[-1]
    gm = copy.deepcopy(gm)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(out):
        gm.graph.call_function(torch.ops.aten.relu.default, (out.args[0][0],))
    ours.calls[-1] = (name, gm)
    with pytest.raises(AssertionError, match="differs"):
        compare(stock, ours, "FP")
    with pytest.raises(AssertionError, match="stock raised"):
        compare(stock, Outcome([], None, RuntimeError("boom")), "FP")


@pytest.mark.parametrize("mode", ["FP", "INT"])
def test_split_lowering_equals_the_user_path(mode: str) -> None:
    """``edge_stage`` + ``lower_once`` give the bytes ``to_edge_transform_and_lower`` gives."""
    spec = Spec(
        inputs=((2, 3, 4),),
        ops=(Op("permute", (0,), ((0, 2, 1),)), Op("unary", (1,), ("sigmoid",))),
        outputs=(2,),
    )
    model, inputs = fm.build(spec)
    program = models.export_for_arm(model, inputs, mode)
    split = lower_once(edge_stage(program, mode), mode, accelerated=True)
    assert split.error is None and split.tosa
    assert split.tosa == models.tosa_bytes(models.lower(copy.deepcopy(program), mode))


def test_fuzz_examples_overrides_the_long_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ARM_ACCEL_FUZZ_EXAMPLES`` sets the long profile's example count and nothing else; the
    CI profile ignores it; a bad value raises naming the variable."""
    monkeypatch.setenv("ARM_ACCEL_FUZZ_EXAMPLES", "1000")
    monkeypatch.setenv("ARM_ACCEL_FUZZ", "long")
    long_profile = settings.get_profile("fuzz-long")
    chosen = fm.fuzz_settings()
    assert chosen.max_examples == 1000 != long_profile.max_examples
    assert chosen.phases == long_profile.phases and chosen.deadline is None
    monkeypatch.setenv("ARM_ACCEL_FUZZ", "")
    assert fm.fuzz_settings().max_examples == settings.get_profile("fuzz-ci").max_examples
    monkeypatch.setenv("ARM_ACCEL_FUZZ", "long")
    monkeypatch.setenv("ARM_ACCEL_FUZZ_EXAMPLES", "ten")
    with pytest.raises(ValueError, match="ARM_ACCEL_FUZZ_EXAMPLES"):
        fm.fuzz_settings()


def test_strategy_draws_the_promised_shapes() -> None:
    """The generator reaches every op kind, ranks 1 and 6, several outputs, and in a quarter of
    the specs chains of >= 3 layout ops each reading the one before, maybe through an elementwise
    op, so the multi-scan propagation runs (the chain step draws 154 of these 300 specs; the
    test asks for a quarter)."""
    from hypothesis import HealthCheck

    seen_kinds: set[str] = set()
    ranks: set[int] = set()
    multi = [False]
    long_chains = [0]

    @settings(max_examples=300, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(spec=fm.specs())
    def probe(spec: Spec) -> None:
        seen_kinds.update(op.kind for op in spec.ops)
        ranks.update(len(s) for s in spec.inputs)
        multi[0] |= len(spec.outputs) > 1
        long_chains[0] += _longest_layout_chain(spec) >= 3
        fm.build(spec)[0](*fm.build(spec)[1])  # runs eagerly

    probe()
    assert seen_kinds == {
        "permute", "transpose", "reshape", "squeeze", "unsqueeze", "unary", "binary", "const",
        "mean", "slice", "cat",
    }  # fmt: skip
    assert {1, 6} <= ranks
    assert multi[0]
    assert long_chains[0] >= 75, long_chains[0]


def _longest_layout_chain(spec: Spec) -> int:
    """Most layout ops on one path where each reads the previous value, optionally through one
    elementwise op."""
    first = len(spec.inputs)
    kinds = {first + k: op.kind for k, op in enumerate(spec.ops)}
    depth: dict[int, int] = {}  # value -> layout ops on the chain ending at it
    for k, op in enumerate(spec.ops):
        src = op.args[0]
        if op.kind in fm.LAYOUT:
            depth[first + k] = depth.get(src, 0) + 1
        elif op.kind in fm.ELEMENTWISE and kinds.get(src) in fm.LAYOUT:
            depth[first + k] = depth.get(src, 0)
    return max(depth.values(), default=0)
