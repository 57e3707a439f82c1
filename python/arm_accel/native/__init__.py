"""The Python side of the native kernels: the columnar node table an fx graph is exported to
(:mod:`.table`), which the Rust extension ``arm_accel._native`` reads without copying."""
