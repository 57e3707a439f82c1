"""The imports of torch, executorch and torchao inside the collector's scope
(``bootstrap/imports.py``): what a fresh interpreter's imports do with the scope and without it
(the hook on, its inline finder told not to install the scope) and with ``ARM_ACCEL=0``: the
collections, the thresholds before and after, the modules imported, their loaders; and the
finder's rules on stand-in packages (outermost import only, nested imports
inside, a failing module, the switch off, the counting)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import arm_accel
import pytest
from arm_accel.bootstrap import imports
from arm_accel.control import counters
from arm_accel.runtime import gc_scope

# Imports what a lowering script imports and reports: the thresholds at each collection during
# the imports (gc.callbacks), the full collections, the state after, the modules, the loaders.
CHILD = r"""
import gc, json, sys
if not SCOPE:
    for finder in sys.meta_path:
        if type(finder).__name__ == "ArmAccelFinder":
            finder.scoping = True  # the inline finder then never installs the import scope
seen = []
def probe(phase, info):
    if phase == "start":
        seen.append((info["generation"], gc.get_threshold()[2]))
before = gc.get_threshold()
gc.callbacks.append(probe)
import torch
from executorch.backends.arm.quantizer import TOSAQuantizer
from executorch.exir import to_edge_transform_and_lower
gc.callbacks.remove(probe)
wrapped = [
    name for name, m in list(sys.modules.items())
    if type(getattr(m, "__loader__", None)).__name__ == "_ScopedLoader"
    or type(getattr(getattr(m, "__spec__", None), "loader", None)).__name__ == "_ScopedLoader"
]
import arm_accel
entry = arm_accel.stats().get("imports.collector")
print(json.dumps({
    "before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count(),
    "full": sum(1 for g, _ in seen if g == 2),
    "old_thresholds": sorted({t for _, t in seen}),
    "modules": sorted(n for n in sys.modules if n.split(".")[0] in ("torch", "executorch")),
    "wrapped": wrapped,
    "finders": [type(f).__name__ for f in sys.meta_path],
    "counted": entry.calls if entry else 0,
}))
"""


def _child(switch: str, scope: bool) -> dict:
    env = {**os.environ, "ARM_ACCEL": switch, "PYTHONHASHSEED": "0"}
    source = CHILD.replace("SCOPE", str(scope))
    done = subprocess.run(
        [sys.executable, "-c", source], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sides() -> dict[str, dict]:
    return {
        "stock": _child("0", False),
        "unscoped": _child("1", False),
        "scoped": _child("1", True),
    }


def test_hook_imports_collect_less_and_restore(sides: dict[str, dict]) -> None:
    """In the scope, the imports' collections run with the raised threshold and fewer full
    collections than without it; afterwards the thresholds and freeze count are as before.
    Without the scope (and with ARM_ACCEL=0) they collect with CPython's threshold."""
    scoped = sides["scoped"]
    for side in ("stock", "unscoped"):
        assert sides[side]["old_thresholds"] == [sides[side]["before"][2]], side
        assert sides[side]["full"] >= 2, side
        assert sides[side]["counted"] == 0, side
        assert "ImportScopeFinder" not in sides[side]["finders"], side
    assert gc_scope.OLD_GENERATION_THRESHOLD in scoped["old_thresholds"]
    assert scoped["full"] < sides["unscoped"]["full"]
    assert scoped["after"] == scoped["before"] == sides["stock"]["before"]
    assert scoped["frozen"] == 0
    assert scoped["counted"] >= 1
    assert "ImportScopeFinder" in scoped["finders"]


