"""The quantization flow's hot paths (``prepare_pt2e`` / calibration / ``convert_pt2e`` with
the Arm quantizers), exact: each part replaces one torch/torchao attribute, pinned to the
source it models, and runs stock's code with acceleration off.

- :mod:`~arm_accel.quantize.histogram`: ``HistogramObserver._non_linear_param_search`` with
  its bound walk in Rust (``convert_pt2e``'s main cost).
"""

from __future__ import annotations

from arm_accel.quantize import histogram


def install_safely() -> str:
    """Install every part (for the activation): never raises; what happened, for status."""
    return histogram.install_safely()


def uninstall() -> None:
    histogram.uninstall()


__all__ = ["histogram", "install_safely", "uninstall"]
