"""Which ``arm_accel.stats()`` entries the tools count as accelerated passes
(``profiling.is_pass_entry``): every entry name a module declares (``*STATS_NAME*``) for a
scope, a memo, a stage or the quantization flow is not one; the accelerated passes' are."""

from __future__ import annotations

import importlib
import pkgutil

import arm_accel
from arm_accel.pipeline.passes import base
from arm_accel.tools import profiling


def _declared_names() -> dict[str, str]:
    """``module.CONSTANT`` -> value of every string constant named ``*STATS_NAME*``."""
    found = {}
    for info in pkgutil.walk_packages(arm_accel.__path__, "arm_accel."):
        module = importlib.import_module(info.name)
        for attr, value in vars(module).items():
            if "STATS_NAME" in attr and isinstance(value, str):
                found[f"{info.name}.{attr}"] = value
    return found


def test_declared_entries_are_not_passes() -> None:
    """Every declared entry name (at least the delegate's, the export's and the memo's) is
    left out of the pass counts."""
    names = _declared_names()
    assert {"delegate.unlifted", "export.scoped", "fake_memo.dispatch"} <= set(names.values())
    counted = {k: v for k, v in names.items() if profiling.is_pass_entry(v)}
    assert not counted, counted


def test_accelerated_passes_are_pass_entries() -> None:
    """The entry of each accelerated pass class (the stock class's name) is a pass entry."""
    from arm_accel.tools.fusion_replay import ACCELERATED

    assert ACCELERATED
    for cls in ACCELERATED.values():
        assert profiling.is_pass_entry(base._stats_name(cls.__new__(cls))), cls
