"""The one installer of the declared table (:mod:`arm_accel.patches.table`): one lock, one
journal of every replacement made, one state per row.

A group installs when its torch gate admits the running torch, its check passes and every row
can install (each pin holds, the owner resolves, the attribute holds the object the row is
``bound`` to, the replacement imports); an ``independent`` group installs the rows that can.
Uninstalling puts each stock object back where ours is still in place, newest first.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from arm_accel.patches import class_swap, sources, table
from arm_accel.patches.model import ClassSwap, Group, Model, ModelState, Patch, Row, RowState

logger = logging.getLogger("arm_accel")

NOT_INSTALLED = "not installed"
INSTALLED = "installed"


@dataclass(frozen=True)
class _Applied:
    """One replacement made: ``owner.attribute`` was ``stock`` (``own``: in the owner's own
    ``__dict__``, else inherited) and is now ``ours``."""

    row: str
    owner: Any
    attribute: str
    stock: Any
    ours: Any
    own: bool


_lock = threading.RLock()
_journal: list[_Applied] = []
_originals: dict[str, Any] = {}
_states: dict[str, RowState] = {}


def _state(group: Group, row: Row, reason: str) -> RowState:
    return RowState(group.name, group.layer, row.name, row.target, reason == INSTALLED, reason)


def _record(row: str, owner: Any, attribute: str, ours: Any) -> None:
    own = attribute in vars(owner)
    stock = vars(owner)[attribute] if own else getattr(owner, attribute)
    setattr(owner, attribute, ours)
    _journal.append(_Applied(row, owner, attribute, stock, ours, own))
    _originals.setdefault(row, stock)


def _group_failure(group: Group) -> str | None:
    if group.torch and not sources.version_matches(sources.version("torch"), group.torch):
        tested = ", ".join(v if v.count(".") > 1 else f"{v}.x" for v in group.torch)
        return f"stock: modelled on torch {tested} (found {sources.version('torch')})"
    if group.check is not None:
        try:
            reason = sources.resolve(group.check)()
        except Exception as exc:  # a failing check keeps the group stock
            reason = f"{group.check} failed: {exc!r}"
        if reason is not None:
            return f"stock: {reason}"
    return None


def _row_failure(row: Row) -> str | None:
    """Why ``row`` cannot install here (None: it can)."""
    for pin in row.models:
        reason = sources.live_failure(pin)
        if reason is not None:
            return f"stock: {reason}"
    if isinstance(row, ClassSwap):
        if class_swap.resolve_stock(row.name) is None:
            return f"stock: no stock Arm pass named {row.name}"
        return None
    try:
        owner = sources.resolve(row.owner)
        current = getattr(owner, row.attribute)
        if row.bound is not None and current is not sources.resolve(row.bound):
            return f"stock: {row.target} is not {row.bound}"
        sources.resolve(row.replacement)
    except (LookupError, AttributeError) as exc:
        return f"stock: {exc}"
    return None


def _apply_patch(row: Patch) -> None:
    owner = sources.resolve(row.owner)
    replacement = sources.resolve(row.replacement)
    ours = replacement(getattr(owner, row.attribute)) if row.wraps else replacement
    _record(row.name, owner, row.attribute, ours)


def _apply_swap(group: Group, row: ClassSwap) -> str:
    stock = class_swap.resolve_stock(row.name)
    assert stock is not None  # checked by _row_failure

    def record(owner: Any, attribute: str, _stock: type, new: type) -> None:
        _record(row.name, owner, attribute, new)

    def complete() -> None:
        with _lock:
            if _states.get(row.name, _state(group, row, "")).reason != "pending":
                return  # uninstalled meanwhile
            _states[row.name] = _state(group, row, _swap_outcome(row, stock, record))

    if class_swap.defer(row.replacement, complete):
        return "pending"
    return _swap_outcome(row, stock, record)


def _swap_outcome(row: ClassSwap, stock: type, record: class_swap.Record) -> str:
    try:
        class_swap.swap(row.name, row.replacement, stock, record)
    except Exception as exc:
        logger.warning("arm_accel: %s stays stock: %r", row.name, exc)
        return f"stock: {exc!r}"
    return INSTALLED


def _install_group(group: Group) -> None:
    reason = _group_failure(group)
    failures = {row.name: _row_failure(row) for row in group.rows} if reason is None else {}
    blocked = reason is None and not group.independent and any(failures.values())
    for row in group.rows:
        if reason is not None:
            outcome = reason
        elif failures[row.name] is not None:
            outcome = failures[row.name]  # type: ignore[assignment]
        elif blocked:
            first = next(name for name, why in failures.items() if why)
            outcome = f"stock: {first} cannot install"
        elif isinstance(row, ClassSwap):
            outcome = _apply_swap(group, row)
        else:
            try:
                _apply_patch(row)
            except Exception as exc:  # the row stays stock; the rest of the group too
                _undo(lambda a: a.row in {r.name for r in group.rows})
                _mark(group, f"stock: installing {row.name} failed: {exc!r}")
                logger.warning("arm_accel: %s stays stock: %r", group.name, exc)
                return
            outcome = INSTALLED
        _states[row.name] = _state(group, row, outcome)


def _mark(group: Group, reason: str) -> None:
    for row in group.rows:
        _states[row.name] = _state(group, row, reason)


def _undo(selected: Any) -> None:
    """Put back every replacement ``selected`` accepts, newest first, where ours is still in
    place."""
    kept: list[_Applied] = []
    for applied in reversed(_journal):
        if not selected(applied):
            kept.append(applied)
            continue
        if vars(applied.owner).get(applied.attribute) is applied.ours:
            if applied.own:
                setattr(applied.owner, applied.attribute, applied.stock)
            else:
                delattr(applied.owner, applied.attribute)
        _originals.pop(applied.row, None)
    _journal[:] = reversed(kept)


def _selected_groups(names: tuple[str, ...] | None) -> list[Group]:
    if names is None:
        return list(table.GROUPS)
    unknown = set(names) - {g.name for g in table.GROUPS}
    if unknown:
        raise KeyError(f"no patch group named {sorted(unknown)}")
    return [g for g in table.GROUPS if g.name in names]


def install(groups: tuple[str, ...] | None = None) -> None:
    """Install the table's groups (all, or those named) that are not installed yet."""
    with _lock:
        for group in _selected_groups(groups):
            if any(_states.get(r.name, None) is not None for r in group.rows):
                continue
            _install_group(group)


