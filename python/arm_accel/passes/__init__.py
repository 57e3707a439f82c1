"""Accelerated replacements of ExecuTorch Arm passes.

``REGISTRY`` maps a stock Arm pass class name (as exported by ``executorch.backends.arm._passes``)
to ``"arm_accel.passes.<module>:<Class>"``. The activation hook (``arm_accel.activation``) swaps
every listed class in wherever executorch looks it up. Keep this module import-light: the hook
imports it, and the listed modules only when it activates. See ``passes/base.py`` for the
``AcceleratedPass`` mixin (switch, stats and safe fallback).
"""

REGISTRY: dict[str, str] = {}

# Issue 3: chain collection, duplicate-user fusion, permute removal, identical-input fusion.
REGISTRY["CanonicalizeViewCopyPermutePass"] = (
    "arm_accel.passes.canonicalize:CanonicalizeViewCopyPermutePass"
)
REGISTRY["FuseDuplicateUsersPass"] = "arm_accel.passes.fuse_duplicate_users:FuseDuplicateUsersPass"
REGISTRY["RemovePermutesAroundElementwiseTosaOps"] = (
    "arm_accel.passes.remove_permutes_around_elementwise:RemovePermutesAroundElementwiseTosaOps"
)
REGISTRY["FuseIdenticalInputTransformsPass"] = (
    "arm_accel.passes.fuse_identical_input_transforms:FuseIdenticalInputTransformsPass"
)

# Issue 4: view/permute propagation with virtual re-traces between scans.
REGISTRY["PropagateViewCopyPermuteDownPass"] = (
    "arm_accel.passes.propagate.accelerated:PropagateViewCopyPermuteDownPass"
)
REGISTRY["PropagateViewCopyPermuteUpPass"] = (
    "arm_accel.passes.propagate.accelerated:PropagateViewCopyPermuteUpPass"
)
