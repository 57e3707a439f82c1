"""Upstream executorch test modules re-run against the accelerated fusion pass classes.

Each upstream test function is re-bound to a copy of its module's globals in which the stock
pass classes are replaced by ours (pytest marks and parametrizations are kept); the pass
manager's module globals are patched the same way while the test runs, so pipelines pick our
classes too. After each test the stats must show that the accelerated path ran, with no
fallback.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from arm_accel.control import counters
from arm_accel.pipeline.passes import (
    canonicalize,
    fuse_duplicate_users,
    fuse_identical_input_transforms,
    remove_permutes_around_elementwise,
)
from arm_accel.tools.fusion_replay import ACCELERATED

_UP = "executorch.backends.arm.test.passes."

# upstream module -> {global symbol: accelerated class}
_SWAPS: dict[str, dict[str, type]] = {
    _UP + "test_canonicalize_view_copy_permute_pass": {
        "CanonicalizeViewCopyPermutePass": canonicalize.CanonicalizeViewCopyPermutePass,
    },
    _UP + "test_fuse_duplicate_users_pass": {
        "FuseDuplicateUsersPass": fuse_duplicate_users.FuseDuplicateUsersPass,
    },
    _UP + "test_remove_permutes_around_elementwise_tosa_ops": {
        "RemovePermutesAroundElementwiseTosaOps": (
            remove_permutes_around_elementwise.RemovePermutesAroundElementwiseTosaOps
        ),
    },
    # Uses the backends.transforms class (the Arm subclass only adds ArmOpTargetedPass).
    _UP + "test_fuse_identical_input_transforms_pass": {
        "FuseIdenticalInputTransformsPass": (
            fuse_identical_input_transforms.BaseFuseIdenticalInputTransformsPass
        ),
    },
}
# unittest modules: TestCase classes that use a swapped name (directly or through a module
# helper) are re-run as subclasses whose methods see our classes. Of the fusion passes,
# test_permute_optimization_passes exercises only RemovePermutesAroundElementwiseOps (the
# transforms base class); its other test classes cover passes we do not accelerate.
_UNITTEST_SWAPS: dict[str, dict[str, type]] = {
    "executorch.backends.transforms.test.test_permute_optimization_passes": {
        "RemovePermutesAroundElementwiseOps": (
            remove_permutes_around_elementwise.BaseRemovePermutesAroundElementwiseOps
        ),
    },
}
# Where the Arm pass manager looks the classes up.
_MANAGER = "executorch.backends.arm._passes.arm_pass_manager"
_MANAGER_SWAPS: dict[str, type] = ACCELERATED
_OUR_NAMES = (
    *_MANAGER_SWAPS,
    "transforms.FuseIdenticalInputTransformsPass",
    "transforms.RemovePermutesAroundElementwiseOps",
)


def _rebind(fn: Callable[..., Any], g: dict[str, Any], suffix: str) -> Callable[..., Any]:
    new = types.FunctionType(fn.__code__, g, fn.__name__ + suffix, fn.__defaults__, fn.__closure__)
    new.__dict__.update(fn.__dict__)  # pytest marks (parametrize)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = new.__name__
    new.__module__ = __name__
    return new


def _export_tests() -> None:
    for modname, swaps in _SWAPS.items():
        mod = importlib.import_module(modname)
        g = dict(mod.__dict__)
        g.update(swaps)
        short = modname.rsplit(".", 1)[1].removeprefix("test_")
        for name, obj in list(mod.__dict__.items()):
            if name.startswith("test_") and isinstance(obj, types.FunctionType):
                globals()[f"{name}__accel_{short}"] = _rebind(obj, g, f"__accel_{short}")
                # Rebound functions whose helpers also refer to the swapped names need them in
                # the helpers' globals too: helpers are rebound lazily by name below.
        for name, obj in list(mod.__dict__.items()):
            if (
                not name.startswith("test_")
                and isinstance(obj, types.FunctionType)
                and obj.__module__ == mod.__name__
            ):
                g[name] = _rebind(obj, g, "")


def _uses(code: types.CodeType, names: set[str]) -> bool:
    if names & set(code.co_names):
        return True
    return any(isinstance(c, types.CodeType) and _uses(c, names) for c in code.co_consts)


def _export_unittest_classes() -> None:
    import unittest

    for modname, swaps in _UNITTEST_SWAPS.items():
        mod = importlib.import_module(modname)
        g = dict(mod.__dict__)
        g.update(swaps)
        # Module helpers that use a swapped name, found to a fixed point.
        users = set(swaps)
        helpers = {
            name: obj
            for name, obj in mod.__dict__.items()
            if isinstance(obj, types.FunctionType) and obj.__module__ == mod.__name__
        }
        changed = True
        while changed:
            changed = False
            for name, fn in helpers.items():
                if name not in users and _uses(fn.__code__, users):
                    users.add(name)
                    changed = True
        for name, fn in helpers.items():
            g[name] = _rebind(fn, g, "")
        short = modname.rsplit(".", 1)[1].removeprefix("test_")
        for name, obj in list(mod.__dict__.items()):
            if not (isinstance(obj, type) and issubclass(obj, unittest.TestCase)):
                continue
            if obj.__module__ != mod.__name__:
                continue
            methods = {
                k: v
                for k, v in obj.__dict__.items()
                if isinstance(v, types.FunctionType) and _uses(v.__code__, users)
            }
            if not methods:
                continue
            body: dict[str, Any] = {"__module__": __name__}
            for k, v in obj.__dict__.items():
                if isinstance(v, types.FunctionType):
                    fn = _rebind(v, g, "")
                    fn.__qualname__ = f"{name}__accel_{short}.{k}"
                    body[k] = fn
            globals()[f"{name}__accel_{short}"] = type(f"{name}__accel_{short}", (obj,), body)
        # The original classes must not be collected here again.


_export_tests()
_export_unittest_classes()


@pytest.fixture(autouse=True)
def _swap_manager_and_check_stats(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    manager = importlib.import_module(_MANAGER)
    for name, cls in _MANAGER_SWAPS.items():
        monkeypatch.setattr(manager, name, cls, raising=False)
    counters.reset()
    yield
    snap = counters.snapshot()
    for name in _OUR_NAMES:
        s = snap.get(name)
        if s is None:
            continue
        assert not s.fallbacks, f"{name} fell back: {s.fallbacks}"
        assert s.accelerated == s.calls, f"{name}: {s}"
