"""Which rows of the patch table another torch / executorch would keep stock.

Reads every pinned source from files (an installed environment's site-packages, or source
trees such as a torch or executorch checkout) without importing them, so the next port starts
from a list: each row or model whose pins would not hold, with the source that changed.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from arm_accel.patches import sources, table
from arm_accel.patches.model import Pin

_PROBE = (
    "import json, os, sys\n"
    "from importlib import metadata\n"
    "def v(d):\n"
    "    try:\n"
    "        return metadata.version(d).split('+')[0]\n"
    "    except metadata.PackageNotFoundError:\n"
    "        return None\n"
    "print(json.dumps({'path': [p for p in sys.path if p and os.path.isdir(p)],\n"
    "                  'torch': v('torch'), 'executorch': v('executorch')}))\n"
)


@dataclass(frozen=True)
class Target:
    """Where the sources are read: directories searched in order, and the torch version
    (None: unknown, torch gates and C++ pins not judged)."""

    roots: tuple[Path, ...]
    torch: str | None
    executorch: str | None = None


@dataclass(frozen=True)
class Finding:
    """One row or model: ``None`` reason when it would install / hold."""

    kind: str  # "row" or "model"
    group: str
    name: str
    reason: str | None
    #: the row would stay stock by design (a stock source running there does its work)
    by_design: bool = False


def environment(python: str) -> Target:
    """The installation of the interpreter ``python`` (its import path and versions)."""
    out = subprocess.run([python, "-c", _PROBE], check=True, capture_output=True, text=True)
    found = json.loads(out.stdout)
    roots = tuple(Path(p) for p in found["path"])
    return Target(roots, found["torch"], found["executorch"])


def _digest(target: Target, ref: str) -> str | None:
    for root in target.roots:
        if sources.module_file(root, ref.partition(":")[0]) is not None:
            return sources.file_digest(root, ref)
    return None


def pin_failure(target: Target, pin: Pin) -> str | None:
    """Why ``pin`` would not hold in ``target`` (None: it would, or cannot be judged)."""
    if not pin.digests:
        if target.torch is None:
            return None
        return sources.pin_failure(pin, None, target.torch)
    return sources.pin_failure(pin, _digest(target, pin.ref), target.torch)


def _first(target: Target, pins: tuple[Pin, ...]) -> str | None:
    return next((r for p in pins if (r := pin_failure(target, p)) is not None), None)


def run(target: Target) -> list[Finding]:
    """Every row and model of the table, judged against ``target``."""
    findings: list[Finding] = []
    for group in table.GROUPS:
        gate = None
        if group.torch and target.torch is not None:
            if not sources.version_matches(target.torch, group.torch):
                gate = f"group modelled on torch {', '.join(group.torch)} (found {target.torch})"
        for row in group.rows:
            suffices = getattr(row, "stock_suffices", ())
            if any(pin_failure(target, p) is None for p in suffices):
                reason = "stock by design: the stock source there does the row's work"
                findings.append(Finding("row", group.name, row.name, reason, by_design=True))
                continue
            reasons = [r for r in (gate, _first(target, row.models)) if r is not None]
            findings.append(Finding("row", group.name, row.name, "; ".join(reasons) or None))
    for model in table.MODELS:
        findings.append(Finding("model", "models", model.name, _first(target, model.pins)))
    return findings


def report(target: Target, findings: list[Finding]) -> str:
    """The text ``arm-accel check-pins`` prints: what would stay stock, then a count."""
    lines = [
        f"sources: {', '.join(str(r) for r in target.roots if 'site-packages' in str(r))}",
        f"torch {target.torch or 'unknown'}, executorch {target.executorch or 'unknown'}",
    ]
    stock = [f for f in findings if f.reason is not None and not f.by_design]
    for f in findings:
        if f.reason is not None:
            lines.append(f"stock  {f.kind:5} {f.group:20} {f.name:40} {f.reason}")
    lines.append(
        f"{len(findings) - len(stock)} of {len(findings)} rows and models would hold "
        "(or stay stock by design)"
    )
    return "\n".join(lines)


__all__ = ["Finding", "Target", "environment", "pin_failure", "report", "run"]
