"""Side-by-side benchmark of the issue-3 passes: stock vs accelerated, same run, same inputs.

Lowers each model once (stock passes, via ``arm_accel.capture``), then replays every captured
input of each pass through the stock class and the accelerated class, alternating, and prints
the total seconds and the ratio stock / accelerated per (model, pass). The graphs are checked
equal as they go.

    python benches/fusion_passes.py [--models dscnnkws,resnet8,llama1,llama1-fp] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import importlib
import time
from collections.abc import Iterator
from typing import Any

import torch
from arm_accel import capture, models, switch
from arm_accel.passes import (
    canonicalize,
    fuse_duplicate_users,
    fuse_identical_input_transforms,
    remove_permutes_around_elementwise,
)
from arm_accel.passes.base import _stock_class
from arm_accel.testing import assert_graphs_equal

OURS: dict[str, type] = {
    "CanonicalizeViewCopyPermutePass": canonicalize.CanonicalizeViewCopyPermutePass,
    "FuseDuplicateUsersPass": fuse_duplicate_users.FuseDuplicateUsersPass,
    "RemovePermutesAroundElementwiseTosaOps": (
        remove_permutes_around_elementwise.RemovePermutesAroundElementwiseTosaOps
    ),
    "FuseIdenticalInputTransformsPass": (
        fuse_identical_input_transforms.FuseIdenticalInputTransformsPass
    ),
}


def _as(instance: Any, cls: type) -> Any:
    new = cls.__new__(cls)
    new.__dict__.update(copy.copy(instance.__dict__))
    return new


def _tosa_context(records: list[capture.Captured], mode: str) -> Any:
    from executorch.backends.arm.tosa.specification import (
        TosaLoweringContext,
        TosaSpecification,
    )

    for r in records:
        spec = getattr(getattr(r.pass_instance, "compile_spec", None), "tosa_spec", None)
        if spec is not None:
            return TosaLoweringContext(spec)
    return TosaLoweringContext(TosaSpecification.create_from_string(f"TOSA-1.0+{mode}"))


# The backends.transforms classes the propagation passes instantiate internally (nested calls),
# keyed by our stats name: (module, class name, accelerated class).
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


@contextlib.contextmanager
def _capture_nested() -> Iterator[list[capture.Captured]]:
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


def _timed(pass_obj: Any, record: capture.Captured) -> tuple[float, Any]:
    gm = record.fresh_graph()
    gc.collect()
    gc.disable()  # sub-millisecond calls: a collection pause would dominate either side
    try:
        t0 = time.perf_counter()
        result = pass_obj.call(gm)
        return time.perf_counter() - t0, result
    finally:
        gc.enable()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="dscnnkws,resnet8,llama1,llama1-fp")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    print(f"{'model':<12} {'pass':<38} {'calls':>5} {'stock s':>9} {'accel s':>9} {'ratio':>6}")
    for name in args.models.split(","):
        torch.manual_seed(0)
        model, inputs, mode = models.build(name)
        exported = models.export_for_arm(model, inputs, mode)
        with (
            switch.disabled(),
            capture.capture(tuple(OURS), outermost_only=False) as records,
            _capture_nested() as nested,
        ):
            models.lower(exported, mode)
        recs_all = records + nested
        passes = [(n, c, _stock_class(capture.stock_class(n))) for n, c in OURS.items()]
        for key, (modname, clsname, ours_cls) in NESTED.items():
            stock = _stock_class(getattr(importlib.import_module(modname), clsname))
            passes.append((key, ours_cls, stock))
        for pass_name, ours_cls, stock_cls in passes:
            recs = [r for r in recs_all if r.pass_name == pass_name]
            t_stock = t_ours = 0.0
            with _tosa_context(recs_all, mode):  # warm-up, untimed (first-call costs)
                for r in recs[:1]:
                    _timed(_as(r.pass_instance, stock_cls), r)
                    _timed(_as(r.pass_instance, ours_cls), r)
            for rep in range(args.repeat):
                for r in recs:
                    with _tosa_context(recs_all, mode):
                        if rep % 2:  # alternate which runs first
                            to, ro = _timed(_as(r.pass_instance, ours_cls), r)
                            ts, rs = _timed(_as(r.pass_instance, stock_cls), r)
                        else:
                            ts, rs = _timed(_as(r.pass_instance, stock_cls), r)
                            to, ro = _timed(_as(r.pass_instance, ours_cls), r)
                    assert_graphs_equal(rs.graph_module, ro.graph_module)
                    t_stock += ts
                    t_ours += to
            ratio = t_stock / t_ours if t_ours else float("nan")
            print(
                f"{name:<12} {pass_name:<38} {len(recs):>5} {t_stock:>9.4f} {t_ours:>9.4f}"
                f" {ratio:>6.2f}"
            )


if __name__ == "__main__":
    main()
