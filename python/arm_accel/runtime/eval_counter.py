"""torch's ``<eval_with_key>.N`` counter, moved as stock's compiles move it.

Every compile of a GraphModule's code (``torch.fx.graph_module._loader``) takes the counter's
next number and names the code's file with it; traces through that code record the name in
stack traces, so where acceleration compiles less than stock (a deferred recompile, a re-trace
it models, a helper pass it does not instantiate), it takes the numbers stock's compiles would
have taken, in their place. Which stock operations take how many numbers: the constants below,
checked against stock by ``tests/test_eval_counter.py``; why the numbers matter: design.md,
"The eval counter".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from torch.fx import graph_module as fx_graph_module

#: Numbers one stock ``ExportPass()`` takes: its placeholder interpreter's empty GraphModule.
EXPORT_PASS_INIT = 1
#: Numbers one stock ``ExportPass.call`` takes on a graph without submodules:
#: ``call_submodule``'s interpreter on an empty GraphModule, and the re-traced module.
EXPORT_PASS_CALL = 2
#: Numbers one ``GraphModule.recompile()`` takes.
RECOMPILE = 1

# Held while the counter is read and moved (``numbered`` holds it through the compile).
_lock = threading.RLock()


def position() -> int:
    """The number the next compile takes."""
    return int(fx_graph_module._loader.next_id)


def take(count: int = 1) -> int:
    """Take ``count`` numbers, as that many compiles would; returns the first."""
    if count < 0:
        raise ValueError(f"cannot take {count} numbers")
    loader = fx_graph_module._loader
    with _lock:
        number: int = loader.next_id
        loader.next_id = number + count
    return number


def rewind(to: int) -> None:
    """Give back the numbers taken since ``position()`` was ``to`` (a rolled-back call's: the
    modules compiled under them are dropped, and stock's run takes them again)."""
    loader = fx_graph_module._loader
    with _lock:
        if to > loader.next_id:
            raise ValueError(f"cannot rewind forward to {to} (at {loader.next_id})")
        loader.next_id = to


@contextmanager
def numbered(number: int) -> Iterator[None]:
    """Compile under ``number`` (taken earlier), leaving the counter where it was."""
    loader = fx_graph_module._loader
    with _lock:
        following = loader.next_id
        loader.next_id = number
        try:
            yield
        finally:
            loader.next_id = following


@contextmanager
def scratch() -> Iterator[None]:
    """Compiles inside take no numbers for good: the counter returns to where it was. For
    modules that live only inside the block (stock has no such compiles); their code's
    file names may be reused by later compiles."""
    start = position()
    try:
        yield
    finally:
        rewind(start)
