"""The quantization flow's hot paths (``prepare_pt2e`` / calibration / ``convert_pt2e`` with
the Arm quantizers), exact: each part replaces one method, pinned to the sources it models,
and runs stock's code with acceleration off.

- :mod:`~arm_accel.quantize.histogram`: ``HistogramObserver._non_linear_param_search`` with
  its bound walk and its candidates' error terms in Rust (``convert_pt2e``'s main cost);
- :mod:`~arm_accel.quantize.observe`: ``HistogramObserver.forward``'s ``histc`` (a batch inside
  the observed range whole) and ``_upscale_histogram``'s bucketing in Rust (calibration);
- :mod:`~arm_accel.quantize.per_channel`: ``PerChannelMinMaxObserver._forward``'s per-channel
  extremes in Rust (calibration: the weights' observers, on every batch);
- :mod:`~arm_accel.quantize.convert`: ``convert_pt2e``'s recompiles deferred to first use;
- :mod:`~arm_accel.quantize.fold`: ``convert_pt2e``'s constant fold without the dequantized
  weights it computes and discards;
- :mod:`~arm_accel.quantize.affine`: the Arm passes' per-tensor ``QuantArgs`` quantization
  and dequantization of constant tensors in Rust;
- :mod:`~arm_accel.quantize.annotation`: ``prepare_pt2e``'s Arm annotation pipeline inside the
  re-trace engine's pipeline scope (deferred recompiles, the codegen memo).

The methods are replaced by the patch table's ``quantize.*`` groups
(:mod:`arm_accel.patches.table`), installed by the activation.
"""
