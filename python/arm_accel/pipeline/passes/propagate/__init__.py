"""``PropagateViewCopyPermute{Down,Up}Pass`` accelerated: the pass (``accelerated.py``), the
native scan plans and their application with stock's edits (``scan_plan.py``), and the virtual
re-trace between scans (``retrace.py``)."""

from arm_accel.pipeline.passes.propagate.accelerated import (
    PropagateViewCopyPermuteDownPass,
    PropagateViewCopyPermuteUpPass,
    accelerate,
)

__all__ = ["PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass", "accelerate"]
