"""torch's ``<eval_with_key>.N`` file names, read for the counter tests."""

from __future__ import annotations

import re
from typing import Any

from torch import fx

_EVAL_KEY = re.compile(r"<eval_with_key>\.(\d+)")


def file_number(gm: fx.GraphModule) -> int:
    """The ``N`` of the ``<eval_with_key>.N`` file ``gm``'s code was compiled under."""
    found = _EVAL_KEY.match(gm.forward.__code__.co_filename)
    assert found, gm.forward.__code__.co_filename
    return int(found.group(1))


def relative_stack_traces(program: Any, start: int) -> list[str]:
    """The program's nodes' stack traces, each ``<eval_with_key>.N`` they name written as its
    distance from ``start`` (``<eval_with_key>.+K``): one process's two runs compare so."""
    return [
        _EVAL_KEY.sub(lambda m: f"<eval_with_key>.+{int(m[1]) - start}", trace)
        for n in program.graph.nodes
        if (trace := n.meta.get("stack_trace"))
    ]
