"""Peak memory of a whole lowering, stock vs accelerated, side by side.

    python benches/lowering_memory.py [--models llama4,dscnnkws]

Each side lowers the zoo model in a fresh subprocess (``ARM_ACCEL=0`` for stock): it builds and
exports the model, resets the RSS high-water mark (``/proc/self/clear_refs``), runs
``to_edge_transform_and_lower`` once and reports ``VmHWM`` (the process's peak during the
lowering) and the peak minus the RSS before the call. Both sides print a digest of their TOSA
bytes, so a row also shows that the two lowerings produced the same output. Both run with
``PYTHONHASHSEED=0``: stock's own output varies from process to process with the string hash
seed (qwen2-2l: two stock processes, two TOSA digests; with a fixed seed, one). The question it
answers: does the hook's state (fake memo, kept values, provenance records) raise the peak a
model needs, e.g. for the upstream full-size LLM tests that need most of a 24 GiB machine?
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from memory import PEAK_HELPERS, run_child  # benches/ is sys.path[0] when run as a script

CHILD = (
    PEAK_HELPERS
    + r"""
import hashlib, json, sys
from arm_accel.tools import models

model, inputs, mode = models.build(sys.argv[1])
exported = models.export_for_arm(model, inputs, mode)
reset_peak()
before = status("VmRSS:")
edge = models.lower(exported, mode)
peak = status("VmHWM:")
digest = hashlib.sha256(b"".join(models.tosa_bytes(edge))).hexdigest()[:16]
print(json.dumps({"peak": peak, "before": before, "tosa": digest}))
"""
)


def side(model: str, accelerated: bool) -> dict[str, Any]:
    env = dict(os.environ, ARM_ACCEL="1" if accelerated else "0", PYTHONHASHSEED="0")
    return run_child(CHILD, model, env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama4,dscnnkws")
    args = ap.parse_args()
    mib = 1 << 20
    print("model | stock peak MiB (lowering's own) | accelerated peak MiB (lowering's own) | "
          "ratio of the lowering's own | TOSA equal")  # fmt: skip
    for name in args.models.split(","):
        s, a = side(name, False), side(name, True)
        own_s, own_a = s["peak"] - s["before"], a["peak"] - a["before"]
        print(
            f"{name} | {s['peak'] / mib:.0f} ({own_s / mib:.0f}) | "
            f"{a['peak'] / mib:.0f} ({own_a / mib:.0f}) | "
            f"{own_a / max(own_s, 1):.2f}x | {s['tosa'] == a['tosa']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
