"""dynamo's location header of a proxy, not composed where the only log that reads it is off.

On Python 3.11+, ``SubgraphTracer._create_proxy`` composes, for the first call proxy of each
traced instruction, ``tx.get_line_of_code_header(...)``: the file, line and qualified function
name of the traced code. Finding that name tokenizes the traced source file, once per file
per process (``funcname_cache``): about 0.45 s of a first ``torch.export`` of a
``transformers`` decoder. The header's only reader is the ``trace_call`` artifact log's DEBUG
message; the branch then sets the tracer's ``prev_inst`` to the instruction.

Inside :func:`tracing` (``torch.export``'s scope, ``pipeline/scoped_calls.py``), where that
logger is off for DEBUG, the instruction is made ``prev_inst`` before stock's call, as stock's
branch leaves it, and stock's branch then does nothing. What it would have done has no effect
on what dynamo builds: the file's entry in ``funcname_cache`` (a memo filled on first use) and
a message the logger drops. Where the log is on, or anything the branch reads cannot be read
first, stock's call runs as it is. Why exact: design.md, "The re-trace engine" (dynamo's
location header).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from arm_accel.control import counters, switch
from arm_accel.runtime.scopes import CountedScope

#: ``stats()`` entry, recorded once per :func:`tracing` block: the proxies made without the
#: header stock's branch would compose (a fallback: the instruction could not be read).
STATS_NAME = "export.dynamo_header"
#: The proxy kinds stock's branch composes a header for.
_CALL_KINDS = frozenset({"call_function", "call_method", "call_module"})

_scope = CountedScope(STATS_NAME)


def tracing() -> AbstractContextManager[None]:
    """The block in which dynamo's tracers leave unread headers uncomposed (``torch.export``);
    the outermost block records how many."""
    return _scope.entered()


def _log_reads_header() -> bool:
    """Whether the ``trace_call`` logger would emit the message that reads the header (stock's
    ``trace_call_log.debug`` checks the same)."""
    from torch._dynamo import output_graph

    return output_graph.trace_call_log.isEnabledFor(logging.DEBUG)


def _unread_header_instruction(tracer: Any, kind: str) -> Any:
    """The instruction stock's branch would compose an unread header for on this call (it
    reads ``current_tx.current_instruction`` after creating the node, which does not move
    it), or None: no header, or one the log reads."""
    if kind not in _CALL_KINDS or sys.version_info < (3, 11):
        return None
    inst = tracer.output_graph.current_tx.current_instruction
    positions = inst.positions
    if inst is tracer.prev_inst or positions is None or positions.lineno is None:
        return None
    if _log_reads_header():
        return None
    return inst


def create_proxy(stock: Callable[..., Any]) -> Any:
    """``SubgraphTracer._create_proxy`` that, inside :func:`tracing`, leaves a header nothing
    reads uncomposed (the patch table's ``export.dynamo_header``)."""

    @functools.wraps(stock)
    def _create_proxy(self: Any, kind: str, *args: Any, **kwargs: Any) -> Any:
        if not _scope.active() or not switch.is_enabled():
            return stock(self, kind, *args, **kwargs)
        try:
            inst = _unread_header_instruction(self, kind)
        except Exception as exc:
            if switch.strict():
                raise
            # Stock's branch reads the same after creating the node: it raises there, or not.
            counters.record_fallback(STATS_NAME, f"reading the instruction failed: {exc!r}")
            return stock(self, kind, *args, **kwargs)
        if inst is None:
            return stock(self, kind, *args, **kwargs)
        previous = self.prev_inst
        self.prev_inst = inst
        try:
            out = stock(self, kind, *args, **kwargs)
        except BaseException:
            # Stock's value where creating the node raised (its branch comes after that).
            self.prev_inst = previous
            raise
        _scope.count(accelerated=True)
        return out

    return _create_proxy


__all__ = ["STATS_NAME", "create_proxy", "tracing"]
