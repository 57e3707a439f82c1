"""``_native.ViewMap`` / ``_native.PermuteMap`` (rust/propagate/dims.rs) against executorch's
dim_maps.

Hypothesis draws shapes of rank 1-6 (size-1 and zero dims included), view targets that are often
valid refactorings of the source (with -1, singletons, and sometimes nonsense), and queries with
out-of-range and negative dims. Every query must give the same outcome as dim_maps: the same
value, ``None`` where it returns ``None``, and a ValueError where dim_maps raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from arm_accel import _native
from executorch.backends.transforms import dim_maps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.native import needs_testing

pytestmark = needs_testing

RAISES = "raises"

DIM = st.one_of(st.just(1), st.integers(1, 12), st.sampled_from([0, 16, 30, 64]))
SHAPE = st.lists(DIM, min_size=1, max_size=6)
SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(fn: Callable[[], Any], ours: bool) -> Any:
    try:
        value = fn()
    except ValueError:
        return RAISES
    except (AssertionError, ZeroDivisionError):
        if ours:
            raise  # the binding may only raise ValueError
        return RAISES
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _same(stock: Callable[[], Any], ours: Callable[[], Any]) -> Any:
    expected = _outcome(stock, ours=False)
    got = _outcome(ours, ours=True)
    assert got == expected
    return expected


def _same_query(stock: Any, ours: Any, method: str, *args: Any) -> Any:
    """``method(*args)`` on both maps gives the same outcome."""
    return _same(lambda: getattr(stock, method)(*args), lambda: getattr(ours, method)(*args))


@st.composite
def _refactor(draw: st.DrawFn, source: list[int]) -> list[int]:
    """A target shape: a regrouping of the source's prime factors, singletons inserted, maybe a
    -1; or, sometimes, an unrelated shape."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.lists(st.integers(-2, 12), min_size=1, max_size=6))
    primes: list[int] = []
    for dim in source:
        rest, p = dim, 2
        while rest > 1 and p * p <= rest:
            while rest % p == 0:
                primes.append(p)
                rest //= p
            p += 1
        if rest > 1:
            primes.append(rest)
    if kind <= 3:
        primes = draw(st.permutations(primes))
    rank = draw(st.integers(1, 6))
    cuts = sorted(draw(st.lists(st.integers(0, len(primes)), min_size=rank - 1, max_size=rank - 1)))
    bounds = [0, *cuts, len(primes)]
    target = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        prod = 1
        for p in primes[a:b]:
            prod *= p
        target.append(prod)
    if 0 in source and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = 0
    if draw(st.integers(0, 3)) == 0:
        target[draw(st.integers(0, len(target) - 1))] = -1
    if draw(st.integers(0, 15)) == 0:
        target = [-1, *target, -1]
    return target


