"""The quantization flow's hot paths (``prepare_pt2e`` / calibration / ``convert_pt2e`` with
the Arm quantizers), exact: each part replaces one torchao method, pinned to the source it
models, and runs stock's code with acceleration off.

- :mod:`~arm_accel.quantize.histogram`: ``HistogramObserver._non_linear_param_search`` with
  its bound walk and its candidates' error terms in Rust (``convert_pt2e``'s main cost);
- :mod:`~arm_accel.quantize.observe`: ``HistogramObserver.forward``'s same-range path and
  ``_upscale_histogram``'s bucketing in Rust (calibration);
- :mod:`~arm_accel.quantize.annotation`: ``prepare_pt2e``'s Arm annotation pipeline inside the
  re-trace engine's pipeline scope (deferred recompiles, the codegen memo).
"""

from __future__ import annotations

from arm_accel.quantize import annotation, histogram, observe


def install_safely() -> str:
    """Install every part (for the activation): never raises; what happened, for status
    (``"installed"``, or the parts that stay stock and why)."""
    stock = []
    parts = (
        ("search", histogram.install),
        ("observe", observe.install),
        ("annotation", annotation.install),
    )
    for name, install in parts:
        try:
            install()
        except Exception as exc:
            stock.append(f"{name}: {exc!r}")
    return "installed" if not stock else "stock: " + "; ".join(stock)


def uninstall() -> None:
    histogram.uninstall()
    observe.uninstall()
    annotation.uninstall()


__all__ = ["annotation", "histogram", "install_safely", "observe", "uninstall"]
