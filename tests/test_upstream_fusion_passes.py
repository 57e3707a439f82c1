"""Upstream executorch test modules re-run against the accelerated classes of issue 3.

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
from arm_accel import stats
from arm_accel.passes import canonicalize, fuse_duplicate_users, remove_permutes_around_elementwise

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
}
# Where the Arm pass manager looks the classes up.
_MANAGER = "executorch.backends.arm._passes.arm_pass_manager"
_MANAGER_SWAPS: dict[str, type] = {
    "CanonicalizeViewCopyPermutePass": canonicalize.CanonicalizeViewCopyPermutePass,
    "FuseDuplicateUsersPass": fuse_duplicate_users.FuseDuplicateUsersPass,
    "RemovePermutesAroundElementwiseTosaOps": (
        remove_permutes_around_elementwise.RemovePermutesAroundElementwiseTosaOps
    ),
}
_OUR_NAMES = tuple(_MANAGER_SWAPS)


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


_export_tests()


@pytest.fixture(autouse=True)
def _swap_manager_and_check_stats(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    manager = importlib.import_module(_MANAGER)
    for name, cls in _MANAGER_SWAPS.items():
        monkeypatch.setattr(manager, name, cls, raising=False)
    stats.reset()
    yield
    snap = stats.snapshot()
    for name in _OUR_NAMES:
        s = snap.get(name)
        if s is None:
            continue
        assert not s["fallbacks"], f"{name} fell back: {s['fallbacks']}"
        assert s["accelerated"] == s["calls"], f"{name}: {s}"
