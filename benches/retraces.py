"""Re-traces and seconds in PropagateViewCopyPermute{Down,Up}Pass, stock vs ours, one process.

    ARM_ACCEL=0 python benches/retraces.py llama4 transformer4 transformer8

``ARM_ACCEL=0`` keeps the activation hook from swapping any accelerated pass in, so the stock run
is pure stock and the other run differs only by our two classes (patched into the Arm pass
manager here, with the switch turned on for them).

For each model: one stock lowering and one lowering with our classes in the Arm pass manager
(same exported program input, built once), the TOSA bytes compared, and per-call re-traces,
seconds in the two passes and the whole ``to_edge_transform_and_lower`` printed with ratios.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from arm_accel.bootstrap import activation
from arm_accel.control import switch
from arm_accel.pipeline.passes.propagate import accelerated
from arm_accel.pipeline.passes.propagate.retrace import count_retraces
from arm_accel.tools import models

NAMES = ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass")


@contextmanager
def measure(ours: bool) -> Iterator[list[tuple[str, int, float]]]:
    """Patch the pass manager (ours) and time/count every call of the two passes."""
    import executorch.backends.arm._passes.arm_pass_manager as apm

    calls: list[tuple[str, int, float]] = []
    saved_apm = {n: getattr(apm, n) for n in NAMES}
    patched: list[tuple[type, Any]] = []
    for n in NAMES:
        cls = getattr(accelerated, n) if ours else activation.stock_class(n)
        setattr(apm, n, cls)
        original = cls.__dict__.get("call")
        inner = cls.call

        def call(self: Any, gm: Any, inner: Any = inner, n: str = n) -> Any:
            with count_retraces() as c:
                t = time.perf_counter()
                result = inner(self, gm)
                calls.append((n, c.count, time.perf_counter() - t))
            return result

        cls.call = call  # type: ignore[method-assign]
        patched.append((cls, original))
    try:
        yield calls
    finally:
        for cls, original in patched:
            if original is None:
                del cls.call
            else:
                cls.call = original  # type: ignore[method-assign]
        for n, cls in saved_apm.items():
            setattr(apm, n, cls)


def run(name: str) -> None:
    model, inputs, mode = models.build(name)
    exported = models.export_for_arm(model, inputs, mode)
    results = {}
    for ours in (False, True):
        previous = switch.set_enabled(ours)
        with measure(ours) as calls, count_retraces() as total:
            t = time.perf_counter()
            edge = models.lower(copy.deepcopy(exported), mode)
            lowering = time.perf_counter() - t
        switch.set_enabled(previous)
        results[ours] = (calls, lowering, total.count, models.tosa_bytes(edge))
    (sc, sl, st, sb), (oc, ol, ot, ob) = results[False], results[True]
    s_sec, o_sec = sum(c[2] for c in sc), sum(c[2] for c in oc)
    print(f"== {name} ({mode})  TOSA identical: {sb == ob}")
    print(f"  re-traces per propagation call  stock {[c[1] for c in sc]}")
    print(f"                                  ours  {[c[1] for c in oc]}")
    print(
        f"  re-traces in the two passes     stock {sum(c[1] for c in sc)}  ours "
        f"{sum(c[1] for c in oc)}   (whole lowering: stock {st}, ours {ot})"
    )
    print(
        f"  seconds in the two passes       stock {s_sec:.2f}  ours {o_sec:.2f}  "
        f"ratio {s_sec / o_sec:.2f}x"
    )
    print(
        f"  to_edge_transform_and_lower     stock {sl:.2f}  ours {ol:.2f}  ratio {sl / ol:.2f}x",
        flush=True,
    )


if __name__ == "__main__":
    for model_name in sys.argv[1:] or ["transformer4", "llama4"]:
        run(model_name)
