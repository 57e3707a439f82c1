"""Misuses of arm_accel's public API that ``mypy --strict`` must reject (tests/test_public_api.py):
proof that the types are really read, not ``Any``. Each line below is one expected error."""

import arm_accel

as_text: str = arm_accel.stats()  # line 6: Stats is not str
calls: str = arm_accel.stats()["X"].calls  # line 7: int is not str
activated: int = arm_accel.status().reason  # line 8: str is not int
arm_accel.enable(3)  # line 9: force is a bool
arm_accel.statz()  # line 10: no such function
