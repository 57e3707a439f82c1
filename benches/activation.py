"""What arm-accel changes in a script's imports, each run in a fresh interpreter, the two sides
alternating; prints each side's runs, medians and the difference.

- ``activation`` (default): the import of ``executorch.backends.arm._passes`` (where the hook
  activates and installs the patch table) after ``torch`` and ``executorch.exir``, with
  ``ARM_ACCEL=0`` and ``=1``.
- The others time a lowering script's imports (torch, the Arm quantizer and partitioner,
  ``executorch.exir``, torchao's pt2e):
  - ``yaml``: ruamel.yaml's C parser hidden, as without arm-accel's ``ruamel.yaml.clib``
    dependency, and available (executorch's import parses its edge dialect's YAML with it);
  - ``collector``: the imports outside and inside the collector's scope
    (``bootstrap/imports.py``; outside: the ``.pth`` finder told not to install it);
  - ``script``: as before arm-accel is installed (``ARM_ACCEL=0``, the pure parser) and with
    it (both of the above, and the activation).

    python benches/activation.py [activation|yaml|collector|script] [--reps 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ACTIVATION = """
import json, time
import torch, executorch.exir
t0 = time.perf_counter()
import executorch.backends.arm._passes
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

# sys.modules[name] = None makes ``import name`` raise ImportError: ruamel.yaml then finds no
# C parser, as where ruamel.yaml.clib is not installed. A ``scoping`` inline finder never
# installs the import scope.
IMPORTS = """
import json, sys, time
if {hide}:
    sys.modules["_ruamel_yaml"] = None
if not {scope}:
    for finder in sys.meta_path:
        if type(finder).__name__ == "ArmAccelFinder":
            finder.scoping = True
t0 = time.perf_counter()
import torch
from executorch.backends.arm.quantizer import TOSAQuantizer
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.exir import to_edge_transform_and_lower
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
seconds = time.perf_counter() - t0
import ruamel.yaml.main
assert (ruamel.yaml.main.CParser is None) == {hide}
assert any(type(f).__name__ == "ImportScopeFinder" for f in sys.meta_path) == {scope}
print(json.dumps({{"seconds": seconds}}))
"""


def imports(hide: bool, scope: bool) -> str:
    return IMPORTS.format(hide=hide, scope=scope)


#: what -> (label, the two sides: (name, child source, ARM_ACCEL)).
MEASURES = {
    "activation": (
        "import of the Arm passes",
        (("stock", ACTIVATION, "0"), ("accelerated", ACTIVATION, "1")),
    ),
    "yaml": (
        "a lowering script's imports",
        (("pure parser", imports(True, True), "1"), ("C parser", imports(False, True), "1")),
    ),
    "collector": (
        "a lowering script's imports",
        (("no scope", imports(False, False), "1"), ("scope", imports(False, True), "1")),
    ),
    "script": (
        "a lowering script's imports",
        (("stock", imports(True, False), "0"), ("accelerated", imports(False, True), "1")),
    ),
}


def one_run(source: str, switch: str) -> float:
    env = {**os.environ, "ARM_ACCEL": switch, "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [sys.executable, "-c", source], env=env, capture_output=True, text=True, check=True
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith('{"seconds"'))
    return float(json.loads(line)["seconds"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", choices=sorted(MEASURES), default="activation")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    label, sides = MEASURES[args.what]
    runs: dict[str, list[float]] = {name: [] for name, _, _ in sides}
    one_run(sides[-1][1], sides[-1][2])  # page cache and bytecode of the modules
    for _ in range(args.reps):
        for name, source, switch in sides:
            runs[name].append(one_run(source, switch))
    for name, xs in runs.items():
        cells = ", ".join(f"{x:.2f}" for x in xs)
        print(f"{name:<12} {label}, s: {cells}  median {statistics.median(xs):.2f}")
    (first, *_), (second, *_) = sides
    diff = statistics.median(runs[second]) - statistics.median(runs[first])
    print(f"{second} - {first} (median - median): {diff:+.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
