"""The ``arm-accel`` command: --version, info (incl. --json), profile (incl. --compare, --csv and
--json), demo."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import subprocess
import sys
from importlib import metadata

import arm_accel
import pytest
from arm_accel.tools import cli, profiling

DATA = os.path.join(os.path.dirname(__file__), "data")
TINY = os.path.join(DATA, "tiny_lowering.py")


def _lowering_seconds(out: str) -> list[float]:
    return [float(x) for x in re.findall(r"LOWERING_SECONDS=([0-9.]+)", out)]


def test_version_module_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "arm_accel.tools.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    from arm_accel import __version__

    assert out.strip() == f"arm-accel {__version__}"


def test_info(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^executorch\s+1\.5\.1$", out, re.M), out
    assert re.search(rf"^torch\s+{re.escape(metadata.version('torch'))}$", out, re.M), out
    assert re.search(r"^accelerated\s+(yes|no|unknown) \(.+\)$", out, re.M), out


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    """``info --json`` prints the versions found and ``arm_accel.status().as_dict()`` (compared
    with the status read in this process after the command ran) as one JSON object."""
    assert cli.main(["info", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["versions"]["executorch"] == "1.5.1"
    assert record["versions"]["torch"] == metadata.version("torch")
    assert record["status"] == arm_accel.status().as_dict()
    assert set(record["status"]) == {f.name for f in dataclasses.fields(arm_accel.Status)}
    assert record["accelerated"] == (record["status"]["enabled"] and record["status"]["activated"])


def test_profiler_restores_hooks() -> None:
    """The profiler wraps the pass entry points and every part of the lowering it attributes
    (``LOWERING_PARTS``) while active, and puts each object back as it was; the Arm passes
    (whose import activates arm-accel) are imported first, as the profiler itself does."""
    import importlib

    import executorch.backends.arm._passes  # noqa: F401
    from executorch.exir.pass_base import _ExportPassBase
    from torch.fx.passes.infra.pass_base import PassBase

    def owners() -> list[tuple[object, str]]:
        out: list[tuple[object, str]] = []
        for module, cls, attr, _ in profiling.LOWERING_PARTS:
            owner = importlib.import_module(module)
            out.append((getattr(owner, cls) if cls else owner, attr))
        return out

    parts = {(id(o), a): getattr(o, a) for o, a in owners()}
    call, retrace = PassBase.__call__, _ExportPassBase.call
    with profiling.Profiler():
        assert PassBase.__call__ is not call
        assert _ExportPassBase.call is not retrace
        for o, a in owners():
            assert getattr(o, a) is not parts[(id(o), a)], a
    assert PassBase.__call__ is call
    assert _ExportPassBase.call is retrace
    for o, a in owners():
        assert getattr(o, a) is parts[(id(o), a)], a


def test_profile_lists_arm_passes_and_adds_up(
    tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out_csv = os.path.join(tmp_path, "profile.csv")
    assert cli.main(["profile", "--top", "15", "--csv", out_csv, TINY, "2"]) == 0
    out = capsys.readouterr().out
    (measured,) = _lowering_seconds(out)

    # The printed table: header, the top 15 rows sorted by time, and a summary.
    assert re.search(r"^pass\s+kind\s+calls\s+retraces\s+seconds\s+share$", out, re.M)
    assert "PropagateViewCopyPermuteDownPass" in out

    with open(out_csv) as f:
        rows = list(csv.DictReader(f))
    names = {r["pass"] for r in rows}
    arm = {r["pass"] for r in rows if r["kind"] == "arm"}
    # The Arm pipeline, including the five view/permute passes, is listed.
    for name in (
        "CanonicalizeViewCopyPermutePass",
        "FuseDuplicateUsersPass",
        "FuseIdenticalInputTransformsPass",
        "PropagateViewCopyPermuteUpPass",
        "PropagateViewCopyPermuteDownPass",
        "DecomposeLinearPass",
        "InsertDataLayoutCastsPass",
    ):
        assert name in arm, sorted(names)
    assert len(arm) > 30
    # What the lowering does between its passes is attributed: the verifiers, the programs'
    # construction and the copies to_backend makes.
    for part in (
        "(verifiers: edge op dtype check, a fake run of the graph)",
        "(ExportedProgram construction)",
        "(to_backend: fake program copy)",
        "(to_backend: partition submodules)",
    ):
        assert part in names, sorted(names)
    seconds = [float(r["seconds"]) for r in rows]
    assert seconds == sorted(seconds, reverse=True)
    assert sum(int(r["retraces"]) for r in rows) > 0
    # Exclusive seconds of all rows add up to the script's own measured lowering time.
    total = sum(seconds)
    assert abs(total - measured) <= 0.10 * measured, (total, measured)
    # ... and the passes themselves (not the phases) are a real part of it.
    passes = sum(float(r["seconds"]) for r in rows if r["kind"] != "phase")
    assert passes > 0.10 * measured, (passes, measured)


def test_profile_compare(tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    out_csv = os.path.join(tmp_path, "compare.csv")
    assert cli.main(["profile", "--compare", "--top", "10", "--csv", out_csv, TINY, "1"]) == 0
    out = capsys.readouterr().out
    assert len(_lowering_seconds(out)) == 2
    assert re.search(r"^pass\s+stock calls\s+stock retraces\s+stock s", out, re.M)
    assert "accel s" in out and "ratio" in out
    with open(out_csv) as f:
        runs = {r["run"] for r in csv.DictReader(f)}
    assert runs == {"stock", "accelerated"}


def test_profile_json(capsys: pytest.CaptureFixture[str]) -> None:
    """``profile --json``: stdout is one JSON object (the script's own output went to stderr)
    with every profile row, rows adding up to the total, and the run's ``arm_accel.stats()``,
    in which the propagation passes took the accelerated path on every call."""
    assert cli.main(["profile", "--json", TINY, "1"]) == 0
    captured = capsys.readouterr()
    (measured,) = _lowering_seconds(captured.err)
    (run,) = json.loads(captured.out).values()
    prof, stats = run["profile"], run["stats"]
    rows = {r["pass"]: r for r in prof["rows"]}
    assert rows["PropagateViewCopyPermuteDownPass"]["kind"] == "arm"
    assert sum(r["seconds"] for r in prof["rows"]) == pytest.approx(prof["total_seconds"], 1e-3)
    assert abs(prof["lowering_seconds"] - measured) <= 0.10 * measured
    for name in ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass"):
        assert stats[name]["calls"] > 0, stats
        assert stats[name]["accelerated"] == stats[name]["calls"], stats[name]
        assert stats[name]["fallbacks"] == {}, stats[name]


def test_profile_stages(capsys: pytest.CaptureFixture[str]) -> None:
    """``profile --compare`` of a script from module to .pte: every stage of it timed in both
    runs (export, prepare, calibrate, convert, re-export, lower, .pte), the whole script's
    wall time covering them, and the stage table with its ratios."""
    script = os.path.join(DATA, "tiny_quantize_script.py")
    assert cli.main(["profile", "--compare", "--json", script]) == 0
    record = json.loads(capsys.readouterr().out)
    for run in ("stock", "accelerated"):
        prof = record[run]["profile"]
        assert list(prof["stages"]) == list(profiling.STAGES), prof["stages"]
        assert sum(prof["stages"].values()) <= prof["script_seconds"]
    assert cli.main(["profile", "--compare", "--top", "3", script]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^calibrate\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+x$", out, re.M), out
    assert re.search(r"^whole script ratio: [0-9.]+x; lowering ratio: [0-9.]+x$", out, re.M), out


def test_profile_script_args_and_missing_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["profile", os.path.join(DATA, "no_such_script.py")]) == 2


def test_demo_small_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--model", "convnet", "--no-warmup"]) == 0
    out = capsys.readouterr().out
    assert "TOSA output: identical" in out and ".pte: identical" in out
    assert out.splitlines()[-1].startswith("verdict: accelerated lowering "), out
    assert re.search(r"^lowering seconds\s+[0-9.]+\s+[0-9.]+$", out, re.M), out
    assert re.search(r"^re-traces\s+\d+\s+\d+$", out, re.M), out
    for group in profiling.VIEW_PERMUTE_GROUPS:
        assert group in out
    assert "ratio (stock / accelerated):" in out
    # The whole script stage by stage (FP: export, lower, .pte), stock vs accelerated.
    for stage in ("export", "lower", ".pte", "whole script"):
        assert re.search(rf"^{re.escape(stage)}\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+x$", out, re.M), out
    assert "whole script ratio (stock / accelerated):" in out
    assert ", whole script " in out.splitlines()[-1]


def test_demo_unknown_model() -> None:
    assert cli.main(["demo", "--model", "no-such-model"]) == 2


def _bench_module():  # type: ignore[no-untyped-def]
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "benches", "lowering.py")
    spec = importlib.util.spec_from_file_location("bench_lowering", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_bench_outputs(tmp_path: os.PathLike[str]) -> None:
    """The benchmark's table, CSV and plot writers (on made-up results: no lowering)."""
    bench = _bench_module()
    assert bench.depth_of("llama16") == 16 and bench.depth_of("transformer4") == 4
    assert bench.depth_of("convnet") is None
    results = [
        bench.Result(
            model=name,
            mode=mode,
            depth=bench.depth_of(name),
            nodes=100 * d,
            stock_s=2.0 * d,
            accel_s=1.0 * d,
            ratio=2.0,
            vp_share_stock=0.4,
            vp_share_accel=0.1,
            vp_stock_s=0.8 * d,
            vp_accel_s=0.1 * d,
            retraces_stock=50,
            retraces_accel=20,
            prop_stock_s=0.6 * d,
            prop_accel_s=0.05 * d,
            prop_retraces_stock=f"{d},{d + 1}",
            prop_retraces_accel="1,1",
            tosa_bytes=1000,
            identical=True,
            accelerated_calls=5,
            fallbacks=0,
        )
        for name, mode, d in (("llama4", "INT", 4), ("llama8", "INT", 8), ("convnet", "FP", 1))
    ]
    results.append(bench.Result.failed("resnet8", "INT", "RuntimeError: boom"))
    out = os.path.join(tmp_path, "lowering")
    bench.write_csv(out + ".csv", results)
    assert bench.plot(out + ".png", results)
    bench.write_md(out + ".md", results, bench.machine(), out + ".png")
    md = open(out + ".md").read()
    assert "| llama8 | INT | 800 | 16.00 | 8.00 | 2.00x | 40.0% | 10.0% | 50 | 20 |" in md
    assert "| llama8 | 4.80 | 0.40 | 12.0x | 8,9 | 1,1 |" in md
    assert "error: RuntimeError: boom" in md and "lowering.png" in md
    with open(out + ".csv") as f:
        assert [r["model"] for r in csv.DictReader(f)] == ["llama4", "llama8", "convnet", "resnet8"]
    assert bench.read_csv(out + ".csv") == results  # --from-csv rebuilds tables from this
    later = os.path.join(tmp_path, "later.csv")
    bench.write_csv(later, [bench.Result.failed("llama8", "INT", "MemoryError: x")])
    merged = bench.merge_csvs([out + ".csv", later])
    got = [(r.model, r.error) for r in merged][:2]
    assert got == [("llama4", ""), ("llama8", "MemoryError: x")]
    with open(out + ".png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
