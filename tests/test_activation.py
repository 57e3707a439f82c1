"""Transparent activation: hook swapping, ARM_ACCEL=0, enable/disable/disabled, stats,
version guard, and the journal-based safe fallback of ``AcceleratedPass``.

The swap tests run in fresh interpreters (the project venv's python, where ``arm_accel_hook.pth``
is installed by ``scripts/setup.sh``) with a test-double registry entry, so they do not depend on
which accelerated passes other engineers have registered.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import arm_accel
import pytest
import torch
import torch.fx
from arm_accel import PassStats
from arm_accel.bootstrap import activation
from arm_accel.control import counters, switch
from arm_accel.fxstock import GraphJournal
from arm_accel.pipeline.passes.base import AcceleratedPass, Decline

# A stock Arm pass that the TOSA pipeline runs (3x, when the graph holds one of its target ops)
# and that another executorch module (fold_qdq_with_annotated_qparams_pass) imports by name.
STOCK = "RemoveNoopPass"

DOUBLE = '''
from executorch.backends.arm._passes.remove_noop_pass import RemoveNoopPass
from arm_accel.pipeline.passes.base import AcceleratedPass

class DoubleNoop(AcceleratedPass, RemoveNoopPass):
    """Test double: "accelerated" path = the stock work, counted."""
    runs = 0

    def accel_plan(self, graph_module):
        return "plan"

    def accel_apply(self, graph_module, plan, journal):
        DoubleNoop.runs += 1
        return self.stock_call(graph_module)
'''

SCRIPT = r"""
import json, os, sys
report = {"torch_at_start": "torch" in sys.modules,
          "finder": any(type(f).__name__ == "ArmAccelFinder" for f in sys.meta_path)}
from arm_accel.patches import table
from arm_accel.patches.model import ClassSwap, Group
table.GROUPS = tuple(
    Group("passes", "pipeline", "test double",
          (ClassSwap("RemoveNoopPass", "double_mod:DoubleNoop", "test double"),), independent=True)
    if g.name == "passes" else g
    for g in table.GROUPS
)

import torch
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.exir import to_edge_transform_and_lower
import executorch.backends.arm._passes as pkg
import executorch.backends.arm._passes.arm_pass_manager as apm
import executorch.backends.arm._passes.remove_noop_pass as defining
import executorch.backends.arm._passes.fold_qdq_with_annotated_qparams_pass as fold
import later_mod  # imported after activation: from ... import RemoveNoopPass
import arm_accel
import double_mod

cls = pkg.RemoveNoopPass
report["activated"] = arm_accel.status().activated
report["is_double"] = isinstance(cls, type) and issubclass(cls, double_mod.DoubleNoop)
report["name"] = cls.__name__
report["same_everywhere"] = all(
    x is cls for x in (apm.RemoveNoopPass, defining.RemoveNoopPass, fold.RemoveNoopPass,
                       later_mod.A, later_mod.B))

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)
    def forward(self, x):
        y = torch.cat([self.lin(x).clone()], dim=0)  # no-ops: RemoveNoopPass acts
        return y.reshape(2, 2, 4).permute(0, 2, 1).relu()

def lower():
    torch.manual_seed(0)
    ep = torch.export.export(M().eval(), (torch.randn(2, 2, 8),))
    spec = TosaCompileSpec("TOSA-1.0+FP")
    to_edge_transform_and_lower(ep, partitioner=[TOSAPartitioner(spec)])

if report["is_double"]:
    lower()
    report["runs_enabled"] = double_mod.DoubleNoop.runs
    report["stats_enabled"] = arm_accel.stats().as_dict().get("RemoveNoopPass")
    with arm_accel.disabled():
        lower()
    report["runs_disabled"] = double_mod.DoubleNoop.runs
    report["stats_disabled"] = arm_accel.stats().as_dict().get("RemoveNoopPass")
else:
    arm_accel.enable()
    report["status_after_enable"] = arm_accel.status().as_dict()
    report["is_double_after_enable"] = issubclass(pkg.RemoveNoopPass, double_mod.DoubleNoop)
    report["apm_after_enable"] = apm.RemoveNoopPass is pkg.RemoveNoopPass
