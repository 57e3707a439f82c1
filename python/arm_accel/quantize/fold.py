"""``convert_pt2e``'s constant fold: the weights' quantization in Rust, without the
dequantized weights it computes and discards.

torchao's ``ConstantFolder`` runs every node whose inputs are constants. A ``dequantize``
node after a folded weight ``quantize`` is run on the real int8 weight (a float copy of the
weight, and an int64 one on the way), and then ``is_impure`` drops the value: the node stays
in the graph and its environment entry is ``unknown_value``. :func:`deduce_value` returns
``unknown_value`` for such a node without computing it; it runs the op's own Python code on
meta copies of its inputs first: where its checks (dtypes, axis, shapes) raise, stock's
computation runs and raises. Why the folder's outcome is stock's: design.md, "The
quantization flow".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

from arm_accel.quantize import affine
from arm_accel.quantize.patch import run_accelerated

#: ``stats()`` entries of the patch table's ``quantize.fold`` row: one call per dequantize
#: node not computed, and per quantize node computed natively.
STATS_NAME = "quantize.fold_dequantize"
QUANTIZE_STATS_NAME = "quantize.fold_quantize"


@functools.cache
def _discarded() -> dict[Any, Callable[..., Any]]:
    """The dequantize ops whose folded value ``is_impure`` discards, with the Python function
    their CPU kernel is (``torch.ao.quantization.fx._decomposed``'s, pinned)."""
    from torch.ao.quantization.fx import _decomposed

    ops = torch.ops.quantized_decomposed
    return {
        ops.dequantize_per_channel.default: _decomposed.dequantize_per_channel,
        ops.dequantize_per_tensor.default: _decomposed.dequantize_per_tensor,
    }


@functools.cache
def _kept() -> dict[Any, Callable[..., tuple[bool, Any]]]:
    """The quantize ops whose folded value the fold keeps, with the native computation of
    each (:mod:`~arm_accel.quantize.affine`'s)."""
    ops = torch.ops.quantized_decomposed
    return {
        ops.quantize_per_tensor.default: affine.quantize_per_tensor,
        ops.quantize_per_channel.default: affine.quantize_per_channel,
    }


def _plain_cpu(value: Any) -> bool:
    return type(value) in (torch.Tensor, torch.nn.Parameter) and value.device.type == "cpu"


def decline_reason(folder: Any, args: tuple[Any, ...], kwargs: Any) -> str | None:
    """Why ``folder`` computes a dequantize node with these inputs as stock does (None: the
    value is provably discarded)."""
    from torchao.quantization.pt2e.constant_fold import ConstantFolder

    if type(folder) is not ConstantFolder:
        return "a ConstantFolder subclass (its is_impure or insertable check may differ)"
    if folder.lifted_constant_names is not None:
        return "lifted constants (the folder deduces values without computing them)"
    tensors = [v for v in pytree.arg_tree_leaves(*args, **kwargs) if isinstance(v, torch.Tensor)]
    if not all(_plain_cpu(t) for t in tensors):
        return "an input is not a plain CPU tensor (a meta value is kept, not discarded)"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "an input requires grad (stock's computation records autograd nodes)"
    return None


def _unknown_if_checked(
    folder: Any, node: torch.fx.Node, args: tuple[Any, ...], kwargs: Any
) -> tuple[bool, Any]:
    """``(True, unknown_value)`` (what ``run_node`` leaves for the node) once the op's own code
    ran on meta copies of its inputs: its checks are of dtypes and shapes only, so they pass
    on the real inputs too. Where they raise, ``(False, why)``: stock runs it and raises."""
    try:
        with torch.no_grad():
            meta_args, meta_kwargs = pytree.tree_map_only(
                torch.Tensor, lambda t: t.to(device="meta"), (args, kwargs)
            )
            _discarded()[node.target](*meta_args, **meta_kwargs)
    except Exception as exc:  # noqa: BLE001 - stock's run raises its own
        return False, f"its checks raise on meta inputs ({type(exc).__name__})"
    return True, folder.unknown_value


def quantize_decline(target: Any, args: tuple[Any, ...], kwargs: Any) -> str | None:
    """Why the folded ``target(*args)`` (a quantize op) is computed by stock's op (None: the
    native kernel computes it)."""
    if kwargs or not args:
        return "keyword arguments, or no arguments"
    reason = affine.input_reason(args[0])
    if reason is not None:
        return reason
    ops = torch.ops.quantized_decomposed
    if target is ops.quantize_per_tensor.default and len(args) == 6:
        return affine.params_reason(*args[1:])
    if target is ops.quantize_per_channel.default and len(args) == 7:
        x, scales, zero_points, axis, qmin, qmax, dtype = args
        return affine.channels_reason(x, scales, zero_points, axis) or affine.bounds_reason(
            qmin, qmax, dtype
        )
    return "arguments not as the schema lists them"


def dispatching(stock: Callable[[Any, torch.fx.Node], Any]) -> Callable[[Any, torch.fx.Node], Any]:
    """The ``_deduce_value`` the patch table installs on ``ConstantFolder``: stock's for every
    node but a discarded dequantize and a folded quantize."""

    @functools.wraps(stock)
    def _deduce_value(self: Any, node: torch.fx.Node) -> Any:
        if node.op != "call_function":
            return stock(self, node)
        if node.target in _discarded():
            args, kwargs = self.fetch_args_kwargs_from_env(node)
            return run_accelerated(
                STATS_NAME,
                lambda: decline_reason(self, args, kwargs),
                lambda: _unknown_if_checked(self, node, args, kwargs),
                lambda: stock(self, node),
            )
        if node.target in _kept() and self.lifted_constant_names is None:
            args, kwargs = self.fetch_args_kwargs_from_env(node)
            return run_accelerated(
                QUANTIZE_STATS_NAME,
                lambda: quantize_decline(node.target, args, kwargs),
                lambda: _kept()[node.target](*args),
                lambda: stock(self, node),
            )
        return stock(self, node)

    return _deduce_value


__all__ = ["QUANTIZE_STATS_NAME", "STATS_NAME", "decline_reason", "dispatching", "quantize_decline"]