def test_scope_imports_the_same_modules_with_their_own_loaders(sides: dict[str, dict]) -> None:
    """The same torch and executorch modules are imported in the scope as without it, and no
    module's spec or ``__loader__`` names the scope's wrapper."""
    assert sides["scoped"]["modules"] == sides["unscoped"]["modules"]
    assert sides["scoped"]["wrapped"] == []


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package ``scopeprobe`` (in PACKAGES for the test) whose modules record, while they
    run, the scopes open and the old generation's threshold; its finder installed first."""
    pkg = tmp_path / "scopeprobe"
    pkg.mkdir()
    record = (
        "import gc\nfrom arm_accel.runtime import gc_scope\n"
        "SEEN = (gc_scope.open_scopes(), gc.get_threshold()[2])\n"
    )
    (pkg / "__init__.py").write_text(record)
    (pkg / "outer.py").write_text(record + "from scopeprobe import inner\n")
    (pkg / "inner.py").write_text(record)
    (pkg / "broken.py").write_text(record + "raise RuntimeError('broken module')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(imports, "PACKAGES", imports.PACKAGES | {"scopeprobe"})
    installed_before = imports.installed() is not None
    imports.install()
    imports.take_counted()
    yield pkg
    for name in [n for n in sys.modules if n.split(".")[0] == "scopeprobe"]:
        del sys.modules[name]
    if not installed_before:
        sys.meta_path.remove(imports.installed())


def test_outermost_import_runs_in_the_scope(stand_in: Path) -> None:
    """The outermost import and the imports it makes run with one scope open and the raised
    threshold; each is counted once (the nested one not); afterwards nothing is open, the
    loaders are the path finder's own."""
    open_before, threshold_before = gc_scope.open_scopes(), gc.get_threshold()
    import scopeprobe.outer as outer

    package, inner = sys.modules["scopeprobe"], sys.modules["scopeprobe.inner"]
    raised = max(threshold_before[2], gc_scope.OLD_GENERATION_THRESHOLD)
    if gc.isenabled() and not gc.get_freeze_count():
        assert outer.SEEN == inner.SEEN == (open_before + 1, raised)
    assert package.SEEN[0] == open_before + 1
    assert gc_scope.open_scopes() == open_before
    assert gc.get_threshold() == threshold_before
    assert imports.take_counted()[0] == 2  # the package, then outer (inner inside it)
    for module in (package, outer, inner):
        assert type(module.__loader__).__name__ == "SourceFileLoader"
        assert module.__spec__.loader is module.__loader__


def test_failing_module_closes_the_scope(stand_in: Path) -> None:
    """A module that raises is imported as stock imports it (the same error), and the scope it
    opened is closed."""
    open_before, threshold_before = gc_scope.open_scopes(), gc.get_threshold()
    with pytest.raises(RuntimeError, match="broken module"):
        import scopeprobe.broken  # noqa: F401
    assert gc_scope.open_scopes() == open_before
    assert gc.get_threshold() == threshold_before
    assert "scopeprobe.broken" not in sys.modules


def test_switch_off_imports_as_stock(stand_in: Path) -> None:
    """With the switch off in the importing thread no scope is opened, nothing counted."""
    open_before = gc_scope.open_scopes()
    with arm_accel.disabled():
        import scopeprobe.inner as inner
    assert inner.SEEN[0] == open_before
    assert imports.take_counted()[0] == 0


def test_other_packages_are_not_scoped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module outside PACKAGES is left to the other finders."""
    (tmp_path / "notscoped.py").write_text(
        "from arm_accel.runtime import gc_scope\nOPEN = gc_scope.open_scopes()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert imports.install().find_spec("notscoped") is None
    open_before = gc_scope.open_scopes()
    import notscoped

    assert notscoped.OPEN == open_before
    del sys.modules["notscoped"]


def test_stats_take_the_counted_imports() -> None:
    """``stats()`` records the imports the hook kept, once."""
    counters.reset()
    with imports._tally_lock:
        imports._tally[0], imports._tally[1] = 2, 0.75
    entry = arm_accel.stats()["imports.collector"]
    assert (entry.calls, entry.accelerated, entry.seconds) == (2, 2, 0.75)
    assert arm_accel.stats()["imports.collector"].calls == 2
