"""Accelerated replacements of ExecuTorch Arm passes: the node table and Rust plans, applied
with stock's own edit methods. Each is a ``ClassSwap`` row of the patch table's ``passes`` group
(:mod:`arm_accel.patches.table`); see ``passes/base.py`` for the ``AcceleratedPass`` mixin
(switch, stats and safe fallback). Import-light: the classes load when the table installs.
"""
