"""Stock torch calls run inside the engine's scopes: a delegate's fake run, ``torch.export``.

Inside each call the provenance records it makes share their ancestors
(:func:`arm_accel.runtime.provenance.sharing`), the modules it recompiles generate their code
once, when used, under the ``<eval_with_key>.N`` numbers stock's recompiles take
(:func:`arm_accel.pipeline.engine.deferring_recompiles`), and its quantize/dequantize fake
kernels are served from the fake mode's memo (:func:`arm_accel.runtime.fake_memo.dispatching`;
inside ``torch.export`` also the ``aten`` calls stock's cache holds).
Inside ``torch.export`` dynamo's tracers also rebuild their list of a traced GraphModule's metas
only when it changed (:func:`arm_accel.runtime.dynamo_meta.tracing`) and leave the location
headers no log reads uncomposed (:func:`arm_accel.runtime.dynamo_header.tracing`).

- ``call_delegate_cpu``: ``executorch_call_delegate``'s fake and tracing dispatches call it
  (looked up by name); it unlifts the lowered module's program into a new module, runs it on
  the inputs and drops it. ``to_executorch`` re-traces the program twice, each dispatching
  every delegate.
- ``_export_for_training``: what ``torch.export.export`` runs. Re-exporting a quantized module
  re-traces every quantize/dequantize node twice (dynamo, then the aten trace) and copies every
  node's provenance chain; the program it returns gets its code before it leaves the call.

Why exact: design.md, "The re-trace engine" (the paragraphs after the shared provenance).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from torch import fx

from arm_accel.control import counters, switch
from arm_accel.pipeline import engine
from arm_accel.runtime import deferred, dynamo_header, dynamo_meta, fake_memo, provenance

#: ``stats()`` entries: one accelerated call per call run inside the scopes.
DELEGATE_STATS_NAME = "delegate.unlifted"
EXPORT_STATS_NAME = "export.scoped"


def _scoped(
    stock: Callable[..., Any],
    stats_name: str,
    leaving: Callable[[Any], None],
    extra: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    aten: bool = False,
) -> Any:
    """``stock`` inside the three scopes and ``extra``'s, ``leaving`` applied to what it
    returns; stock's with acceleration off. ``aten``: the fake memo serves ``aten`` calls too."""

    @functools.wraps(stock)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not switch.is_enabled():
            return stock(*args, **kwargs)
        start = time.perf_counter()
        memo = fake_memo.dispatching(aten)
        with provenance.sharing(), engine.deferring_recompiles(), memo, extra():
            out = stock(*args, **kwargs)
        leaving(out)
        counters.record_call(stats_name, time.perf_counter() - start, accelerated=True)
        return out

    return call


def _outputs_only(out: Any) -> None:
    """A delegate call returns tensors: the modules it built died with it."""


def _program_code(program: Any) -> None:
    """The exported program's modules get their code, as stock's recompiles gave it them
    before the program left ``torch.export``."""
    module = getattr(program, "graph_module", None)
    if isinstance(module, fx.GraphModule):
        for sub in module.modules():
            if isinstance(sub, fx.GraphModule):
                deferred.materialize(sub)


def delegate_call(stock: Callable[..., Any]) -> Any:
    """``call_delegate_cpu`` inside the scopes (the patch table's ``delegate.unlifted``)."""
    return _scoped(stock, DELEGATE_STATS_NAME, _outputs_only)


@contextlib.contextmanager
def _dynamo_blocks() -> Iterator[None]:
    """The blocks of dynamo's tracers inside ``torch.export``."""
    with dynamo_meta.tracing(), dynamo_header.tracing():
        yield


def export_call(stock: Callable[..., Any]) -> Any:
    """``torch.export._trace._export_for_training`` inside the scopes (``export.scoped``)."""
    return _scoped(stock, EXPORT_STATS_NAME, _program_code, _dynamo_blocks, aten=True)


__all__ = ["DELEGATE_STATS_NAME", "EXPORT_STATS_NAME", "delegate_call", "export_call"]
