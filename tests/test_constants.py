"""The constants Rust and Python share are written once, in Rust: every group Rust exports
(``_native.CONSTANTS``) has its Python enum, with exactly Rust's names and values."""

from __future__ import annotations

import enum

from arm_accel import _native
from arm_accel.native import table
from arm_accel.pipeline.passes.propagate import scan_plan

PYTHON: dict[str, type[enum.Enum]] = {
    "op": table.Op,
    "flag": table.Flag,
    "class": table.Cls,
    "form": scan_plan.Form,
    "extra": scan_plan.Extra,
    "retrace": scan_plan.Retrace,
    "special": scan_plan.Special,
}


def test_every_rust_constant_has_its_python_name_and_value() -> None:
    assert set(_native.CONSTANTS) == set(PYTHON)
    for group, python in PYTHON.items():
        ours = {name: member.value for name, member in python.__members__.items()}
        assert ours == _native.CONSTANTS[group], group


def test_op_kinds_are_fx_op_names_by_code() -> None:
    """``OP_KINDS[code]`` is the fx op name of ``code``: the codes are 0..n-1."""
    assert table.OP_KINDS == (
        "placeholder",
        "call_function",
        "get_attr",
        "output",
        "call_module",
        "call_method",
    )
    assert [table.Op[name.upper()] for name in table.OP_KINDS] == list(range(len(table.OP_KINDS)))
