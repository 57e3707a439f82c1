"""Replaying captured inputs of the four view/permute fusion passes through stock and
accelerated classes.

Shared by ``benches/fusion_passes.py`` and the differential tests: which accelerated class
stands for which stock pass, the capture of a real lowering (the Arm passes the pass manager
runs, plus the ``backends.transforms`` base classes the propagation passes call internally),
and the setup a replayed call needs (the pass instance re-classed, the TOSA lowering context).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
from collections.abc import Iterator
from typing import Any

from arm_accel.control import switch
from arm_accel.pipeline.passes import (
    canonicalize,
    fuse_duplicate_users,
    fuse_identical_input_transforms,
    remove_permutes_around_elementwise,
)
from arm_accel.pipeline.passes.base import _stock_class
from arm_accel.tools import capture, models

#: Arm pass class name (as ``executorch.backends.arm._passes`` exports it) -> accelerated class.
ACCELERATED: dict[str, type] = {
    "CanonicalizeViewCopyPermutePass": canonicalize.CanonicalizeViewCopyPermutePass,
    "FuseDuplicateUsersPass": fuse_duplicate_users.FuseDuplicateUsersPass,
    "RemovePermutesAroundElementwiseTosaOps": (
        remove_permutes_around_elementwise.RemovePermutesAroundElementwiseTosaOps
    ),
    "FuseIdenticalInputTransformsPass": (
        fuse_identical_input_transforms.FuseIdenticalInputTransformsPass
    ),
}

#: The ``backends.transforms`` classes the propagation passes instantiate internally (nested
#: calls), keyed by our stats name: (module, class name, accelerated class).
NESTED: dict[str, tuple[str, str, type]] = {
    "transforms.CanonicalizeViewCopyPermutePass": (
        "executorch.backends.transforms.canonicalize_view_copy_permute_pass",
        "CanonicalizeViewCopyPermutePass",
        canonicalize.BaseCanonicalizeViewCopyPermutePass,
    ),
    "transforms.FuseDuplicateUsersPass": (
        "executorch.backends.transforms.fuse_duplicate_users_pass",
        "FuseDuplicateUsersPass",
        fuse_duplicate_users.BaseFuseDuplicateUsersPass,
    ),
    "transforms.FuseIdenticalInputTransformsPass": (
        "executorch.backends.transforms.fuse_identical_input_transforms_pass",
        "FuseIdenticalInputTransformsPass",
        fuse_identical_input_transforms.BaseFuseIdenticalInputTransformsPass,
    ),
}


def pass_pairs() -> list[tuple[str, type, type]]:
    """(name, accelerated class, stock class) of every captured pass, Arm then nested."""
    pairs = [(n, c, _stock_class(capture.stock_class(n))) for n, c in ACCELERATED.items()]
    for key, (modname, clsname, ours) in NESTED.items():
        pairs.append((key, ours, _stock_class(getattr(importlib.import_module(modname), clsname))))
    return pairs


def as_class(instance: Any, cls: type) -> Any:
    """A shallow copy of a configured pass instance, re-classed (same constructor state)."""
    new = cls.__new__(cls)
    new.__dict__.update(copy.copy(instance.__dict__))
    return new


def tosa_context(records: list[capture.Captured], mode: str | None = None) -> Any:
    """The TOSA lowering context of a captured lowering (TOSA ops re-trace only inside it):
    the spec of the first pass that carries one, else ``mode``'s default spec, else none."""
    from executorch.backends.arm.tosa.specification import (
        TosaLoweringContext,
        TosaSpecification,
    )

    for r in records:
        spec = getattr(getattr(r.pass_instance, "compile_spec", None), "tosa_spec", None)
        if spec is not None:
            return TosaLoweringContext(spec)
    if mode is None:
        return contextlib.nullcontext()
    return TosaLoweringContext(TosaSpecification.create_from_string(f"TOSA-1.0+{mode}"))


@contextlib.contextmanager
def capture_nested() -> Iterator[list[capture.Captured]]:
    """Record the inputs of calls made on the transforms base classes themselves (not the Arm
    subclasses, which ``capture.capture`` records)."""
    records: list[capture.Captured] = []
    undo = []
    for key, (modname, clsname, _ours) in NESTED.items():
        base = _stock_class(getattr(importlib.import_module(modname), clsname))
        original = base.__dict__["call"]

        def call(self: Any, gm: Any, _base: type = base, _orig: Any = original, _k: str = key):
            kind = type(self)
            # The base class itself, or the propagation passes' Virtual<name> variant of it.
            if kind is _base or (
                kind.__name__ == f"Virtual{_base.__name__}" and _base in kind.__bases__
            ):
                records.append(capture.Captured(_k, len(records), copy.deepcopy(gm), self))
            return _orig(self, gm)

        base.call = call
        undo.append((base, original))
    try:
        yield records
    finally:
        for base, original in undo:
            base.call = original


def capture_lowering(name: str) -> tuple[list[capture.Captured], str]:
    """Lower zoo model ``name`` with stock passes once; return every captured input of the
    fusion passes (Arm and nested) and the lowering mode ("INT" or "FP")."""
    import torch

    torch.manual_seed(0)
    model, inputs, mode = models.build(name)
    exported = models.export_for_arm(model, inputs, mode)
    with (
        switch.disabled(),
        capture.capture(tuple(ACCELERATED), outermost_only=False) as records,
        capture_nested() as nested,
    ):
        models.lower(exported, mode)
    return records + nested, mode
