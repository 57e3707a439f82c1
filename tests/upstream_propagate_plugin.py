"""pytest plugin: run executorch's own test modules with our propagation passes swapped in.

Loaded with ``-p upstream_propagate_plugin`` (``tests`` on ``PYTHONPATH``) before the upstream
modules are imported, so their ``from ... import PropagateViewCopyPermute*Pass`` pick up ours.

Differential on top of the upstream assertions (``ARM_ACCEL_DIFFERENTIAL=0`` turns it off):
every call of ours first runs the pure stock class on a deep copy of the same input, with the
same instance state, and our result must equal stock's (``assert_graphs_equal``, same
``modified``, or the same exception type and message).

A call whose input cannot be deep-copied cannot be compared: it is counted (``not_copyable``)
and fails the session. At the end it prints the ``arm_accel.stats()`` lines and the differential
counts, so the caller can check our classes ran and were compared.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

_DIFF = {"compared": 0, "raised_alike": 0, "not_copyable": 0}


def _differential(cls: type) -> None:
    from arm_accel.control import switch
    from arm_accel.testing import assert_graphs_equal

    ours_call = cls.call
    stock_cls = cls._arm_accel_stock  # type: ignore[attr-defined]

    def call(self: Any, graph_module: Any) -> Any:
        try:
            reference = copy.deepcopy(graph_module)
        except Exception:
            _DIFF["not_copyable"] += 1
            return ours_call(self, graph_module)
        stock = stock_cls.__new__(stock_cls)
        stock.__dict__.update(self.__dict__)
        stock_error: BaseException | None = None
        with switch.disabled():
            try:
                expected = stock_cls.call(stock, reference)
            except Exception as exc:  # noqa: BLE001 - compared with ours below
                stock_error = exc
        if stock_error is not None:
            try:
                ours_call(self, graph_module)
            except Exception as exc:
                assert type(exc) is type(stock_error) and str(exc) == str(stock_error), (
                    f"{cls.__name__}: ours raised {exc!r}, stock {stock_error!r}"
                )
                _DIFF["raised_alike"] += 1
                raise
            raise AssertionError(f"{cls.__name__}: stock raised {stock_error!r}, ours did not")
        result = ours_call(self, graph_module)
        assert result.modified == expected.modified, f"{cls.__name__}: modified differs"
        assert_graphs_equal(expected.graph_module, result.graph_module)
        _DIFF["compared"] += 1
        return result

    cls.call = call  # type: ignore[method-assign]


def pytest_configure(config: object) -> None:
    import executorch.backends.arm._passes as arm_passes
    import executorch.backends.arm._passes.arm_pass_manager as apm
    import executorch.backends.arm._passes.propagate_view_copy_permute_pass as arm_mod
    import executorch.backends.transforms.propagate_view_copy_permute_pass as generic
    from arm_accel.control import switch
    from arm_accel.pipeline.passes.propagate import accelerated

    # Run with ARM_ACCEL=0 so the activation hook swaps nothing else in; turn the switch on
    # for our two classes.
    switch.set_enabled(True)
    differential = os.environ.get("ARM_ACCEL_DIFFERENTIAL", "1") != "0"

    for name in ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass"):
        ours = getattr(accelerated, name)
        generic_ours = accelerated.accelerate(getattr(generic, name))
        if differential:
            ours = type(name, (ours,), {})  # wrap a subclass, leave propagate's class alone
            _differential(ours)
            _differential(generic_ours)
        for module in (arm_passes, apm, arm_mod):
            setattr(module, name, ours)
        setattr(generic, name, generic_ours)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    from arm_accel.control import counters

    print("\nARM_ACCEL_STATS " + json.dumps(counters.snapshot().as_dict()))
    print("ARM_ACCEL_DIFFERENTIAL " + json.dumps(_DIFF))
    if _DIFF["not_copyable"]:
        print(f"ERROR: {_DIFF['not_copyable']} call(s) could not be compared (input not copyable)")
        session.exitstatus = 1
