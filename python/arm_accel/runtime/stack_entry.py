"""The caller's stack entry without formatting the whole stack.

``ArmPass.call_operator`` (for every node a pass rebuilds with ``updated=True``) and
``arm_pass_utils.create_node`` append ``traceback.format_stack()[-2]`` to the node's
``stack_trace``: the entry of the frame that called them. ``format_stack`` extracts and formats
every frame of the stack to keep that one, 80-150 us at a lowering's depth (60-100 frames),
against 6 us for the last two. Those two modules get a ``traceback`` whose ``format_stack()``
returns only the last two entries, formatted by ``traceback`` itself, which is what both call
sites read (their module sources are pinned by digest). Where stock's list would end
differently, ``format_stack`` of the whole stack runs, counted:

- ``sys.tracebacklimit`` set (stock keeps that many innermost frames);
- a run of four or more identical frames (file, line, function) at either of the last two
  entries: stock collapses it into a ``[Previous line repeated N more times]`` entry.
"""

from __future__ import annotations

import sys
import traceback
import types
from typing import Any

from arm_accel.control import counters, switch

STATS_NAME = "retrace_engine.stack_entry"
#: Stock collapses a run of more than this many identical frames (``traceback._RECURSIVE_CUTOFF``).
_CUTOFF = 3


def _key(frame: types.FrameType | None) -> tuple[str, int, str] | None:
    if frame is None:
        return None
    code = frame.f_code
    return code.co_filename, frame.f_lineno, code.co_name


def _collapses(frame: types.FrameType) -> bool:
    """Whether stock's formatting of the stack ending at ``frame`` collapses a run of identical
    frames that holds one of its last two entries."""
    keys = []
    f: types.FrameType | None = frame
    for _ in range(_CUTOFF + 2):
        keys.append(_key(f))
        f = f.f_back if f is not None else None
    # ``frame`` itself is never None: only the caller's run needs the guard (a shallow stack).
    at_last = len(set(keys[: _CUTOFF + 1])) == 1
    at_caller = keys[1] is not None and len(set(keys[1 : _CUTOFF + 2])) == 1
    return at_last or at_caller


def format_stack(f: types.FrameType | None = None, limit: int | None = None) -> list[str]:
    """``traceback.format_stack``, of which only the last two entries are exact (what the
    pinned call sites read) unless stock's list would end otherwise (module docstring)."""
    frame = sys._getframe(1) if f is None else f
    if f is not None or limit is not None or not switch.is_enabled():
        return traceback.format_stack(frame, limit)
    if getattr(sys, "tracebacklimit", None) is not None:
        counters.record_decline(STATS_NAME, "sys.tracebacklimit is set")
        return traceback.format_stack(frame)
    if _collapses(frame):
        counters.record_decline(STATS_NAME, "repeated frames at the end of the stack")
        return traceback.format_stack(frame)
    counters.record_call(STATS_NAME, 0.0, True)
    return traceback.format_list(traceback.extract_stack(frame, limit=2))


class _Traceback(types.ModuleType):
    """``traceback`` with :func:`format_stack` (everything else is the module's own)."""

    def __init__(self) -> None:
        super().__init__("traceback", traceback.__doc__)
        self.format_stack = format_stack

    def __getattr__(self, name: str) -> Any:
        return getattr(traceback, name)


#: What the pinned modules see as ``traceback`` (the patch table's ``stack_entry`` rows).
TRACEBACK = _Traceback()
