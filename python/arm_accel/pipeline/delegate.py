"""A delegate's fake outputs: the module ``call_delegate_cpu`` unlifts, built cheaply.

``executorch_call_delegate``'s fake and tracing dispatches call ``call_delegate_cpu`` (looked up
by name), which unlifts the lowered module's program into a new module, runs it on the inputs
and drops it. ``to_executorch`` re-traces the program twice, each dispatching every delegate.
Only the outputs outlive the call, so inside it the module's provenance records share their
ancestors (:func:`arm_accel.runtime.provenance.sharing`), its code is generated once, when it
runs, under the ``<eval_with_key>.N`` numbers stock's recompiles would take
(:func:`arm_accel.pipeline.engine.deferring_recompiles`), and its quantize/dequantize calls are
served from the fake mode's memo (:func:`arm_accel.runtime.fake_memo.dispatching`). Why exact:
design.md, "The re-trace engine" (the delegate paragraph after the shared provenance).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from arm_accel.control import counters, switch
from arm_accel.pipeline import engine
from arm_accel.runtime import fake_memo, provenance

#: ``stats()`` entry: one accelerated call per delegate call run with the cheaper module.
STATS_NAME = "delegate.unlifted"


def scoped(stock: Any) -> Any:
    """``call_delegate_cpu`` inside the three scopes (the patch table's ``delegate.unlifted``
    row); stock's with acceleration off."""

    @functools.wraps(stock)
    def call_delegate_cpu(lowered_module: Any, *args: Any) -> Any:
        if not switch.is_enabled():
            return stock(lowered_module, *args)
        start = time.perf_counter()
        with provenance.sharing(), engine.deferring_recompiles(), fake_memo.dispatching():
            out = stock(lowered_module, *args)
        counters.record_call(STATS_NAME, time.perf_counter() - start, accelerated=True)
        return out

    return call_delegate_cpu


__all__ = ["STATS_NAME", "scoped"]