@st.composite
def _view_case(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    source = draw(SHAPE)
    return source, draw(_refactor(source))


def _dims(rank: int) -> st.SearchStrategy[Any]:
    one = st.integers(-rank - 1, rank)
    return st.one_of(one, st.lists(one, min_size=0, max_size=4))


def _perm(rank: int) -> st.SearchStrategy[list[int]]:
    valid = st.permutations(list(range(rank))).map(list)

    def negate_some(p: list[int]) -> st.SearchStrategy[list[int]]:
        return st.lists(st.booleans(), min_size=len(p), max_size=len(p)).map(
            lambda flips: [d - rank if f else d for d, f in zip(p, flips, strict=True)]
        )

    return st.one_of(
        valid, valid.flatmap(negate_some), st.lists(st.integers(-rank, rank), max_size=rank + 1)
    )


def _maps(source: list[int], target: list[int]) -> tuple[Any, Any] | None:
    """Both maps, or None after checking that both constructors raise."""
    holder: dict[str, Any] = {}

    def stock() -> None:
        holder["stock"] = dim_maps.ViewMap.from_shapes(source, target)

    def ours() -> None:
        holder["ours"] = _native.ViewMap(source, target)

    if _same(stock, ours) == RAISES:
        return None
    return holder["stock"], holder["ours"]


@SETTINGS
@given(_view_case(), st.data())
def test_view_map_queries_match_dim_maps(
    case: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    maps = _maps(*case)
    if maps is None:
        return
    stock, ours = maps
    assert ours.is_valid_map == stock.is_valid_map
    assert ours.target_shape == list(stock.target_shape)
    src_rank, tgt_rank = len(stock.source_shape), len(stock.target_shape)
    _same(stock.source_to_target_axes, ours.source_to_target_axes)
    for _ in range(3):
        d = data.draw(_dims(src_rank))
        _same_query(stock, ours, "map_dim", d)
        _same_query(stock, ours, "map_source_dims_to_target_axes", d)
        t = data.draw(_dims(tgt_rank))
        _same_query(stock, ours, "map_dim_inverse", t)
        _same_query(stock, ours, "map_reduction_before_view", t)
        p = data.draw(_perm(src_rank))
        _same_query(stock, ours, "map_permutation", p)
        q = data.draw(_perm(tgt_rank))
        _same_query(stock, ours, "map_permutation_inverse", q)


@st.composite
def _new_source(draw: st.DrawFn, source: list[int]) -> list[int]:
    """The view's input after a move: some dims changed, sometimes a different rank."""
    if draw(st.integers(0, 9)) == 0:
        return draw(SHAPE)
    return [draw(st.one_of(st.just(d), DIM)) for d in source]


@SETTINGS
@given(_view_case(), st.data())
def test_view_map_remaps_match_dim_maps(
    case: tuple[list[int], list[int]], data: st.DataObject
) -> None:
    maps = _maps(*case)
    if maps is None:
        return
    stock, ours = maps
    source = case[0]
    for _ in range(3):
        new = data.draw(_new_source(source))
        _same_query(stock, ours, "remap_target_shape", new)
        d = data.draw(_dims(len(source)))
        _same_query(stock, ours, "map_reduction_after_view", new, d)
        dim = data.draw(st.integers(-len(source) - 1, len(source)))
        start = data.draw(st.integers(-3, 8))
        end = start + data.draw(st.sampled_from([1, 1, 1, 2, 0]))
        step = data.draw(st.sampled_from([1, 1, 2]))
        producer = list(source)
        if -len(source) <= dim < len(source):
            producer[dim] = data.draw(DIM)
        _same_query(stock, ours, "remap_unit_slice", producer, dim, start, end, step)


@st.composite
def _unit_slice_case(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    """A view that drops the singleton a unit slice leaves (the case ``remap_unit_slice`` is for),
    neighbours sometimes merged or split."""
    rest = draw(st.lists(DIM, min_size=1, max_size=5))
    at = draw(st.one_of(st.integers(1, max(1, len(rest) - 1)), st.integers(0, len(rest))))
    source = [*rest[:at], 1, *rest[at:]]
    target = list(rest)
    if len(target) > 1 and draw(st.booleans()):
        i = draw(st.integers(0, len(target) - 2))
        target[i : i + 2] = [target[i] * target[i + 1]]
    split = [(i, p) for i, d in enumerate(target) for p in (2, 3) if d > p and d % p == 0]
    if split and draw(st.booleans()):
        i, p = draw(st.sampled_from(split))
        target[i : i + 1] = [p, target[i] // p]
    return source, target, at


@SETTINGS
@given(_unit_slice_case(), st.data())
def test_unit_slice_remap_matches_dim_maps(
    case: tuple[list[int], list[int], int], data: st.DataObject
) -> None:
    source, target, at = case
    maps = _maps(source, target)
    if maps is None:
        return
    stock, ours = maps
    producer = list(source)
    producer[at] = data.draw(DIM)
    start = data.draw(st.integers(-2, 6))
    end = start + data.draw(st.sampled_from([1, 1, 1, 2]))
    dim = at - len(source) if data.draw(st.booleans()) else at
    _same_query(stock, ours, "remap_unit_slice", producer, dim, start, end)


@SETTINGS
@given(st.integers(1, 6).flatmap(lambda r: st.tuples(_perm(r), _dims(r))))
def test_permute_map_matches_dim_maps(case: tuple[list[int], Any]) -> None:
    perm, dims = case
    holder: dict[str, Any] = {}

    def stock() -> None:
        # PermuteMap's constructor reads a node; build it the way it does from the dims.
        normalized = dim_maps._normalize_permutation(perm, len(perm))
        if normalized is None:
            raise ValueError(f"Invalid permute dims: {perm}")
        holder["stock"] = pm = dim_maps.PermuteMap.__new__(dim_maps.PermuteMap)
        pm.permute_dims = normalized

    def ours() -> None:
        holder["ours"] = _native.PermuteMap(perm)

    if _same(stock, ours) == RAISES:
        return
    s, o = holder["stock"], holder["ours"]
    assert o.permute_dims == s.permute_dims
    _same_query(s, o, "map_dims", dims)
    _same_query(s, o, "map_dims_inverse", dims)


def test_docstring_example() -> None:
    """dim_maps' own worked example, through the binding."""
    m = _native.ViewMap([4, 3, 10], [2, 2, 1, 5, 3, 2])
    assert m.map_dim(0) == [0, 1]
    assert m.map_dim([1, 2]) == [3, 4, 5]
    assert m.map_permutation([1, 2, 0]) is not None
    assert m.map_permutation([2, 0, 1]) is None


@pytest.mark.parametrize(
    "build",
    [
        lambda: _native.ViewMap("ab", [1]),
        lambda: _native.ViewMap([1, 2], None),
        lambda: _native.ViewMap([1.5], [1]),
        lambda: _native.ViewMap([2**70], [1]),
        lambda: _native.ViewMap([2, 3], [6]).map_dim("x"),
        lambda: _native.ViewMap([2, 3], [6]).remap_unit_slice([2, 3], 0, None, 1),
        lambda: _native.PermuteMap([0, 0]),
        lambda: _native.PermuteMap(object()),
        lambda: _native.ViewMap([2**62, 4], [2**62, 4]).remap_target_shape([2**62, 4]),
    ],
)
def test_malformed_input_raises_value_error(build: Callable[[], Any]) -> None:
    with pytest.raises(ValueError):
        build()
