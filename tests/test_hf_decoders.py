"""Small decoder LLMs: a 2-layer ``transformers`` Qwen2 (random weights, INT) lowered
stock and accelerated from one exported program. Compares the graph after every pass of the Arm
pipeline (``pipeline_diff.assert_lowerings_identical``: nodes, meta, users order) and the TOSA
bytes, and checks in ``arm_accel.stats()`` that the re-trace engine ran in place (a lowering
where it always fell back would compare stock with stock)."""

from __future__ import annotations

import sys

import executorch.backends.arm._passes  # noqa: F401 - triggers the activation hook
import pytest
from arm_accel.control import counters
from arm_accel.tools import models

MODEL = "qwen2-2l"


def test_qwen2_every_pass_identical_to_stock() -> None:
    """qwen2-2l INT: every pass's graph and the TOSA bytes equal stock's, and at least one
    re-trace ran in place (the engine declines a few here: graphs with no fake input)."""
    pytest.importorskip("transformers", reason="the transformers zoo models need transformers")
    from pipeline_diff import assert_lowerings_identical, lower

    net, inputs, mode = models.build(MODEL)
    assert mode == "INT"
    exported = models.export_for_arm(net, inputs, mode)
    stock = lower(exported, mode, accelerated=False)
    counters.reset()
    accelerated = lower(exported, mode, accelerated=True)
    assert_lowerings_identical(stock, accelerated)
    assert accelerated.tosa, "nothing was delegated to TOSA"
    records = {k: v for k, v in counters.snapshot().items() if k.endswith(".retrace")}
    in_place = sum(v.accelerated for v in records.values())
    assert in_place > 0, records


def test_without_transformers_build_raises_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """With transformers not importable, the zoo still lists the models and building one raises
    an ImportError that names transformers and how to install it."""
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes the import fail
    assert models.ZOO[MODEL].mode == "INT" and models.ZOO[f"{MODEL}-fp"].mode == "FP"
    with pytest.raises(ImportError, match="pip install transformers"):
        models.build(MODEL)
