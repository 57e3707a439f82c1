"""The declared patch table: every row installs here and uninstalls to the stock object, a pin
that does not hold keeps its row stock and says which source changed, and ``check-pins`` reads
the same digests from files as the installer reads from the live objects."""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path
from typing import Any

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
from arm_accel import patches
from arm_accel.patches import check, installer, sources, table
from arm_accel.patches.model import ClassSwap, Group, Patch, Pin

ALL_PINS = [
    pin for group in table.GROUPS for row in group.rows for pin in row.models if pin.digests
] + [pin for model in table.MODELS for pin in model.pins if pin.digests]


def _here() -> check.Target:
    return check.Target(tuple(Path(p) for p in sys.path if p and Path(p).is_dir()), None)


def _current(row: Patch) -> Any:
    owner = sources.resolve(row.owner)
    return vars(owner).get(row.attribute, getattr(owner, row.attribute))


@pytest.fixture
def reinstalled(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Whatever a test uninstalls or re-tables, the real table is installed again after it."""
    yield
    patches.uninstall()
    monkeypatch.undo()
    patches.install()
    assert all(s.expected for s in patches.states())


def test_file_digest_is_the_live_digest(reinstalled: None) -> None:
    """What ``check-pins`` reads from the installed files equals ``inspect.getsource``'s digest
    of the live stock objects (the table uninstalled), for every pinned source."""
    patches.uninstall()
    here = _here()
    differ = [p.ref for p in ALL_PINS if check._digest(here, p.ref) != sources.live_digest(p.ref)]
    assert len(ALL_PINS) > 20 and differ == []


def test_every_row_installed_and_every_model_holds() -> None:
    """On a supported stack the whole table is in effect: every row is installed or stock by
    design (the running stock source already does its work), every modelled behaviour holds
    (each with the reason shown by ``arm-accel info``)."""
    stock = {s.row: s.reason for s in patches.states() if not s.expected}
    assert stock == {}
    assert [m.name for m in patches.model_states() if not m.holds] == []


def test_uninstall_puts_every_stock_object_back(reinstalled: None) -> None:
    """Every replaced attribute is ours while installed, the stock object after uninstall, and
    ours again after install; every swapped class is stock after uninstall."""
    installed = {s.row for s in patches.states() if s.installed}
    rows = [r for g in table.GROUPS for r in g.rows if isinstance(r, Patch) and r.name in installed]
    originals = {r.name: patches.original(r.name) for r in rows}
    assert all(_current(r) is not originals[r.name] for r in rows)
    pkg = sys.modules["executorch.backends.arm._passes"]
    swaps = [r for r in table.group("passes").rows if isinstance(r, ClassSwap)]
    patches.uninstall()
    # where rows stack on one attribute (NodeSource.__init__), stock is the first one's original
    first = {}
    for r in rows:
        first.setdefault(r.target, originals[r.name])
    assert [r.name for r in rows if _current(r) is not first[r.target]] == []
    assert [r.name for r in swaps if hasattr(getattr(pkg, r.name), "_arm_accel_impl")] == []
    patches.install()
    assert [r.name for r in rows if _current(r) is originals[r.name]] == []
    assert [r.name for r in swaps if not hasattr(getattr(pkg, r.name), "_arm_accel_impl")] == []


def _with_pin(group: Group, row_index: int, pin: Pin) -> Group:
    """``group`` with its row ``row_index``'s first pin replaced by ``pin``."""
    rows = list(group.rows)
    row = rows[row_index]
    rows[row_index] = dataclasses.replace(row, models=(pin, *row.models[1:]))
    return dataclasses.replace(group, rows=tuple(rows))


@pytest.mark.parametrize(
    "name",
    [g.name for g in table.GROUPS if not g.independent and any(r.models for r in g.rows)],
)
def test_a_changed_source_keeps_its_group_stock(
    name: str, monkeypatch: pytest.MonkeyPatch, reinstalled: None
) -> None:
    """A pin whose digest is not the running source's: every row of its group stays stock,
    the row names the source that changed, and no attribute of the group is replaced."""
    group = table.group(name)
    if not patches.installed(name):
        pytest.skip(f"{name} is stock by design on this torch")
    index = next(i for i, r in enumerate(group.rows) if r.models)
    real = group.rows[index].models[0]
    fake = Pin(real.ref, {"0.0.0": "0" * 16})
    ours = {a.ours for a in installer._journal if a.row in {r.name for r in group.rows}}
    patches.uninstall((name,))
    monkeypatch.setattr(
        table,
        "GROUPS",
        tuple(_with_pin(g, index, fake) if g.name == name else g for g in table.GROUPS),
    )
    patches.install((name,))
    states = {s.row: s for s in patches.states() if s.group == name}
    assert not any(s.installed for s in states.values())
    changed = states[group.rows[index].name].reason
    assert real.ref in changed and "source changed" in changed, changed
    chains = [_chain(_current(r)) for r in group.rows if isinstance(r, Patch)]
    assert ours and not any(ours & set(chain) for chain in chains)


def _chain(fn: Any) -> list[Any]:
    """``fn`` and every function it wraps (``__wrapped__``), outermost first."""
    found = [fn]
    while hasattr(found[-1], "__wrapped__"):
        found.append(found[-1].__wrapped__)
    return found


def test_uninstalling_a_group_under_another_keeps_the_other(reinstalled: None) -> None:
    """Two rows wrap ``NodeSource.__init__`` (the engine's graph identity, then the edge
    stage's shared provenance): uninstalling the engine alone takes its wrapper out of the
    chain and leaves the edge stage's installed on the stock constructor."""
    from torch.fx.traceback import NodeSource

    if not patches.installed("edge.provenance"):
        pytest.skip("one row on NodeSource.__init__ here (the edge stage's is stock by design)")
    stock = patches.original("retrace_engine.identity")
    patches.uninstall(("retrace_engine",))
    assert _chain(NodeSource.__init__)[1:] == [stock]
    assert patches.installed("edge.provenance") and patches.original("edge.provenance") is stock


def test_torch_gate_keeps_a_group_stock(monkeypatch: pytest.MonkeyPatch, reinstalled: None) -> None:
    """A group tied to torch's internals stays stock on a torch it was not modelled on."""
    gated = next(g for g in table.GROUPS if g.torch)
    real = sources.version
    patches.uninstall((gated.name,))
    monkeypatch.setattr(sources, "version", lambda d: "9.9.0" if d == "torch" else real(d))
    patches.install((gated.name,))
    reasons = {s.reason for s in patches.states() if s.group == gated.name}
    assert len(reasons) == 1 and "modelled on torch" in reasons.pop()


def test_a_row_bound_to_another_function_stays_stock(
    monkeypatch: pytest.MonkeyPatch, reinstalled: None
) -> None:
    """A ``bound`` row whose attribute holds something else (another library's wrapper of the
    CIA collection) is not replaced, and says so, keeping its group stock; uninstalling never
    puts stock back over another's object."""
    from torch.export import exported_program

    patches.uninstall(("edge.cia_ops",))

    def someone_elses() -> set[object]:
        return set()

    monkeypatch.setattr(exported_program, "_collect_all_valid_cia_ops", someone_elses)
    patches.install(("edge.cia_ops",))
    states = {s.row: s for s in patches.states() if s.group == "edge.cia_ops"}
    assert not any(s.installed for s in states.values())
    assert "is not" in states["edge.cia_ops.collect.exported_program"].reason
    patches.uninstall(("edge.cia_ops",))
    assert exported_program._collect_all_valid_cia_ops is someone_elses


def test_check_pins_agrees_with_the_installer() -> None:
    """``check-pins`` against this interpreter's installation finds every row and model that
    the installer installed (all of them on the supported stack) holding."""
    findings = check.run(check.environment(sys.executable))
    states = patches.states()
    assert {f.name for f in findings if f.kind == "row" and f.reason is None} == {
        s.row for s in states if s.installed
    }
    assert {f.name for f in findings if f.by_design} == {
        s.row for s in states if s.expected and not s.installed
    }
    assert [f.name for f in findings if f.kind == "model" and f.reason is not None] == []


def test_check_pins_names_the_source_changed_in_a_tree(tmp_path: Path) -> None:
    """A source tree holding one edited pinned function (``_is_cia_op``): ``check-pins`` keeps
    exactly the rows that model it stock, naming it; everything else holds."""
    import torch._export.utils as utils

    copy = tmp_path / "torch" / "_export" / "utils.py"
    copy.parent.mkdir(parents=True)
    shutil.copy(utils.__file__, copy)
    text = copy.read_text()
    copy.write_text(text.replace("def _is_cia_op(op", "def _is_cia_op(  op", 1))
    here = _here()
    findings = check.run(check.Target((tmp_path, *here.roots), None))
    stock = {f.name: f.reason for f in findings if f.reason is not None and not f.by_design}
    assert set(stock) == {r.name for r in table.group("edge.cia_ops").rows}
    assert all("torch._export.utils:_is_cia_op source changed" in r for r in stock.values())


def test_info_lists_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    """``arm-accel info`` prints every row of the table with its state, and every model."""
    import argparse

    from arm_accel.tools import cli

    cli.cmd_info(argparse.Namespace(no_import=False, json=False))
    out = capsys.readouterr().out
    for state in patches.states():
        assert any(state.row in line and state.reason in line for line in out.splitlines())
    for model in table.MODELS:
        assert model.name in out
