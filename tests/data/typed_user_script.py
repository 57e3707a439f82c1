"""A user script calling every public function of arm_accel, for ``mypy --strict``
(tests/test_public_api.py): it must type-check with no error and no ``Any`` leaking in."""

import json

import arm_accel
from arm_accel import PassStats, Stats, Status

arm_accel.enable()
arm_accel.enable(force=True)
arm_accel.disable()
with arm_accel.disabled():
    off: bool = arm_accel.is_enabled()
with arm_accel.enabled():
    on: bool = arm_accel.is_enabled()
arm_accel.reset_stats()

stats: Stats = arm_accel.stats()
for name, entry in stats.items():
    record: PassStats = entry
    stock_runs: int = record.calls - record.accelerated
    reasons: dict[str, int] = dict(record.fallbacks)
    total: int = record.fallback_count + record.retraces + record.scans_native
    seconds: float = record.seconds
    print(name, stock_runs, reasons, total, seconds, dict(record.scans_declined))
one: PassStats | None = stats.get("PropagateViewCopyPermuteDownPass")

status: Status = arm_accel.status()
active: bool = status.enabled and status.activated and status.hook_installed
why: str = status.reason
swapped: list[str] = sorted(status.swapped)
found: str | None = status.versions.get("torch")
engines: tuple[str, str] = (status.retrace_engine, status.edge_decompositions)
version: str = arm_accel.__version__
print(json.dumps({"stats": stats.as_dict(), "status": status.as_dict()}), off, on, one, active)
print(why, swapped, found, engines, version, dict(status.skipped))
