"""The typed records the public API returns: :func:`arm_accel.stats` and :func:`arm_accel.status`.

Frozen snapshots, each with ``as_dict()`` (plain JSON-ready values, what ``arm-accel info --json``
and ``arm-accel profile --json`` print). Standard library only, so that type-checking a user
script against ``arm_accel`` reads nothing heavier than this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from arm_accel.patches.model import ModelState, RowState


@dataclass(frozen=True)
class PassStats:
    """What one ``stats()`` entry recorded: an accelerated pass under its stock class name, the
    re-trace engine under ``"<Pass>.retrace"``, the to_edge decompositions replay under
    ``"to_edge.run_decompositions"``."""

    calls: int = 0
    #: Calls that took the accelerated path (the rest ran stock).
    accelerated: int = 0
    #: Stock runs by reason: declines by design (a case not modelled) and failures alike.
    fallbacks: Mapping[str, int] = field(default_factory=dict)
    retraces: int = 0
    seconds: float = 0.0
    #: Propagation scans the native planner decided, and the ones it declined, by reason.
    scans_native: int = 0
    scans_declined: Mapping[str, int] = field(default_factory=dict)
    #: Runs of natively planned scans, and the values the between-scan model mispredicted
    #: (each such run falls back; should stay 0).
    scan_runs: int = 0
    shape_mismatches: int = 0

    @property
    def fallback_count(self) -> int:
        """Stock runs over every reason."""
        return sum(self.fallbacks.values())

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, eq=False)  # eq from Mapping: equal to any mapping with the same items
class Stats(Mapping[str, PassStats]):
    """``arm_accel.stats()``: a read-only mapping of entry name to :class:`PassStats`, in name
    order."""

    passes: Mapping[str, PassStats] = field(default_factory=dict)

    def __getitem__(self, name: str) -> PassStats:
        return self.passes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def as_dict(self) -> dict[str, dict[str, object]]:
        return {name: s.as_dict() for name, s in self.passes.items()}


@dataclass(frozen=True)
class Status:
    """``arm_accel.status()``: what the activation did and why."""

    #: The switch in this thread (``ARM_ACCEL``, ``enable()``/``disable()``, ``with disabled():``).
    enabled: bool
    #: The start-up import hook (``arm_accel_hook.pth``) is in ``sys.meta_path``.
    hook_installed: bool
    #: The swap ran (executorch's Arm passes were imported and the versions are supported).
    activated: bool
    reason: str
    #: Stock pass name -> ``"module:Class"`` installed in its place.
    swapped: Mapping[str, str]
    #: Stock pass name -> why it stays stock.
    skipped: Mapping[str, str]
    #: Distribution -> version found (None: not installed).
    versions: Mapping[str, str | None]
    #: ``"installed"``, ``"not installed"`` or ``"stock: <why>"``.
    retrace_engine: str
    edge_decompositions: str
    #: Every row of the patch table (:mod:`arm_accel.patches.table`): installed, or why stock.
    patches: tuple[RowState, ...] = ()
    #: Every stock behaviour the code models at run time: whether its pins hold here.
    models: tuple[ModelState, ...] = ()

    def as_dict(self) -> dict[str, object]:
        record = dataclasses.asdict(self)
        record["patches"] = list(record["patches"])
        record["models"] = list(record["models"])
        return record
