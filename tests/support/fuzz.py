"""The fuzz tests' example budget: a small derandomized run in CI, a long random one with
``ARM_ACCEL_FUZZ=long`` (``ARM_ACCEL_FUZZ_EXAMPLES=N`` sets its size)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: ``ARM_ACCEL_FUZZ=long``: the long run.
LONG = os.environ.get("ARM_ACCEL_FUZZ", "").lower() == "long"


def examples(ci: int, long: int) -> settings:
    """``ci`` derandomized examples, or ``long`` random ones in the long run (unless
    ``ARM_ACCEL_FUZZ_EXAMPLES`` says how many); no deadline, no health checks."""
    return settings(
        max_examples=int(os.environ.get("ARM_ACCEL_FUZZ_EXAMPLES", str(long))) if LONG else ci,
        derandomize=not LONG,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
