"""``convert_pt2e``'s steps with their recompiles deferred to first use.

``convert_pt2e`` recompiles the module five times (``_convert_to_reference_decomposed_fx``
twice, each of its two ``PassManager`` runs, the constant fold); only the last code is ever run
(the re-export traces it). Each step it looks up by name in ``quantize_pt2e`` runs here inside
the engine's deferred recompiles (each keeping the ``<eval_with_key>.N`` number stock's compile
would give it) and, for the conversion and the fold, the garbage collector's scope; the code is
generated once, when first used. Why exact: design.md, "The quantization flow".
"""

from __future__ import annotations

import functools
from typing import Any

from torch.fx.passes.infra.pass_manager import PassManager

from arm_accel.control import switch
from arm_accel.pipeline import engine
from arm_accel.runtime import collector


def converting(stock: Any) -> Any:
    """``stock`` (``_convert_to_reference_decomposed_fx``, ``constant_fold`` as
    ``quantize_pt2e`` binds them) in the collector's scope with its recompiles deferred; stock's
    with acceleration off."""

    @functools.wraps(stock)
    def step(*args: Any, **kwargs: Any) -> Any:
        if not switch.is_enabled():
            return stock(*args, **kwargs)
        with collector.collecting_less(), engine.deferring_recompiles():
            return stock(*args, **kwargs)

    return step


class DeferringPassManager(PassManager):
    """torch's ``PassManager`` (as ``quantize_pt2e`` binds it) whose run defers the recompile
    after each pass; stock's run with acceleration off."""

    def __call__(self, module: Any) -> Any:
        if not switch.is_enabled():
            return super().__call__(module)
        with engine.deferring_recompiles():
            return super().__call__(module)


__all__ = ["DeferringPassManager", "converting"]