def uninstall(groups: tuple[str, ...] | None = None) -> None:
    """Put the stock objects of the groups (all, or those named) back."""
    with _lock:
        selected = _selected_groups(groups)
        rows = {r.name for g in selected for r in g.rows}
        _undo(lambda a: a.row in rows)
        for name in rows:
            _states.pop(name, None)
        if groups is None:
            class_swap.cancel_pending()


def original(row: str) -> Any:
    """The stock object ``row`` replaced (KeyError when the row is not installed)."""
    return _originals[row]


def installed(group: str) -> bool:
    """Every row of ``group`` is installed."""
    rows = next(g.rows for g in table.GROUPS if g.name == group)
    return all((s := _states.get(r.name)) is not None and s.installed for r in rows)


def states() -> tuple[RowState, ...]:
    """Every row of the table, in table order, with what the installer did."""
    with _lock:
        return tuple(
            _states.get(r.name) or _state(g, r, NOT_INSTALLED) for g in table.GROUPS for r in g.rows
        )


_model_failures: dict[str, tuple[Model, str | None]] = {}


def _model_failure(name: str) -> str | None:
    """Why the model ``name`` does not hold here (None: it holds); read once per table entry."""
    model = table.model(name)
    cached = _model_failures.get(name)
    if cached is None or cached[0] is not model:
        reason = next((r for p in model.pins if (r := sources.live_failure(p)) is not None), None)
        cached = _model_failures[name] = (model, reason)
    return cached[1]


def holds(model: str) -> bool:
    """The stock behaviour ``model`` names is the one modelled, in this process."""
    return _model_failure(model) is None


def model_states() -> tuple[ModelState, ...]:
    return tuple(
        ModelState(m.name, (r := _model_failure(m.name)) is None, r or "holds")
        for m in table.MODELS
    )


__all__ = [
    "INSTALLED",
    "NOT_INSTALLED",
    "holds",
    "install",
    "installed",
    "model_states",
    "original",
    "states",
    "uninstall",
]
