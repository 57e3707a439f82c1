"""pytest plugin: run executorch's own test modules with our propagation passes swapped in.

Loaded with ``-p upstream_propagate_plugin`` (``tests`` on ``PYTHONPATH``) before the upstream
modules are imported, so their ``from ... import PropagateViewCopyPermute*Pass`` pick up ours.
At the end it prints the ``arm_accel.stats`` lines, so the caller can check our classes ran.
"""

from __future__ import annotations

import json


def pytest_configure(config: object) -> None:
    import executorch.backends.arm._passes as arm_passes
    import executorch.backends.arm._passes.arm_pass_manager as apm
    import executorch.backends.arm._passes.propagate_view_copy_permute_pass as arm_mod
    import executorch.backends.transforms.propagate_view_copy_permute_pass as generic
    from arm_accel import switch
    from arm_accel.passes import propagate

    # Run with ARM_ACCEL=0 so the activation hook swaps nothing else in; turn the switch on
    # for our two classes.
    switch.set_enabled(True)

    for name in ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass"):
        ours = getattr(propagate, name)
        for module in (arm_passes, apm, arm_mod):
            setattr(module, name, ours)
        setattr(generic, name, propagate.accelerate(getattr(generic, name)))


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    from arm_accel import stats

    print("\nARM_ACCEL_STATS " + json.dumps(stats.snapshot()))
