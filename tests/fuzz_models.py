"""Random small models for the differential fuzz tests.

A model is a :class:`Spec`: input shapes, a straight-line program of :class:`Op` steps (each reads
earlier values by index and appends one value), and the indices of the values it returns.
Specs print as plain Python (``Spec(inputs=..., ops=(Op(...), ...), outputs=...)``), so a shrunk
failure can be pasted into a named regression test as it is.

The strategy tracks every value's shape by running each step on meta tensors, so whatever it
draws is a valid model; what stock ExecuTorch then does with it (lower, decline, raise) is what
the tests compare against.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

UNARY = ("relu", "neg", "abs", "sigmoid", "tanh", "exp")  # sigmoid/tanh/exp: TABLE ops under INT
BINARY = ("add", "mul", "sub")
MAX_RANK = 6
MAX_NUMEL = 96
DIM_SIZES = (1, 1, 1, 2, 2, 3, 4)  # size-1 dims are common on purpose
LAYOUT = ("permute", "transpose", "reshape", "squeeze", "unsqueeze")
# A chain's layout ops: permutes and transposes twice as likely (views of tiny shapes are often
# folded together before the propagation passes run).
CHAIN_LAYOUT = ("permute", "transpose", *LAYOUT)
ELEMENTWISE = ("unary", "binary", "const")
KINDS = (*LAYOUT, *ELEMENTWISE, "mean", "slice", "cat")


@dataclass(frozen=True)
class Op:
    """One step: ``kind`` applied to the values at ``args`` with kind-specific ``params``.

    kinds and params:
      permute (perm,) | transpose (d0, d1) | reshape (shape,) | squeeze (dim,) | unsqueeze (dim,)
      unary (name,) | binary (name,) with two args | const (name, shape) against a seeded buffer
      mean (dims,) with keepdim | slice (dim, start, stop) | cat (dim,) with two args
    """

    kind: str
    args: tuple[int, ...]
    params: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Spec:
    inputs: tuple[tuple[int, ...], ...]
    ops: tuple[Op, ...]
    outputs: tuple[int, ...]


def apply(op: Op, values: list[torch.Tensor], const: torch.Tensor | None = None) -> torch.Tensor:
    """The tensor computation of ``op`` (the same code builds shapes and the model's forward)."""
    x = values[op.args[0]]
    p = op.params
    if op.kind == "permute":
        return x.permute(p[0])
    if op.kind == "transpose":
        return x.transpose(p[0], p[1])
    if op.kind == "reshape":
        return x.reshape(p[0])
    if op.kind == "squeeze":
        return x.squeeze(p[0])
    if op.kind == "unsqueeze":
        return x.unsqueeze(p[0])
    if op.kind == "unary":
        return getattr(torch, p[0])(x)
    if op.kind == "binary":
        return getattr(torch, p[0])(x, values[op.args[1]])
    if op.kind == "const":
        assert const is not None
        return getattr(torch, p[0])(x, const)
    if op.kind == "mean":
        return x.mean(dim=list(p[0]), keepdim=True)
    if op.kind == "slice":
        dim, start, stop = p
        return x[(slice(None),) * dim + (slice(start, stop),)]
    if op.kind == "cat":
        return torch.cat([x, values[op.args[1]]], dim=p[0])
    raise ValueError(f"unknown op kind {op.kind!r}")


class RandomModel(torch.nn.Module):
    """Runs a :class:`Spec`; the constants of ``const`` steps are seeded buffers."""

    def __init__(self, spec: Spec, seed: int = 0) -> None:
        super().__init__()
        self.spec = spec
        gen = torch.Generator().manual_seed(seed)
        for k, op in enumerate(spec.ops):
            if op.kind == "const":
                self.register_buffer(f"c{k}", torch.rand(op.params[1], generator=gen) + 0.5)

    def forward(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = list(xs)
        for k, op in enumerate(self.spec.ops):
            values.append(apply(op, values, getattr(self, f"c{k}", None)))
        return tuple(values[i] for i in self.spec.outputs)


def build(spec: Spec, seed: int = 0) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The model and seeded example inputs for ``spec``."""
    torch.manual_seed(seed)
    model = RandomModel(spec, seed).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = tuple(torch.randn(shape, generator=gen) for shape in spec.inputs)
    return model, inputs


# -- the strategy -----------------------------------------------------------------------------

shapes = st.lists(st.sampled_from(DIM_SIZES), min_size=1, max_size=MAX_RANK).filter(
    lambda s: math.prod(s) <= MAX_NUMEL
)


def _reshape_target(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Merge two adjacent dims, split one, insert a size-1 dim or remove one."""
    rank = len(shape)
    moves = []
    if rank >= 2:
        moves.append("merge")
    if rank < MAX_RANK and any(d in (4, 6, 8, 9, 12) for d in shape):
        moves.append("split")
    if rank < MAX_RANK:
        moves.append("insert1")
    if rank >= 2 and 1 in shape:
        moves.append("remove1")
    if not moves:
        return None
    move = draw(st.sampled_from(moves))
    s = list(shape)
    if move == "merge":
        i = draw(st.integers(0, rank - 2))
        s[i : i + 2] = [s[i] * s[i + 1]]
    elif move == "split":
        i = draw(st.sampled_from([i for i, d in enumerate(s) if d in (4, 6, 8, 9, 12)]))
        a = draw(st.sampled_from([f for f in (2, 3) if s[i] % f == 0]))
        s[i : i + 1] = [a, s[i] // a]
    elif move == "insert1":
        s.insert(draw(st.integers(0, rank)), 1)
    else:
        del s[draw(st.sampled_from([i for i, d in enumerate(s) if d == 1]))]
    return tuple(s)


def _draw_src(draw: st.DrawFn, n: int) -> int:
    # Shrinks toward the latest value (chains); reaches back for fan-outs and diamonds.
    return n - 1 - draw(st.integers(0, n - 1))


def _draw_op(
    draw: st.DrawFn,
    shapes_so_far: list[tuple[int, ...]],
    src: int | None = None,
    kinds: tuple[str, ...] = KINDS,
) -> Op | None:
    """One step of a kind in ``kinds`` reading ``src`` (drawn if None) and maybe other earlier
    values; None if the drawn kind does not fit the input."""
    if src is None:
        src = _draw_src(draw, len(shapes_so_far))
    shape = shapes_so_far[src]
    rank = len(shape)
    kind = draw(st.sampled_from(kinds))
    if kind == "permute":
        return Op(kind, (src,), (tuple(draw(st.permutations(range(rank)))),))
    if kind == "transpose":
        if rank < 2:
            return None
        d0, d1 = draw(st.lists(st.integers(0, rank - 1), min_size=2, max_size=2, unique=True))
        return Op(kind, (src,), (d0, d1))
    if kind == "reshape":
        target = _reshape_target(draw, shape)
        return None if target is None else Op(kind, (src,), (target,))
    if kind == "squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        if rank < 2 or not ones:
            return None
        return Op(kind, (src,), (draw(st.sampled_from(ones)),))
    if kind == "unsqueeze":
        if rank >= MAX_RANK:
            return None
        return Op(kind, (src,), (draw(st.integers(0, rank)),))
    if kind == "unary":
        return Op(kind, (src,), (draw(st.sampled_from(UNARY)),))
    if kind == "binary":
        partners = [j for j, s in enumerate(shapes_so_far) if _broadcasts_to(s, shape)]
        other = draw(st.sampled_from(partners))  # src itself always qualifies
        return Op(kind, (src, other), (draw(st.sampled_from(BINARY)),))
    if kind == "const":
        # Broadcast constant: some dims set to 1, possibly fewer leading dims.
        keep = draw(st.integers(1, rank))
        cshape = tuple(d if draw(st.booleans()) else 1 for d in shape[rank - keep :])
        return Op(kind, (src,), (draw(st.sampled_from(BINARY)), cshape))
    if kind == "mean":
        dims = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
        return Op(kind, (src,), (tuple(sorted(dims)),))
    if kind == "slice":
        dim = draw(st.integers(0, rank - 1))
        if shape[dim] < 2:
            return None
        start = draw(st.integers(0, shape[dim] - 1))
        stop = draw(st.integers(start + 1, shape[dim]))
        return Op(kind, (src,), (dim, start, stop))
    # cat: with itself or another value of the same shape (other dims equal).
    dim = draw(st.integers(0, rank - 1))

    def fits(s: tuple[int, ...]) -> bool:
        return len(s) == rank and all(s[k] == shape[k] for k in range(rank) if k != dim)

    partners = [j for j, s in enumerate(shapes_so_far) if fits(s)]
    other = draw(st.sampled_from(partners))
    if shape[dim] + shapes_so_far[other][dim] > 8:
        return None
    return Op(kind, (src, other), (dim,))


def _broadcasts_to(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    if len(small) > len(big):
        return False
    return all(a in (1, b) for a, b in zip(small[::-1], big[::-1], strict=False))


def shape_of(op: Op, shapes_so_far: list[tuple[int, ...]]) -> tuple[int, ...]:
    metas = [torch.empty(s, device="meta") for s in shapes_so_far]
    const = torch.empty(op.params[1], device="meta") if op.kind == "const" else None
    return tuple(apply(op, metas, const).shape)


def _fits(shape: tuple[int, ...]) -> bool:
    return 1 <= len(shape) <= MAX_RANK and math.prod(shape) <= MAX_NUMEL


def _draw_step(
    draw: st.DrawFn,
    all_shapes: list[tuple[int, ...]],
    src: int | None = None,
    kinds: tuple[str, ...] = KINDS,
) -> Op | None:
    """One op (see :func:`_draw_op`) whose value fits the size bounds, its shape appended to
    ``all_shapes``; None (nothing appended) if the draw does not fit."""
    op = _draw_op(draw, all_shapes, src, kinds)
    if op is None:
        return None
    shape = shape_of(op, all_shapes)
    if not _fits(shape):
        return None
    all_shapes.append(shape)
    return op


def _draw_chain(draw: st.DrawFn, all_shapes: list[tuple[int, ...]], room: int) -> list[Op]:
    """Up to ``room`` steps: 2-6 layout ops (permute/view/transpose/squeeze/unsqueeze) one
    after another on the same value, each maybe followed by an elementwise op. Stock's scan
    leaves the region downstream of a node it moved for the next scan, so the propagation
    passes move such a chain's ops over several scans: the runs where the native planner models
    the re-trace between scans. Appends the new values' shapes to ``all_shapes``."""
    ops: list[Op] = []
    src = _draw_src(draw, len(all_shapes))
    for _ in range(draw(st.integers(2, 6))):
        between = draw(st.integers(0, 3)) != 0  # shrinks toward none
        for kinds in (CHAIN_LAYOUT, ELEMENTWISE) if between else (CHAIN_LAYOUT,):
            if len(ops) >= room:
                return ops
            op = _draw_step(draw, all_shapes, src, kinds)
            if op is None:
                continue
            ops.append(op)
            src = len(all_shapes) - 1
    return ops


@st.composite
def specs(draw: st.DrawFn, max_ops: int = 12) -> Spec:
    """A random :class:`Spec` with 1-2 inputs, 1-``max_ops`` steps and 1-3 outputs; about
    half of the steps draw a chain of layout ops (:func:`_draw_chain`) instead of one op."""
    inputs = tuple(tuple(s) for s in draw(st.lists(shapes, min_size=1, max_size=2)))
    all_shapes = list(inputs)
    ops: list[Op] = []
    n_ops = draw(st.integers(1, max_ops))
    attempts = 0
    while len(ops) < n_ops and attempts < 4 * max_ops:
        attempts += 1
        if draw(st.booleans()):  # shrinks toward single ops
            ops.extend(_draw_chain(draw, all_shapes, n_ops - len(ops)))
            continue
        op = _draw_step(draw, all_shapes)
        if op is not None:
            ops.append(op)
    if not ops:
        ops.append(Op("unary", (0,), ("relu",)))
        all_shapes.append(inputs[0])
    first = len(inputs)
    last = len(all_shapes) - 1
    extra = draw(st.lists(st.integers(first, last), max_size=2, unique=True))
    outputs = tuple(dict.fromkeys([last, *extra]))
    return Spec(inputs, tuple(ops), outputs)


# -- settings profiles ------------------------------------------------------------------------

settings.register_profile(
    "fuzz-ci",
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "fuzz-long",
    max_examples=2000,
    deadline=None,
    # Without the explain phase: once an example failed, hypothesis runs every later one (the
    # whole shrink) under its line tracer, sys.settrace before Python 3.12: 3.6x the CPU time
    # of an example here, and shrinking stopped as "very slow".
    phases=tuple(p for p in Phase if p is not Phase.explain),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


def fuzz_settings() -> settings:
    """``ARM_ACCEL_FUZZ=long`` selects the long-run profile; the default is the CI subset.
    ``ARM_ACCEL_FUZZ_EXAMPLES=N`` overrides the long profile's ``max_examples`` (shards of a
    complete profile)."""
    if os.environ.get("ARM_ACCEL_FUZZ", "").lower() != "long":
        return settings.get_profile("fuzz-ci")
    profile = settings.get_profile("fuzz-long")
    examples = os.environ.get("ARM_ACCEL_FUZZ_EXAMPLES")
    if not examples:
        return profile
    if not examples.isdigit() or int(examples) < 1:
        raise ValueError(f"ARM_ACCEL_FUZZ_EXAMPLES must be a positive integer, not {examples!r}")
    return settings(profile, max_examples=int(examples))


def _log(line: str) -> None:
    """Append a timestamped line to the file named by ``ARM_ACCEL_FUZZ_LOG``, if any."""
    path = os.environ.get("ARM_ACCEL_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def log_example(spec: Spec) -> None:
    """Append ``spec`` to the fuzz log (progress of long runs)."""
    _log(repr(spec))


def log_outcome(text: str) -> None:
    """Append an example's outcome worth a look (both lowerings raised) to the same log, on a
    line of its own that ``benches/fuzz_shard.py`` does not count as an example."""
    _log(f"  outcome: {text}")
