"""arm-accel: Rust-accelerated view/permute passes for ExecuTorch's Arm backend."""

from arm_accel._native import __version__

__all__ = ["__version__"]
