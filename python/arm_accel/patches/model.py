"""The declared patch table's types: pins on stock sources, patch rows, groups, models.

Import-light (no torch, no executorch): the table is read by ``arm-accel info`` and by the pin
check against another installation without importing either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Pin:
    """A stock behaviour a patch models. A Python function, class or module (``ref`` is
    ``"module:qualname"`` or ``"module"``) is pinned to the digests of the sources read, by
    version; a C++ kernel (``ref`` without a module to read) to the torch versions read."""

    ref: str
    #: version read (``"2.13.0"``, executorch's ``"1.5.1"``) -> ``sources.digest`` of its source
    digests: Mapping[str, str] = field(default_factory=dict)
    #: for a C++ behaviour: the torch versions (``"2.13"`` prefixes accepted) it was read on
    torch: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "digests", _frozen(self.digests))
        if not self.digests and not self.torch:
            raise ValueError(f"pin {self.ref}: no digest and no torch version")

    @property
    def module(self) -> str:
        return self.ref.partition(":")[0]

    @property
    def qualname(self) -> str:
        return self.ref.partition(":")[2]

    @property
    def distribution(self) -> str:
        """The distribution whose version the digests are keyed by."""
        return self.module.partition(".")[0]


@dataclass(frozen=True)
class Patch:
    """One replaced attribute: ``owner.attribute`` (owner ``"module"`` or ``"module:Class"``)
    becomes ``replacement`` (``"module:name"``; with ``wraps``, a factory called with the stock
    attribute that returns the replacement)."""

    name: str
    owner: str
    attribute: str
    replacement: str
    why: str
    wraps: bool = False
    #: the stock sources the replacement models; any that does not hold keeps the row stock
    models: tuple[Pin, ...] = ()
    #: ``"module:name"`` of the object the attribute must hold when installed (a function bound
    #: by name elsewhere, a stock module attribute), else the row stays stock
    bound: str | None = None

    @property
    def target(self) -> str:
        return f"{self.owner}.{self.attribute}"


@dataclass(frozen=True)
class ClassSwap:
    """An accelerated pass class put wherever executorch looks the stock class up (by
    identity): the stock pass's package namespace, its module and every loaded ``executorch``
    module holding it. ``name`` is the stock class name."""

    name: str
    replacement: str
    why: str
    models: tuple[Pin, ...] = ()

    @property
    def target(self) -> str:
        return f"executorch.backends.arm._passes:{self.name}"


Row = Patch | ClassSwap


@dataclass(frozen=True)
class Group:
    """Rows installed together (all or none, unless ``independent``), in order."""

    name: str
    layer: str
    why: str
    rows: tuple[Row, ...]
    #: torch versions (``"2.13"`` prefixes accepted) the group's unpinned modelling of torch
    #: internals was shown identical on; empty: not tied to torch's internals
    torch: tuple[str, ...] = ()
    #: a row that cannot install leaves the others installed (else the group stays stock)
    independent: bool = False
    #: ``"module:function"`` returning why the group must stay stock here, or None
    check: str | None = None


@dataclass(frozen=True)
class Model:
    """A modelled stock behaviour the code consults at run time (no attribute replaced): where
    a pin does not hold, that behaviour takes stock's path."""

    name: str
    why: str
    pins: tuple[Pin, ...]


@dataclass(frozen=True)
class RowState:
    """What the installer did with one row (``arm-accel info``, ``status().patches``)."""

    group: str
    layer: str
    row: str
    target: str
    installed: bool
    #: ``"installed"`` or why the row is stock
    reason: str


@dataclass(frozen=True)
class ModelState:
    name: str
    holds: bool
    reason: str


__all__ = ["ClassSwap", "Group", "Model", "ModelState", "Patch", "Pin", "Row", "RowState"]