print("REPORT" + json.dumps(report))
"""

LATER = """
from executorch.backends.arm._passes import RemoveNoopPass as A
from executorch.backends.arm._passes.remove_noop_pass import RemoveNoopPass as B
"""


def _run_script(tmp_path: Path, env_extra: dict[str, str]) -> dict:
    (tmp_path / "double_mod.py").write_text(DOUBLE)
    (tmp_path / "later_mod.py").write_text(LATER)
    (tmp_path / "script.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), **env_extra)
    env.pop("ARM_ACCEL", None) if "ARM_ACCEL" not in env_extra else None
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "script.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT"))
    return json.loads(line[len("REPORT") :])


def _hook_pth_installed() -> bool:
    import sysconfig

    return (Path(sysconfig.get_paths()["purelib"]) / "arm_accel_hook.pth").exists()


needs_pth = pytest.mark.skipif(
    not _hook_pth_installed(), reason="arm_accel_hook.pth not installed (run scripts/setup.sh)"
)


@needs_pth
def test_hook_swaps_stock_class_everywhere(tmp_path: Path) -> None:
    r = _run_script(tmp_path, {})
    assert r["torch_at_start"] is False
    assert r["finder"] is True
    assert r["activated"] is True
    assert r["is_double"] and r["name"] == STOCK
    assert r["same_everywhere"], r
    # The TOSA pipeline ran our class; every enabled call took the accelerated path.
    s = r["stats_enabled"]
    assert r["runs_enabled"] > 0 and s["calls"] == r["runs_enabled"] == s["accelerated"]
    # disabled(): the swapped-in class ran pure stock behaviour.
    s2 = r["stats_disabled"]
    assert r["runs_disabled"] == r["runs_enabled"]
    assert s2["calls"] > s["calls"] and s2["accelerated"] == s["accelerated"]


@needs_pth
def test_env_off_then_enable(tmp_path: Path) -> None:
    r = _run_script(tmp_path, {"ARM_ACCEL": "0"})
    assert r["finder"] is False and r["activated"] is False and r["is_double"] is False
    st = r["status_after_enable"]
    assert st["activated"] and st["swapped"] == {STOCK: "double_mod:DoubleNoop"}
    assert r["is_double_after_enable"] and r["apm_after_enable"]


IMPORT_OURS_FIRST = r"""
import json, sys
# imports executorch's Arm passes while still executing (and others of ours import from it)
import arm_accel.pipeline.passes.{module}
import arm_accel
from arm_accel.patches import table
import executorch.backends.arm._passes as pkg
import executorch.backends.arm._passes.arm_pass_manager as apm
st = arm_accel.status()
registry = [row.name for row in table.group("passes").rows]
print(json.dumps({
    "registry": sorted(registry),
    "swapped": sorted(st.swapped),
    "skipped": dict(st.skipped),
    "ours_in_pkg": sorted(
        n for n in registry
        if getattr(getattr(pkg, n, None), "_arm_accel_impl", None) is not None
    ),
    "stock_in_apm": sorted(
        n for n in registry
        if hasattr(apm, n) and getattr(getattr(apm, n), "_arm_accel_impl", None) is None
    ),
}))
"""


@needs_pth
@pytest.mark.parametrize("module", ["propagate", "canonicalize"])
def test_importing_our_pass_module_first_still_swaps_everything(module: str) -> None:
    """One of our pass modules imported before executorch's Arm passes, in a fresh interpreter:
    its import triggers the activation before its own classes (which other pass modules import)
    exist; every swap is deferred to the end of its import, none skipped, none warned."""
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_OURS_FIRST.replace("{module}", module)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ARM_ACCEL": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["skipped"] == {}
    assert r["swapped"] == r["registry"] == r["ours_in_pkg"]
    assert r["stock_in_apm"] == []
    assert "stays stock" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# In-process tests (no executorch pipeline): switch, stats, version guard, safe fallback.


@pytest.fixture
def clean_stats():
    counters.reset()
    prev = switch.set_enabled(True)
    yield
    switch.set_enabled(prev)
    counters.reset()


def test_env_parsing() -> None:
    """``ARM_ACCEL`` read by the switch; the ``.pth`` start-up line, which may import nothing,
    holds its own copy of the off values: the same set."""
    import ast
    import pathlib
    import re

    pth = (pathlib.Path(__file__).parent.parent / "arm_accel_hook.pth").read_text()
    copy = re.search(r"not in (\([^)]*\))", pth)
    assert copy is not None and frozenset(ast.literal_eval(copy.group(1))) == switch._OFF_VALUES
    assert switch.env_enabled({}) is True
    assert switch.env_enabled({"ARM_ACCEL": "1"}) is True
    for off in ("0", "false", "OFF", "no "):
        assert switch.env_enabled({"ARM_ACCEL": off}) is False


def test_enable_disable_disabled(clean_stats) -> None:
    arm_accel.disable()
    assert not arm_accel.is_enabled()
    arm_accel.enable()
    assert arm_accel.is_enabled()
    with arm_accel.disabled():
        assert not switch.is_enabled()
        with arm_accel.disabled():
            assert not switch.is_enabled()
        assert not switch.is_enabled()
    assert switch.is_enabled()


def test_stats_api(clean_stats, caplog) -> None:
    """What the recording API counted, read back by ``arm_accel.stats()`` as typed records and
    as their JSON form (``as_dict()``); ``reset_stats()`` empties it."""
    counters.record_call("P", 0.5, accelerated=True, retraces=2)
    counters.record_call("P", 0.25, accelerated=False)
    with caplog.at_level(logging.WARNING, logger="arm_accel"):
        counters.record_fallback("P", "why")
        counters.record_fallback("P", "why")
    snap = arm_accel.stats()
    assert snap == {
        "P": PassStats(
            calls=2,
            accelerated=1,
            fallbacks={"why": 2},
            retraces=2,
            seconds=0.75,
        )
    }
    assert snap["P"].fallback_count == 2
    assert snap.as_dict() == {
        "P": {
            "calls": 2,
            "accelerated": 1,
            "fallbacks": {"why": 2},
            "retraces": 2,
            "seconds": 0.75,
            "scans_native": 0,
            "scans_declined": {},
            "scan_runs": 0,
            "shape_mismatches": 0,
        }
    }
    counters.record_scan("P", None)
    counters.record_scan("P", "fork")
    assert arm_accel.stats()["P"].scans_native == 1
    assert arm_accel.stats()["P"].scans_declined == {"fork": 1}
    counters.record_scan_run("P")
    counters.record_shape_mismatch("P", 2)
    assert arm_accel.stats()["P"].scan_runs == 1
    assert arm_accel.stats()["P"].shape_mismatches == 2
    assert sum("why" in r.getMessage() for r in caplog.records) == 1
    arm_accel.reset_stats()
    assert arm_accel.stats() == {} and arm_accel.stats().as_dict() == {}


# A stand-in "stock" pass and accelerated variants of it, on a plain torch.fx graph.


class _Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x + 1) * 2


class FakeStock:
    stock_runs = 0

    def call(self, graph_module):
        FakeStock.stock_runs += 1
        return {"stock": True, "code": graph_module.code}


class AccelOK(AcceleratedPass, FakeStock):
    def accel_plan(self, graph_module):
        return [n for n in graph_module.graph.nodes if n.target is torch.relu]

    def accel_apply(self, graph_module, plan, journal):
        for relu in plan:
            new = journal.call_function(torch.sigmoid, (relu.args[0],), after=relu)
            journal.replace_all_uses_with(relu, new)
            journal.erase(relu)
        self.note_retrace()
        return {"stock": False}


class AccelBoom(AcceleratedPass, FakeStock):
    """Makes every kind of journaled edit, then fails."""

    def accel_plan(self, graph_module):
        return list(graph_module.graph.nodes)

    def accel_apply(self, graph_module, plan, journal):
        add = next(n for n in plan if n.target in (torch.add, "add") or "add" in n.name)
        relu = next(n for n in plan if n.target is torch.relu)
        new = journal.call_function(torch.neg, (add,), before=relu)
        journal.call_function(torch.abs, (new,), after=new)
        journal.replace_all_uses_with(add, new, delete_user_cb=lambda u: u is not new)
        journal.set_meta(relu, "tag", 1)
        journal.set_meta(add, "stack_trace", "changed")
        journal.move_before(relu, add)  # makes the graph invalid on purpose
        journal.erase(relu)
        raise RuntimeError("boom")


class AccelRawBoom(AcceleratedPass, FakeStock):
    """Edits the graph behind the journal's back (as stock's own methods do) after a
    checkpoint: creates, erases, moves, renames, rewires, rewrites meta in place; then fails."""

    def accel_plan(self, graph_module):
        return list(graph_module.graph.nodes)

    def accel_apply(self, graph_module, plan, journal):
        journal.checkpoint()
        graph = graph_module.graph
        x = plan[0]
        add = next(n for n in plan if "add" in n.name)
        relu = next(n for n in plan if n.target is torch.relu)
        mul = next(n for n in plan if "mul" in n.name)
        with graph.inserting_after(x):
            new = graph.call_function(torch.neg, (x,))
            graph.call_function(torch.abs, (new,))
        relu.replace_all_uses_with(new)
        graph.erase_node(relu)
        graph.erase_node(add)  # its only user is gone
        mul.meta["val"] = "changed"
        mul.meta.pop("stack_trace", None)
        mul.name = "renamed"
        mul.target = torch.sub  # stock's edits retarget nodes in place
        x.users.clear()  # users order broken by hand
        x.users.update(dict.fromkeys(reversed(list(new.users) + [new])))
        raise RuntimeError("boom")


class AccelDecline(AcceleratedPass, FakeStock):
    def accel_plan(self, graph_module):
        raise Decline("symbolic shapes")


def _graph_state(gm: torch.fx.GraphModule):
    return [
        (n.name, n.op, str(n.target), str(n.args), str(n.kwargs), dict(n.meta), list(n.users))
        for n in gm.graph.nodes
    ]


def test_accelerated_path_and_stats(clean_stats) -> None:
    gm = torch.fx.symbolic_trace(_Model())
    res = AccelOK().call(gm)
    assert res == {"stock": False}
    assert "sigmoid" in gm.code and "relu" not in gm.code
    gm.graph.lint()
    s = arm_accel.stats()["FakeStock"]
    assert s.calls == 1 and s.accelerated == 1 and s.retraces == 1


def test_disabled_runs_stock(clean_stats) -> None:
    gm = torch.fx.symbolic_trace(_Model())
    before = FakeStock.stock_runs
    with arm_accel.disabled():
        res = AccelOK().call(gm)
    assert res["stock"] is True and FakeStock.stock_runs == before + 1
    assert "relu" in gm.code
    s = arm_accel.stats()["FakeStock"]
    assert s.calls == 1 and s.accelerated == 0 and s.fallbacks == {}


def test_checkpoint_restores_raw_fx_edits(clean_stats, lenient) -> None:
    """A checkpointed journal undoes edits made with fx directly (nodes created, erased,
    renamed, retargeted, meta rewritten in place, users reordered): the stock pass gets the same
    nodes, names, args, meta, users order and name counters; fresh nodes get the same names."""
    gm = torch.fx.symbolic_trace(_Model())
    for n in gm.graph.nodes:
        n.meta["val"] = n.name
    state, code = _graph_state(gm), gm.code
    ns = gm.graph._graph_namespace
    names_before = (dict(ns._base_count), set(ns._used_names))
    res = AccelRawBoom().call(gm)
    assert res == {"stock": True, "code": code}
    assert _graph_state(gm) == state
    assert (dict(ns._base_count), set(ns._used_names)) == names_before
    gm.graph.lint()
    assert len(gm.graph.find_nodes(op="call_function", target=torch.relu)) == 1
    assert arm_accel.stats()["FakeStock"].fallbacks == {"apply failed: RuntimeError": 1}


def test_strict_raises_after_rollback(clean_stats, monkeypatch) -> None:
    """``ARM_ACCEL_STRICT=1``: an apply failure raises (after the rollback) instead of running
    stock; a Decline still runs stock."""
    monkeypatch.setenv("ARM_ACCEL_STRICT", "1")
    gm = torch.fx.symbolic_trace(_Model())
    state = _graph_state(gm)
    with pytest.raises(RuntimeError, match="boom"):
        AccelBoom().call(gm)
    assert _graph_state(gm) == state
    assert AccelDecline().call(gm)["stock"] is True


def test_apply_failure_restores_graph_and_runs_stock(clean_stats, caplog, lenient) -> None:
    gm = torch.fx.symbolic_trace(_Model())
    state, code = _graph_state(gm), gm.code
    ns = gm.graph._graph_namespace
    names_before = (dict(ns._base_count), set(ns._used_names))
    with caplog.at_level(logging.WARNING, logger="arm_accel"):
        res = AccelBoom().call(gm)
        AccelBoom().call(gm)
    # The stock pass received the graph exactly as it was: structure, order, meta, name counters.
    assert res == {"stock": True, "code": code}
    assert _graph_state(gm) == state
    assert (dict(ns._base_count), set(ns._used_names)) == names_before
    gm.graph.lint()
    # A node created now gets the name it would have had without the failed attempt.
    fresh = torch.fx.symbolic_trace(_Model())
    with fresh.graph.inserting_after(next(iter(fresh.graph.nodes))):
        expect = fresh.graph.call_function(torch.neg, (next(iter(fresh.graph.nodes)),)).name
    with gm.graph.inserting_after(next(iter(gm.graph.nodes))):
        assert gm.graph.call_function(torch.neg, (next(iter(gm.graph.nodes)),)).name == expect
    s = arm_accel.stats()["FakeStock"]
    assert s.calls == 2 and s.accelerated == 0
    assert s.fallbacks == {"apply failed: RuntimeError": 2}
    assert sum("apply failed" in r.getMessage() for r in caplog.records) <= 1


def test_decline_runs_stock(clean_stats, caplog) -> None:
    """A decline by design runs stock, counted with its reason, and logs no warning (an
    expected decline is not news); a failure warns (``test_stats_api``)."""
    gm = torch.fx.symbolic_trace(_Model())
    with caplog.at_level(logging.WARNING, logger="arm_accel"):
        assert AccelDecline().call(gm)["stock"] is True
    assert arm_accel.stats()["FakeStock"].fallbacks == {"symbolic shapes": 1}
    assert [r.getMessage() for r in caplog.records] == []


def test_journal_commit_rejects_erasing_used_node() -> None:
    gm = torch.fx.symbolic_trace(_Model())
    j = GraphJournal(gm)
    relu = next(n for n in gm.graph.nodes if n.target is torch.relu)
    j.erase(relu)
    with pytest.raises(RuntimeError):
        j.commit()
    j.rollback()
    gm.graph.lint()


def test_mixin_must_come_first() -> None:
    with pytest.raises(TypeError):

        class Wrong(FakeStock, AcceleratedPass):  # noqa: F841
            pass


# ---------------------------------------------------------------------------------------------
# Version guard (in process, against a fake executorch passes package).


@pytest.fixture
def isolated_activation(monkeypatch):
    from arm_accel.patches import sources

    was_active = activation.status().activated
    activation.deactivate()
    sources.version.cache_clear()  # the tests fake the installed versions
    monkeypatch.setattr(activation, "_state", activation._State())
    monkeypatch.setattr(activation, "_warned", set())
    yield
    activation.deactivate()
    # Re-activate with the test's patches (fake package, versions) undone, or it stays off
    # for every later test in this process.
    monkeypatch.undo()
    sources.version.cache_clear()
    if was_active:
        activation._state.activated = False
        activation.activate()


def _fake_passes_package(monkeypatch) -> type:
    stock = type("RemoveNoopPass", (FakeStock,), {"__module__": activation.PASSES_PACKAGE})
    pkg = types.ModuleType(activation.PASSES_PACKAGE)
    pkg.RemoveNoopPass = stock
    monkeypatch.setitem(sys.modules, activation.PASSES_PACKAGE, pkg)
    return stock


def test_unsupported_version_stays_off_and_warns_once(monkeypatch, caplog, isolated_activation):
    import importlib.metadata as md

    stock = _fake_passes_package(monkeypatch)
    real = md.version
    monkeypatch.setattr(md, "version", lambda d: "1.4.0" if d == "executorch" else real(d))
    with caplog.at_level(logging.WARNING, logger="arm_accel"):
        assert activation.activate() is False
        assert activation.activate() is False
    msgs = [r.getMessage() for r in caplog.records if "stays off" in r.getMessage()]
    assert len(msgs) == 1 and "executorch=1.4.0" in msgs[0]
    st = arm_accel.status()
    assert not st.activated and "unsupported" in st.reason
    assert sys.modules[activation.PASSES_PACKAGE].RemoveNoopPass is stock


def test_supported_version_swaps_fake_package(monkeypatch, isolated_activation):
    """With a table of two class swaps (one whose stock class does not exist) against a fake
    passes package: the one swaps in everywhere and back out, the other is reported stock."""
    from arm_accel.patches import table
    from arm_accel.patches.model import ClassSwap, Group

    stock = _fake_passes_package(monkeypatch)
    monkeypatch.setattr(activation, "check_versions", lambda: (True, {}))
    spec = f"{__name__}:AccelForFake"
    rows = (ClassSwap("RemoveNoopPass", spec, "test"), ClassSwap("Nope", spec, "test"))
    monkeypatch.setattr(
        table, "GROUPS", (Group("passes", "pipeline", "test", rows, independent=True),)
    )
    globals()["AccelForFake"] = type("AccelForFake", (AcceleratedPass, stock), {})
    assert activation.activate() is True
    new = sys.modules[activation.PASSES_PACKAGE].RemoveNoopPass
    assert new is not stock and issubclass(new, stock) and new.__name__ == "RemoveNoopPass"
    st = arm_accel.status()
    assert st.swapped == {"RemoveNoopPass": spec} and "Nope" in st.skipped
    assert (
        activation.stock_class(new) is stock and activation.stock_class("RemoveNoopPass") is stock
    )
    activation.deactivate()
    assert sys.modules[activation.PASSES_PACKAGE].RemoveNoopPass is stock
