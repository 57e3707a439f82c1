"""Ethos-U end to end: EthosUPartitioner + Vela, stock vs accelerated in one process, on a small
quantized model; Vela output (delegate bytes) and the serialized .pte compared byte for byte."""

from __future__ import annotations

import copy
import re

import arm_accel
import pytest
from arm_accel.runtime import eval_counter
from arm_accel.tools import cli, models, profiling

pytest.importorskip("ethosu.vela", reason="Ethos-U lowering needs ethos-u-vela (scripts/setup.sh)")


def _backend_ids(edge: object) -> list[str]:
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    gm = edge.exported_program().graph_module  # type: ignore[attr-defined]
    return [lowered.backend_id for _, lowered, _ in get_lowered_submodules(gm)]


def test_ethos_u55_stock_vs_accelerated_identical() -> None:
    """Lower convnet (quantized) for ethos-u55-128 stock (arm_accel.disabled(), no accelerated
    call recorded) and then accelerated from the same exported program; compares the Vela bytes
    of every delegate and the .pte bytes, and requires that accelerated passes ran (stats delta
    > 0, no fallback)."""
    target = "ethos-u55-128"
    assert profiling.ensure_active(), "acceleration must be on for this test"
    model, inputs, mode = models.build("convnet")
    mode = models.target_mode(target, mode)
    assert mode == "INT"
    exported = models.export_for_arm(model, inputs, mode, target=target)

    before = profiling.stats_snapshot()
    with arm_accel.disabled():
        edge_s = models.lower(copy.deepcopy(exported), mode, target)
    middle = profiling.stats_snapshot()
    edge_a = models.lower(copy.deepcopy(exported), mode, target)
    accelerated, fallbacks = profiling.stats_delta(middle, profiling.stats_snapshot())
    assert profiling.stats_delta(before, middle)[0] == 0, "the stock lowering ran our passes"

    assert _backend_ids(edge_s) == _backend_ids(edge_a) == ["EthosUBackend"]
    vela_s, vela_a = models.tosa_bytes(edge_s), models.tosa_bytes(edge_a)
    assert all(len(b) > 0 for b in vela_s)
    assert vela_s == vela_a
    assert models.pte_bytes(edge_s) == models.pte_bytes(edge_a)
    assert accelerated is not None and accelerated > 0, (accelerated, fallbacks)
    assert fallbacks == 0


def test_ethos_u55_llama_with_rewritten_nodes_identical() -> None:
    """llama1 (quantized) for ethos-u55-128, stock then accelerated from copies of one exported
    program: the edge stage's calls 1 (its transpose/type_as/unbind/... traced alone) and 2 are
    replayed, the Arm passes' constant quantizations and dequantizations ran natively, the
    Vela bytes of every delegate and the .pte bytes equal stock's, and the lowering took as
    many ``<eval_with_key>`` numbers as stock's."""
    from arm_accel.edge import decompositions
    from arm_accel.quantize import affine

    def qargs_runs() -> tuple[int, int]:
        stats = arm_accel.stats()
        return tuple(  # type: ignore[return-value]
            stats.get(n, arm_accel.PassStats()).accelerated
            for n in (affine.QUANTIZE_STATS_NAME, affine.DEQUANTIZE_STATS_NAME)
        )

    target = "ethos-u55-128"
    assert profiling.ensure_active(), "acceleration must be on for this test"
    model, inputs, mode = models.build("llama1")
    mode = models.target_mode(target, mode)
    exported = models.export_for_arm(model, inputs, mode, target=target)
    program_s, program_a = copy.deepcopy(exported), copy.deepcopy(exported)
    with arm_accel.disabled():
        start = eval_counter.position()
        edge_s = models.lower(program_s, mode, target)
        numbers_s = eval_counter.position() - start
    before = arm_accel.stats().get(decompositions.STATS_NAME, arm_accel.PassStats()).accelerated
    qargs_before = qargs_runs()
    start = eval_counter.position()
    edge_a = models.lower(program_a, mode, target)
    assert eval_counter.position() - start == numbers_s, "<eval_with_key> numbers"
    after = arm_accel.stats().get(decompositions.STATS_NAME, arm_accel.PassStats()).accelerated
    assert after - before == 2, "calls 1 and 2 of the edge stage were not both replayed"
    assert all(a > b for a, b in zip(qargs_runs(), qargs_before, strict=True)), "QuantArgs"
    vela_s, vela_a = models.tosa_bytes(edge_s), models.tosa_bytes(edge_a)
    assert vela_s and all(len(b) > 0 for b in vela_s)
    assert vela_s == vela_a
    assert models.pte_bytes(edge_s) == models.pte_bytes(edge_a)


def test_demo_ethos_u85(capsys: pytest.CaptureFixture[str]) -> None:
    """`arm-accel demo --target ethos-u85-256` on dscnnkws: exit 0 only when Vela bytes and the
    .pte are identical; the report names both, the accelerated call count (> 0) and a verdict
    as its last line; Vela's network summary is not on stdout."""
    rc = cli.main(["demo", "--model", "dscnnkws", "--target", "ethos-u85-256", "--no-warmup"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert re.search(r"^model dscnnkws \(INT\) for ethos-u85-256, ", out, re.M), out
    assert re.search(r"^  Vela compile s\s+[0-9.]+\s+[0-9.]+$", out, re.M), out
    assert "Vela output: identical" in out and ".pte: identical" in out
    calls = re.search(r"^accelerated pass calls: (\d+), fallbacks to stock: 0$", out, re.M)
    assert calls and int(calls.group(1)) > 0, out
    assert out.splitlines()[-1].startswith("verdict: accelerated lowering "), out
    assert "Network summary" not in out


def test_ethos_u_rejects_fp_and_unknown_target() -> None:
    """Ethos-U compile specs are INT only; the demo names the known targets for a wrong one."""
    with pytest.raises(ValueError, match="INT models only"):
        models.compile_spec("FP", "ethos-u55-128")
    with pytest.raises(ValueError, match="unknown target"):
        models.compile_spec("INT", "vgf")
    assert cli.main(["demo", "--target", "ethos-u99"]) == 2
